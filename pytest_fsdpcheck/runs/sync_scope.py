"""FS2-13: turning a group's gradient reduction off reaches as far as it is
asked to, and no further.

Gradient accumulation turns reduction off on the model's root for the
micro-batches but the last (``set_requires_gradient_sync(False)``); a
framework that keeps some groups reducing asks the root alone
(``recurse=False``). One fixed model, two groups (the first layer's, inner,
and the root's, holding the second layer), driven by the implementation's
walk in a gloo world of one rank, one forward and backward after the call:
a group whose reduction is off leaves its parameters without a sharded
gradient yet, a reducing one gives each parameter the reduced gradient (at
one rank, the unsharded model's: the control's, which runs nothing of
``fully_shard``).
"""

from __future__ import annotations

import torch
from torch import nn

from .frozen_step import full_value

#: the cases: whether the call on the root recurses
SYNC_CASES = {"root-only": False, "recursive": True}


def _model() -> nn.Module:
    torch.manual_seed(7)
    return nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 4))


def _input() -> torch.Tensor:
    return torch.randn(2, 4, generator=torch.Generator().manual_seed(8))


def _grads(model) -> dict:
    return {name: None if p.grad is None else full_value(p.grad) for name, p in model.named_parameters()}


def run_case(case: str, area, mesh) -> dict:
    """``{"grads": {name: gradient or None}}`` after the step, or ``{"error": (type, first line)}``."""
    from .fsdp2_run import driven_by, fully_shard_function

    model = _model()
    try:
        with driven_by(area, []):
            fully_shard_function()(model[0], mesh=mesh)
            # what torch's walk reads from the module's FSDP state, the area
            # learns through its contract (the call's root owns the group)
            area.mark_own_group(model[0])
            fully_shard_function()(model, mesh=mesh)
        model.set_requires_gradient_sync(False, recurse=SYNC_CASES[case])
        model(_input()).square().mean().backward()
    except Exception as exc:  # noqa: BLE001 - the step's failure is the finding
        return {"case": case, "error": (type(exc).__name__, (str(exc).splitlines() or [""])[0])}
    return {"case": case, "grads": _grads(model)}


def control_case(case: str) -> dict:
    """The unsharded model's gradients, and which parameters' groups were
    asked to stop reducing (the root's second layer always; the first
    layer's group only when the call recurses)."""
    model = _model()
    model(_input()).square().mean().backward()
    stopped = {name for name, _ in model.named_parameters() if name.startswith("1.") or SYNC_CASES[case]}
    return {"case": case, "grads": _grads(model), "stopped": stopped}
