"""The plan's own mistakes (PLN) on planted plans, and the recording of a
plan's real fully_shard calls (every import path, lists of modules)."""

import pytest

pytestmark = pytest.mark.unit

pytest.importorskip("torch.distributed.fsdp")

from pytest_fsdpcheck.cases import CaseError, build_case, checks  # noqa: E402
from pytest_fsdpcheck.cases.inputs import recorded  # noqa: E402
from pytest_fsdpcheck.cases.model import model_copy  # noqa: E402
from pytest_fsdpcheck.cases.probe import plan_rule_violations  # noqa: E402
from pytest_fsdpcheck.cases.recording import record_plan  # noqa: E402
from tests.planted import plans  # noqa: E402


@pytest.mark.parametrize(("factory", "invariant", "names"), [
    (plans.tied_split, "PLN-1", "embed.weight"),
    (plans.shared_module, "PLN-2", "layers.0.mlp.0"),
    (plans.unsharded_root, "PLN-3", "norm.weight"),
    (plans.unsharded_root, "PLN-4", "never sharded"),
    (plans.root_first, "PLN-4", "not last"),
    (plans.tied_half_ignored, "PLN-1", "embed.weight (lm_head: call 4, embed: call 3)"),
    (plans.adapters_after, "PLN-3", "layers.0.mlp.0.lora_a.weight"),
    (plans.ignored_trainable, "PLN-5", "layers.0.mlp.0.weight"),
])
def test_planted_plan_is_the_users_mistake_naming_its_rule(factory, invariant, names):
    """A plan's mistake is the user's: one line naming the factory and the
    rule, raised before any implementation runs (so no implementation's
    cell), by check_case and by check_plan_rules alike."""
    case = build_case(factory)
    for check in (checks.check_case, checks.check_plan_rules):
        with pytest.raises(CaseError) as info:
            check(case)
        message = str(info.value)
        assert message.startswith(f"model tests.planted.plans:{factory.__name__}: PLN-"), message
        assert "\n" not in message and invariant in message, message
    violations = plan_rule_violations(recorded(case))
    assert any(v.invariant == invariant and names in v.message for v in violations), violations


def test_a_declared_unreduced_parameter_is_not_pln_5():
    checks.check_plan_rules(build_case(plans.ignored_declared))
    checks.check_case(build_case(plans.ignored_declared))


def test_a_model_deepcopy_refuses_is_rebuilt_from_its_factory():
    """Issue 56 finding 4: a model holding a lock made every check's own
    copy raise, a FAIL in torch's column each. The checks copy through
    model_copy, which builds a fresh model from the factory."""
    case = build_case(plans.uncopyable)
    for check in (checks.check_case, checks.check_fsdp2_walk, checks.check_fsdp2_recorded,
                  checks.check_fully_shard_calls, checks.check_traversal):
        check(case)
    copied = model_copy(case.model, case)
    assert copied is not case.model and copied.lock is not case.model.lock
    assert all(a.equal(b) for a, b in zip(copied.parameters(), case.model.parameters(), strict=True))


def test_a_model_that_cannot_be_copied_nor_rebuilt_is_the_users():
    case = plans.uncopyable()  # a ModelCase without a factory
    with pytest.raises(CaseError, match=r"^case 'uncopyable': its model cannot be deep-copied \(TypeError: "):
        model_copy(case.model, case)


def test_correct_plan_passes_every_fsdp2_check():
    case = build_case(plans.good)
    for check in (checks.check_plan_rules, checks.check_fsdp2_walk, checks.check_fsdp2_recorded,
                  checks.check_fully_shard_calls):
        check(case)
        check(case, "reference") if check is not checks.check_fsdp2_recorded else None


@pytest.mark.parametrize("impl", ["torch", "reference"])
def test_a_tied_weight_every_reaching_call_ignores_is_not_pln_1(impl):
    """Issue 28 item 5: PLN-1 is two groups managing one tied parameter. The
    root's call ignores embed.weight (tied to lm_head, which its bias keeps
    in the root's group): no group manages it, torch's recorded groups hold
    it nowhere, and it was 'split across groups: [embed.weight (lm_head:
    call 3, embed: no group)]' for torch and the reference alike."""
    case = build_case(plans.tied_ignored)
    record = recorded(case)
    assert [c.error for c in record.calls] == [None] * 3
    assert not any("embed.weight" in c.sharded or "lm_head.weight" in c.sharded for c in record.calls)
    checks.run_check(checks.check_plan_rules, case, impl)


def test_plain_function_recorded_with_list_call():
    record = record_plan(build_case(plans.good))
    assert [c.roots for c in record.calls] == [("layers.0",), ("layers.1",), ("embed", "lm_head"), ("",)]
    assert [c.as_list for c in record.calls] == [False, False, True, False]
    assert record.calls[2].walk == ["embed", "lm_head"]
    assert record.calls[2].params == ["embed.weight"]
    assert record.calls[-1].walk == ["layers", "norm", ""]
    assert all(c.error is None for c in record.calls)
    # the plan ran on a copy: the case's model is as the factory made it
    assert not any(getattr(m, "_is_fsdp_managed_module", False) for m in record.case.model.modules())


def test_composable_import_path_recorded():
    record = record_plan(build_case(plans.shared_module))
    assert [c.roots for c in record.calls][:2] == [("layers.0",), ("layers.1",)]
    # torch 2.13 fails inside the DTensor code on the shared Linear (FS2-8's known bug)
    assert type(record.calls[1].error).__name__ == "TypeError"


def test_a_plan_sharing_a_module_is_the_users_before_any_fully_shard_is_judged():
    """PLN-2 is the plan's mistake: FS2-8 (how fully_shard rejects the
    shared module; torch 2.13 fails inside DTensor, a known bug) is not
    judged on a user's plan that breaks it, for torch and the reference
    alike. FS2-8 itself is judged on the suite's generated plans."""
    case = build_case(plans.shared_module)
    for impl in ("torch", "reference"):
        with pytest.raises(CaseError, match="PLN-2: modules reachable from two groups"):
            checks.check_fully_shard_calls(case, impl)
