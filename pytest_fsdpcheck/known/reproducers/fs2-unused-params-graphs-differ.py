"""FSDP2: with set_reduce_scatter_unused_params(True), ranks whose backward
graphs differ (a group's output feeds the loss on one rank only) still
reduce-scatter in different orders, and the gradients come out silently
wrong (or the collectives mismatch and the job aborts or hangs).

Upstream: https://github.com/pytorch/pytorch/issues/158719 ("FSDP Fails when
parameters are used differently across ranks", opened 2025-07-20, still open
and active in the window: reposted as
https://github.com/pytorch/torchtitan/issues/2747 on 2026-03-30); the open
fix https://github.com/pytorch/pytorch/pull/174862 ("[FSDP2] Fix to
differing gradient computation graphs in different ranks", guarded by the
same flag, review in 2026-05..06). The flag itself came with the work on
https://github.com/pytorch/pytorch/pull/170667.

Area: FSDP2 fully_shard, gradient reduction with
FSDPModule.set_reduce_scatter_unused_params.

What should happen: set_reduce_scatter_unused_params's docstring (torch
2.13): "Sets whether to include zero gradients for parameters that did not
receive a gradient in backward. This is needed when different ranks use
different parameters due to conditional control flow (e.g. multi-modal
models, mixture of experts) ... Similar to DDP's find_unused_parameters."
So each gradient is the average over the ranks, a rank that did not use a
parameter contributing zero.

What happens: module `a` (its own group) runs forward on both ranks, but its
output feeds the loss only on rank 0. Rank 0 reduces `a`'s group during
backward and the root's at the end; rank 1 reduces both at the end, root
first. The reduce-scatters pair up crosswise: with groups of equal size
every gradient is wrong; with unequal sizes gloo aborts ("Received data
size doesn't match expected size").

Two gloo ranks on CPU, each checked against the unsharded model.
Exit 1 and "BUG: ..." when the bug shows; exit 0 and "fixed: ..." when the
gradients equal the unsharded model's; exit 2 and "n/a: ..." when the
scenario cannot be run here (no set_reduce_scatter_unused_params).
"""
import copy
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


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        # the root group (pre, head) and a's group hold the same number of elements
        self.pre = nn.Linear(4, 4, bias=False)
        self.a = nn.Sequential(nn.Linear(4, 4, bias=False), nn.Linear(4, 4, bias=False))
        self.head = nn.Linear(4, 4, bias=False)

    def forward(self, x, use_a):
        h = self.pre(x)
        y = self.a(h)  # runs on every rank: its all-gather is a collective
        return self.head(y if use_a else h)


def run(rank, world, port, queue):
    try:
        init(rank, world, port)
        from torch.distributed.fsdp import fully_shard

        torch.manual_seed(0)
        model = Model()
        reference = copy.deepcopy(model)
        fully_shard(model.a)
        fully_shard(model)
        if not hasattr(model, "set_reduce_scatter_unused_params"):
            queue.put((rank, "error", "this torch has no FSDPModule.set_reduce_scatter_unused_params"))
            return
        model.set_reduce_scatter_unused_params(True)
        batches = [torch.randn(3, 4, generator=torch.Generator().manual_seed(r)) for r in range(world)]
        model(batches[rank], rank == 0).sum().backward()
        for r, x in enumerate(batches):
            (reference(x, r == 0).sum() / world).backward()
        wrong = []
        for (name, p), (_, q) in zip(model.named_parameters(), reference.named_parameters(), strict=True):
            want = q.grad if q.grad is not None else torch.zeros_like(q)
            if p.grad is None or (p.grad.full_tensor() - want).abs().max() > 1e-5:
                wrong.append(name)
        queue.put((rank, "bug" if wrong else "ok", ", ".join(wrong)))
        dist.destroy_process_group()
    except Exception as e:  # noqa: BLE001
        queue.put((rank, "bug" if "mismatch" in str(e).lower() else "error",
                   f"{type(e).__name__}: {str(e).splitlines()[0][:160]}"))


def main():
    results = launch(run)
    if results is None:
        print("BUG: a rank died or the world hung in backward (the reduce-scatters of the two ranks "
              "do not match)")
        return 1
    if any(kind == "error" for _, kind, _ in results):
        print(f"n/a: the scenario cannot run here: {next(d for _, k, d in results if k == 'error')}")
        return 2
    wrong = next((d for _, k, d in sorted(results) if k == "bug"), None)
    if wrong is not None:
        print(f"BUG: with set_reduce_scatter_unused_params(True), a group whose output feeds the loss "
              f"on one rank only leaves wrong gradients on every rank ({wrong})")
        return 1
    print("fixed: the gradients are the average over the ranks, a rank's unused group counting zero")
    return 0


if __name__ == "__main__":
    sys.exit(main())
