"""FS2-14: a group's output that its caller writes into in place takes the
step the unsharded model takes.

A residual block's caller adds into what the block returned (``out +=
skip``); where the block returns a view of its last result (a reshape, an
``unsqueeze``/``squeeze``), autograd rebases that view's history on the
in-place op, as eager PyTorch allows for any module's output. FSDP2
documents that a group's parameters are all-gathered again before its
backward (reshard after forward) and that its gradients are the unsharded
model's; nothing in that promise depends on how the caller uses the
output.

One fixed model: an inner block (two layers, one ``fully_shard`` call)
returning a view of its result, and a root (holding the head) that adds a
second input into that view in place before the head. Two cases, the
inner group resharded after forward or kept, each driven by the
implementation's walk in a gloo world of one rank, one forward and
backward. The control runs nothing of ``fully_shard``: the same model,
unsharded, on the same inputs. Results are plain records, judged by
:func:`pytest_fsdpcheck.checks.fsdp2.check_inplace_output`.
"""

from __future__ import annotations

import torch
from torch import nn

from .frozen_step import full_value

#: the cases: whether the inner group reshards after its forward
INPLACE_CASES = {"view-resharded": True, "view-kept": False}


class _Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin0, self.lin1 = nn.Linear(8, 8), nn.Linear(8, 8)

    def forward(self, x):
        # a view of the block's result, as a reshape back to the input's shape gives
        return self.lin1(torch.relu(self.lin0(x))).unsqueeze(0).squeeze(0)


class _Residual(nn.Module):
    def __init__(self):
        super().__init__()
        self.block, self.head = _Block(), nn.Linear(8, 2)

    def forward(self, x, skip):
        out = self.block(x)
        out += skip  # in place, into the view the block returned
        return self.head(out)


def _model() -> nn.Module:
    torch.manual_seed(14)
    return _Residual()


def _inputs() -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(15)
    return torch.randn(4, 8, generator=generator), torch.randn(4, 8, generator=generator)


def _step(model) -> dict:
    output = model(*_inputs())
    output.square().mean().backward()
    return {"output": output.detach().float(),
            "grads": {name: None if p.grad is None else full_value(p.grad) for name, p in model.named_parameters()}}


def run_case(case: str, area, mesh) -> dict:
    """``output`` and every parameter's full ``grads`` after the step, or the
    ``error`` it raised (type, first line)."""
    from .fsdp2_run import driven_by, fully_shard_function

    model = _model()
    try:
        with driven_by(area, []):
            fully_shard_function()(model.block, mesh=mesh, reshard_after_forward=INPLACE_CASES[case])
            # what torch's walk reads from the module's FSDP state, the area
            # learns through its contract (the call's root owns the group)
            area.mark_own_group(model.block)
            fully_shard_function()(model, mesh=mesh)
        return {"case": case, **_step(model)}
    except Exception as exc:  # noqa: BLE001 - the step's failure is the finding
        return {"case": case, "error": (type(exc).__name__, (str(exc).splitlines() or [""])[0])}


def control_case(case: str) -> dict:
    """The unsharded model's output and gradients on the same inputs."""
    return {"case": case, **_step(_model())}
