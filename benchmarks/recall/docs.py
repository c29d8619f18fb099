"""Writes the recall table and its headline into ``docs/recall.md``, between
its markers, from a results file of ``run.py`` (the text around them is the
page's own)."""

from __future__ import annotations

import re
from pathlib import Path

from benchmarks.recall.table import rows

PAGE = Path(__file__).resolve().parents[2] / "docs" / "recall.md"
START, END = "<!-- recall table: start -->", "<!-- recall table: end -->"


def _link(ref: str) -> str:
    repo, _, number = ref.partition("#")
    return f"[{ref}](https://github.com/{repo}/issues/{number})"


def _cell(entry: dict | None) -> str:
    if entry is None:
        return "not run"
    if entry["verdict"] == "flagged":
        parts = [entry["failed"] and "FAIL " + ", ".join(entry["failed"]),
                 entry["known"] and "known " + ", ".join(f"`{k}`" for k in entry["known"])]
        return "**flagged**: " + "; ".join(p for p in parts if p)
    return f"{entry['verdict']}: {entry.get('why', '')}".rstrip(": ")


def table(results: dict) -> str:
    table_rows = rows()
    measured = results["rows"]
    judged = [r for r in table_rows if measured.get(r.id, {}).get("verdict") in ("flagged", "missed")]
    flagged = [r for r in judged if measured[r.id]["verdict"] == "flagged"]
    unjudged = len(table_rows) - len(judged)
    lines = [f"**The suite flags {len(flagged)} of {len(judged)} bugs torch really had** "
             f"(torch {results['torch']} with each old behaviour patched in"
             + (f"; {unjudged} more rows not judged: their verdict says why" if unjudged else "") + ").", "",
             "| # | row | area | had | fixed in | upstream | behaviour | suite's verdict |",
             "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for number, bug in enumerate(table_rows, 1):
        upstream = ", ".join(_link(u) for u in bug.upstream) or "none found"
        known = f" (modelled: `{bug.known}`)" if bug.known else ""
        lines.append(f"| {number} | `{bug.id}` | {bug.area} | {bug.had} | {bug.fixed_in} | {upstream} | "
                     f"{bug.behaviour.replace('|', '/')}{known} | {_cell(measured.get(bug.id))} |")
    return "\n".join(lines)


def write(results: dict) -> None:
    text = PAGE.read_text()
    pattern = re.compile(re.escape(START) + r".*?" + re.escape(END), re.S)
    if not pattern.search(text):
        raise SystemExit(f"{PAGE} has no {START} … {END} markers")
    PAGE.write_text(pattern.sub(lambda _: f"{START}\n{table(results)}\n{END}", text))


OPEN_START, OPEN_END = "<!-- open table: start -->", "<!-- open table: end -->"


def open_table(results: dict) -> str:
    """The open table (``open_rows.py``) from a results file's ``open``
    entries: one row per open bug, with the installed release's outcome."""
    from benchmarks.recall.open_rows import open_rows

    table_rows = open_rows()
    measured = results.get("open", {})
    ran = [r for r in table_rows if measured.get(r.id, {}).get("outcome") in ("reproduced", "not reproduced")]
    reproduced = [r for r in ran if measured[r.id]["outcome"] == "reproduced"]
    flagged = [r for r in reproduced if measured[r.id]["verdict"].startswith("flagged")]
    unrun = len(table_rows) - len(ran)
    lines = [f"**{len(reproduced)} of {len(ran)} open reports reproduce on torch {results['torch']} (CPU); the "
             f"suite's catalog flags {len(flagged)} of those {len(reproduced)}**"
             + (f" ({unrun} more rows not run or not judged: their cell says why)" if unrun else "") + ".", "",
             f"| # | script | area | upstream | status | releases named | behaviour | on {results['torch']} "
             "| elsewhere | suite's verdict |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for number, bug in enumerate(table_rows, 1):
        entry = measured.get(bug.id)
        outcome = "not run" if entry is None else entry["outcome"]
        if entry is not None and entry["outcome"] == "error":
            outcome = f"error: {entry['line']}"
        verdict = "not run" if entry is None else entry["verdict"]
        known = f" (known bug `{bug.known}`)" if bug.known else ""
        elsewhere = ", ".join(f"{release}: {what}" for release, what in bug.measured) or "—"
        lines.append(f"| {number} | `{bug.id}` | {bug.area} | "
                     f"{', '.join(_link(u) for u in bug.upstream)} | {bug.status} | "
                     f"{', '.join(bug.releases_named) or '—'} | {bug.behaviour.replace('|', '/')}{known} | "
                     f"{outcome.replace('|', '/')} | {elsewhere} | {verdict} |")
    return "\n".join(lines)


def write_open(results: dict) -> None:
    """Rewrite the open table of ``docs/recall.md`` between its markers."""
    text = PAGE.read_text()
    pattern = re.compile(re.escape(OPEN_START) + r".*?" + re.escape(OPEN_END), re.S)
    if not pattern.search(text):
        raise SystemExit(f"{PAGE} has no {OPEN_START} … {OPEN_END} markers")
    PAGE.write_text(pattern.sub(lambda _: f"{OPEN_START}\n{open_table(results)}\n{OPEN_END}", text))
