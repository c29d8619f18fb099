"""A user's own mistakes (issue 28 item 4): a plan or factory that raises, a
model on the meta device, example inputs that do not fit, an output that is
not floating-point tensors, a plan that calls nothing. Each is the case's
error, found when the case is first built, never an implementation's FAIL."""

import hypothesis.strategies as st
import torch
from torch import nn
from torch.distributed.fsdp import fully_shard

from pytest_fsdpcheck.cases import ModelCase, model_factory
from tests.planted.plans import TinyLM, _inputs, good_plan


def _raising_plan(model, mesh):
    for layer in model.layers:
        fully_shard(layer, mesh=mesh)
    config = {}
    fully_shard(model, mesh=mesh, reshard_after_forward=config["x"])


def plan_raises():
    torch.manual_seed(0)
    return ModelCase("plan_raises", TinyLM(), _inputs(), plan=_raising_plan)


def factory_raises():
    raise KeyError("x")


def _idle_plan(model, mesh):
    pass


def plan_idle():
    torch.manual_seed(0)
    return ModelCase("plan_idle", TinyLM(), _inputs(), plan=_idle_plan)


def on_meta():
    with torch.device("meta"):
        model = TinyLM()
    return ModelCase("on_meta", model, _inputs(), plan=good_plan)


def inputs_misfit():
    torch.manual_seed(0)
    return ModelCase("inputs_misfit", TinyLM(), (torch.randn(2, 3),), plan=good_plan)


class Argmax(nn.Module):
    def __init__(self):
        super().__init__()
        self.lm = TinyLM()

    def forward(self, tokens):
        return self.lm(tokens).argmax(-1)


class Count(nn.Module):
    def __init__(self):
        super().__init__()
        self.lm = TinyLM()

    def forward(self, tokens):
        return int(self.lm(tokens).shape[-1])


def _nested_plan(model, mesh):
    good_plan(model.lm, mesh)
    fully_shard(model, mesh=mesh)


def int_output():
    torch.manual_seed(0)
    return ModelCase("int_output", Argmax(), _inputs(), plan=_nested_plan)


def python_int_output():
    torch.manual_seed(0)
    return Count(), _inputs()


def _deep_raising_plan(model, mesh):
    if len(model.layers) >= 2:
        raise KeyError("x")
    good_plan(model, mesh)


@model_factory(depth=st.integers(1, 3))
def drawn_raises(depth=1):
    """Its plan raises from depth 2 on: check_case shrinks to depth=2, every
    other check judges depth 1 only."""
    torch.manual_seed(0)
    return ModelCase("drawn_raises", TinyLM(depth=depth), _inputs(), plan=_deep_raising_plan)


class ScaledLM(TinyLM):
    """A learnable 0-dim temperature on the logits."""

    def __init__(self):
        super().__init__()
        self.scale = nn.Parameter(torch.tensor(1.0))

    def forward(self, tokens):
        return super().forward(tokens) * self.scale


def scalar_param():
    """The root's call would shard the 0-dim ``scale``, which FSDP2 rejects
    (FS2-4): the plan's mistake, not FS2-7 for torch and the reference."""
    torch.manual_seed(0)
    return ModelCase("scalar_param", ScaledLM(), _inputs(), plan=good_plan)


def _plan_case(name, plan):
    from tests.planted.plans import TinyLM, _inputs

    torch.manual_seed(0)
    return ModelCase(name, TinyLM(), _inputs(), plan=plan)


def mesh_positional():
    """fully_shard(block, mesh): torch's mesh is keyword-only."""
    from torch.distributed.fsdp import fully_shard

    def plan(model, mesh):
        for layer in model.layers:
            fully_shard(layer, mesh)
        fully_shard(model, mesh=mesh)

    return _plan_case("mesh_positional", plan)


def reshard_yes():
    """reshard_after_forward="yes": a bool or a number of ranks."""
    from torch.distributed.fsdp import fully_shard

    def plan(model, mesh):
        for layer in model.layers:
            fully_shard(layer, mesh=mesh, reshard_after_forward="yes")
        fully_shard(model, mesh=mesh)

    return _plan_case("reshard_yes", plan)


def container_group():
    """A ModuleList given as a group: a container without a forward."""
    from torch.distributed.fsdp import fully_shard

    def plan(model, mesh):
        fully_shard(model.layers, mesh=mesh)
        fully_shard(model, mesh=mesh)

    return _plan_case("container_group", plan)


def _frozen_ignored_bf16_plan(model, mesh):
    from torch.distributed.fsdp import MixedPrecisionPolicy

    bf16 = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    frozen = model.layers[1].mlp[0]
    frozen.requires_grad_(False)
    ignored = set(frozen.parameters())
    for layer in model.layers:
        fully_shard(layer, mesh=mesh, mp_policy=bf16, ignored_params=ignored)
    fully_shard(model, mesh=mesh, mp_policy=bf16, ignored_params=ignored)


def frozen_ignored_bf16():
    """A frozen linear put in ``ignored_params`` under a bf16 policy (issue
    38 item 6): it keeps its fp32 parameters while the activations reaching
    it are bf16, so real ``fully_shard``'s step raises, and so does the
    unsharded model at the plan's precision. A call torch takes: only the
    step shows the mistake (FS2-9), which is the case's, not torch's FAIL."""
    return _plan_case("frozen_ignored_bf16", _frozen_ignored_bf16_plan)
