"""FS2-9 on a user's model: the case's own plan (its real ``fully_shard``
calls) at the runner's world size, one training step eagerly and one under
``torch.compile``, beside the unsharded model.

Each rank builds the case itself with a picklable builder (the factory's
``pkg.module:factory`` name and keyword arguments; a case without a factory
travels pickled), so what runs is the user's code, not a copy the parent
made. Every rank takes the same inputs, the case's ``example_inputs``, so
nothing depends on how a batch would have been split; parameters and tensor
inputs are broadcast from rank 0 first, so a factory that forgets to seed
cannot make ranks disagree about the reference. Rank ``r``'s loss is scaled
by :func:`rank_weight` (1 on even ranks, 2 on odd ones): with equal
contributions a rank that skips the reduction, or a reduction in the wrong
dtype (bf16 sums of equal bf16 values are exact), would go unseen.

The control is the unsharded model at the plan's own precision
(:class:`PlanGroup`, read from the plan's recorded calls): each group's
parameters cast to its ``param_dtype`` for the step, floating inputs of its
modules cast as ``cast_forward_inputs`` says, outputs to ``output_dtype``,
and its gradients summed over the ranks' weights in its ``reduce_dtype`` and
averaged, as FSDP2's reduce-scatter does; a parameter in no group keeps its
rank's own gradient. Both runs seed torch's generator with :data:`STEP_SEED`
just before the forward (and Inductor draws through aten's generator), so
dropout and random masks draw the same numbers in both.

Nothing raises out of a rank: errors are recorded, and
:func:`pytest_fsdpcheck.checks.plan_distributed.check_plan_end_to_end`
judges the records.
"""

from __future__ import annotations

import contextlib
import copy
import os
import traceback
from dataclasses import dataclass
from pathlib import Path

import torch

from .ddp_run import free_port, spawn_ranks
from .fsdp2_run import compile_backend, dtensor_class

BUILD_SEED = 0
STEP_SEED = 28
MODES = ("eager", "compiled")


def rank_weight(rank: int) -> float:
    # a power of two, so rank r's gradients are exactly rank_weight(r) times
    # rank 0's in any dtype, and the control needs one backward
    return 2.0 if rank % 2 else 1.0


@dataclass(frozen=True)
class PlanGroup:
    """One group of the plan as its call asked for it: the parameters it
    shards (first qualified names), the modules it was called on, and the
    mixed-precision policy given (``None`` dtypes: no cast). A
    ``replicate``-owned module's parameters are a group with no policy (DDP
    averages them in their own dtype)."""

    params: tuple[str, ...]
    roots: tuple[str, ...] = ()
    param_dtype: object = None
    reduce_dtype: object = None
    output_dtype: object = None
    cast_forward_inputs: bool = True


@dataclass(frozen=True)
class PlanJob:
    world_size: int
    port: int
    out_dir: str
    build: object  # a picklable zero-argument callable returning the case
    groups: tuple | None = None  # PlanGroups; None: every parameter reduced, no casts


def run_plan_ranks(build, world_size: int = 2, timeout: float = 180.0, groups=None) -> list[dict]:
    """Start ``world_size`` CPU ranks (gloo), each building its case with
    ``build()`` (picklable: :func:`pytest_fsdpcheck.cases.checks.case_builder`),
    wait at most ``timeout`` seconds, return each rank's record (``error``
    set for a rank that failed or died). ``groups`` (:class:`PlanGroup`, from
    :func:`pytest_fsdpcheck.cases.checks.plan_groups`) is the plan's precision
    and reduction; ``None`` reduces every parameter with no casts."""
    groups = None if groups is None else tuple(groups)
    return spawn_ranks(_rank_main, lambda out_dir: PlanJob(world_size, free_port(), out_dir, build, groups),
                       world_size, timeout, "fsdpcheck-plan-", device="cpu")


