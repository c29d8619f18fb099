"""The recall benchmark's open table (issue 57 item 1): every row of
``benchmarks/recall/open_rows.py`` names a torch-only script under
``benchmarks/recall/open/`` whose docstring cites its upstream reports and
which prints the REPRODUCED / NOT REPRODUCED line the runner reads; the
runner maps a script's exit and line to its outcome and reads the suite's
verdict from the catalog; the docs writer puts the table between its own
markers of ``docs/recall.md`` and leaves the rest of the page alone. No
script is run here (they take seconds each and need gloo): the outcomes are
from planted scripts."""

from __future__ import annotations

import ast
import dataclasses
import re
import sys
import textwrap
from pathlib import Path

import pytest

from benchmarks.recall import docs, open_rows, open_run
from benchmarks.recall.open_rows import OPEN_AREAS, OPEN_DIR, OpenBug
from benchmarks.recall.open_rows import open_rows as all_rows
from pytest_fsdpcheck.core.bugs import UPSTREAM_REF
from pytest_fsdpcheck.core.catalog import INVARIANTS
from pytest_fsdpcheck.impls.torch_bugs import TORCH_BUGS

pytestmark = pytest.mark.unit

ROWS = all_rows()
KNOWN = {bug.id: bug for bug in TORCH_BUGS}


def _docstring(path: Path) -> str:
    return ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""


@pytest.mark.parametrize("row", ROWS, ids=[r.id for r in ROWS])
def test_every_row_names_a_script_that_cites_its_reports(row):
    assert row.script.is_file(), f"{row.id}: no {row.script}"
    doc = _docstring(row.script)
    assert doc, f"{row.script.name} has no docstring"
    assert row.upstream, f"{row.id}: an open row cites at least its report"
    for ref in row.upstream:
        match = UPSTREAM_REF.fullmatch(ref)
        assert match, (row.id, ref)
        url = rf"https://github\.com/{match['owner']}/{re.escape(match['repo'])}/(issues|pull)/{match['number']}\b"
        assert re.search(url, doc), f"{row.script.name}'s docstring does not cite {ref}"
    source = row.script.read_text(encoding="utf-8")
    assert '"REPRODUCED: ' in source or "'REPRODUCED: " in source or 'f"REPRODUCED: ' in source, row.id
    assert "NOT REPRODUCED: " in source, row.id
    # torch only: no third-party package a CPU box may lack
    imported = {n.names[0].name.split(".")[0] if isinstance(n, ast.Import) else (n.module or "").split(".")[0]
                for n in ast.walk(ast.parse(source)) if isinstance(n, (ast.Import, ast.ImportFrom))}
    assert imported <= set(sys.stdlib_module_names) | {"torch", ""}, (row.id, imported)


@pytest.mark.parametrize("row", ROWS, ids=[r.id for r in ROWS])
def test_every_row_names_what_the_suite_knows(row):
    assert row.area in OPEN_AREAS, row.id
    assert row.invariants and set(row.invariants) <= set(INVARIANTS), row.id
    assert row.known is None or row.known in KNOWN, f"{row.id}: no known bug {row.known!r} in the catalog"
    assert row.behaviour and row.status, row.id
    assert all(what in ("reproduced", "not reproduced") for _, what in row.measured), row.id


def test_rows_and_scripts_match_one_to_one():
    assert len({r.id for r in ROWS}) == len(ROWS)
    assert {p.stem for p in OPEN_DIR.glob("*.py")} == {r.id for r in ROWS}
    with pytest.raises(ValueError, match="named twice"):
        original = open_rows.OPEN_ROWS
        try:
            open_rows.OPEN_ROWS = original + original[:1]
            open_rows.open_rows()
        finally:
            open_rows.OPEN_ROWS = original


# ----------------------------------------------------------------- the runner

def _planted(tmp_path, monkeypatch, body: str) -> OpenBug:
    monkeypatch.setattr(open_rows, "OPEN_DIR", tmp_path)
    (tmp_path / "planted.py").write_text(textwrap.dedent(body), encoding="utf-8")
    return OpenBug(id="planted", area="fsdp2", behaviour="b", upstream=("pytorch/pytorch#1",), status="open",
                   invariants=("FS2-9",))


