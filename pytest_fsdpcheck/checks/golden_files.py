"""Golden files of the corpus: ``fixtures/golden/<model>.txt``.

A file has one ``## <section>`` block per area. Comparing is expecttest-style:
with ``EXPECTTEST_ACCEPT=1`` a differing (or missing) section is rewritten
instead of failing, so a deliberate change to the spec's answer is one rerun
and a reviewed diff.
"""

from __future__ import annotations

import os
from pathlib import Path

HEADER = "# pytest-fsdpcheck golden output for corpus model {name!r}: {description}.\n" \
    "# The spec's answer, shared by every implementation. Rewrite with EXPECTTEST_ACCEPT=1.\n"


def golden_dir() -> Path:
    from importlib.resources import files

    return Path(str(files("pytest_fsdpcheck.fixtures") / "golden"))


def accepting() -> bool:
    return os.environ.get("EXPECTTEST_ACCEPT", "") not in ("", "0")


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
