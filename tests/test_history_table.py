"""The history grid reads the reports a CI writes (``--table-from``): any
file names, folders and globs, every implementation's column, and a one-line
error for a file it cannot read. In-process, on small hand-made reports."""

from __future__ import annotations

import json

import pytest

from pytest_fsdpcheck.commands.history import main

pytestmark = pytest.mark.unit


def _report(torch: str, cells: dict, devices=("cpu",)) -> dict:
    """A report as --fsdpcheck-report writes it, reduced to what the table reads."""
    tests = {f"test_x.py::test_{inv.lower()}[{impl}]": {"outcome": "failed" if out == "fail" else "passed"}
             for impl, row in cells.items() for inv, out in row.items()}
    return {"header": {"torch": torch, "devices": list(devices), "implementations": list(cells)},
            "matrix": {impl: {inv: {"outcome": out, "tests": 1} for inv, out in row.items()} for impl, row in cells.items()},
            "tests": tests, "known_bugs": [], "stale_divergences": [], "unexpected_passes": []}


def _write(path, data) -> None:
    path.write_text(json.dumps(data) if not isinstance(data, str) else data, encoding="utf-8")


def test_the_recipes_report_names_give_every_implementations_column(tmp_path, capsys):
    reports = tmp_path / "artifacts"
    reports.mkdir()
    # the CI recipe's names, and one a user made up: the header says the release
    _write(reports / "fsdpcheck-torch2.13.0.json", _report("2.13.0+cu126", {
        "torch": {"TRV-7": "pass", "FS2-1": "pass"}, "mypkg.checks:MyFramework": {"TRV-7": "fail", "FS2-1": "pass"}}))
    _write(reports / "torch-2.3.1-titanlite.json", _report("2.3.1", {
        "torch": {"TRV-7": "pass", "FS2-1": "not provided"}, "mypkg.checks:MyFramework": {"TRV-7": "pass"}}))
    assert main(["--table-from", str(reports)]) == 1  # MyFramework's FAIL on 2.13
    out = capsys.readouterr().out.splitlines()
    assert out[0].split() == ["invariant", "2.3.1", "2.3.1", "mypkg.checks:MyFramework", "2.13.0", "2.13.0",
                              "mypkg.checks:MyFramework"], out[0]
    trv7 = next(line for line in out if line.startswith("TRV-7"))
    assert trv7.split() == ["TRV-7", "pass", "pass", "pass", "FAIL"], trv7
    assert any("torch 2.13.0+cu126: exit 1" in line and "fsdpcheck-torch2.13.0.json" in line for line in out), out


def test_files_and_globs_in_any_order_sort_by_release_and_device(tmp_path, capsys):
    _write(tmp_path / "b.json", _report("2.13.0", {"torch": {"TRV-7": "pass"}}))
    _write(tmp_path / "gpu.json", _report("2.13.0", {"torch": {"TRV-7": "pass"}}, devices=("cpu", "cuda")))
    _write(tmp_path / "a-old.json", _report("2.10.0", {"torch": {"TRV-7": "pass"}}))
    assert main(["--table-from", str(tmp_path / "b.json"), str(tmp_path / "*.json")]) == 0
    head = capsys.readouterr().out.splitlines()[0]
    assert head.split() == ["invariant", "2.10.0", "2.13.0", "2.13.0", "(cpu+cuda)"], head


