"""SPL-16: a real ``DistributedDataParallel`` run under ``torch.compile``.

Ranks are started with ``torch.multiprocessing`` (spawn) and join a real
process group (gloo on CPU, NCCL on CUDA). Each rank runs the world's
self-test (:mod:`pytest_fsdpcheck.runs.selftest`) and the control (the
unsharded model, its gradients averaged with plain ``all_reduce``: nothing
of DDP or DDPOptimizer), then takes one training step
twice, eagerly (eager DDP: a second opinion) and compiled with Dynamo's
DDPOptimizer in front of a recording backend, then runs every implementation under test on the graph
Dynamo handed to DDPOptimizer, and writes what it saw to a file. The parent
only loads those files; :mod:`pytest_fsdpcheck.checks.distributed` judges them.

Nothing here raises out of a rank: an error is recorded and reported by the
checker, so one broken implementation cannot hang its peers.
"""

from __future__ import annotations

import contextlib
import os
import traceback
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from .launch import _device, all_gather_objects, free_port, launched_by_torchrun, spawn_ranks

# Widths of the generated MLP: every weight is at least 1 MiB so each layer
# fills a 1 MiB bucket, which gives several buckets from a model that runs in
# milliseconds. 1 MiB is also DDP's default first-bucket cap, the one Dynamo
# hands DDPOptimizer, so DDP's own caps and DDPOptimizer's agree.
WIDTHS = (512, 512, 768, 512, 512)
BUCKET_CAP_MB = 1
BATCH = 8
STEP_LR = 0.1
#: how far the control's all-reduced fp32 gradients may be from the same
#: average computed on one rank (the gradient of the mean loss): the same
#: fp32 terms summed in another order differ by rounding only, a few
#: eps(fp32) = 1.2e-7 of the largest entry per operation: 1e-4 relative,
#: 1e-5 absolute
CONTROL_RTOL, CONTROL_ATOL = 1e-4, 1e-5


class GeneratedMLP(nn.Module):
    """Defined outside ``torch`` on purpose: Dynamo does not compile frames
    of modules defined inside torch (``nn.Sequential.forward``)."""

    def __init__(self, widths=WIDTHS):
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(a, b) for a, b in zip(widths, widths[1:], strict=False))
        self.head = nn.Linear(widths[-1], 1)

    def forward(self, x):
        for layer in self.layers:
            x = torch.relu(layer(x))
        return self.head(x)


class LossInForward(GeneratedMLP):
    """The same layers with a BatchNorm before the head, returning the loss
    from ``forward`` as many models do: the graph's last bucket then has one
    output, a 0-d tensor, and ``forward`` updates real buffers (the running
    statistics) while DDPOptimizer propagates fake tensors at compile time."""

    def __init__(self, widths=WIDTHS):
        super().__init__(widths)
        self.norm = nn.BatchNorm1d(widths[-1])

    def forward(self, x):
        for layer in self.layers:
            x = torch.relu(layer(x))
        return self.head(self.norm(x)).square().mean()


class ScaledBranch(nn.Module):
    """A residual branch's drop-path scaling at its expectation: in
    training, the branch times its keep probability ``1 - p``, ``p`` a
    Python float attribute (stochastic depth's drop probability, here
    without the noise so that the step is deterministic)."""

    def __init__(self, p: float):
        super().__init__()
        self.p = p

    def forward(self, x):
        if not self.training or self.p == 0.0:
            return x
        return x * (1.0 - self.p)


class ScaledBlock(nn.Module):
    """Two residual layers, each branch scaled by the block's float: the
    value ``1 - p`` computed in the first layer's bucket is used again in
    the second's, so a split at the bucket boundary carries a number that is
    not a tensor from one bucket to the next."""

    def __init__(self, p: float, width: int = WIDTHS[0]):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(width, width), nn.Linear(width, width)
        self.scale = ScaledBranch(p)

    def forward(self, x):
        x = x + self.scale(self.fc1(x))
        return x + self.scale(self.fc2(x))


