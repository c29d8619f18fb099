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

        @parametrize_with_checks([good, "tests.planted.plans:plain", tied_split])
        def test_fsdp(case, check):
            check(case)
        """
    )
    result = pytester.runpytest_subprocess("-q", "-p", "no:cacheprovider", "-rfs")
    outcomes = result.parseoutcomes()
    text = result.stdout.str()
    # tied_split breaks PLN-1 (plan rules), and its real step fails FS2-9 (torch
    # refuses a tied parameter in two groups); everything else passes or is not provided
    assert outcomes.get("failed") == 2, text
    assert "test_fsdp[tied_split-check_plan_rules]" in text
    assert "test_fsdp[tied_split-check_plan_end_to_end]" in text
    assert "PLN-1" in text and "from tests.planted.plans import tied_split" in text
    assert "FS2-9: rank 0, eager: the plan's step failed" in text
    assert outcomes.get("passed", 0) >= 14, text
    assert "not provided: case 'plain' gives no FSDP2 plan" in text
