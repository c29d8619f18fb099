"""The users' model paths have killers of their own: a planted
implementation on a correct plan must fail, with the ID, both through
``--fsdpcheck-model`` and through a user's ``parametrize_with_checks`` test;
and planted plans, each breaking one PLN rule, must be the user's mistake
there: one line naming the factory and the rule, exit 11, no
implementation's cell. Only the checks these killers break run (no
distributed step: the end-to-end check has its own planted plans)."""

import pytest

pytestmark = pytest.mark.kill

pytest.importorskip("torch.distributed.fsdp")

from pytest_fsdpcheck.report.verdict import EXIT_CASE_ERROR, EXIT_FAIL  # noqa: E402
from tests.demands import (  # noqa: E402
    demand_check_case_errors,
    demand_check_failures,
    demand_model_case_errors,
    demand_model_failures,
    impl_test,
)
from tests.helpers import PLANTED_RUN  # noqa: E402

PLANS = "tests.planted.plans:"
LORATUNE = "tests.planted.loratune:"
#: a walk listing parents before children, on a correct plan
PRE_ORDER = "tests.planted.fsdp2:PreOrder"

#: killer -> (invariant, model, implementation)
MODEL_PLANTED = {
    PRE_ORDER: ("FS2-1", PLANS + "good", PRE_ORDER),
}

#: killer -> (invariant, check, model, implementation)
CHECK_PLANTED = {
    PRE_ORDER: ("FS2-1", "check_fsdp2_walk", PLANS + "good", PRE_ORDER),
}

#: a plan breaking each rule (and the issue-56 framework's mistakes): the
#: user's. killer (the factory) -> (rule, factory)
MODEL_MISTAKES = {
    PLANS + "tied_split": ("PLN-1", PLANS + "tied_split"),
    PLANS + "shared_module": ("PLN-2", PLANS + "shared_module"),
    PLANS + "unsharded_root": ("PLN-3", PLANS + "unsharded_root"),
    PLANS + "adapters_after": ("PLN-3", PLANS + "adapters_after"),
    PLANS + "root_never_sharded": ("PLN-4", PLANS + "root_never_sharded"),
    PLANS + "ignored_trainable": ("PLN-5", PLANS + "ignored_trainable"),
    LORATUNE + "mistake_tied_split": ("PLN-1", LORATUNE + "mistake_tied_split"),
    LORATUNE + "mistake_root_first": ("PLN-2", LORATUNE + "mistake_root_first"),
    LORATUNE + "mistake_lora_after_sharding": ("PLN-3", LORATUNE + "mistake_lora_after_sharding"),
    LORATUNE + "mistake_adapters_ignored": ("PLN-5", LORATUNE + "mistake_adapters_ignored"),
}

#: killer -> (rule, factory, implementation)
CHECK_MISTAKES = {
    PLANS + "tied_split": ("PLN-1", PLANS + "tied_split", "reference"),
    PLANS + "shared_module": ("PLN-2", PLANS + "shared_module", "reference"),
    PLANS + "adapters_after": ("PLN-3", PLANS + "adapters_after", "reference"),
    PLANS + "root_never_sharded": ("PLN-4", PLANS + "root_never_sharded", "reference"),
    PLANS + "ignored_trainable": ("PLN-5", PLANS + "ignored_trainable", "reference"),
}


def test_model_option_reports_its_killers(run_suite):
    models = sorted({model for _, model, _ in MODEL_PLANTED.values()})
    impls = sorted({impl for _, _, impl in MODEL_PLANTED.values()} | {"reference"})
    extra = [arg for model in models for arg in ("--fsdpcheck-model", model)]
    result, report = run_suite(*impls, k="test_model_fsdp2_walk", extra=[*PLANTED_RUN, *extra])
    demand_model_failures(result, report, MODEL_PLANTED)
    assert result.ret == EXIT_FAIL
    # the correct plan passes on the reference
    good = [t["outcome"] for nodeid, t in report["tests"].items() if "[reference-tests.planted.plans.good]" in nodeid]
    assert good and set(good) == {"passed"}, good


def test_a_plans_mistakes_are_the_users_through_the_model_option(run_suite):
    """Issue 56 finding 3: a plan's mistake was a FAIL cell in torch's column
    (JUnit PLN-1[torch], exit 1, "page its owner"). Each is one case error
    naming the factory and the rule; the run exits 11 and says it is yours."""
    extra = [arg for _, model in MODEL_MISTAKES.values() for arg in ("--fsdpcheck-model", model)]
    result, report = run_suite("torch", k="test_model_case or test_model_fsdp2_walk", extra=[*PLANTED_RUN, *extra])
    demand_model_case_errors(result, report, MODEL_MISTAKES)
    assert result.ret == EXIT_CASE_ERROR, result.ret
    text = "\n".join(result.outlines)
    assert "page its owner" not in text and "case error (your model or plan cannot be checked" in text
    assert not any(cell.get("outcome") == "fail" for cell in report["matrix"].get("torch", {}).values())


def _user_file(pytester, monkeypatch, rows):
    import os
    import pathlib

    root = pathlib.Path(__file__).resolve().parents[1]
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")])))
    by_impl: dict[str, list[str]] = {}
    for model, impl in rows:
        by_impl.setdefault(impl, []).append(model)
    functions = [
        f"@parametrize_with_checks({models!r}, impl={impl!r})\ndef {impl_test(impl)}(case, check):\n    check(case)\n"
        for impl, models in by_impl.items()
    ]
    pytester.makepyfile(test_user="from pytest_fsdpcheck.cases import parametrize_with_checks\n\n\n" + "\n\n".join(functions))


def test_parametrize_with_checks_reports_its_killers(pytester, monkeypatch):
    _user_file(pytester, monkeypatch, [(model, impl) for _, _, model, impl in CHECK_PLANTED.values()]
               + [(model, impl) for _, model, impl in CHECK_MISTAKES.values()])
    checks = " or ".join(sorted({check for _, check, _, _ in CHECK_PLANTED.values()} | {"check_case"}))
    result = pytester.runpytest_subprocess("-q", "-p", "no:cacheprovider", "-p", "no:randomly", "-k", checks)
    demand_check_failures(result, CHECK_PLANTED)
    demand_check_case_errors(result, CHECK_MISTAKES)


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
