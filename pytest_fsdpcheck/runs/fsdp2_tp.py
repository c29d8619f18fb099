"""FS2-15: one step of ``fully_shard`` over the dp dimension of a 2-D
(dp, tp) mesh, on tensor-parallel parameters, driven by the implementation
under test, in each of FS2-9's worlds (after FS2-9's own steps).

The model is what a sequence-parallel region of a transformer is: residual
blocks of an RMS norm's weight and a token-wise linear layer, every
parameter a ``DTensor`` replicated over the tp dimension (what
``SequenceParallel`` makes of a norm), every rank holding its own rows of
the tokens (``Shard(0)`` over tp; each dp index its own batch). A replicated
parameter's gradient is then ``Partial`` over tp: each rank's is the sum
over its own rows, and FSDP2 must sum them over tp and average them over dp,
both in the policy's ``reduce_dtype`` (``MixedPrecisionPolicy``: it
"controls the dtype for gradient reduction"). Each rank applies the
implementation's groups with real ``fully_shard`` (each block, then the
root), with no policy (``fp32``) and with bf16 parameters reduced in fp32
(``bf16``), and records where each parameter ended up and its full
gradient.

The control runs nothing of ``fully_shard`` nor of ``DTensor``: the same
model as plain tensors on this rank's rows (its parameters bf16 leaves and
its input cast to bf16 for the ``bf16`` step, as FSDP2 gives them), each
gradient cast to fp32 and every rank's gathered with plain ``all_gather``.
The checker (:func:`pytest_fsdpcheck.checks.fsdp2_tp.check_fsdp2_tp`) sums
them itself. Each token's computation is row-wise, so a rank's rows give the
same partial gradients in the control as in the tensor-parallel model.
"""

from __future__ import annotations

import contextlib
import traceback

import torch
from torch import nn

from .fsdp2_run import driven_by, fully_shard_function, mixed_precision_policy
from .precision import low_leaf, swap_in_leaves

#: the steps taken: no policy, and bf16 parameters reduced in fp32
TP_MODES = ("fp32", "bf16")
TP_WIDTH, TP_ROWS, TP_DEPTH = 8, 3, 2
TP_MODEL_SEED, TP_INPUT_SEED = 2000, 3000


def tp_mesh_shape(world_size: int) -> tuple[int, int]:
    """(dp, tp): tp 2 where the world is even (4 ranks are 2 x 2), else the
    whole world on tp."""
    tp = 2 if world_size % 2 == 0 else world_size
    return world_size // tp, tp


class RmsScale(nn.Module):
    """An RMS norm and its weight (a norm ``SequenceParallel`` replicates)."""

    def __init__(self, width: int):
        super().__init__()
        self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(width))

    def forward(self, x):
        return x * torch.rsqrt(x.square().mean(-1, keepdim=True) + 1e-6) * self.weight


class TpBlock(nn.Module):
    def __init__(self, width: int):
        super().__init__()
        self.norm = RmsScale(width)
        self.proj = nn.Linear(width, width)

    def forward(self, x):
        return x + torch.tanh(self.proj(self.norm(x)))


class TpModel(nn.Module):
    def __init__(self, width: int = TP_WIDTH, depth: int = TP_DEPTH):
        super().__init__()
        self.blocks = nn.ModuleList(TpBlock(width) for _ in range(depth))
        self.out = RmsScale(width)

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return self.out(x)


def tp_model() -> TpModel:
    """The same model on every rank (its own generator: nothing global)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(TP_MODEL_SEED)
        return TpModel()


def tp_rows(rank: int) -> torch.Tensor:
    """Rank ``rank``'s own rows of the tokens."""
    return torch.randn(TP_ROWS, TP_WIDTH, generator=torch.Generator().manual_seed(TP_INPUT_SEED + rank))


def _dtensor_api():
    try:
        from torch.distributed.tensor import DTensor, Replicate, Shard, distribute_tensor
    except ImportError:
        from torch.distributed._tensor import DTensor, Replicate, Shard, distribute_tensor
    return DTensor, Replicate, Shard, distribute_tensor


def with_tp_steps(result: dict, rank: int, world_size: int, device: torch.device, impl_specs,
                  progress: dict | None = None) -> dict:
    """FS2-9's ``result`` with FS2-15's records added as ``tp``, where FS2-9
    could drive ``fully_shard`` at all (else FS2-15 is n/p for its reason)."""
    if "FS2-9" in (result.get("unchecked") or {}):
        return result
    if progress is not None:
        progress["phase"] = "tp"  # a failure from here on is the check's
    result["tp"] = tp_task(rank, world_size, device, impl_specs)
    return result


