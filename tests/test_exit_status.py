"""Exit statuses that say whose fault (issue 42 item 3, issue 38 item 5):
a conformance FAIL exits 1 (pytest's TESTS_FAILED), a user's case error
11, an environment ERROR (a world's self-test, a rank time-out, a missing
device, a report not written) 10, --fsdpcheck-strict's findings 12;
pytest's own statuses (2 interrupted, 3 internal, 4 usage error, 5 no
tests) stand. Where several apply, the first of FAIL, case error, ERROR,
strict. Each status is demanded here or beside its planted cause:
``tests/test_distributed_world.py`` (a world failing its self-test or
unable to join), ``tests/test_case_errors.py`` (case errors),
``tests/test_plugin.py`` and ``tests/test_plugin_boundaries.py`` (strict
findings, a missing device, a report that cannot be written)."""

from types import SimpleNamespace

import pytest

from pytest_fsdpcheck.plugin.verdicts import Findings, exit_status
from pytest_fsdpcheck.report.matrix import Matrix
from pytest_fsdpcheck.report.verdict import (
    EXIT_CASE_ERROR,
    EXIT_ENVIRONMENT,
    EXIT_FAIL,
    EXIT_MEANING,
    EXIT_STRICT,
    PROP_CASE_ERROR,
    PROP_ENVIRONMENT,
    PROP_IMPL,
    PROP_INVARIANTS,
)

pytestmark = pytest.mark.unit


def _report(nodeid, failed=True, **props):
    user = [(PROP_INVARIANTS, ["FS2-9"]), (PROP_IMPL, "torch")]
    user += [(key, value) for key, value in props.items()]
    return SimpleNamespace(nodeid=nodeid, when="call", passed=not failed, failed=failed, skipped=False,
                           outcome="failed" if failed else "passed", duration=0.1, user_properties=user,
                           longrepr="x", sections=[])


FAIL = {}
ERROR = {PROP_ENVIRONMENT: "environment (gloo on cpu, world size 2): rank 0 was killed at the ranks' limit"}
CASE = {PROP_CASE_ERROR: {"model": "pkg.m:f", "error": "model pkg.m:f: FS2-9: the plan's step fails"}}


def _session(*failures, strict_findings=False):
    matrix = Matrix()
    matrix.record(_report("t::passes", failed=False))
    for i, props in enumerate(failures):
        matrix.record(_report(f"t::fails{i}", **props))
    stale = ["an entry"] if strict_findings else []
    return SimpleNamespace(matrix=matrix, strict=True, _findings=Findings(stale, [], [], []), incomplete=False,
                           pytest_session=SimpleNamespace(testscollected=1 + len(failures)), impls={})


def test_the_statuses_are_distinct_and_none_is_pytests():
    ours = [EXIT_FAIL, EXIT_CASE_ERROR, EXIT_ENVIRONMENT, EXIT_STRICT]
    assert len(set(ours)) == 4 and set(EXIT_MEANING) == set(ours)
    assert EXIT_FAIL == pytest.ExitCode.TESTS_FAILED
    assert not set(ours[1:]) & {int(code) for code in pytest.ExitCode}


@pytest.mark.parametrize("failures, strict, want", [
    ((), False, 0),
    ((FAIL,), False, EXIT_FAIL),
    ((ERROR,), False, EXIT_ENVIRONMENT),
    ((CASE,), False, EXIT_CASE_ERROR),
    ((), True, EXIT_STRICT),
    # a FAIL outranks everything: retrying the machine or fixing the case cannot fix it
    ((ERROR, FAIL), True, EXIT_FAIL),
    ((CASE, FAIL), False, EXIT_FAIL),
    # a case error outranks an ERROR (it is no machine's), an ERROR the strict findings
    ((ERROR, CASE), True, EXIT_CASE_ERROR),
    ((ERROR,), True, EXIT_ENVIRONMENT),
], ids=["pass", "fail", "error", "case", "strict", "fail>error", "fail>case", "case>error", "error>strict"])
def test_each_fault_exits_with_its_status_the_first_in_precedence(failures, strict, want):
    session = _session(*failures, strict_findings=strict)
    pytest_status = 1 if failures else 0
    assert exit_status(session, pytest_status, len(failures)) == want


def test_a_failure_the_matrix_never_saw_is_a_fail():
    # a collection error (with --continue-on-collection-errors) beside an ERROR
    assert exit_status(_session(ERROR), 1, 2) == EXIT_FAIL


