"""FSDP2 + TP: MixedPrecisionPolicy(reduce_dtype=fp32) does not reach the
TP-mesh Partial -> Replicate all-reduce of a replicated parameter's
gradient; it runs in the bf16 compute dtype.

Upstream: https://github.com/pytorch/pytorch/issues/190626 ("[FSDP2]
MixedPrecisionPolicy reduce_dtype is not applied to the TP-mesh Partial ->
Replicate gradient all-reduce", open, comments 2026-07-24) and its fix
https://github.com/pytorch/pytorch/pull/190627 ("[FSDP2] Apply reduce_dtype
to the non-DP-mesh gradient all-reduce", opened 2026-07-21). A maintainer
asked whether the docs rather than the code are wrong; the reporter points
out that the gradient-accumulation path already upcasts before this
all-reduce.

Area: FSDP2 fully_shard on a 2-D (dp, tp) mesh; mixed precision, gradient
reduction.

What should happen: MixedPrecisionPolicy.reduce_dtype "controls the dtype
for gradient reduction (i.e. reduce-scatter or all-reduce)": with
param_dtype=bf16 and reduce_dtype=fp32 the gradient is summed in fp32.

What happens: a SequenceParallel-style parameter (Replicate on the tp mesh,
its input Shard(1)) gets a Partial gradient; FSDP2 redistributes it to
Replicate in bf16 before its own fp32 reduce-scatter. The script makes the
two ranks' partial gradients 1 and 2**-9 (both exact in bf16): summed in fp32
that is 1.001953125, in bf16 it rounds to 1.0.

Two gloo ranks on CPU, mesh (dp=1, tp=2).
Exit 1 and "REPRODUCED: ..." when the gradient is the bf16 sum; exit 0 and
"NOT REPRODUCED: ..." when it is the fp32 sum; exit 2 and "ERROR: ..." when
the scenario cannot be run here.
"""
import datetime
import os
import socket
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn


def launch(target, world=2, timeout=150):
    """Run ``target(rank, world, port, queue)`` on ``world`` spawned gloo ranks;
    their results, or None where a rank died or the world hung."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    procs = [ctx.Process(target=target, args=(rank, world, port, queue)) for rank in range(world)]
    for p in procs:
        p.start()
    results = []
    try:
        for _ in procs:
            results.append(queue.get(timeout=timeout))
    except Exception:  # noqa: BLE001 - queue.Empty: a rank died or hung
        results = None
    for p in procs:
        p.join(timeout=30)
        if p.is_alive():
            p.kill()
            p.join()
    return results


def init(rank, world, port):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world, timeout=datetime.timedelta(seconds=60))


class Scale(nn.Module):
    """A norm's weight, as SequenceParallel leaves it: x * weight."""

    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(4))

    def forward(self, x):
        return x * self.weight


def run(rank, world, port, queue):
    try:
        init(rank, world, port)
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
        from torch.distributed.tensor import DTensor, Replicate, Shard, distribute_tensor

        mesh = init_device_mesh("cpu", (1, world), mesh_dim_names=("dp", "tp"))
        model = Scale()
        model.weight = nn.Parameter(distribute_tensor(model.weight.data, mesh["tp"], [Replicate()]))
        fully_shard(model, mesh=mesh["dp"],
                    mp_policy=MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32))
        # each rank holds one position of the sequence: its partial gradient of weight is its input
        local = torch.full((1, 1, 4), 1.0 if rank == 0 else 2.0 ** -9)
        x = DTensor.from_local(local, mesh["tp"], [Shard(1)])
        model(x).to_local().float().sum().backward()
        grad = model.weight.grad.full_tensor()
        queue.put((rank, "ok", grad.tolist()))
        dist.destroy_process_group()
    except Exception as e:  # noqa: BLE001
        queue.put((rank, "error", f"{type(e).__name__}: {str(e).splitlines()[0][:160]}"))


def main():
    results = launch(run)
    if results is None:
        print("ERROR: a rank died or the world hung")
        return 2
    if any(kind == "error" for _, kind, _ in results):
        print(f"ERROR: the scenario cannot run here: {next(d for _, k, d in results if k == 'error')}")
        return 2
    fp32_sum = 1.0 + 2.0 ** -9
    got = sorted(results)[0][2]
    if all(abs(v - fp32_sum) < 1e-7 for _, _, grad in results for v in grad):
        print(f"NOT REPRODUCED: the TP all-reduce of the gradient ran in reduce_dtype (fp32): {fp32_sum!r}")
        return 0
    if all(v == 1.0 for _, _, grad in results for v in grad):
        print(f"REPRODUCED: with reduce_dtype=fp32 the TP-mesh Partial->Replicate reduction of a replicated "
              f"parameter's gradient ran in bf16: 1 + 2**-9 came out {got[0]!r}, not {fp32_sum!r}")
        return 1
    print(f"ERROR: unexpected gradient {got}")
    return 2


if __name__ == "__main__":
    sys.exit(main())
