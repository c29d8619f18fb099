"""The users' model paths have killers of their own: planted plans (each
breaking one PLN rule) and a planted implementation on a correct plan must
fail, with the ID, both through ``--fsdpcheck-model`` and through a user's
``parametrize_with_checks`` test. Only the checks these killers break run
(no distributed step: the end-to-end check has its own planted plans)."""

import pytest

pytestmark = pytest.mark.kill

pytest.importorskip("torch.distributed.fsdp")

from tests.demands import demand_check_failures, demand_model_failures, impl_test  # noqa: E402
from tests.helpers import PLANTED_RUN  # noqa: E402

PLANS = "tests.planted.plans:"
#: a walk listing parents before children, on a correct plan
PRE_ORDER = "tests.planted.fsdp2:PreOrder"

#: killer -> (invariant, model, implementation)
MODEL_PLANTED = {
    PLANS + "tied_split": ("PLN-1", PLANS + "tied_split", "reference"),
    PLANS + "shared_module": ("PLN-2", PLANS + "shared_module", "reference"),
    PLANS + "unsharded_root": ("PLN-3", PLANS + "unsharded_root", "reference"),
    PLANS + "root_first": ("PLN-4", PLANS + "root_first", "reference"),
    PRE_ORDER: ("FS2-1", PLANS + "good", PRE_ORDER),
}

#: killer -> (invariant, check, model, implementation)
CHECK_PLANTED = {
    PLANS + "tied_split": ("PLN-1", "check_plan_rules", PLANS + "tied_split", "reference"),
    PLANS + "shared_module": ("PLN-2", "check_plan_rules", PLANS + "shared_module", "reference"),
    PLANS + "unsharded_root": ("PLN-3", "check_plan_rules", PLANS + "unsharded_root", "reference"),
    PLANS + "root_first": ("PLN-4", "check_plan_rules", PLANS + "root_first", "reference"),
    PRE_ORDER: ("FS2-1", "check_fsdp2_walk", PLANS + "good", PRE_ORDER),
}


def test_model_option_reports_its_killers(run_suite):
    models = sorted({model for _, model, _ in MODEL_PLANTED.values()})
    impls = sorted({impl for _, _, impl in MODEL_PLANTED.values()})
    extra = [arg for model in models for arg in ("--fsdpcheck-model", model)]
    result, report = run_suite(*impls, k="test_model_plan_rules or test_model_fsdp2_walk", extra=[*PLANTED_RUN, *extra])
    demand_model_failures(result, report, MODEL_PLANTED)
    # the correct plan passes on the reference
    good = [t["outcome"] for nodeid, t in report["tests"].items() if "[reference-tests.planted.plans.good]" in nodeid]
    assert good and set(good) == {"passed"}, good


def test_parametrize_with_checks_reports_its_killers(pytester, monkeypatch):
    import os
    import pathlib

    root = pathlib.Path(__file__).resolve().parents[1]
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")])))
    by_impl: dict[str, list[str]] = {}
    for _, _, model, impl in CHECK_PLANTED.values():
        by_impl.setdefault(impl, []).append(model)
    functions = [
        f"@parametrize_with_checks({models!r}, impl={impl!r})\ndef {impl_test(impl)}(case, check):\n    check(case)\n"
        for impl, models in by_impl.items()
    ]
    pytester.makepyfile(test_user="from pytest_fsdpcheck.cases import parametrize_with_checks\n\n\n" + "\n\n".join(functions))
    checks = " or ".join(sorted({check for _, check, _, _ in CHECK_PLANTED.values()}))
    result = pytester.runpytest_subprocess("-q", "-p", "no:cacheprovider", "-p", "no:randomly", "-k", checks)
    demand_check_failures(result, CHECK_PLANTED)


#: FS2-10 on a user's plan at the size it trains at: a layout right up to 8
#: ranks and wrong past them fails only where --fsdpcheck-world-size reaches
#: the simulated world (the default is 8)
PAST_EIGHT = "tests.planted.fsdp2:PaddingFirstPastEight"
WORLD_MODEL_PLANTED = {
    PAST_EIGHT: ("FS2-10", PLANS + "good", PAST_EIGHT),
}


def test_model_plan_at_its_world_size_reports_its_killer(run_suite):
    result, report = run_suite("reference", PAST_EIGHT, k="test_model_plan_simulated",
                               extra=[*PLANTED_RUN, "--fsdpcheck-model", PLANS + "good", "--fsdpcheck-world-size", "64"])
    demand_model_failures(result, report, WORLD_MODEL_PLANTED)
    good = [t["outcome"] for nodeid, t in report["tests"].items() if "[reference-tests.planted.plans.good]" in nodeid]
    assert good == ["passed"], good
