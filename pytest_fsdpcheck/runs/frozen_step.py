"""FS2-12: a ``fully_shard`` group holding frozen parameters of other dtypes
takes a step in mixed precision, as fine-tuning runs it.

Two fixed cases, each one module sharded by one ``fully_shard`` call with
``mp_policy`` bf16 parameters reduced in fp32, driven by the
implementation's walk (:func:`~pytest_fsdpcheck.runs.fsdp2_run.driven_by`)
in a gloo world of one rank, one forward and backward:

- ``frozen-low-base``: a frozen bf16 base weight beside a trainable fp32
  adapter (a LoRA-like fine-tune: the base is never reduced, so its dtype
  is not the group's reduce dtype's business);
- ``frozen-index``: a frozen integer parameter (an index the forward
  gathers with) beside a trainable fp32 layer: a non-floating parameter is
  never cast to ``param_dtype``.

The control runs nothing of ``fully_shard``: the unsharded model with every
floating parameter one bf16 leaf for the step and its input cast to bf16
(:mod:`pytest_fsdpcheck.runs.precision`, as the other controls), its
gradients read back in fp32 (at one rank FSDP2's reduction in fp32 only
casts them). Results are plain records, judged by
:func:`pytest_fsdpcheck.checks.fsdp2.check_frozen_step`.
"""

from __future__ import annotations

import copy

import torch
from torch import nn

from .precision import cast_floating, low_leaf, swap_in_leaves

#: the fixed cases, in the order the suite runs them
FROZEN_CASES = ("frozen-low-base", "frozen-index")

#: the index the ``frozen-index`` case gathers with: 257 is not a bf16
#: number (it reads back as 256), so a cast shows in the values too
FROZEN_INDEX = (1, 257, 3)


class LowBase(nn.Module):
    def __init__(self):
        super().__init__()
        self.adapter = nn.Linear(6, 6)
        self.base = nn.Parameter(torch.randn(6, 6).to(torch.bfloat16), requires_grad=False)

    def forward(self, x):
        return self.adapter(x) + x @ self.base.t()


class FrozenIndex(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(6, 260)
        self.idx = nn.Parameter(torch.tensor(FROZEN_INDEX), requires_grad=False)
        self.seen = None

    def forward(self, x):
        # what the forward was given, before it is used (a float index raises)
        self.seen = (str(self.idx.dtype).removeprefix("torch."), [float(v) for v in self.idx.tolist()])
        return self.lin(x)[..., self.idx]


_MODELS = {"frozen-low-base": LowBase, "frozen-index": FrozenIndex}


def frozen_model(case: str) -> nn.Module:
    torch.manual_seed(FROZEN_CASES.index(case))
    return _MODELS[case]()


def frozen_input(case: str) -> torch.Tensor:
    return torch.randn(3, 6, generator=torch.Generator().manual_seed(100 + FROZEN_CASES.index(case)))


def full_value(tensor) -> torch.Tensor:
    """A DTensor's whole value (FSDP2's sharded gradient), or the tensor."""
    full = getattr(tensor, "full_tensor", None)
    return (full() if full is not None else tensor).detach().float()


def _trainable_grads(model) -> dict:
    return {name: None if p.grad is None else full_value(p.grad)
            for name, p in model.named_parameters() if p.requires_grad}


def _error(exc) -> tuple[str, str]:
    return type(exc).__name__, (str(exc).splitlines() or [""])[0]


def run_case(case: str, area, mesh) -> dict:
    """The step of ``case`` with ``fully_shard`` driven by ``area``'s walk:
    ``output``, trainable ``grads`` (full, fp32), what the forward ``seen``
    of a frozen index, or the ``error`` it raised (type, first line)."""
    from .fsdp2_run import driven_by, fully_shard_function, mixed_precision_policy

    model = frozen_model(case)
    policy = mixed_precision_policy()(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    result: dict = {"case": case}
    try:
        with driven_by(area, []):
            fully_shard_function()(model, mesh=mesh, mp_policy=policy)
        output = model(frozen_input(case))
        output.float().square().mean().backward()
    except Exception as exc:  # noqa: BLE001 - the step's failure is the finding
        result["error"] = _error(exc)
        result["seen"] = getattr(model, "seen", None)
        return result
    result.update(output=output.detach().float(), grads=_trainable_grads(model), seen=getattr(model, "seen", None))
    return result


def control_case(case: str) -> dict:
    """The same step without ``fully_shard``: floating parameters one bf16
    leaf each for the step (a tied one a single leaf), integer ones as they
    are, the input cast to bf16."""
    model = copy.deepcopy(frozen_model(case))
    leaves = {id(p): low_leaf(p, torch.bfloat16) for p in model.parameters() if p.is_floating_point()}
    swap_in_leaves(model, leaves)
    output = model(cast_floating(torch.bfloat16, frozen_input(case)))
    output.float().square().mean().backward()
    return {"case": case, "output": output.detach().float(), "grads": _trainable_grads(model),
            "seen": getattr(model, "seen", None)}