@pytest.mark.parametrize("body, outcome", [
    ("import sys\nprint('noise')\nprint('REPRODUCED: it shows')\nsys.exit(1)\n", "reproduced"),
    ("print('NOT REPRODUCED: fine')\n", "not reproduced"),
    ("import sys\nprint('ERROR: no gloo')\nsys.exit(2)\n", "error"),
    ("import sys\nprint('something else')\nsys.exit(1)\n", "error"),  # exit 1 without its line
    ("print('REPRODUCED: but exit 0')\n", "error"),
    ("raise RuntimeError('boom')\n", "error"),
])
def test_the_runner_reads_the_exit_and_the_line(tmp_path, monkeypatch, body, outcome):
    entry = open_run.run_script(_planted(tmp_path, monkeypatch, body))
    assert entry["outcome"] == outcome, entry
    if outcome != "error":
        assert entry["line"].split(":")[0] in ("REPRODUCED", "NOT REPRODUCED")


def test_the_verdict_comes_from_the_catalog_and_its_range():
    row = OpenBug(id="x", area="fsdp2", behaviour="b", upstream=("pytorch/pytorch#1",), status="open",
                  invariants=("FS2-9",), known="fs2-frozen-mp-latched")
    assert not KNOWN["fs2-frozen-mp-latched"].applies_to_version("2.15.0")
    assert open_run.suite_verdict(row, "reproduced", "2.13.0") == "flagged (known fs2-frozen-mp-latched)"
    assert open_run.suite_verdict(row, "reproduced", "2.15.0") == "missed"  # outside the bug's range
    assert open_run.suite_verdict(dataclasses.replace(row, known=None), "reproduced", "2.13.0") == "missed"
    assert open_run.suite_verdict(row, "not reproduced", "2.13.0").startswith("nothing to flag")
    assert open_run.suite_verdict(row, "error", "2.13.0").startswith("not judged")


# ------------------------------------------------------------------- the page

PAGE = """# Real-bug recall

<!-- recall table: start -->
the historical table
<!-- recall table: end -->

## Open in the current release

A paragraph of the page's own.

<!-- open table: start -->
an old open table
<!-- open table: end -->

after
"""


def _results():
    first, second = ROWS[0], ROWS[1]
    return {"torch": "2.13.0", "rows": {},
            "open": {first.id: {"outcome": "reproduced", "line": "REPRODUCED: x", "seconds": 1.0,
                                "verdict": "missed"},
                     second.id: {"outcome": "not reproduced", "line": "NOT REPRODUCED: y", "seconds": 1.0,
                                 "verdict": "nothing to flag (not reproduced)"}}}


def test_the_writer_puts_the_table_between_its_markers(tmp_path, monkeypatch):
    page = tmp_path / "recall.md"
    page.write_text(PAGE, encoding="utf-8")
    monkeypatch.setattr(docs, "PAGE", page)
    docs.write_open(_results())
    text = page.read_text(encoding="utf-8")
    before, rest = text.split(docs.OPEN_START + "\n", 1)
    table, after = rest.split("\n" + docs.OPEN_END, 1)
    assert before == PAGE.split(docs.OPEN_START)[0]  # the historical table and the prose untouched
    assert after == PAGE.split(docs.OPEN_END)[1]
    assert "an old open table" not in table
    assert table.startswith("**1 of 2 open reports reproduce on torch 2.13.0 (CPU)")
    for row in ROWS:
        assert f"`{row.id}`" in table
        assert all(f"[{ref}](https://github.com/" in table for ref in row.upstream)
    assert "not run" in table  # the rows the results do not hold
    docs.write_open(_results())
    assert page.read_text(encoding="utf-8") == text  # idempotent


def test_the_writer_refuses_a_page_without_the_markers(tmp_path, monkeypatch):
    page = tmp_path / "recall.md"
    page.write_text(PAGE.replace(docs.OPEN_END, ""), encoding="utf-8")
    monkeypatch.setattr(docs, "PAGE", page)
    with pytest.raises(SystemExit, match="open table"):
        docs.write_open(_results())


def test_the_real_page_has_both_tables_in_order():
    text = docs.PAGE.read_text(encoding="utf-8")
    order = [text.index(marker) for marker in (docs.START, docs.END, docs.OPEN_START, docs.OPEN_END)]
    assert order == sorted(order)
    table = text.split(docs.OPEN_START, 1)[1].split(docs.OPEN_END, 1)[0]
    assert all(f"`{row.id}`" in table for row in ROWS), "the page's open table is not the rows': run --open --write-docs"
