"""Mistakes only repeated fully_shard calls show are caught by the plan
properties with their ID, and missed by the single-call ones."""

import pytest

from tests.demands import demand_failures
from tests.helpers import PLANTED_RUN, selection
from tests.planted.fsdp2_plans import PLANTED

pytestmark = pytest.mark.kill


def test_planted_plan_bugs_are_caught(run_suite):
    result, report = run_suite("reference", *PLANTED, k=f"test_fsdp2_plans and ({selection(PLANTED)})", extra=PLANTED_RUN)
    assert result.ret == 1, "\n".join(result.outlines[-40:])
    # ... each with its ID; the same tests pass on the reference each bug was planted in
    demand_failures(result, report, PLANTED)


def test_single_call_properties_miss_them(run_suite):
    """Why the plan properties exist: every single-call FS2 property passes
    on these implementations."""
    k = "test_fsdp2.py and (test_managed_modules or test_ignored_params or test_several_roots or test_managed_states)"
    result, report = run_suite(*PLANTED, k=k, extra=PLANTED_RUN)
    assert result.ret == 0, "\n".join(result.outlines[-40:])
    for spec in PLANTED:
        assert report["matrix"][spec] and all(c["outcome"] == "pass" for c in report["matrix"][spec].values()), report["matrix"][spec]


#: the fixed plans (test_plan_walk_cases) alone, before any property: killer -> the ID it must FAIL
FIXED_PLAN_TARGETS = {
    "tests.planted.fsdp2_plans:PrunesGroupedRoots": ("FS2-5", "test_plan_walk_cases"),
    "tests.planted.fsdp2_plans:SharedIgnoreMemo": (("FS2-3", "FS2-2", "FS2-5"), "test_plan_walk_cases"),
}


def test_fixed_plans_catch_them(run_suite):
    """A root an earlier call grouped, given second in a call, is walked
    (FS2-5); a module only the first call's ignored parameters drop is
    managed by the next call (FS2-3's rule, per call): fixed plans see both
    at once, where the plan properties needed a search (PrunesGroupedRoots:
    16-27 s to its first failure under -x, SharedIgnoreMemo 21 s)."""
    result, report = run_suite("reference", *FIXED_PLAN_TARGETS,
                               k=f"test_fsdp2_plans and ({selection(FIXED_PLAN_TARGETS)})", extra=PLANTED_RUN)
    assert result.ret == 1, "\n".join(result.outlines[-40:])
    demand_failures(result, report, FIXED_PLAN_TARGETS)