@pytest.mark.parametrize("status", [2, 3, 4, 5, 6])
def test_pytests_own_statuses_stand(status):
    assert exit_status(_session(ERROR, strict_findings=True), status, 1) == status


def test_an_xfailed_failure_counts_for_nothing():
    matrix = Matrix()
    xfailed = _report("t::known", **FAIL)
    xfailed.wasxfail = "known"
    matrix.record(xfailed)
    assert sum(matrix.failures.values()) == 0


@pytest.mark.e2e
def test_a_world_too_slow_exits_with_the_environments_status_and_a_fail_beside_it_with_1(run_suite):
    """A rank time-out (FS2-9's ranks killed at --fsdpcheck-timeout's
    limit in the unsharded control: the planted model waits a minute in a
    process group only) is the environment's status, 10, under xdist too;
    with a planted TRV-7 FAIL in the same run, the FAIL's 1."""
    model = ("--fsdpcheck-model", "tests.planted.plans:slow_in_ranks", "--fsdpcheck-timeout", "2")
    # under xdist: the controller, which runs no test, draws it from its workers' reports
    result, report = run_suite("torch", k="test_model_plan_end_to_end", extra=(*model, "-n", "2"))
    assert report["matrix"]["torch"]["FS2-9"]["outcome"] == "error", "\n".join(result.outlines[-30:])
    assert result.ret == EXIT_ENVIRONMENT, "\n".join(result.outlines[-30:])
    assert f"fsdpcheck: exit status {EXIT_ENVIRONMENT}: environment ERROR" in result.stdout.str()
    planted = "tests.planted.traversal:UnfilteredRoots"
    result, report = run_suite("torch", planted, k="test_model_plan_end_to_end or test_root_states",
                               extra=(*model, "-p", "tests.planted.noshrink"))
    assert report["matrix"][planted]["TRV-7"]["outcome"] == "fail", "\n".join(result.outlines[-30:])
    assert report["matrix"]["torch"]["FS2-9"]["outcome"] == "error"
    assert result.ret == EXIT_FAIL, "\n".join(result.outlines[-30:])


def test_the_ranks_under_torchrun_exit_with_the_worst_status_by_precedence():
    from pytest_fsdpcheck.distributed import worst_status

    assert worst_status([0, 0]) == 0
    assert worst_status([EXIT_STRICT, EXIT_ENVIRONMENT]) == EXIT_ENVIRONMENT
    assert worst_status([EXIT_ENVIRONMENT, EXIT_CASE_ERROR, 0]) == EXIT_CASE_ERROR
    assert worst_status([EXIT_ENVIRONMENT, EXIT_FAIL, EXIT_STRICT]) == EXIT_FAIL  # the max of the numbers is 12
    assert worst_status([EXIT_FAIL, 4]) == 4 and worst_status([EXIT_FAIL, 3, 2]) == 3


def test_under_torchrun_only_rank_0_writes_the_run_s_files():
    """docs/ci.md passes --fsdpcheck-junit and a report to every rank:
    the others must not write the same paths."""
    from pytest_fsdpcheck.distributed import rank_args

    argv = ["--fsdpcheck-impl", "torch", "--fsdpcheck-report", "r.json", "--fsdpcheck-junit=j.xml",
            "--fsdpcheck-html", "h.html", "--fsdpcheck-write-baseline", "b.toml", "--junitxml", "p.xml",
            "--fsdpcheck-strict"]
    assert rank_args(argv, 0) == argv
    assert rank_args(argv, 1) == ["--fsdpcheck-impl", "torch", "--fsdpcheck-strict"]


def test_every_status_is_documented_for_ci():
    """README's exit table and docs/ci.md's name every status the plugin
    exits with, each with its number."""
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    readme = (root / "README.md").read_text(encoding="utf-8").split("### Exit statuses", 1)[1].split("\n## ", 1)[0]
    ci = (root / "docs" / "ci.md").read_text(encoding="utf-8").split("## Exit statuses", 1)[1].split("\n## ", 1)[0]
    for text in (readme, ci):
        rows = {int(n) for n in re.findall(r"^\| (\d+)[ ,|]", text, re.M)}
        assert set(EXIT_MEANING) <= rows, (sorted(EXIT_MEANING), sorted(rows))
