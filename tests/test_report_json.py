"""The JSON report's file and content, unit by unit: its mode, the n/p
reasons of its cells, its schema, and the options naming its files."""

from __future__ import annotations

import json
import os
import stat
from types import SimpleNamespace

import pytest

from pytest_fsdpcheck.report.content import SCHEMA_VERSION, payload, schema, write_atomically
from pytest_fsdpcheck.report.matrix import Matrix
from pytest_fsdpcheck.report.verdict import PROP_IMPL, PROP_INVARIANTS, PROP_NOT_PROVIDED

pytestmark = pytest.mark.unit


def _mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


@pytest.mark.parametrize(("umask", "mode"), [(0o022, 0o644), (0o002, 0o664), (0o077, 0o600)])
def test_a_new_report_gets_the_mode_the_umask_gives(tmp_path, umask, mode):
    before = os.umask(umask)
    try:
        write_atomically(str(tmp_path / "report.json"), "{}\n")
    finally:
        os.umask(before)
    assert _mode(tmp_path / "report.json") == mode
    assert [p.name for p in tmp_path.iterdir()] == ["report.json"]  # no temporary file left


def test_a_rewritten_report_keeps_its_mode(tmp_path):
    path = tmp_path / "report.json"
    path.write_text("old\n")
    path.chmod(0o640)
    write_atomically(str(path), "new\n")
    assert path.read_text() == "new\n" and _mode(path) == 0o640


def _skip_report(nodeid, reason, invariants, impl, *, not_provided=False):
    """A skipped test's report; ``not_provided``: as the plugin marks a
    NotProvided (or an area missing at collection), its reason a property."""
    props = [(PROP_INVARIANTS, invariants), (PROP_IMPL, impl)]
    if not_provided:
        props.append((PROP_NOT_PROVIDED, reason))
    message = f"not provided: {reason}" if not_provided else reason
    return SimpleNamespace(nodeid=nodeid, when="setup", outcome="skipped", passed=False, failed=False, skipped=True,
                           longrepr=("conformance/test_x.py", 3, f"Skipped: {message}"), user_properties=props,
                           duration=0.0, sections=[])


def test_np_cells_and_tests_carry_their_reasons():
    matrix = Matrix()
    matrix.record(_skip_report("t.py::a[x]", "x has no splitting area", ["SPL-3"], "x", not_provided=True))
    matrix.record(_skip_report("t.py::b[x]", "x accepts dynamo-form graphs, not module form",
                               ["SPL-3", "SPL-4"], "x", not_provided=True))
    matrix.record(_skip_report("t.py::c[x]", "needs a GPU", ["SPL-11"], "x"))
    cells = matrix.to_json()["x"]
    assert cells["SPL-3"] == {"outcome": "not provided", "tests": 2,
                              "reasons": ["x accepts dynamo-form graphs, not module form", "x has no splitting area"]}
    assert cells["SPL-4"]["reasons"] == ["x accepts dynamo-form graphs, not module form"]
    assert cells["SPL-11"] == {"outcome": "skipped", "tests": 1, "reasons": ["needs a GPU"]}
    assert matrix.per_test["t.py::a[x]"]["reason"] == "x has no splitting area"
    assert matrix.per_test["t.py::c[x]"] == {"outcome": "skipped", "implementation": "x", "invariants": ["SPL-11"],
                                             "reason": "needs a GPU"}


def test_np_is_what_the_check_raised_never_what_a_skip_message_says():
    # a plain skip whose message merely reads like one (a user's own check,
    # a library's skip) is "skipped": n/p comes only from NotProvided
    matrix = Matrix()
    matrix.record(_skip_report("t.py::a[x]", "not provided: as a plain skip", ["SPL-3"], "x"))
    assert matrix.to_json()["x"]["SPL-3"] == {"outcome": "skipped", "tests": 1, "reasons": ["not provided: as a plain skip"]}


def _failed_report(nodeid, message, invariants, impl, props=()):
    return SimpleNamespace(nodeid=nodeid, when="call", outcome="failed", passed=False, failed=True, skipped=False,
                           longrepr=message, user_properties=[(PROP_INVARIANTS, invariants), (PROP_IMPL, impl), *props],
                           duration=0.0, sections=[])


