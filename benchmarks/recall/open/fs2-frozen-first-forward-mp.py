"""FSDP2 mixed precision latches None as a group's original and reduce dtypes
when the group's first forward runs with all its parameters frozen; after
unfreezing, the first backward fails (or reduces in bf16).

Upstream: https://github.com/pytorch/pytorch/issues/186998 ("[FSDP2] Mixed
precision breaks after unfreezing when the first forward ran with
requires_grad=False (RuntimeError at backward)", opened 2026-06-11, closed by
https://github.com/pytorch/pytorch/pull/187376, which landed after the 2.13
branch: the behaviour is in 2.13.0, not in 2.14+).

Area: FSDP2 fully_shard, mixed precision (FSDPParamGroup._init_mp_dtypes at
lazy init).

What should happen: MixedPrecisionPolicy(param_dtype=bf16,
reduce_dtype=fp32): gradients are reduced in fp32 and handed back in the
sharded parameter's fp32 dtype, whatever requires_grad was at the first
forward (the reference: the same step unsharded, bf16 compute, fp32
average).

What happens: the group frozen at its first forward keeps no original or
reduce dtype; once unfrozen, its first backward raises "attempting to assign
a gradient with dtype 'c10::BFloat16' to a tensor with ..." (or, where no
check fires, reduces in bf16).

Two gloo ranks on CPU. (The suite's catalog models this as the known bug
fs2-frozen-mp-latched, whose own reproducer this script follows.)
Exit 1 and "REPRODUCED: ..." when the bug shows; exit 0 and "NOT REPRODUCED:
..." when the gradient is the fp32 one; exit 2 and "ERROR: ..." when the
scenario cannot be run here.
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


class Two(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(4, 4), nn.Linear(4, 4)

    def forward(self, x):
        return self.b(self.a(x).float())  # a computes in bf16 under its policy, b in fp32


def run(rank, world, port, queue):
    try:
        init(rank, world, port)
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

        torch.manual_seed(0)
        model, reference = Two(), Two()
        reference.load_state_dict(model.state_dict())
        mesh = init_device_mesh("cpu", (world,))
        fully_shard(model.a, mesh=mesh,
                    mp_policy=MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32))
        fully_shard(model, mesh=mesh)
        batches = [torch.randn(2, 4, generator=torch.Generator().manual_seed(10 + r)) for r in range(world)]
        model.a.requires_grad_(False)
        model(batches[rank])  # the first forward: lazy init sees a's group with nothing trainable
        model.a.requires_grad_(True)
        try:
            model(batches[rank]).float().square().mean().backward()
        except RuntimeError as e:
            queue.put((rank, "bug", f"RuntimeError: {str(e).splitlines()[0][:120]}"))
            return
        got = model.a.weight.grad.full_tensor()
        want = torch.zeros(4, 4)
        for batch in batches:
            low = nn.Linear(4, 4).to(torch.bfloat16)
            low.load_state_dict({k: v.to(torch.bfloat16) for k, v in reference.a.state_dict().items()})
            reference.b(low(batch.to(torch.bfloat16)).float()).float().square().mean().backward()
            want += low.weight.grad.float() / world
        off = (got.float() - want).abs().max().item()
        ok = got.dtype == torch.float32 and off < 1e-5
        queue.put((rank, "ok" if ok else "bug", f"gradient {got.dtype}, off by {off:.3g}"))
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
    bug = next((d for _, k, d in sorted(results) if k == "bug"), None)
    if bug is not None:
        print(f"REPRODUCED: after unfreezing a group frozen at its first forward, the bf16/fp32 policy's "
              f"first backward fails or reduces in bf16: {bug}")
        return 1
    print("NOT REPRODUCED: a group frozen at its first forward reduces in fp32 once unfrozen")
    return 0


if __name__ == "__main__":
    sys.exit(main())