@pytest.mark.parametrize("content, message", [
    ("{not json", "not JSON"),
    ("[1, 2]", "not a pytest-fsdpcheck JSON report"),
    (json.dumps({"header": {"torch": "2.13.0"}}), "not a pytest-fsdpcheck JSON report"),
    (json.dumps({"header": {"torch": "2.13.0"}, "matrix": {"torch": []}}), "matrix of 'torch' is not an object"),
])
def test_a_malformed_report_is_a_one_line_error(tmp_path, capsys, content, message):
    _write(tmp_path / "torch-2.13.0-titanlite.json", content)
    assert main(["--table-from", str(tmp_path)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    (line,) = captured.err.splitlines()
    assert "torch-2.13.0-titanlite.json" in line and message in line, line


@pytest.mark.parametrize("given, message", [
    ("missing.json", "no such file or folder"),
    ("*.nothing", "matches no file"),
    (".", "a folder with no *.json report in it"),
])
def test_nothing_to_read_is_an_error_not_an_empty_table(tmp_path, monkeypatch, capsys, given, message):
    monkeypatch.chdir(tmp_path)
    assert main(["--table-from", given]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert message in line, line


def _failed(report: dict, impl: str, inv: str, message: str, reproducer: str | None) -> dict:
    """``report`` with its test of ``inv`` on ``impl`` failed, as the plugin records a failure."""
    node_id = f"test_x.py::test_{inv.lower()}[{impl}]"
    report["tests"][node_id] = {"outcome": "failed", "implementation": impl, "invariants": [inv],
                                "failure": {"invariants": [inv], "message": message, "reproducer": reproducer}}
    return report


def test_diff_names_new_fails_and_fixed_cells_and_exits_1_on_a_new_fail(tmp_path, capsys):
    before = _report("2.13.0", {"torch": {"TRV-7": "pass", "EXO-3": "fail", "ANN-1": "pass"},
                                "mypkg:Impl": {"TRV-7": "pass"}})
    before = _failed(before, "torch", "EXO-3", "EXO-3: parameter order differs", None)
    after = _report("2.13.0", {"torch": {"TRV-7": "fail", "EXO-3": "pass", "ANN-1": "not provided", "SPL-1": "pass"}})
    after = _failed(after, "torch", "TRV-7", "TRV-7: root states are [s0, s2], expected [s0]", "import torch\n")
    _write(tmp_path / "before.json", before)
    _write(tmp_path / "after.json", after)
    assert main(["--diff", str(tmp_path / "before.json"), str(tmp_path / "after.json")]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "new FAIL  TRV-7  2.13.0: pass -> FAIL (TRV-7: root states are [s0, s2], expected [s0])", out
    assert "fixed     EXO-3  2.13.0: FAIL -> pass" in out, out
    assert "changed   ANN-1  2.13.0: pass -> n/p" in out, out
    assert "only after  SPL-1  2.13.0: pass" in out, out
    assert "column only before: 2.13.0 mypkg:Impl" in out, out
    assert out[-1] == "1 new FAIL, 1 fixed, 2 other changes in 1 column(s) both runs have", out
    # the other way round: EXO-3 is the new FAIL, TRV-7 the fixed cell
    assert main(["--diff", str(tmp_path / "after.json"), str(tmp_path / "before.json")]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "new FAIL  EXO-3  2.13.0: pass -> FAIL (EXO-3: parameter order differs)", out
    assert "fixed     TRV-7  2.13.0: FAIL -> pass" in out, out
    # the same run twice: nothing to say but the count, exit 0
    assert main(["--diff", str(tmp_path / "after.json"), str(tmp_path / "after.json")]) == 0
    assert capsys.readouterr().out.splitlines() == ["0 new FAIL, 0 fixed, 0 other changes in 1 column(s) both runs have"]


def test_diff_of_a_missing_report_is_a_one_line_error(tmp_path, capsys):
    _write(tmp_path / "before.json", _report("2.13.0", {"torch": {"TRV-7": "pass"}}))
    assert main(["--diff", str(tmp_path / "before.json"), str(tmp_path / "nowhere.json")]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert "nowhere.json: no such file or folder" in line, line


def test_every_fail_cell_of_the_grid_links_to_its_failures_and_reproducers(tmp_path, capsys):
    report = _report("2.13.0", {"torch": {"TRV-7": "fail", "TRV-2": "pass"}, "mypkg:Impl": {"TRV-7": "fail"}})
    report = _failed(report, "torch", "TRV-7", "TRV-7: root <states> differ", "print('rebuild <it>')\n")
    report = _failed(report, "mypkg:Impl", "TRV-7", "TRV-7: another message", None)
    _write(tmp_path / "r.json", report)
    grid = tmp_path / "grid.html"
    assert main(["--table-from", str(tmp_path / "r.json"), "--html", str(grid)]) == 1
    page = grid.read_text()
    assert page.count('<a href="#fail-') == 2, page
    for column, message in ((0, "TRV-7: root &lt;states&gt; differ"), (1, "TRV-7: another message")):
        anchor = f"fail-{column}-TRV-7"
        assert f'<a href="#{anchor}">FAIL</a>' in page, page
        section = page[page.index(f'id="{anchor}"'):]
        section = section[:section.index("</details>")]
        assert message in section, section
    assert "print(&#x27;rebuild &lt;it&gt;&#x27;)" in page or "print('rebuild &lt;it&gt;')" in page, page
    assert "no reproducer" in page


def test_affected_by_picks_the_releases_a_change_can_reach():
    """Issue 58 item 3: a known bug's range and one release on each side; an
    invariant's bugs' ranges and both ends of the promise; every known bug
    and invariant names releases of the promise only; anything else is a
    one-line error."""
    from pytest_fsdpcheck.commands.history import RELEASES, affected_releases
    from pytest_fsdpcheck.impls.torch_bugs import TORCH_BUGS

    assert affected_releases(["fs2-grouped-module-reused-summed"]) == ["2.6.0", "2.7.1", "2.8.0", "2.9.1"]
    assert affected_releases(["spl-dynamic-bucket-fake-run-raises"]) == ["2.7.1", "2.8.0", "2.9.1"]
    fs2_9 = affected_releases(["FS2-9"])
    assert fs2_9[0] == RELEASES[0] and fs2_9[-1] == RELEASES[-1] and "2.11.0" in fs2_9 and "2.4.1" not in fs2_9
    assert affected_releases(["fs2-gloo-grads-summed", "spl-dynamic-bucket-fake-run-raises"]) == [
        "2.6.0", "2.7.1", "2.8.0", "2.9.1"]
    for bug in TORCH_BUGS:
        reached = affected_releases([bug.id])
        assert set(reached) <= set(RELEASES) and all(bug.applies_to_version(r) or r in reached for r in RELEASES
                                                     if bug.applies_to_version(r)), bug.id
    with pytest.raises(ValueError, match="--affected-by nope: neither a known bug's id"):
        affected_releases(["nope"])


def test_the_command_refuses_an_unknown_affected_by_in_one_line(capsys):
    with pytest.raises(SystemExit) as exited:
        main(["--affected-by", "nope"])
    assert exited.value.code == 2
    assert "neither a known bug's id" in capsys.readouterr().err


def _results(*versions_and_exits) -> list[dict]:
    """What a run of the command writes with --json: one result per release."""
    return [{"version": v, "exit": code, "summary": "3 passed in 1.00s", "torch": f"{v}+cpu",
             "matrix": {"TRV-7": {"outcome": "pass" if code == 0 else "fail", "tests": 1}}, "failures": {},
             "known_bugs": [], "install_s": 120.0, "suite_s": 180.0 + i * 60}
            for i, (v, code) in enumerate(versions_and_exits)]


def test_the_markdown_block_is_the_commands_output_with_its_cost_and_a_digest(tmp_path, capsys):
    """--markdown writes the table, the releases' exits and costs, the date,
    the commit and the command into the page's generated block, replacing
    the previous one and leaving the page's prose; a hand edit of the block
    no longer matches its digest."""
    from pytest_fsdpcheck.commands.history import block_digest, written_block

    runs = tmp_path / "run.json"
    _write(runs, _results(("2.0.1", 0), ("2.13.0", 0)))
    page = tmp_path / "history.md"
    page.write_text("# History\n\nProse a person wrote.\n", encoding="utf-8")
    args = ["--table-from", str(runs), "--markdown", str(page), "--reports-commit", "abc1234"]
    assert main(args) == 0
    assert main(args) == 0  # twice: one block, replaced
    text = page.read_text(encoding="utf-8")
    assert text.startswith("# History\n\nProse a person wrote.\n") and text.count("<!-- begin: written by") == 1
    body, digest = written_block(text)
    assert block_digest(body) == digest
    assert "commit `abc1234`" in text and f"--table-from {runs} --markdown {page}" in text
    assert "**2 of 2 releases exit 0**" in text
    assert "Cost of one release: 3.0–4.0 min of suite (median 4.0) and 2.0–2.0 min of install; all 2: 11 min" in text
    assert "torch 2.13.0+cpu: exit 0, install 120.0 s, suite 240.0 s" in text
    edited = written_block(text.replace("exit 0, install 120.0", "exit 0, install 12.0"))
    assert block_digest(edited[0]) != edited[1]
    # a red release is said so at the top of the block, and the command exits 1
    _write(runs, _results(("2.0.1", 0), ("2.11.0", 1)))
    assert main(args) == 1
    assert "**1 of 2 releases exit 0**" in page.read_text(encoding="utf-8")


def test_the_history_page_is_the_commands_output_not_a_hand_edit():
    """docs/history.md's results are the history command's own block, as it
    wrote it (README, "Working on it": never edited by hand)."""
    from pathlib import Path

    from pytest_fsdpcheck.commands.history import block_digest, written_block

    page = Path(__file__).resolve().parents[1] / "docs" / "history.md"
    found = written_block(page.read_text(encoding="utf-8"))
    assert found is not None, "docs/history.md has no block written by the history command's --markdown"
    body, digest = found
    assert block_digest(body) == digest, "docs/history.md's generated block was edited by hand: run the command again"


def test_known_bugs_past_the_alphabet_get_two_letters():
    """Over 26 known bugs in one table (33 across the sixteen releases): AA, AB, …, never '[' or '\\'."""
    from pytest_fsdpcheck.commands.history import _letter

    assert [_letter(i) for i in (0, 25, 26, 27, 51, 52)] == ["A", "Z", "AA", "AB", "AZ", "BA"]
