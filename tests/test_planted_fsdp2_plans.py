"""Mistakes only repeated fully_shard calls show are caught by the plan
properties with their ID, and missed by the single-call ones."""

from tests.demands import demand_failures
from tests.helpers import NO_SHRINK, selection
from tests.planted.fsdp2_plans import PLANTED


def test_planted_plan_bugs_are_caught(run_suite):
    result, report = run_suite("reference", *PLANTED, k=f"test_fsdp2_plans and ({selection(PLANTED)})", extra=NO_SHRINK)
    assert result.ret == 1, "\n".join(result.outlines[-40:])
    # ... each with its ID; the same tests pass on the reference each bug was planted in
    demand_failures(result, report, PLANTED)


def test_single_call_properties_miss_them(run_suite):
    """Why the plan properties exist: every single-call FS2 property passes
    on these implementations."""
    k = "test_fsdp2.py and (test_managed_modules or test_ignored_params or test_several_roots or test_managed_states)"
    result, report = run_suite(*PLANTED, k=k, extra=NO_SHRINK)
    assert result.ret == 0, "\n".join(result.outlines[-40:])
    for spec in PLANTED:
        assert report["matrix"][spec] and all(c["outcome"] == "pass" for c in report["matrix"][spec].values()), report["matrix"][spec]
