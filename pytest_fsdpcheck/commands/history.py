"""Conformance history: the suite over a list of torch releases, one table.

    python -m pytest_fsdpcheck.commands.history 2.0.1 2.3.1 2.13.0 [--jobs 2] [--json out.json] [--html grid.html]
    python -m pytest_fsdpcheck.commands.history --model pkg.module:factory 2.3.1 2.4.1
    python -m pytest_fsdpcheck.commands.history --table-from 'reports/*.json' --html grid.html
    python -m pytest_fsdpcheck.commands.history --diff yesterday.json today.json

For each release: a fresh virtual environment in a temporary directory, torch
pinned and installed first, then this package's wheel with its ``models``
extra as a user installs it (pip resolves its dependencies; a constraints
file keeps it from replacing the pinned torch),
``pytest --fsdpcheck --fsdpcheck-strict`` against ``torch``, its JSON report
read back, and the environment deleted (each is a 3-5 GB CUDA build). The
table is invariant x release: ``pass``, ``known <id>``, ``FAIL``, ``n/p``;
below it, per known bug, the first and last release it was seen in, and each
release's exit code and time. pip's own settings (``PIP_INDEX_URL``,
``PIP_CONSTRAINT``, ...) pass through.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from ..core.catalog import sort_key
from ..core.provided import RELEASES  # what --all runs and --affected-by picks from
from ..report.verdict import SYMBOL

PROJECT = Path(__file__).resolve().parents[2]



def affected_releases(names: list[str]) -> list[str]:
    """The releases a change can reach, for each name a known bug's id or an
    invariant ID: a known bug's whole declared range and the release on
    each side of it (where its edge could move); an invariant's every
    release a known bug of that invariant applies to and the first and last
    release (a check that changes meets every bug it can excuse, and both
    ends of the promise). Raises ``ValueError`` naming an unknown name."""
    from ..core.catalog import INVARIANTS
    from ..impls.torch_bugs import TORCH_BUGS

    bugs = {bug.id: bug for bug in TORCH_BUGS}
    picked: set[str] = set()
    for name in names:
        if name in bugs:
            inside = [i for i, r in enumerate(RELEASES) if bugs[name].applies_to_version(r)]
            if inside:
                picked.update(RELEASES[max(inside[0] - 1, 0):inside[-1] + 2])
        elif name in INVARIANTS:
            picked.update((RELEASES[0], RELEASES[-1]))
            picked.update(r for bug in TORCH_BUGS if name in bug.invariants
                          for r in RELEASES if bug.applies_to_version(r))
        else:
            raise ValueError(f"--affected-by {name}: neither a known bug's id (python -m pytest_fsdpcheck.known) "
                             "nor an invariant ID")
    return [r for r in RELEASES if r in picked]


def pinned(version: str) -> list[str]:
    """What a release's environment gets first and keeps: the release itself
    and, for releases built against numpy 1 (before 2.4), ``numpy<2``."""
    numpy = ["numpy<2"] if tuple(int(p) for p in version.split(".")[:2]) < (2, 4) else []
    return [f"torch=={version}", *numpy]


def install_commands(python: Path, version: str, wheel: Path, constraints: Path) -> list[list[str]]:
    """The pip commands that set up a release's environment, in order. The
    second is what a user types after pinning torch: the package with its
    dependencies resolved by pip, the ``models`` extra included. pip may pick
    any torch that the package's declared range admits; the constraints file
    (holding ``pinned(version)``) is what keeps the release in place, so a
    declared range that excludes it fails the install instead of replacing it."""
    pip = [str(python), "-m", "pip", "install", "-q"]
    return [[*pip, *pinned(version)], [*pip, "--constraint", str(constraints), f"{wheel}[models]"]]


def build_wheel(into: Path) -> Path:
    """One wheel of this package, so every release runs the same suite."""
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", str(PROJECT), "-w", str(into)], check=True)
    return next(into.glob("pytest_fsdpcheck-*.whl"))


def run_release(version: str, jobs: int, wheel: Path, keep_dir: Path | None = None) -> dict:
    """One release: its report's matrix and known bugs, exit code and timings."""
    start = time.monotonic()
    work = Path(tempfile.mkdtemp(prefix=f"fsdpcheck-torch-{version}-"))
    try:
        venv = work / "venv"
        python = venv / "bin" / "python"
        report = work / "report.json"
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        constraints = work / "constraints.txt"
        constraints.write_text("\n".join(pinned(version)) + "\n")
        torch_step, package_step = install_commands(python, version, wheel, constraints)
        installed = subprocess.run(torch_step, capture_output=True, text=True)
        if installed.returncode != 0:
            return {"version": version, "error": "torch install failed: " + installed.stderr.strip()[-300:]}
        installed = subprocess.run(package_step, capture_output=True, text=True)
        if installed.returncode != 0:
            return {"version": version, "error": "package install failed: " + installed.stderr.strip()[-300:]}
        installed_at = time.monotonic()
        suite = subprocess.run(
            [str(python), "-m", "pytest", "--fsdpcheck", "--fsdpcheck-impl", "torch", "--fsdpcheck-strict",
             "-p", "no:cacheprovider", "-q", "-n", str(jobs), "--fsdpcheck-report", str(report)],
            cwd=work, capture_output=True, text=True,
        )
        data = json.loads(report.read_text()) if report.exists() else {}
        tail = suite.stdout.strip().splitlines()[-1:] or [""]
        (keep_dir or work).joinpath(f"torch-{version}.log").write_text(suite.stdout + suite.stderr)
        return {
            "version": version,
            "exit": suite.returncode,
            "summary": tail[0],
            "torch": data.get("header", {}).get("torch"),
            "matrix": data.get("matrix", {}).get("torch", {}),
            "failures": failures_of(data, "torch"),
            "known_bugs": data.get("known_bugs", []),
            "install_s": round(installed_at - start, 1),
            "suite_s": round(time.monotonic() - installed_at, 1),
        }
    finally:
        if keep_dir is not None and (work / "report.json").exists():
            shutil.copy(work / "report.json", keep_dir / f"torch-{version}.json")
        shutil.rmtree(work, ignore_errors=True)