class ScaledBlocks(nn.Module):
    """Residual blocks as vision and language models stack them: a graph
    break between blocks (several graphs per step, each split into buckets
    on its own) and each block its own drop probability, so Dynamo compiles
    the block's frame again for the second one and takes the float as a
    symbolic input (automatic dynamic), as it does for a model whose
    stochastic depth rises with the block's index."""

    def __init__(self, probabilities=(0.0, 0.1, 0.2)):
        super().__init__()
        self.blocks = nn.ModuleList(ScaledBlock(p) for p in probabilities)
        self.head = nn.Linear(WIDTHS[0], 1)

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
            torch._dynamo.graph_break()
        return self.head(x)


def error_record(exc: BaseException) -> str:
    """A step's failure as SPL-16 reports it: the traceback, then the last
    line naming the exception and, for a compiler's failure that wraps
    another (``BackendCompilerFailed``), the one it wraps, whose first line
    the wrapper's own message puts on a line of its own."""
    causes, seen = [], exc
    while seen is not None and len(causes) < 4:
        lines = [line for line in str(seen).splitlines() if line.strip()]
        causes.append(f"{type(seen).__name__}: {lines[0].strip() if lines else ''}".strip())
        seen = seen.__cause__ or getattr(seen, "inner_exception", None)
        if seen is not None and any(c.startswith(type(seen).__name__ + ":") for c in causes[1:]):
            break
    return traceback.format_exc(limit=8) + "\n" + " <- ".join(dict.fromkeys(causes))


@dataclass(frozen=True)
class RankJob:
    world_size: int
    device: str  # "cpu" or "cuda"
    port: int
    impl_specs: tuple[str, ...]
    out_dir: str
    task: str = "ddp"  # a key of TASKS
    seed: int = 0  # FS2-9's model


def run_ranks(world_size: int, device: str, impl_specs, timeout: float = 120.0, task: str = "ddp", seed: int = 0) -> list[dict]:
    """Start ``world_size`` ranks, wait at most ``timeout`` seconds, return
    each rank's result dict (a dict with ``error`` for a rank that died).

    Under torchrun the ranks exist already: this process runs its own rank
    and every rank gets every rank's result (the same verdict everywhere)."""
    if launched_by_torchrun():
        return _run_in_torchrun_world(world_size, device, tuple(impl_specs), task, seed)
    return spawn_ranks(
        _rank_main, lambda out_dir: RankJob(world_size, device, free_port(), tuple(impl_specs), out_dir, task, seed),
        world_size, timeout, "fsdpcheck-ranks-", device=device)


def _run_in_torchrun_world(world_size: int, device: str, impl_specs, task: str, seed: int) -> list[dict]:
    import torch.distributed as dist

    from .world import world_record

    rank = dist.get_rank()
    result: dict = {"rank": rank, "error": None, "phase": "world",
                    "world": world_record(dist.get_backend(), device, dist.get_world_size())}
    try:
        if dist.get_world_size() != world_size:
            raise RuntimeError(f"asked for world size {world_size}, torchrun started {dist.get_world_size()}")
        local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        # every rank builds rank 0's model (dev/fuzz draw a seed per process)
        seed = all_gather_objects(seed)[0]
        result.update(TASKS[task](rank, world_size, _device(device, local_rank), impl_specs, seed, progress=result))
    except BaseException:  # noqa: BLE001 - reported with every rank's results
        result["error"] = traceback.format_exc(limit=8)
    try:
        return all_gather_objects(result)
    except Exception:  # noqa: BLE001 - the world broke after the checks ran: this rank's record says so
        return [{**result, "error": traceback.format_exc(limit=8), "phase": "exchange"}]


def _rank_main(rank: int, job: RankJob) -> None:
    import torch.distributed as dist

    from .world import world_record

    backend = "nccl" if job.device == "cuda" else "gloo"
    # phase: how far the rank got, so that a failure of the world (joining,
    # or its self-test before any implementation ran) is told from the check's own
    result: dict = {"rank": rank, "error": None, "phase": "world"}
    initialized = False
    # Tiny tensors, and as many ranks as cores: intra-op threads would only
    # fight the other rank (and the xdist workers) for the CPU.
    torch.set_num_threads(1)
    try:
        result["world"] = world_record(backend, job.device, job.world_size)
        if job.device == "cpu":
            # The loopback interface always exists; gloo's default choice
            # (the hostname's address) does not in every container.
            os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
        device = _device(job.device, rank)
        from datetime import timedelta

        dist.init_process_group(
            backend,
            init_method=f"tcp://127.0.0.1:{job.port}",
            rank=rank,
            world_size=job.world_size,
            timeout=timedelta(seconds=60),
        )
        initialized = True
        result.update(TASKS[job.task](rank, job.world_size, device, job.impl_specs, job.seed, progress=result))
    except BaseException:  # noqa: BLE001 - reported to the parent, never raised across ranks
        result["error"] = traceback.format_exc(limit=8)
    finally:
        if initialized:
            with contextlib.suppress(Exception):
                dist.destroy_process_group()
        torch.save(result, Path(job.out_dir) / f"rank{rank}.pt")


