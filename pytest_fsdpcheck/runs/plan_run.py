"""FS2-9 on a user's model: the case's own plan (its real ``fully_shard``
calls) at the runner's world size, one training step eagerly and one under
``torch.compile``, beside the unsharded model.

Each rank builds the case itself with a picklable builder (the factory's
``pkg.module:factory`` name and keyword arguments; a case without a factory
travels pickled), so what runs is the user's code, not a copy the parent
made. Every rank takes
the same inputs, the case's ``example_inputs``: FSDP2 averages gradients
over ranks, so the sharded gradient must then equal the unsharded model's
gradient for those inputs exactly (up to float reordering), with no
dependence on how the batch would have been split. Parameters and tensor
inputs are broadcast from rank 0 first, so a factory that forgets to seed
cannot make ranks disagree about the reference.

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
MODES = ("eager", "compiled")


@dataclass(frozen=True)
class PlanJob:
    world_size: int
    port: int
    out_dir: str
    build: object  # a picklable zero-argument callable returning the case


def run_plan_ranks(build, world_size: int = 2, timeout: float = 180.0) -> list[dict]:
    """Start ``world_size`` CPU ranks (gloo), each building its case with
    ``build()`` (picklable: :func:`pytest_fsdpcheck.cases.checks.case_builder`),
    wait at most ``timeout`` seconds, return each rank's record (``error``
    set for a rank that failed or died)."""
    return spawn_ranks(_rank_main, lambda out_dir: PlanJob(world_size, free_port(), out_dir, build),
                       world_size, timeout, "fsdpcheck-plan-")


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
        result.update(plan_task(case, rank, job.world_size))
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


def plan_task(case, rank: int, world_size: int) -> dict:
    """This rank's record (process group up): the unsharded model's gradients
    and, per mode, the full gradients of the model after ``case.plan``."""
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
    reference_model = copy.deepcopy(pristine)
    _loss(reference_model(*inputs)).backward()
    backend = compile_backend()
    result = {"reference": _grads(reference_model), "backend": backend, "world_size": world_size,
              "case": getattr(case, "name", "?")}
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
                forward = torch.compile(model, backend=backend)
            _loss(forward(*inputs)).backward()
            record["grads"] = _grads(model)
        except Exception as exc:  # noqa: BLE001 - the checker turns it into a violation
            record["error"] = _error(exc)
        result[mode] = record
    return result


def _loss(output) -> torch.Tensor:
    """A scalar from whatever the model returns: every floating tensor in it
    (through tuples, lists, dicts and dataclass-like outputs) squared and averaged."""
    found = []

    def walk(obj):
        if isinstance(obj, torch.Tensor):
            if obj.is_floating_point():
                found.append(obj)
        elif isinstance(obj, dict):
            for value in obj.values():
                walk(value)
        elif isinstance(obj, (tuple, list)):
            for value in obj:
                walk(value)
        elif hasattr(obj, "to_tuple"):  # transformers' ModelOutput
            walk(obj.to_tuple())

    walk(output)
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
