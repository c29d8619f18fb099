"""Golden files of the corpus: ``fixtures/golden/<model>.txt``.

A file has one ``## <section>`` block per area: the spec's answer, which a
run only ever reads. Nothing in the environment turns a difference into a
pass: a deliberate change to the answer is made by a maintainer in a source
checkout with

    python -m pytest_fsdpcheck.checks.golden_files regenerate [MODEL ...]

which renders every section from the ``reference`` implementation (never from
an implementation under test) and writes the files for review as a diff.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SECTIONS = ["buckets", "traversal", "exec order", "fsdp2"]
REGENERATE = "python -m pytest_fsdpcheck.checks.golden_files regenerate"
HEADER = "# pytest-fsdpcheck golden output for corpus model {name!r}: {description}.\n" \
    f"# The spec's answer, shared by every implementation. Rendered from the reference by `{REGENERATE}`.\n"


def golden_dir() -> Path:
    from importlib.resources import files

    try:
        return Path(str(files("pytest_fsdpcheck.fixtures") / "golden"))
    except ModuleNotFoundError:
        # Run from a checkout's root, the package is imported from the working
        # tree, where fixtures/ sits beside it rather than inside it.
        return Path(__file__).resolve().parents[2] / "fixtures" / "golden"


def read_sections(path: Path) -> dict[str, list[str]]:
    sections: dict[str, list[str]] = {}
    current = None
    if not path.exists():
        return sections
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("## "):
            current = line[3:].strip()
            sections[current] = []
        elif current is not None and line.strip():
            sections[current].append(line)
    return sections


def write_section(path: Path, header: str, section: str, lines: list[str], order: list[str]) -> None:
    """Replace one section, keeping the others in ``order``."""
    sections = read_sections(path)
    sections[section] = list(lines)
    out = [header.rstrip("\n")]
    for name in [*order, *sorted(set(sections) - set(order))]:
        if name in sections:
            out += ["", f"## {name}", *sections[name]]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(out) + "\n", encoding="utf-8")


def render_section(model: str, section: str, impl) -> list[str]:
    """The lines ``impl`` gives for one section of a corpus model; the golden
    tests and :func:`regenerate` render through this one function."""
    from ..generators import corpus

    if section == "buckets":
        spec = corpus.CORPUS[model]
        caps = f"caps: bucket_bytes_cap={spec.bucket_bytes_cap} first_bucket_cap={spec.first_bucket_cap}"
        return [caps, *corpus.render_buckets(model, impl.splitting)]
    if section == "traversal":
        return corpus.render_traversal(model, impl.traversal)
    if section == "exec order":
        return corpus.render_exec_order(model, impl.exec_order)
    if section == "fsdp2":
        return corpus.render_fsdp2(model, impl.fsdp2)
    raise ValueError(f"no golden section {section!r}; sections are {SECTIONS}")


def not_a_source_checkout(folder: Path) -> str | None:
    """Why golden files must not be written into ``folder``, or None.

    An installed package is what other runs judge against: writing there
    would change the answer for everyone using it, with no diff to review."""
    resolved = folder.resolve()
    if any(part in ("site-packages", "dist-packages") for part in resolved.parts):
        return f"{resolved} is inside an installed package ({'/'.join(p for p in resolved.parts if p.endswith('-packages'))})"
    try:
        inside = subprocess.run(["git", "-C", str(resolved), "rev-parse", "--is-inside-work-tree"],
                                capture_output=True, text=True, check=False).stdout.strip()
    except OSError as exc:
        return f"cannot ask git whether {resolved} is a source checkout ({exc})"
    if inside != "true":
        return f"{resolved} is not inside a git checkout"
    return None


def _unavailable(model: str, section: str) -> str | None:
    """Why this environment cannot render a section (its input is missing),
    in which case the file keeps the section it has."""
    from ..core.torch_support import compile_unsupported
    from ..generators import corpus

    reason = corpus.missing(model)
    if reason is None and section == "buckets":
        reason = compile_unsupported() or corpus.capture_unavailable(model)
    if reason is None and section == "exec order":
        reason = corpus.untraceable(model)
    return reason


def regenerate(models: list[str] | None = None, folder: Path | None = None, out=sys.stdout) -> list[Path]:
    """Render the golden files of ``models`` (all by default) from the
    reference into ``folder`` (the package's fixtures by default), which must
    be a source checkout. Returns the files that changed."""
    from ..generators.corpus import CORPUS
    from ..reference import ReferenceImplementation

    folder = golden_dir() if folder is None else folder
    refusal = not_a_source_checkout(folder)
    if refusal is not None:
        raise SystemExit(f"error: golden files are written only into a source checkout: {refusal}")
    unknown = sorted(set(models or []) - set(CORPUS))
    if unknown:
        raise SystemExit(f"error: no corpus model {', '.join(unknown)}; models are {', '.join(CORPUS)}")
    changed = []
    for model in models or list(CORPUS):
        path = folder / f"{model}.txt"
        before = path.read_bytes() if path.exists() else None
        header = HEADER.format(name=model, description=CORPUS[model].description)
        for section in SECTIONS:
            reason = _unavailable(model, section)
            if reason is not None:
                print(f"{model} [{section}]: kept as it is: {reason}", file=out)
                continue
            write_section(path, header, section, render_section(model, section, ReferenceImplementation()), SECTIONS)
        if path.exists() and path.read_bytes() != before:
            changed.append(path)
            print(f"{model}: rewritten, review the diff of {path}", file=out)
    return changed


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m pytest_fsdpcheck.checks.golden_files",
                                     description="Maintainer command: render the corpus golden files from the reference.")
    sub = parser.add_subparsers(dest="command", required=True)
    regen = sub.add_parser("regenerate", help="render golden files from the reference into this source checkout")
    regen.add_argument("models", nargs="*", help="corpus models (default: all)")
    regen.add_argument("--folder", type=Path, default=None, help="golden folder (default: the package's fixtures/golden)")
    args = parser.parse_args(argv)
    regenerate(args.models or None, args.folder)
    return 0


if __name__ == "__main__":
    sys.exit(main())
