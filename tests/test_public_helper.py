"""parametrize_with_checks from a plain test file (no --fsdpcheck): every
check on a correct plan passes, and a planted plan fails with its ID and a
reproducer importing the user's factory."""

import pytest

pytest_plugins = ["pytester"]

pytest.importorskip("torch.distributed.fsdp")


def test_helper_from_a_plain_test_file(pytester, monkeypatch):
    import os
    import pathlib

    root = pathlib.Path(__file__).resolve().parents[1]
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")])))
    pytester.makepyfile(
        test_user="""
        from pytest_fsdpcheck.cases import parametrize_with_checks
        from tests.planted.plans import good, tied_split

        @parametrize_with_checks([good, "tests.planted.plans:plain", tied_split, "tests.planted.mistakes:plan_raises"])
        def test_fsdp(case, check):
            check(case)
        """
    )
    result = pytester.runpytest_subprocess("-q", "-p", "no:cacheprovider", "-rfs")
    outcomes = result.parseoutcomes()
    text = result.stdout.str()
    # tied_split breaks PLN-1: judged by the plan rules only, FS2-9 is n/p with
    # that reason (its real step failing is the plan's mistake, not torch's);
    # plan_raises is the case's error, once, in one line: every other check skips
    assert outcomes.get("failed") == 2, text
    assert "test_fsdp[tied_split-check_plan_rules]" in text
    assert "PLN-1" in text and "from tests.planted.plans import tied_split" in text
    assert "not provided: the plan breaks PLN-1" in text
    assert "FAILED test_user.py::test_fsdp[tied_split-check_plan_end_to_end]" not in text
    from tests.helpers import failure_sections

    section = failure_sections(result.outlines)["test_fsdp[tests.planted.mistakes:plan_raises-check_case]"]
    assert section.strip() == "model tests.planted.mistakes:plan_raises: plan raised KeyError: 'x'", section
    from pytest_fsdpcheck.cases.checks import CHECKS

    # every check but check_case skips on it
    assert f"SKIPPED [{len(CHECKS) - 1}]" in text and "plan raised KeyError: 'x' (the case's error, reported once by check_case)" in text
    assert outcomes.get("passed", 0) >= 17, text
    assert "not provided: case 'plain' gives no FSDP2 plan" in text
