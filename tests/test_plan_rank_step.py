"""FS2-9's rank, piece by piece (runs/plan_run.py), with no world
started: the framework's step (micro-batches; its mistakes the user's one
line), the plan's groups as the control reads them, each rank's own batch,
the control at the plan's precision (every rank's batch averaged, a
checkpointed bf16 step, batches reaching different parameters), and the
compiled step leaving Inductor's process-wide config as it found it. The
ranks running it end to end are tests/test_plan_end_to_end.py's."""

import pytest
import torch

pytestmark = [pytest.mark.unit, pytest.mark.skipif(not torch.distributed.is_available(), reason="no torch.distributed")]


# --- the framework's step (issue 56) ------------------------------------------------


def test_micro_batches_split_every_batched_input_and_refuse_an_uneven_batch():
    from pytest_fsdpcheck.runs.plan_run import micro_batches

    tokens, mask, scale = torch.arange(8).reshape(4, 2), torch.ones(4, 2, dtype=torch.bool), torch.tensor([2.0, 3.0])
    chunks = micro_batches(((tokens, scale), {"mask": mask, "eps": 0.5}), 2)
    assert [c[0][0].tolist() for c in chunks] == [[[0, 1], [2, 3]], [[4, 5], [6, 7]]]
    # a tensor of another first dimension (2 != 4) and a plain value go whole to each micro-batch
    assert all(c[0][1] is scale and c[1]["eps"] == 0.5 and c[1]["mask"].shape == (2, 2) for c in chunks)
    assert micro_batches(((tokens,), {}), 1) == [((tokens,), {})]
    with pytest.raises(ValueError, match="micro_batches=3 does not divide the batch size 4"):
        micro_batches(((tokens,), {}), 3)


def test_the_frameworks_step_mistakes_are_the_users_one_line():
    """An uneven micro-batch split, or an optimizer that fails on the plain
    model, is the user's case error naming the factory, before any rank
    runs (never a cell in torch's column)."""
    from pytest_fsdpcheck.cases.exposure import case_of
    from pytest_fsdpcheck.cases.probe import case_problem

    assert case_problem(case_of("tests.planted.plans:micro_batches_uneven")) == (
        "model tests.planted.plans:micro_batches_uneven: micro_batches=3 does not divide the batch size 2 "
        "(the first dimension of the first tensor input)")
    assert case_problem(case_of("tests.planted.plans:optimizer_broken")) == (
        "model tests.planted.plans:optimizer_broken: the case's optimizer on the unsharded model: "
        "ValueError: Invalid learning rate: -1.0")
    assert case_problem(case_of("tests.planted.plans:accumulating")) is None


# --- the control at the plan's precision, on each rank's batch ----------------------


def test_plan_groups_follow_the_recorded_policies():
    from pytest_fsdpcheck.cases.exposure import case_of
    from pytest_fsdpcheck.cases.inputs import control_groups

    groups = control_groups(case_of("tests.planted.plans:bf16_last_block"))
    assert [g.roots for g in groups] == [("layers.0",), ("layers.1",), ("",)]
    assert {(g.param_dtype, g.reduce_dtype) for g in groups} == {(torch.bfloat16, torch.float32)}
    assert "layers.1.mlp.2.weight" in groups[1].params
    assert {"embed.weight", "norm.weight"} <= set(groups[2].params)  # the root's own; lm_head is tied to embed
    assert all(g.param_dtype is None for g in control_groups(case_of("tests.planted.plans:good")))