def _letter(n: int) -> str:
    """A, B, … Z, then AA, AB, …: a known bug's label in the table."""
    return (_letter(n // 26 - 1) if n >= 26 else "") + chr(ord("A") + n % 26)


def cell(entry: dict, letters: dict) -> str:
    outcome = entry.get("outcome")
    if outcome == "known":
        return "known " + ",".join(sorted(letters.setdefault(b, _letter(len(letters))) for b in entry.get("known", [])))
    return _symbol(outcome)


def _symbol(outcome) -> str:
    """A cell's outcome as the matrix prints it (``-``: none)."""
    return SYMBOL.get(outcome, outcome or "-")


def table(results: list[dict]) -> list[str]:
    ok = [r for r in results if "matrix" in r]
    invariants = sorted({inv for r in ok for inv in r["matrix"]}, key=sort_key)
    heads = [r.get("column", r["version"]) for r in ok]
    letters: dict[str, str] = {}  # known-bug id -> the letter its cells show
    rows = [[inv, *(cell(r["matrix"].get(inv, {}), letters) for r in ok)] for inv in invariants]
    widths = [max(len(x) for x in col) for col in zip(["invariant", *heads], *rows, strict=True)]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    lines = [fmt.format("invariant", *heads), fmt.format(*("-" * w for w in widths))]
    lines += [fmt.format(*row) for row in rows]
    seen: dict[str, list[str]] = {}
    for r in ok:
        for bug in r["known_bugs"]:
            if bug["examples"]:
                seen.setdefault(bug["id"], []).append(r.get("column", r["version"]))
    lines.append("")
    for bug_id, letter in letters.items():
        versions = seen.get(bug_id, [])
        lines.append(f"{letter} = {bug_id}: seen in {versions[0]} … {versions[-1]} ({len(versions)} of {len(ok)} releases run)")
    for r in results:
        if "matrix" in r:
            if r.get("first_of_report", True):  # a report's other implementations share its line
                source = f" ({r['source']})" if "source" in r else ""
                lines.append(f"torch {r['torch']}: exit {r['exit']}, install {r['install_s']} s, suite {r['suite_s']} s — "
                             f"{r['summary']}{source}")
        else:
            lines.append(f"torch {r['version']}: {r['error']}")
    return lines


def failures_of(data: dict, implementation: str) -> dict[str, list[dict]]:
    """A report's failing tests of one implementation, by invariant: each with
    its node id, one-line message and reproducer (``None`` where the failure
    has none), so a grid cell can show what failed and how to rebuild it."""
    found: dict[str, list[dict]] = {}
    tests = data.get("tests") if isinstance(data.get("tests"), dict) else {}
    for node_id, test in tests.items():
        failure = test.get("failure") if isinstance(test, dict) else None
        if not isinstance(failure, dict) or test.get("implementation", implementation) != implementation:
            continue
        for invariant in failure.get("invariants") or test.get("invariants") or []:
            found.setdefault(invariant, []).append({"test": node_id, "message": str(failure.get("message", "")),
                                                    "reproducer": failure.get("reproducer")})
    return found


class ReportError(Exception):
    """A report file the table cannot read; the message is one line."""


def report_paths(given: list[str]) -> list[Path]:
    """The JSON reports named: a folder (every ``*.json`` in it), a glob
    pattern, or a file; in the order given, each once."""
    import glob

    found: list[Path] = []
    for name in given:
        path = Path(name)
        if path.is_dir():
            matched = sorted(path.glob("*.json"))
            if not matched:
                raise ReportError(f"{name}: a folder with no *.json report in it")
        elif glob.has_magic(name):
            matched = sorted(Path(p) for p in glob.glob(name) if Path(p).is_file())
            if not matched:
                raise ReportError(f"{name}: matches no file")
        elif path.is_file():
            matched = [path]
        else:
            raise ReportError(f"{name}: no such file or folder")
        found += [p for p in matched if p not in found]
    return found


def from_file(path: Path) -> list[dict]:
    """The columns of a JSON report, or the results a run of this command
    wrote (``--json``: a list, one per release, with its install and suite
    times, which a report alone does not hold)."""
    data = _read_json(path)
    if not isinstance(data, list):
        return _report_columns(path, data)
    results = []
    for result in data:
        if not isinstance(result, dict) or not isinstance(result.get("version"), str) or not (
                isinstance(result.get("matrix"), dict) or "error" in result):
            raise ReportError(f"{path}: not a pytest-fsdpcheck JSON report, nor a history --json file "
                              "(a list of releases' results)")
        results.append({"devices": ["cpu"], **result, "implementation": "torch", "column": result["version"],
                        "source": str(path)})
    return results


#: the lines around docs/history.md's generated block: everything between is
#: this command's output, and its digest line says whether a hand changed it
MARKDOWN_BEGIN = "<!-- begin: written by python -m pytest_fsdpcheck.commands.history --markdown; do not edit -->"
MARKDOWN_END = "<!-- end of the history command's block -->"


def block_digest(lines: list[str]) -> str:
    import hashlib

    return hashlib.sha256("\n".join(lines).encode()).hexdigest()[:16]


def markdown_block(results: list[dict], commit: str, date: str, command: str) -> list[str]:
    """The generated block: how and when it was made, the table, and what
    each release cost (install and suite, as the run measured them)."""
    timed = [r for r in results if isinstance(r.get("suite_s"), (int, float))]
    body = [f"Written on {date} from a run at commit `{commit}` by:", "", "```bash", command, "```", ""]
    green = sum(1 for r in results if r.get("exit") == 0)
    body.append(f"**{green} of {len(results)} releases exit 0** (`--fsdpcheck-strict`, torch's column, CPU).")
    if timed:
        suite = sorted(r["suite_s"] / 60 for r in timed)
        install = sorted(r["install_s"] / 60 for r in timed if isinstance(r.get("install_s"), (int, float)))
        total = sum(r["suite_s"] + (r["install_s"] if isinstance(r.get("install_s"), (int, float)) else 0)
                    for r in timed) / 60
        body.append(f"Cost of one release: {suite[0]:.1f}–{suite[-1]:.1f} min of suite (median "
                    f"{suite[len(suite) // 2]:.1f})" + (f" and {install[0]:.1f}–{install[-1]:.1f} min of install"
                                                         if install else "")
                    + f"; all {len(timed)}: {total:.0f} min of release time, summed (runs side by side take less wall time).")
    body += ["", "```text", *table(results), "```"]
    return [MARKDOWN_BEGIN, *body, f"<!-- digest {block_digest(body)} -->", MARKDOWN_END]


def replace_block(text: str, block: list[str]) -> str:
    """``text`` with its generated block replaced by ``block`` (appended
    where it has none)."""
    lines = text.splitlines()
    if MARKDOWN_BEGIN in lines and MARKDOWN_END in lines:
        start, end = lines.index(MARKDOWN_BEGIN), lines.index(MARKDOWN_END)
        lines[start:end + 1] = block
    else:
        lines += ["", *block]
    return "\n".join(lines) + "\n"


def written_block(text: str) -> tuple[list[str], str] | None:
    """The generated block's body in ``text`` and the digest it was written
    with, or None where there is no block."""
    lines = text.splitlines()
    if MARKDOWN_BEGIN not in lines or MARKDOWN_END not in lines:
        return None
    inner = lines[lines.index(MARKDOWN_BEGIN) + 1:lines.index(MARKDOWN_END)]
    digest = inner[-1].removeprefix("<!-- digest ").removesuffix(" -->") if inner else ""
    return inner[:-1], digest


def _write_markdown(path: str | None, results: list[dict], commit: str | None, argv) -> None:
    if not path:
        return
    import datetime
    import shlex

    commit = commit or subprocess.run(["git", "-C", str(PROJECT), "rev-parse", "--short", "HEAD"],
                                      capture_output=True, text=True).stdout.strip() or "unknown"
    words = sys.argv[1:] if argv is None else list(argv)
    command = "python -m pytest_fsdpcheck.commands.history " + shlex.join(words)
    target = Path(path)
    text = target.read_text(encoding="utf-8") if target.exists() else ""
    block = markdown_block(results, commit, datetime.date.today().isoformat(), command)
    target.write_text(replace_block(text, block), encoding="utf-8")
    print(f"table written to {target}'s generated block", file=sys.stderr)


def _read_json(path: Path):
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise ReportError(f"{path}: cannot read: {exc}") from None
    except json.JSONDecodeError as exc:
        raise ReportError(f"{path}: not JSON ({exc.msg} at line {exc.lineno})") from None


def from_report(path: Path) -> list[dict]:
    """A report's columns, one per implementation it ran (a kept
    ``--keep-reports`` file or any ``--fsdpcheck-report``), keyed by the
    report's own header: torch release, implementation, devices."""
    return _report_columns(path, _read_json(path))


def _report_columns(path: Path, data) -> list[dict]:
    header = data.get("header") if isinstance(data, dict) else None
    if not isinstance(header, dict) or not isinstance(header.get("torch"), str) or not isinstance(data.get("matrix"), dict):
        raise ReportError(f"{path}: not a pytest-fsdpcheck JSON report (no header.torch or matrix)")
    torch = header["torch"]
    version = torch.split("+")[0]
    devices = [d for d in header.get("devices", []) if isinstance(d, str)]
    tests = data.get("tests", {}) if isinstance(data.get("tests"), dict) else {}
    known = [b for b in data.get("known_bugs", []) if isinstance(b, dict)]
    failed = sum(1 for t in tests.values() if isinstance(t, dict) and t.get("outcome") == "failed")
    strict = [e for e in known if e.get("not_reproduced")]
    strict += data.get("stale_divergences", []) + data.get("unexpected_passes", [])
    impls = list(data["matrix"]) or ["torch"]
    columns = []
    for n, impl in enumerate(sorted(impls, key=lambda i: (i != "torch", i))):
        label = version if impl == "torch" else f"{version} {impl}"
        if devices and devices != ["cpu"]:
            label += f" ({'+'.join(devices)})"
        matrix = data["matrix"].get(impl, {})
        if not isinstance(matrix, dict):
            raise ReportError(f"{path}: matrix of {impl!r} is not an object")
        columns.append({
            "version": version, "column": label, "implementation": impl, "devices": devices, "torch": torch,
            "matrix": matrix, "failures": failures_of(data, impl),
            "known_bugs": [b for b in known if b.get("implementation", impl) == impl],
            "exit": 1 if failed or strict else 0, "summary": f"{len(tests)} tests, {failed} failed",
            "install_s": "-", "suite_s": "-", "source": str(path),
            # the report's line under the table is printed once, under its first column
            "first_of_report": n == 0,
        })
    return columns


#: outcomes a CI pages someone for
_BAD = {"fail", "error", "unexpected pass"}


def _cell_text(entry: dict) -> str:
    known = entry.get("known") if entry.get("outcome") == "known" else None
    return _symbol(entry.get("outcome")) + (" " + ",".join(known) if known else "")


def diff_lines(before: list[dict], after: list[dict]) -> tuple[list[str], int]:
    """Two runs' cells compared column by column (a column: implementation x
    torch release x devices, as the grid keys them): every cell that became
    FAIL, ERROR or an unexpected pass (``new FAIL``), every such cell that no
    longer is (``fixed``), every other change, and the columns and invariants
    only one run has. Returns the lines and 1 where a cell became bad, else 0."""
    def columns(results):
        return {r["column"]: r for r in results if "matrix" in r}

    old, new = columns(before), columns(after)
    worse, fixed, changed = [], [], []
    for label in [c for c in new if c in old]:
        for inv in sorted(set(old[label]["matrix"]) | set(new[label]["matrix"]), key=sort_key):
            was, now = old[label]["matrix"].get(inv), new[label]["matrix"].get(inv)
            if was is None or now is None:
                changed.append(f"{'only after' if was is None else 'only before'}  {inv}  {label}: "
                               f"{_cell_text(now or was)}")
                continue
            if _cell_text(was) == _cell_text(now):
                continue
            line = f"{inv}  {label}: {_cell_text(was)} -> {_cell_text(now)}"
            if now.get("outcome") in _BAD and was.get("outcome") not in _BAD:
                reasons = [f["message"] for f in new[label].get("failures", {}).get(inv, [])][:1]
                worse.append(f"new FAIL  {line}" + (f" ({reasons[0]})" if reasons else ""))
            elif was.get("outcome") in _BAD and now.get("outcome") not in _BAD:
                fixed.append(f"fixed     {line}")
            else:
                changed.append(f"changed   {line}")
    lines = worse + fixed + changed
    lines += [f"column only before: {c}" for c in old if c not in new]
    lines += [f"column only after: {c}" for c in new if c not in old]
    common = sum(1 for c in new if c in old)
    lines.append(f"{len(worse)} new FAIL, {len(fixed)} fixed, {len(changed)} other changes "
                 f"in {common} column(s) both runs have")
    return lines, 1 if worse else 0


def _release_key(result: dict):
    from packaging.version import InvalidVersion, Version

    try:
        version = Version(result["version"])
    except InvalidVersion:
        version = Version("0")
    return (version, result["implementation"] != "torch", result["implementation"], result["devices"])


# --- one model over the releases (--model) -------------------------------------------


def run_model_release(version: str, spec: str, wheel: Path, model_path: str) -> dict:
    """One release for one model: a fresh environment installed as above,
    the model's outcome on that torch (``--describe-model``: its bucket plan
    and FSDP2 groups) and the suite's model checks with their judged known
    bugs. ``model_path`` is put on PYTHONPATH so the factory imports."""
    start = time.monotonic()
    work = Path(tempfile.mkdtemp(prefix=f"fsdpcheck-torch-{version}-"))
    try:
        python = work / "venv" / "bin" / "python"
        subprocess.run([sys.executable, "-m", "venv", str(work / "venv")], check=True)
        constraints = work / "constraints.txt"
        constraints.write_text("\n".join(pinned(version)) + "\n")
        for step, what in zip(install_commands(python, version, wheel, constraints), ("torch", "package"), strict=True):
            installed = subprocess.run(step, capture_output=True, text=True)
            if installed.returncode != 0:
                return {"version": version, "error": f"{what} install failed: " + installed.stderr.strip()[-300:]}
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (model_path, os.environ.get("PYTHONPATH")) if p)}
        described = subprocess.run([str(python), "-m", "pytest_fsdpcheck.commands.history", "--describe-model", spec],
                                   cwd=work, env=env, capture_output=True, text=True)
        if described.returncode != 0:
            last = (described.stderr.strip().splitlines() or ["(no output)"])[-1]
            return {"version": version, "error": "describing the model failed: " + last[-300:]}
        report = work / "report.json"
        suite = subprocess.run(
            [str(python), "-m", "pytest", "--fsdpcheck", "--fsdpcheck-impl", "torch", "--fsdpcheck-model", spec,
             "-k", "test_model_", "-p", "no:cacheprovider", "-q", "--fsdpcheck-report", str(report)],
            cwd=work, env=env, capture_output=True, text=True,
        )
        data = json.loads(report.read_text()) if report.exists() else {}
        return {
            "version": version, "outcome": json.loads(described.stdout), "exit": suite.returncode,
            # pytest's last line, or what it said on stderr when it could not finish (exit 3, 4)
            "summary": (suite.stdout.strip().splitlines()[-1:] or suite.stderr.strip().splitlines()[-1:] or [""])[0],
            "known_bugs": [b["id"] for b in data.get("known_bugs", []) if b.get("examples")],
            "seconds": round(time.monotonic() - start, 1),
        }
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _plan_words(buckets) -> str:
    if isinstance(buckets, str):
        return buckets
    return f"{len(buckets)} buckets, bytes " + ", ".join(f"{b['bytes']:,}" for b in buckets)