def _rank_main(rank: int, job: PlanJob) -> None:
    import torch.distributed as dist

    result: dict = {"rank": rank, "error": None}
    initialized = False
    torch.set_num_threads(1)
    try:
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
        from datetime import timedelta

        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{job.port}", rank=rank,
                                world_size=job.world_size, timeout=timedelta(seconds=60))
        initialized = True
        # the same seed on every rank, for a factory that does not seed itself
        torch.manual_seed(BUILD_SEED)
        case = job.build()
        result.update(plan_task(case, rank, job.world_size, job.groups))
    except BaseException as exc:  # noqa: BLE001 - reported to the parent, never raised across ranks
        result["error"] = _error(exc)
    finally:
        if initialized:
            with contextlib.suppress(Exception):
                dist.destroy_process_group()
        torch.save(result, Path(job.out_dir) / f"rank{rank}.pt")


def _error(exc: BaseException) -> str:
    """``Type: message`` first (the checker shows the first line), the traceback after."""
    return f"{type(exc).__name__}: {exc}\n{traceback.format_exc(limit=8)}"


def plan_task(case, rank: int, world_size: int, groups=None) -> dict:
    """This rank's record (process group up): per mode, the full gradients
    of the model after ``case.plan``, and the control's (``reference``)."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh

    base = case.model
    with torch.no_grad():
        for tensor in [*base.parameters(), *base.buffers()]:
            dist.broadcast(tensor.data, src=0)
    inputs = tuple(x.clone() if isinstance(x, torch.Tensor) else x for x in case.example_inputs)
    for x in inputs:
        if isinstance(x, torch.Tensor):
            dist.broadcast(x, src=0)
    pristine = copy.deepcopy(base)
    weight = rank_weight(rank)
    if groups is None:
        groups = (PlanGroup(tuple(name for name, _ in pristine.named_parameters())),)
    backend = compile_backend()
    reference, precision = _control(copy.deepcopy(pristine), inputs, groups, rank, world_size)
    result = {"reference": reference, "precision": precision, "backend": backend, "world_size": world_size,
              "case": getattr(case, "name", "?"), "weight": weight}
    mesh = init_device_mesh("cpu", (world_size,))
    for mode in MODES:
        record: dict = {"error": None}
        try:
            model = copy.deepcopy(pristine)
            case.plan(model, mesh)
            forward = model
            if mode == "compiled":
                from torch import _dynamo

                _dynamo.reset()
                _draw_through_aten(backend)
                forward = torch.compile(model, backend=backend)
            torch.manual_seed(STEP_SEED)
            (_loss(forward(*inputs)) * weight).backward()
            record["grads"] = _grads(model)
        except Exception as exc:  # noqa: BLE001 - the checker turns it into a violation
            record["error"] = _error(exc)
        result[mode] = record
    return result


def _draw_through_aten(backend) -> None:
    """Inductor draws dropout masks and ``rand`` with its own Philox
    generator unless told to fall back to aten's: then it draws what eager
    draws from the same seed."""
    if backend == "inductor":
        from torch._inductor import config

        config.fallback_random = True


def _control(model, inputs, groups, rank: int, world_size: int):
    """The unsharded model's gradients reduced as the plan's groups say (see
    the module docstring), and ``{name: (param_dtype, reduce_dtype)}`` for
    the parameters the plan computes or reduces below their own dtype."""
    from torch.func import functional_call

    params = dict(model.named_parameters())
    modules = dict(model.named_modules())
    low: dict = {}
    plan_of: dict = {}
    hooks = []
    for group in groups:
        for name in group.params:
            p = params.get(name)
            if p is None or name in plan_of:
                continue
            param_dtype = group.param_dtype
            # FSDP2 leaves a parameter alone where param_dtype is its own or it is not floating
            if param_dtype == p.dtype or not p.is_floating_point():
                param_dtype = None
            compute = param_dtype or p.dtype
            reduce_dtype = group.reduce_dtype or compute
            plan_of[name] = (compute, reduce_dtype)
            if param_dtype is not None:
                low[name] = p.detach().to(param_dtype).requires_grad_(p.requires_grad)
        for root in group.roots:
            module = modules.get(root)
            if module is not None:
                hooks.extend(_precision_hooks(module, group))
    try:
        torch.manual_seed(STEP_SEED)
        # an fp32 plan's control is the model's own forward, untouched
        output = functional_call(model, low, inputs) if low else model(*inputs)
        _loss(output).backward()
    finally:
        for hook in hooks:
            hook.remove()
    weights = [rank_weight(r) for r in range(world_size)]
    reference, precision = {}, {}
    for name, p in params.items():
        grad = low[name].grad if name in low else p.grad
        if grad is None:
            reference[name] = None
            continue
        grad = grad.detach()
        if name not in plan_of:  # in no group: nothing reduces it
            reference[name] = (grad * rank_weight(rank)).to(p.dtype)
            continue
        compute, reduce_dtype = plan_of[name]
        total = None
        for w in weights:
            term = (grad * w).to(reduce_dtype)
            total = term if total is None else total + term
        reference[name] = (total / world_size).to(p.dtype)
        if compute != p.dtype or reduce_dtype != p.dtype:
            precision[name] = (str(compute).removeprefix("torch."), str(reduce_dtype).removeprefix("torch."))
    return {k: v.cpu().clone() if v is not None else None for k, v in reference.items()}, precision


def _precision_hooks(module, group):
    """FSDP2's casts at a group's modules: floating inputs to ``param_dtype``
    (``cast_forward_inputs``), outputs to ``output_dtype``."""
    def cast(dtype, obj):
        if isinstance(obj, torch.Tensor):
            return obj.to(dtype) if obj.is_floating_point() and obj.dtype != dtype else obj
        if isinstance(obj, (tuple, list)):
            return type(obj)(cast(dtype, x) for x in obj) if not hasattr(obj, "_fields") else type(obj)(
                *(cast(dtype, x) for x in obj))
        if isinstance(obj, dict):
            return {k: cast(dtype, v) for k, v in obj.items()}
        return obj

    hooks = []
    if group.param_dtype is not None and group.cast_forward_inputs:
        hooks.append(module.register_forward_pre_hook(
            lambda m, args, kwargs: (cast(group.param_dtype, args), cast(group.param_dtype, kwargs)),
            with_kwargs=True))
    if group.output_dtype is not None:
        hooks.append(module.register_forward_hook(lambda m, args, out: cast(group.output_dtype, out)))
    return hooks


def output_tensors(output) -> list:
    """Every tensor in what a model returns, through tuples, lists, dicts and
    dataclass-like outputs, in order."""
    found, pending = [], [output]
    while pending:
        obj = pending.pop()
        if isinstance(obj, torch.Tensor):
            found.append(obj)
        elif isinstance(obj, dict):
            pending.extend(reversed(list(obj.values())))
        elif isinstance(obj, (tuple, list)):
            pending.extend(reversed(obj))
        elif hasattr(obj, "to_tuple"):  # transformers' ModelOutput
            pending.append(obj.to_tuple())
    return found


def _loss(output) -> torch.Tensor:
    """A scalar from whatever the model returns: every floating tensor in it
    squared and averaged."""
    found = [t for t in output_tensors(output) if t.is_floating_point()]
    if not found:
        raise TypeError(f"the model's output ({type(output).__name__}) holds no floating-point tensor to take a loss of")
    total = found[0].float().square().mean()
    for tensor in found[1:]:
        total = total + tensor.float().square().mean()
    return total


def _grads(model) -> dict:
    """Full gradients by qualified name, each parameter once (a tied one under
    its first name); sharded ones gathered, a collective on every rank."""
    DTensor = dtensor_class()
    out = {}
    for name, p in model.named_parameters():
        grad = p.grad
        if grad is None:
            out[name] = None
            continue
        grad = grad.full_tensor() if isinstance(grad, DTensor) else grad
        out[name] = grad.detach().cpu().clone()
    return out