def test_each_rank_takes_its_own_batch_of_the_same_shapes():
    from pytest_fsdpcheck.runs.plan_run import rank_batches

    tokens = torch.arange(12).reshape(3, 4)
    x = torch.randn(3, 4)
    x[0, 0] = float("-inf")  # an additive mask's -inf stays where it is
    mask = torch.tensor([True, False, True])
    first, second, third = rank_batches((tokens, {"x": x, "mask": mask}, 7), 3)
    assert first[0] is tokens and first[1]["x"] is x
    for other in (second, third):
        varied_tokens, rest, seven = other
        assert not torch.equal(varied_tokens, tokens) and sorted(varied_tokens.flatten().tolist()) == list(range(12))
        assert varied_tokens.shape == tokens.shape and varied_tokens.dtype == tokens.dtype
        assert not torch.equal(rest["x"][1:], x[1:]) and rest["x"][0, 0] == float("-inf")
        assert torch.equal(rest["mask"], mask) and seven == 7
    assert not torch.equal(second[0], third[0])


def test_the_control_averages_every_ranks_batch_and_falls_back_where_the_model_rejects_them():
    from torch import nn

    from pytest_fsdpcheck.runs.plan_run import PlanGroup, _control, _Rejected, rank_batches

    torch.manual_seed(0)
    model = nn.Linear(4, 1, bias=False)
    batches = rank_batches(((torch.randn(3, 4),), {}), 2)  # (positional, keyword)
    reference, _, reach = _control(model, batches, (PlanGroup(("weight",)),), rank=0, world_size=2)
    assert reach == {"params": {}, "modules": {}}
    grads = []
    for weight, ((x,), _) in zip((1.0, 2.0), batches, strict=True):
        model.zero_grad()
        model(x).square().mean().backward()
        grads.append(weight * model.weight.grad.clone())
    assert torch.allclose(reference["weight"], (grads[0] + grads[1]) / 2)

    class SortedOnly(nn.Linear):  # takes sorted ids only, as a packed-sequence offset table
        def forward(self, offsets):
            assert bool((offsets.diff() >= 0).all()), "offsets must be sorted"
            return super().forward(offsets.float())

    with pytest.raises(_Rejected, match="offsets must be sorted"):
        _control(SortedOnly(4, 1), rank_batches(((), {"offsets": torch.arange(4)}), 2), (PlanGroup(("weight",)),),
                 rank=0, world_size=2)


def test_the_control_runs_a_checkpointed_bf16_step_at_the_plans_precision():
    """Item 2: the control casts the parameters for the whole step (forward,
    the checkpoint's recompute, backward), as FSDP2's all-gather does. It
    swapped bf16 parameters in for the forward only, so torch's recompute
    in the backward saw fp32 ones and raised (a false FS2-9 FAIL for torch)."""
    from pytest_fsdpcheck.cases.exposure import case_of
    from pytest_fsdpcheck.cases.inputs import control_groups
    from pytest_fsdpcheck.runs.plan_run import _control, rank_batches

    case = case_of("tests.planted.plans:checkpointed_bf16")
    reference, precision, _ = _control(case.model, rank_batches((tuple(case.example_inputs), {}), 2),
                                    control_groups(case), rank=0, world_size=2)
    assert precision["layers.0.mlp.0.weight"] == ("bfloat16", "float32")
    assert precision["layers.1._checkpoint_wrapped_module.mlp.0.weight"] == ("bfloat16", "float32")
    assert all(g is not None and g.dtype == torch.float32 and torch.isfinite(g).all() for g in reference.values())