def model_lines(results: list[dict], exposures) -> list[str]:
    """Per release: the model's bucket plan and FSDP2 groups where they
    differ from the previous release run, the known bugs the model's
    exposure predicts there (and those starting or ending since the previous
    release), and the bugs the suite judged on that release."""
    from ..cases.exposure import bugs_between, holding

    lines, previous = [], None
    for r in results:
        if "outcome" not in r:
            lines.append(f"torch {r['version']}: {r['error']}")
            continue
        out = r["outcome"]
        lines.append(f"torch {r['version']} ({out.get('torch')}): exit {r['exit']}, {r['seconds']} s — {r['summary']}")
        before = previous["outcome"] if previous else None
        if before is None or out.get("buckets") != before.get("buckets"):
            lines.append(f"  bucket plan ({out.get('form', '-')} form): {_plan_words(out.get('buckets'))}")
            if isinstance(out.get("buckets"), list):
                lines += [f"    bucket {i}: {', '.join(b['params'])}" for i, b in enumerate(out["buckets"])]
        else:
            lines.append("  bucket plan: as on the previous release")
        groups = out.get("groups")
        if before is None or groups != before.get("groups"):
            if groups is None or isinstance(groups, str):
                lines.append(f"  FSDP2 groups: {groups or 'no plan'}")
            else:
                for g in groups:
                    what = g.get("error") or f"{len(g['modules'] or [])} modules, params {', '.join(g['params'] or [])}"
                    lines.append(f"  FSDP2 group {g['call']}: {what}")
        else:
            lines.append("  FSDP2 groups: as on the previous release")
        predicted = holding(exposures, r["version"])
        lines.append(f"  known bugs the exposure predicts here: {', '.join(predicted) or 'none'}")
        if previous is not None:
            changed = bugs_between(exposures, previous["version"], r["version"])
            lines.append(f"  since torch {previous['version']}: {', '.join(changed) or 'no predicted bug starts or ends'}")
        lines.append(f"  known bugs the suite judged: {', '.join(r['known_bugs']) or 'none'}")
        previous = r
    return lines