def _train_and_record(rank: int, world_size: int, device: torch.device, impl_specs, seed: int = 0,
                      progress: dict | None = None) -> dict:
    import copy

    import torch._dynamo
    from torch.nn.parallel import DistributedDataParallel as DDP

    from .selftest import DDP_COLLECTIVES, averaged, check_against_local, self_test

    progress = {} if progress is None else progress
    progress["phase"] = "setup"
    torch.manual_seed(0)
    model = GeneratedMLP().to(device)
    # Rank-dependent data: the all-reduce then changes every gradient.
    batches = [torch.randn(BATCH, WIDTHS[0], generator=torch.Generator().manual_seed(1000 + r)).to(device)
               for r in range(world_size)]
    x = batches[rank]
    # The gradient of the mean loss over every rank's batch, on this rank
    # alone: what averaging the ranks' gradients must give.
    unsharded = copy.deepcopy(model)
    (sum(unsharded(b).square().mean() for b in batches) / world_size).backward()
    unsharded_grads = {n: p.grad.detach().cpu().clone() for n, p in unsharded.named_parameters()}

    def control_step(source, loss_in_forward=False) -> dict:
        """The control, which runs nothing of DDP or DDPOptimizer: the
        unsharded model on this rank's batch, its gradients averaged over
        the ranks with plain ``all_reduce``, and the SGD step taken by hand."""
        plain = copy.deepcopy(source)
        out = plain(x)
        loss = out if loss_in_forward else out.square().mean()
        loss.backward()
        named = list(plain.named_parameters())
        grads = averaged({n: p.grad for n, p in named}, world_size)
        params = {n: p.detach().add(grads[n], alpha=-STEP_LR) for n, p in named}
        return {"loss": loss.item(), "grads": {n: g.cpu().clone() for n, g in grads.items()},
                "params": {n: q.cpu().clone() for n, q in params.items()}}

    control: dict = {}

    def control_on_real_gradients():
        control.update(control_step(model))
        return check_against_local(control["grads"], unsharded_grads, CONTROL_RTOL, CONTROL_ATOL)

    progress["phase"] = "selftest"
    agreement = {**{f"parameter {n}": p for n, p in model.named_parameters()},
                 **{f"rank {r}'s batch": b for r, b in enumerate(batches)}}
    self_test(device, DDP_COLLECTIVES, agreement, real=control_on_real_gradients)
    progress["phase"] = "eager"

    def step(forward, ddp_module, loss_in_forward=False):
        optimizer = torch.optim.SGD(ddp_module.parameters(), lr=STEP_LR)
        loss = forward(x) if loss_in_forward else forward(x).square().mean()
        loss.backward()
        named = list(ddp_module.module.named_parameters())
        grads = {n: p.grad.detach().cpu().clone() for n, p in named}
        optimizer.step()
        params = {n: p.detach().cpu().clone() for n, p in named}
        return loss.item(), grads, params

    device_ids = [device.index] if device.type == "cuda" else None
    eager = DDP(copy.deepcopy(model), device_ids=device_ids, bucket_cap_mb=BUCKET_CAP_MB)
    eager_loss, eager_grads, eager_params = step(eager, eager)
    progress["phase"] = "compiled"

    handed, reasons = [], []

    def recording_backend(gm, example_inputs):
        reason = getattr(gm, "compile_subgraph_reason", None)
        reasons.append(str(getattr(reason, "reason", reason)))
        return gm.forward

    torch._dynamo.reset()
    # The DDP optimizer's split is what SPL-16 checks: on for this task's
    # compiles only, never left set (under torchrun this runs in the test
    # process, whose Dynamo config the isolation check compares)
    def ddp_optimized():
        return torch._dynamo.config.patch(optimize_ddp=True)

    from torch._dynamo.backends import distributed as ddp_backend

    original_compile_fn = ddp_backend.DDPOptimizer.compile_fn

    def spying_compile_fn(self, gm, example_inputs):
        handed.append((gm, list(example_inputs), self.bucket_bytes_cap, self.first_bucket_cap))
        return original_compile_fn(self, gm, example_inputs)

    ddp_backend.DDPOptimizer.compile_fn = spying_compile_fn
    try:
        compiled_ddp = DDP(copy.deepcopy(model), device_ids=device_ids, bucket_cap_mb=BUCKET_CAP_MB)
        compiled = torch.compile(compiled_ddp, backend=recording_backend)
        with ddp_optimized():
            compiled_loss, compiled_grads, compiled_params = step(compiled, compiled_ddp)
    finally:
        ddp_backend.DDPOptimizer.compile_fn = original_compile_fn

    def through_aot(source, loss_in_forward=False) -> dict:
        """One DDP step of a copy of ``source`` compiled through AOTAutograd,
        its forward and backward graphs run as traced (only the split is judged)."""
        from functorch.compile import make_boxed_func
        from torch._dynamo.backends.common import aot_autograd

        def run_traced(gm, _example_inputs):
            return make_boxed_func(gm.forward)

        torch._dynamo.reset()
        ddp = DDP(copy.deepcopy(source), device_ids=device_ids, bucket_cap_mb=BUCKET_CAP_MB)
        compiled = torch.compile(ddp, backend=aot_autograd(fw_compiler=run_traced, bw_compiler=run_traced))
        with ddp_optimized():
            return dict(zip(("loss", "grads", "params"), step(compiled, ddp, loss_in_forward), strict=True))

    # The same step through AOTAutograd, as inductor compiles it: each
    # bucket's backward is compiled lazily, in reverse, at the first backward,
    # and must find its own bucket's forward metadata (pytorch#160745).
    progress["phase"] = "aot"
    try:
        aot = through_aot(model)
    except Exception:  # noqa: BLE001 - judged by SPL-16 as this step's failure
        aot = {"error": traceback.format_exc(limit=8)}

    # A second model through AOTAutograd, against its own control (and its
    # own eager DDP step, the second opinion):
    # its loss computed in forward (the fake-tensor values the split passes
    # from bucket to bucket at compile time include a 0-d one) and a
    # BatchNorm's running statistics updated there (real buffers).
    progress["phase"] = "aot_loss"
    try:
        torch.manual_seed(0)
        loss_model = LossInForward().to(device)
        loss_eager = DDP(copy.deepcopy(loss_model), device_ids=device_ids, bucket_cap_mb=BUCKET_CAP_MB)
        eager_of_loss = dict(zip(("loss", "grads", "params"), step(loss_eager, loss_eager, loss_in_forward=True), strict=True))
        aot_loss = {**through_aot(loss_model, loss_in_forward=True), "eager": eager_of_loss,
                    "control": control_step(loss_model, loss_in_forward=True)}
    except Exception:  # noqa: BLE001 - judged by SPL-16 as this step's failure
        aot_loss = {"error": traceback.format_exc(limit=8)}

    # Residual blocks scaled by float attributes, a graph break between
    # them, through AOTAutograd against their own control and eager DDP
    # step: what DDPOptimizer's split hands from bucket to bucket includes a
    # symbolic float (issue 57: compiled DDP as real models run it).
    progress["phase"] = "aot_blocks"
    try:
        torch.manual_seed(0)
        blocks_model = ScaledBlocks().to(device)
        blocks_eager = DDP(copy.deepcopy(blocks_model), device_ids=device_ids, bucket_cap_mb=BUCKET_CAP_MB)
        eager_of_blocks = dict(zip(("loss", "grads", "params"), step(blocks_eager, blocks_eager), strict=True))
        aot_blocks = {**through_aot(blocks_model), "eager": eager_of_blocks, "control": control_step(blocks_model)}
    except Exception as exc:  # noqa: BLE001 - judged by SPL-16 as this step's failure
        aot_blocks = {"error": error_record(exc)}

    progress["phase"] = "plans"
    return {
        "ddp_bucket_bytes_cap": compiled_ddp.bucket_bytes_cap,
        "param_bytes": sum(p.numel() * p.element_size() for p in model.parameters()),
        "graphs_handed": len(handed),
        "compiled_subgraphs": len(reasons),
        "reasons": reasons,
        "plans": {spec: _plans(spec, handed) for spec in impl_specs},
        "exec_orders": {spec: _exec_order(spec, copy.deepcopy(model)) for spec in impl_specs},
        "unsharded": unsharded_grads,
        "control": control,
        "eager": {"loss": eager_loss, "grads": eager_grads, "params": eager_params},
        "compiled": {"loss": compiled_loss, "grads": compiled_grads, "params": compiled_params},
        "aot": aot,
        "aot_loss": aot_loss,
        "aot_blocks": aot_blocks,
    }