def test_a_failure_records_its_cause():
    """Only a check's violation is one: a leak, a time-out or any other
    exception fails every invariant of its test, and its record says so,
    so nothing reading the report (the killers' demands) takes it for the
    invariants' own violation (issue 56, item 6)."""
    from pytest_fsdpcheck.checks import ConformanceFailure, Violation
    from pytest_fsdpcheck.plugin.guard import ImplementationTimeout, LeakedGlobalState
    from pytest_fsdpcheck.plugin.verdicts import failure_cause
    from pytest_fsdpcheck.report.verdict import PROP_CAUSE, PROP_VIOLATED

    violation = ConformanceFailure([Violation("TRV-7", "lost a root")])
    leak = LeakedGlobalState("TRV-7: TRV-9: x left process-wide state changed: default_dtype")
    assert [failure_cause(exc, False) for exc in (violation, leak, ImplementationTimeout("slow"), RuntimeError("TRV-7:"))] == [
        "violation", "leak", "timeout", "crash"]
    assert failure_cause(violation, True) == "timeout"  # its report says ImplementationTimeout
    matrix = Matrix()
    matrix.record(_failed_report("t.py::a[x]", "TRV-7: lost a root", ["TRV-7", "TRV-9"], "x",
                                 [(PROP_VIOLATED, ["TRV-7"]), (PROP_CAUSE, "violation")]))
    matrix.record(_failed_report("t.py::b[x]", str(leak), ["TRV-7", "TRV-9"], "x", [(PROP_CAUSE, "leak")]))
    matrix.record(_failed_report("t.py::c[x]", "worker crashed", ["TRV-8"], "x"))  # no cause recorded: a crash
    assert {nodeid: (t["failure"]["cause"], t["failure"]["invariants"]) for nodeid, t in matrix.per_test.items()} == {
        "t.py::a[x]": ("violation", ["TRV-7"]), "t.py::b[x]": ("leak", ["TRV-7", "TRV-9"]),
        "t.py::c[x]": ("crash", ["TRV-8"])}
    assert matrix.outcome("TRV-9", "x") == "fail"  # the leak still FAILs every cell of its test
    jsonschema = pytest.importorskip("jsonschema")
    header = {"torch": "2.13.0", "implementations": ["x"], "devices": ["cpu"], "profile": "ci", "seed": None,
              "divergence_files": [], "complete": True}
    report = payload(header, matrix, {})
    jsonschema.validate(report, schema())
    report["tests"]["t.py::a[x]"]["failure"]["cause"] = "flaky"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(report, schema())


def test_each_model_has_cells_of_its_own_beside_the_runs():
    """A framework naming several models sees which one failed (issue 56,
    item 4): the run's cell holds every test, a model's cells its tests
    alone, both from the same reports (the model is their PROP_MODEL, never
    read from a test id); a known bug keeps the run's [n]."""
    from pytest_fsdpcheck.impls.torch_bugs import TORCH_BUGS
    from pytest_fsdpcheck.report.verdict import PROP_CAUSE, PROP_MODEL, PROP_VIOLATED

    make, other = "pkg.models:make", "pkg.models:other"
    first, later = TORCH_BUGS[0].id, TORCH_BUGS[3].id
    failing = "test_models.py::test_model_plan_end_to_end[torch-pkg.models.make]"

    def passed(nodeid, invariants, model=None):
        props = [(PROP_INVARIANTS, invariants), (PROP_IMPL, "torch"), *([(PROP_MODEL, model)] if model else [])]
        return SimpleNamespace(nodeid=nodeid, when="call", outcome="passed", passed=True, failed=False, skipped=False,
                               longrepr=None, user_properties=props, duration=0.0, sections=[])

    known = _known_report("test_models.py::test_model_traversal[torch-pkg.models.other]", ["TRV-7"], [later])
    known.user_properties.append((PROP_MODEL, other))
    matrix = Matrix()
    matrix.add_impl("torch")
    for report in (passed("test_fsdp2.py::test_world[torch]", ["FS2-9"]),
                   _known_report("test_traversal.py::test_states[torch]", ["TRV-7"], [first]),
                   _failed_report(failing, "FS2-9: rank 1: wrong gradients", ["FS2-9"], "torch",
                                  [(PROP_MODEL, make), (PROP_VIOLATED, ["FS2-9"]), (PROP_CAUSE, "violation")]),
                   passed("test_models.py::test_model_plan_end_to_end[torch-pkg.models.other]", ["FS2-9"], other),
                   passed("test_models.py::test_model_fsdp2_walk[torch-pkg.models.other]", ["FS2-1"], other),
                   known):
        matrix.record(report)
    header = {"torch": "2.13.0", "implementations": ["torch"], "devices": ["cpu"], "profile": "ci", "seed": None,
              "divergence_files": [], "complete": True, "world_size": 4}
    content = payload(header, matrix, {})
    assert content["matrix"]["torch"]["FS2-9"] == {"outcome": "fail", "tests": 3}  # every test, the models' included
    assert content["models"] == {
        make: {"torch": {"FS2-9": {"outcome": "fail", "tests": 1}}},
        other: {"torch": {"FS2-1": {"outcome": "pass", "tests": 1}, "FS2-9": {"outcome": "pass", "tests": 1},
                          "TRV-7": {"outcome": "known", "tests": 1, "known": [later]}}}}
    assert content["tests"][failing]["model"] == make and "model" not in content["tests"]["test_fsdp2.py::test_world[torch]"]
    jsonschema = pytest.importorskip("jsonschema")
    jsonschema.validate(content, schema())
    lines = matrix.render()
    at = next(i for i, line in enumerate(lines) if line.startswith("cells: "))
    assert lines[at + 1].startswith("your models") and lines[at + 2].split() == ["invariant", "[model]", "torch"]
    rows = {" ".join(line.split()[:2]): line.split()[2:] for line in lines[at + 3:]}
    assert rows == {f"FS2-9 [{make}]": ["FAIL"], f"FS2-1 [{other}]": ["pass"], f"FS2-9 [{other}]": ["pass"],
                    f"TRV-7 [{other}]": ["known", "[2]"]}  # the run's numbering: [1] is the suite's own bug
    assert [line.split()[:2] for line in lines[1:at]] == [["TRV-7", "known"], ["FS2-1", "pass"], ["FS2-9", "FAIL"]]