def test_the_control_keeps_per_rank_batches_that_reach_different_parameters():
    """A routed model on per-rank data: the batches are kept (they fell back
    to rank 0's batch on every rank, a plain pass that hid every routed
    bug), the reach names what only some ranks reach, and a parameter's
    reference is the ranks' average with a zero where a rank's batch did
    not reach it (FSDP2's documented reduce-scatter of unused parameters)."""
    from torch import nn

    from pytest_fsdpcheck.runs.plan_run import PlanGroup, _control

    class Routed(nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = nn.Linear(3, 1), nn.Linear(3, 1)

        def forward(self, x):
            return self.a(x) if x.sum() > 0 else self.b(x)

    torch.manual_seed(0)
    model = Routed()
    batches = [((torch.ones(2, 3),), {}), ((-torch.ones(2, 3),), {})]
    names = tuple(n for n, _ in model.named_parameters())
    reference, _, reach = _control(model, batches, (PlanGroup(names),), rank=1, world_size=2)
    assert reach == {"params": {"a.weight": [0], "a.bias": [0], "b.weight": [1], "b.bias": [1]},
                     "modules": {"a": [0], "b": [1]}}
    expected = {}
    for (x,), _ in batches:
        model.zero_grad()
        model(x).square().mean().backward()
        expected.update({n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None})
    # rank 0's term weighs 1, rank 1's 2; the rank that did not reach a parameter adds zero
    assert torch.allclose(reference["a.weight"], expected["a.weight"] * 1.0 / 2)
    assert torch.allclose(reference["b.weight"], expected["b.weight"] * 2.0 / 2)


# --- the compiled step and Inductor's process-wide config (issue 56) ----------------


def _observed_as_fs2_9_of_torch(body):
    """``body`` run as the plugin runs a suite test of torch's FS2-9 (its
    process-wide state compared before and after: plugin/verdicts.py), in
    this process: as FS2-9's step runs under torchrun."""
    from types import SimpleNamespace

    import torch._dynamo  # noqa: F401 - imported before the snapshot, as the plugin does
    import torch._inductor.config  # noqa: F401

    from pytest_fsdpcheck.plugin import verdicts
    from pytest_fsdpcheck.report.verdict import PROP_IMPL, PROP_INVARIANTS

    class TorchColumn:
        calls = 0

        def start_test(self):
            pass

    item = SimpleNamespace(callspec=SimpleNamespace(params={"fsdpcheck_impl": TorchColumn()}), obj=body, config=None,
                           user_properties=[(PROP_INVARIANTS, ["FS2-9"]), (PROP_IMPL, "torch")])
    with verdicts.observed_call(item, SimpleNamespace(import_history=None, profile="ci")):
        body()


def _compiled_step_with_dropout():
    """FS2-9's compiled step (plan_run._compiled) through Inductor on a
    model that draws: its dropout mask must be eager's from the same seed."""
    from pytest_fsdpcheck.runs import plan_run

    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Dropout(0.5))
    x = torch.randn(3, 4, requires_grad=True)
    graphs = []
    compiled = plan_run._compiled(model, "inductor", graphs)
    torch.manual_seed(5)
    out = compiled(x)
    out.sum().backward()
    torch.manual_seed(5)
    assert len(graphs) == 1 and torch.equal(out, model(x)), "the compiled step did not draw what eager draws"


def test_the_compiled_step_leaves_inductors_config_as_it_found_it_and_a_leak_by_torch_still_fails(monkeypatch):
    """Issue 56: the compiled step asked Inductor to draw as eager does by
    setting ``fallback_random`` process-wide and never put it back; under
    torchrun that step runs in the test process, and FS2-9 FAILed every
    user's model as torch's leak. The setting is the step's own compiles'
    now, and torch leaving that same setting changed
    (tests/planted/torch_faults.py:CompileLeavesFallbackRandom) is still
    FS2-9's LeakedGlobalState in torch's column, not put back by the step."""
    import shutil

    import torch._inductor.config as inductor_config

    from pytest_fsdpcheck.plugin.guard import LeakedGlobalState
    from tests.planted.torch_faults import CompileLeavesFallbackRandom

    if not (shutil.which("c++") or shutil.which("g++")):
        pytest.skip("Inductor compiles CPU kernels with a C++ compiler; none here")
    assert inductor_config.fallback_random is False
    _observed_as_fs2_9_of_torch(_compiled_step_with_dropout)
    assert inductor_config.fallback_random is False

    monkeypatch.setattr(torch, "compile", torch.compile)  # put back after the fault
    CompileLeavesFallbackRandom.plant()
    with pytest.raises(LeakedGlobalState, match=r"^FS2-9: torch left process-wide state changed: "
                                                 r"inductor\.config \(fallback_random\)"):
        _observed_as_fs2_9_of_torch(_compiled_step_with_dropout)
    assert inductor_config.fallback_random is False  # the leak was put back by the isolation check