def tp_task(rank: int, world_size: int, device: torch.device, impl_specs) -> dict:
    """This rank's FS2-15 records: the mesh, the control of each step, and
    each implementation's steps. Nothing raises: the mesh's or the control's
    failure is recorded as ``control_error`` (the check's), an implementation's as its
    record's ``error``; ``unchecked`` says why this torch cannot build the
    mesh (decided before anything ran)."""
    from ..impls import load_implementation

    dp, tp = tp_mesh_shape(world_size)
    out: dict = {"mesh": [dp, tp], "modes": list(TP_MODES), "control": {}, "impls": {}}
    try:
        from torch.distributed.device_mesh import init_device_mesh

        _dtensor_api()
        mesh = init_device_mesh(device.type, (dp, tp), mesh_dim_names=("dp", "tp"))
        mesh["dp"], mesh["tp"]  # noqa: B018 - slicing by name is what the step needs
    except ImportError as exc:  # only a torch without device meshes or DTensor: any other error is the check's
        out["unchecked"] = f"torch {torch.__version__} cannot build a named (dp, tp) device mesh: {type(exc).__name__}: {exc}"
        return out
    except Exception:  # noqa: BLE001 - a mesh this torch has but cannot build here is the check's failure
        out["control_error"] = traceback.format_exc(limit=6)
        return out
    try:
        for mode in TP_MODES:
            out["control"][mode] = tp_control(rank, world_size, device, mode)
    except Exception:  # noqa: BLE001 - the control's failure is the check's
        out["control_error"] = traceback.format_exc(limit=6)
        return out
    for spec in impl_specs:
        try:
            area = load_implementation(spec).fsdp2
        except BaseException:  # noqa: BLE001 - the checker turns it into a violation
            out["impls"][spec] = {"error": traceback.format_exc(limit=6), "not_provided": False}
            continue
        if area is None:
            out["impls"][spec] = {"error": None, "not_provided": True}
            continue
        record: dict = {"error": None, "not_provided": False}
        for mode in TP_MODES:
            try:
                record[mode] = tp_step(area, mesh, rank, device, mode)
            except Exception:  # noqa: BLE001 - the checker turns it into a violation of this step
                record[mode] = {"error": traceback.format_exc(limit=8)}
        out["impls"][spec] = record
    return out


def tp_control(rank: int, world_size: int, device, mode: str) -> dict:
    """Every rank's partial gradients (fp32, rank order) of the plain model
    on its own rows at ``mode``'s precision: nothing of FSDP2 or DTensor."""
    model = tp_model()
    x = tp_rows(rank)
    if mode == "bf16":
        swap_in_leaves(model, {id(p): low_leaf(p, torch.bfloat16) for p in model.parameters()})
        x = x.to(torch.bfloat16)
    model(x).float().square().sum().backward()
    names = [name for name, _ in model.named_parameters()]
    local = [p.grad.detach().float().flatten() for _, p in model.named_parameters()]
    flat = torch.cat(local).to(device)
    gathered = [torch.empty_like(flat) for _ in range(world_size)]
    torch.distributed.all_gather(gathered, flat)
    shapes = {name: tuple(p.shape) for name, p in model.named_parameters()}
    partials, start = {}, 0
    for name in names:
        size = int(torch.Size(shapes[name]).numel())
        partials[name] = torch.stack([g[start:start + size].cpu().reshape(shapes[name]) for g in gathered])
        start += size
    return {"partials": partials}


def _placement(p, DTensor) -> str:
    if not isinstance(p, DTensor):
        return "a plain tensor"
    names = getattr(p.device_mesh, "mesh_dim_names", None) or ()
    return f"a DTensor on the ({', '.join(names)}) mesh, {tuple(p.placements)}"


def tp_step(area, mesh, rank: int, device, mode: str) -> dict:
    """One step of the tensor-parallel model with ``fully_shard`` driven by
    ``area``'s walk over ``mesh["dp"]``: each parameter's placement after
    the calls, and every parameter's full gradient (fp32, on CPU)."""
    DTensor, Replicate, Shard, distribute_tensor = _dtensor_api()
    fully_shard = fully_shard_function()
    model = tp_model().to(device)
    for module in model.modules():
        for name, p in list(module._parameters.items()):
            module._parameters[name] = nn.Parameter(distribute_tensor(p.detach(), mesh["tp"], [Replicate()]))
    module_names = {id(m): name or "(root)" for name, m in model.named_modules()}
    param_names = {id(p): name for name, p in model.named_parameters()}
    policy = {}
    if mode == "bf16":
        policy = {"mp_policy": mixed_precision_policy()(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)}
    record: list = []
    with driven_by(area, record) if area is not None else contextlib.nullcontext():
        for root in [*model.blocks, model]:
            fully_shard(root, mesh=mesh["dp"], **policy)
            if area is not None:
                area.mark_own_group(root)
    # A walk that gives the ranks different groups (FS2-11's finding) would
    # leave their collectives unpaired: a hang that takes every record of
    # the world with it. The ranks compare what the walk gave first, and
    # none steps where they differ.
    walked = [([module_names.get(id(m), "?") for m in modules],
               [param_names.get(id(p), "?") for p in (states[0] if states else ())]) for modules, states in record]
    everyone: list = [None] * torch.distributed.get_world_size()
    torch.distributed.all_gather_object(everyone, walked)
    if any(answer != walked for answer in everyone):
        differ = [r for r, answer in enumerate(everyone) if answer != everyone[0]]
        raise RuntimeError(f"the walk gave ranks {differ} other groups than rank 0's (FS2-11 names them): no step "
                           "taken, its collectives would not pair up")
    placed = {name: _placement(p, DTensor) for name, p in model.named_parameters()}
    x = DTensor.from_local(tp_rows(rank).to(device), mesh["tp"], [Shard(0)], run_check=False)
    y = model(x)
    (y.to_local() if isinstance(y, DTensor) else y).float().square().sum().backward()
    grads = {}
    for name, p in model.named_parameters():
        if p.grad is not None:
            grad = p.grad.full_tensor() if isinstance(p.grad, DTensor) else p.grad
            grads[name] = grad.detach().float().cpu().clone()
    return {"placements": placed, "grads": grads, "fully_shard_calls": len(record)}