def test_the_schema_is_shipped_valid_and_versioned():
    jsonschema = pytest.importorskip("jsonschema")
    published = schema()
    jsonschema.Draft202012Validator.check_schema(published)
    assert published["properties"]["schema_version"] == {"const": SCHEMA_VERSION}


def test_the_report_a_run_starts_with_matches_the_schema():
    jsonschema = pytest.importorskip("jsonschema")
    header = {"torch": "2.13.0", "implementations": ["torch"], "devices": ["cpu"], "profile": "ci", "seed": None,
              "divergence_files": [], "complete": False}
    jsonschema.validate(payload(header, Matrix(), {}), schema())


def test_the_schema_rejects_what_a_dashboard_could_not_read():
    jsonschema = pytest.importorskip("jsonschema")
    header = {"torch": "2.13.0", "implementations": ["x"], "devices": ["cpu"], "profile": "ci", "seed": None,
              "divergence_files": [], "complete": True}
    good = payload(header, Matrix(), {})
    good["matrix"] = {"x": {"SPL-3": {"outcome": "not provided", "tests": 1, "reasons": ["why"]}}}
    jsonschema.validate(good, schema())
    for bad in ({**good, "schema_version": SCHEMA_VERSION + 1},
                {**good, "matrix": {"x": {"SPL-3": {"outcome": "not provided", "tests": 1}}}},  # no reasons
                {**good, "matrix": {"x": {"SPL-3": {"outcome": "green", "tests": 1}}}},
                {**good, "header": {**header, "profile": "fast"}}):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(bad, schema())


@pytest.mark.plugin
@pytest.mark.parametrize(("args", "ini", "says"), [
    (["--fsdpcheck-html", "no-such-folder/report.html"], "", "no-such-folder' is a file, not a folder"),
    (["--fsdpcheck-html", "."], "", "--fsdpcheck-html '.' is a directory"),
    ([], "fsdpcheck_html = missing/page.html", "--fsdpcheck-html"),
])
def test_a_bad_html_path_is_a_one_line_usage_error(pytester, run_in_process, args, ini, says):
    # a folder that does not exist yet is made when the page is written (as
    # --junitxml does); one a file stands in the way of cannot be
    for blocker in ("no-such-folder", "missing"):
        (pytester.path / blocker).write_text("a file, not a folder\n")
    if ini:
        pytester.makeini(f"[pytest]\n{ini}\n")
    result = run_in_process("--fsdpcheck", *args)
    output = result.outlines + result.errlines
    assert result.ret == pytest.ExitCode.USAGE_ERROR, "\n".join(output)
    saying = [line for line in output if says in line]
    assert len(saying) == 1 and saying[0].startswith("ERROR: fsdpcheck:"), "\n".join(output)
    assert not any("Traceback" in line for line in output)
    if ini:  # the ini's path is resolved against the ini file's folder
        assert str(pytester.path / "missing") in saying[0]