def _model_main(spec: str, versions: list[str], model_path: str, json_out: str | None) -> int:
    from ..cases.exposure import case_of, exposure, render

    # the factory imports here as it will in each release's run
    sys.path.insert(0, os.path.abspath(model_path))
    case = case_of(spec)
    exposures = exposure(case)
    print("\n".join(render(exposures, f"{case.name} (torch installed here)")))
    wheel_dir = Path(tempfile.mkdtemp(prefix="fsdpcheck-wheel-"))
    results = []
    try:
        wheel = build_wheel(wheel_dir)
        for version in versions:
            print(f"torch {version} ...", file=sys.stderr, flush=True)
            results.append(run_model_release(version, spec, wheel, model_path))
            if json_out:
                Path(json_out).write_text(json.dumps(results, indent=2) + "\n")
    finally:
        shutil.rmtree(wheel_dir, ignore_errors=True)
    print("\n".join(model_lines(results, exposures)))
    return 0 if all(r.get("exit") == 0 for r in results) else 1


def _write_grid(path: str | None, results: list[dict]) -> None:
    if path:
        from ..report.html import grid_page

        Path(path).write_text(grid_page(results), encoding="utf-8")
        print(f"grid written to {path}", file=sys.stderr)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pytest_fsdpcheck.commands.history", description=__doc__.split("\n\n")[0])
    parser.add_argument("versions", nargs="*", help="torch releases, e.g. 2.0.1 2.13.0")
    parser.add_argument("--all", action="store_true", help=f"every release of the promise ({RELEASES[0]} … {RELEASES[-1]})")
    parser.add_argument("--affected-by", metavar="ID", nargs="+",
                        help="the releases a change to these known bugs or invariants can reach: a bug's range and "
                             "its neighbours; an invariant's bugs' ranges and both ends")
    parser.add_argument("--table-from", metavar="REPORT", nargs="+",
                        help="only print the table of these JSON reports: files, glob patterns, or folders "
                             "(every *.json in them); a column per torch release x implementation x devices")
    parser.add_argument("--diff", nargs=2, metavar=("BEFORE", "AFTER"),
                        help="compare two runs' JSON reports (each a file, glob or folder): new FAILs, fixed cells, "
                             "other changes; exit 1 where a cell became FAIL, ERROR or an unexpected pass")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="pytest-xdist workers per run")
    parser.add_argument("--json", help="write every release's result to this file")
    parser.add_argument("--keep-reports", help="copy each release's JSON report into this directory")
    parser.add_argument("--record-observed", metavar="FILE",
                        help="merge the releases run (with --table-from: the reports read) and the known bugs each "
                             "observed into this record (the package's known/observed.json)")
    parser.add_argument("--reports-commit", metavar="COMMIT",
                        help="with --table-from, for --record-observed and --markdown: the commit the reports were "
                             "made with "
                             "(default: this checkout's)")
    parser.add_argument("--markdown", metavar="PATH",
                        help="also write the table, each release's exit and cost, the date, the commit and this "
                             "command into PATH's generated block (docs/history.md), replacing the one there")
    parser.add_argument("--html", metavar="PATH",
                        help="also write the invariant x release grid as one self-contained HTML page")
    parser.add_argument("--model", metavar="PKG.MODULE:FACTORY",
                        help="run only this model's checks on each release and print its bucket plan and FSDP2 groups")
    parser.add_argument("--model-path", default=os.getcwd(), help="where the model's package imports from (default: .)")
    parser.add_argument("--describe-model", metavar="SPEC", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.describe_model:
        from ..cases.exposure import case_of, model_outcome

        print(json.dumps(model_outcome(case_of(args.describe_model))))
        return 0
    if args.model:
        if not args.versions:
            parser.error("give torch versions")
        return _model_main(args.model, args.versions, args.model_path, args.json)
    if args.diff:
        try:
            before, after = ([c for p in report_paths([side]) for c in from_report(p)] for side in args.diff)
        except ReportError as exc:
            print(f"{parser.prog}: error: {exc}", file=sys.stderr)
            return 2
        lines, status = diff_lines(before, after)
        print("\n".join(lines))
        return status
    if args.table_from:
        try:
            results = sorted((c for p in report_paths(args.table_from) for c in from_file(p)), key=_release_key)
        except ReportError as exc:
            print(f"{parser.prog}: error: {exc}", file=sys.stderr)
            return 2
        print("\n".join(table(results)))
        _write_markdown(args.markdown, results, args.reports_commit, argv)
        _write_grid(args.html, results)
        _record_observed(args.record_observed, [r for r in results if r["implementation"] == "torch"],
                         args.reports_commit)
        return 0 if all(r["exit"] == 0 for r in results) else 1
    if args.all:
        args.versions = [*args.versions, *(r for r in RELEASES if r not in args.versions)]
    if args.affected_by:
        try:
            reached = affected_releases(args.affected_by)
        except ValueError as exc:
            parser.error(str(exc))
        print(f"releases {' '.join(args.affected_by)} can reach: {' '.join(reached)}", file=sys.stderr)
        args.versions = [*args.versions, *(r for r in reached if r not in args.versions)]
    if not args.versions:
        parser.error("give torch versions, --all, --affected-by ID, or --table-from DIR")
    keep = Path(args.keep_reports) if args.keep_reports else None
    if keep:
        keep.mkdir(parents=True, exist_ok=True)
    results = []
    wheel_dir = Path(tempfile.mkdtemp(prefix="fsdpcheck-wheel-"))
    wheel = build_wheel(wheel_dir)
    for version in args.versions:
        print(f"torch {version} ...", file=sys.stderr, flush=True)
        results.append(run_release(version, args.jobs, wheel, keep))
        if args.json:
            Path(args.json).write_text(json.dumps(results, indent=2) + "\n")
    shutil.rmtree(wheel_dir, ignore_errors=True)
    print("\n".join(table(results)))
    _write_markdown(args.markdown, results, None, argv)
    _write_grid(args.html, results)
    _record_observed(args.record_observed, results)
    return 0 if all(r.get("exit") == 0 for r in results) else 1


def _record_observed(path: str | None, results: list[dict], commit: str | None = None) -> None:
    """Merge what ``results`` observed into the record at ``path`` (see
    :mod:`pytest_fsdpcheck.known.observed`), with this checkout's commit."""
    if not path:
        return
    import datetime

    from ..known import observed

    target = Path(path)
    record = observed.load(target.read_text(encoding="utf-8") if target.exists() else "{}")
    commit = commit or subprocess.run(["git", "-C", str(PROJECT), "rev-parse", "--short", "HEAD"],
                                      capture_output=True, text=True).stdout.strip() or "unknown"
    target.write_text(observed.dumps(observed.merged(record, results, commit, datetime.date.today().isoformat())),
                      encoding="utf-8")
    print(f"observed known bugs recorded in {target}", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