def _plans(spec: str, handed) -> dict:
    """Bucket counts of ``spec``'s plans for the graphs DDPOptimizer received,
    with DDPOptimizer's own caps (``bucket_bytes_cap`` from DDP), and each
    bucket's node names (SPL-20 compares them across the ranks: small lists)."""
    try:
        from ..impls import load_implementation

        splitting = load_implementation(spec).splitting
        if splitting is None:
            return {"error": None, "not_provided": True, "buckets": []}
        counts, nodes = [], []
        for gm, example_inputs, cap, first_cap in handed:
            result = splitting.split(
                gm, example_inputs, bucket_bytes_cap=cap, first_bucket_cap=first_cap,
                backend=lambda sub_gm, _inputs: sub_gm.forward,
            )
            counts.append(len(result.buckets))
            nodes.append([[str(name) for name in bucket.nodes] for bucket in result.buckets])
        return {"error": None, "not_provided": False, "buckets": counts, "nodes": nodes}
    except BaseException:  # noqa: BLE001 - the checker turns it into a violation
        return {"error": traceback.format_exc(limit=6), "not_provided": False, "buckets": []}


def _exec_order(spec: str, model) -> dict:
    """``spec``'s exec order of ``model`` traced with a plain ``torch.fx``
    tracer: module and parameter qualified names in the order recorded
    (EXO-9 compares them across the ranks)."""
    try:
        import torch.fx

        from ..impls import load_implementation

        area = load_implementation(spec).exec_order
        if area is None:
            return {"error": None, "not_provided": True}
        names = {id(m): n or "(root)" for n, m in model.named_modules()}
        names.update({id(p): n for n, p in model.named_parameters()})
        tracer = torch.fx.Tracer()
        with area.patch_tracer(tracer, model) as info:
            tracer.trace(model)
        return {"error": None, "not_provided": False,
                "modules": [names.get(id(m), "?") for m in info.module_forward_order],
                "params": [names.get(id(p), "?") for p in info.param_forward_order]}
    except BaseException:  # noqa: BLE001 - the checker turns it into a violation
        return {"error": traceback.format_exc(limit=6), "not_provided": False}


def _fsdp2(rank: int, world_size: int, device: torch.device, impl_specs, seed: int = 0,
           progress: dict | None = None) -> dict:
    from .fsdp2_run import fsdp2_task
    from .fsdp2_tp import with_tp_steps

    result = fsdp2_task(rank, world_size, device, impl_specs, seed, progress)
    return with_tp_steps(result, rank, world_size, device, impl_specs, progress)


def _fsdp2_eager(rank: int, world_size: int, device: torch.device, impl_specs, seed: int = 0,
                 progress: dict | None = None) -> dict:
    from .fsdp2_run import fsdp2_task
    from .fsdp2_tp import with_tp_steps

    result = fsdp2_task(rank, world_size, device, impl_specs, seed, progress, modes=("eager",))
    return with_tp_steps(result, rank, world_size, device, impl_specs, progress)


#: what a rank runs: SPL-16's DDP step, FS2-9's fully_shard step (both
#: modes; ``fsdp2-eager``: the eager step only, FS2-9's second world), each
#: FS2-9 world followed by FS2-15's steps on a (dp, tp) mesh
TASKS = {"ddp": _train_and_record, "fsdp2": _fsdp2, "fsdp2-eager": _fsdp2_eager}