def test_every_report_a_test_leaves_is_checked_against_the_schema(pytester):
    """tests/conftest.py validates each JSON report left in a test's
    temporary folders; this one leaves a broken report and asks it."""
    pytest.importorskip("jsonschema")
    from tests.conftest import schema_errors

    broken = pytester.path / "report.json"
    broken.write_text(json.dumps({"schema_version": SCHEMA_VERSION, "header": {}}))
    (pytester.path / "other.json").write_text(json.dumps({"not": "a report"}))
    try:
        errors = schema_errors([pytester.path])
    finally:
        broken.unlink()  # or the check would fail this test too
    assert errors and all(e.startswith(f"{broken}: ") for e in errors), errors


def test_a_run_starts_both_reports_as_incomplete(tmp_path):
    """A run that dies before its summary leaves reports saying so, never
    the previous run's green JSON or page."""
    from pytest_fsdpcheck.report.terminal import start_report

    for name in ("report.json", "report.html"):
        (tmp_path / name).write_text("a previous run's green report")
    session = SimpleNamespace(report_path=str(tmp_path / "report.json"), html_path=str(tmp_path / "report.html"),
                              junit_path=None,
                              torch_version="2.13.0", impls={"torch": None}, devices=["cpu"], profile="ci", seed=None,
                              divergence_files=[], incomplete=False, plan=None)
    start_report(session)
    assert json.loads((tmp_path / "report.json").read_text())["header"]["complete"] is False
    assert "This run did not complete" in (tmp_path / "report.html").read_text()


def _known_report(nodeid, invariants, bug_ids, impl="torch"):
    from pytest_fsdpcheck.report.verdict import PROP_IMPL, PROP_INVARIANTS, PROP_KNOWN, PROP_VERDICT

    known = {bug: {"examples": 1, "invariants": list(invariants)} for bug in bug_ids}
    # the verdict as the plugin records it where it decides it (plugin.verdicts.judge_report)
    verdict = {"cells": dict.fromkeys(invariants, "known"), "reason": None}
    props = [(PROP_INVARIANTS, list(invariants)), (PROP_IMPL, impl), (PROP_KNOWN, known), (PROP_VERDICT, verdict)]
    return SimpleNamespace(nodeid=nodeid, when="call", outcome="skipped", passed=False, failed=False, skipped=True,
                           wasxfail="known", longrepr=None, user_properties=props, duration=0.0, sections=[])


def test_known_bugs_are_numbered_by_the_catalog_not_by_which_test_met_them_first():
    """A serial run and -n 2 meet the known bugs in other orders: the [n]
    the matrix prints must not depend on it (issue 42 item 5)."""
    from pytest_fsdpcheck.impls.torch_bugs import TORCH_BUGS

    first, later = TORCH_BUGS[0].id, TORCH_BUGS[3].id
    reports = [_known_report("t.py::a[torch]", ["TRV-7"], [later]), _known_report("t.py::b[torch]", ["SPL-3"], [first])]
    texts = []
    for order in (reports, reports[::-1]):
        matrix = Matrix()
        matrix.add_impl("torch")
        for report in order:
            matrix.record(report)
        texts.append((matrix.known_order, matrix.cell_text("TRV-7", "torch"), matrix.cell_text("SPL-3", "torch")))
    assert texts[0] == texts[1] == ([("torch", first), ("torch", later)], "known [2]", "known [1]")


def test_the_html_lists_known_bugs_in_number_order():
    from pytest_fsdpcheck.report.html import _Anchors, _known_bugs

    def bug(bug_id, number):
        return {"id": bug_id, "implementation": "torch", "examples": 1, "invariants": ["TRV-7"], "number": number}

    report = {"known_bugs": [bug("c", 3), bug("gone", None) | {"examples": 0, "not_reproduced": True}, bug("a", 1),
                             bug("b", 2)]}
    numbers = {("torch", b["id"]): b["number"] for b in report["known_bugs"] if b["number"]}
    html = "".join(_known_bugs(report, _Anchors(["torch"]), numbers))
    assert html.index("[1] a") < html.index("[2] b") < html.index("[3] c") < html.index("gone"), html


def test_a_report_in_a_folder_not_made_yet_is_written_there(tmp_path):
    """As --junitxml does (issue 42 item 8): the folder is made when the
    report is written, not refused at the start."""
    from pytest_fsdpcheck.plugin.options import _writable_report
    from pytest_fsdpcheck.report.content import write_atomically

    path = str(tmp_path / "reports" / "today" / "fsdpcheck.json")
    assert _writable_report(path) == path
    assert not (tmp_path / "reports").exists()  # nothing made before the run has something to write
    write_atomically(path, "{}")
    assert (tmp_path / "reports" / "today" / "fsdpcheck.json").read_text() == "{}"
