"""FSDP2: an in-place op on a view that a fully_shard module returned drops
the module's pre-backward hook, so backward never all-gathers its parameters.

Upstream: https://github.com/pytorch/pytorch/issues/181832 ("[FSDP2] Inplace
operation on a view tensor can drop the fsdp pre-backward hook on it.",
opened 2026-04-28). Closed by https://github.com/pytorch/pytorch/pull/181850
(merged 2026-05-05), which only adds a UserWarning ("returned a view tensor")
and leaves the fix ("wrap via autograd.Function + clone") to a follow-up: the
behaviour itself is still there.

Area: FSDP2 fully_shard (gradient reduction; the pre-backward unshard).

What should happen: fully_shard documents that a module's parameters are
all-gathered before its backward (the pre-backward hook registered on the
module's forward outputs); the step's gradients are the unsharded model's.
Whether the caller then writes into an output in place is ordinary autograd
usage, which eager PyTorch handles (the reference model here).

What happens: the module returns `y.unsqueeze(0).squeeze(0)` (a view) and
the caller does `out += y`; autograd rebases the view's grad_fn and the hook
FSDP2 registered on it never fires. With reshard_after_forward=True the
backward reads the freed parameter storage: "RuntimeError: setStorage: ...
out of bounds for storage of size 0" (or, where storage survives, gradients
that do not match).

Two gloo ranks on CPU, each checked against the unsharded model.
Exit 1 and "REPRODUCED: ..." when the bug shows; exit 0 and "NOT REPRODUCED:
..." when the gradients equal the unsharded model's; exit 2 and "ERROR: ..."
when the scenario cannot be run here.
"""
import copy
import datetime
import os
import socket
import sys
import warnings

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


class Inner(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin0, self.lin1 = nn.Linear(8, 8), nn.Linear(8, 8)

    def forward(self, x):
        return self.lin1(self.lin0(x)).unsqueeze(0).squeeze(0)  # a view of the output


class Outer(nn.Module):
    def __init__(self):
        super().__init__()
        self.inner, self.head = Inner(), nn.Linear(8, 1)

    def forward(self, x, y):
        out = self.inner(x)
        out += y  # in place, on the view
        return self.head(out)


def run(rank, world, port, queue):
    try:
        init(rank, world, port)
        from torch.distributed.fsdp import fully_shard

        warnings.simplefilter("ignore")
        torch.manual_seed(0)
        model = Outer()
        reference = copy.deepcopy(model)
        fully_shard(model.inner, reshard_after_forward=True)
        fully_shard(model)
        batches = [(torch.randn(4, 8, generator=torch.Generator().manual_seed(10 + r)),
                    torch.randn(4, 8, generator=torch.Generator().manual_seed(20 + r))) for r in range(world)]
        try:
            model(*batches[rank]).sum().backward()
        except RuntimeError as e:
            queue.put((rank, "bug", f"RuntimeError: {str(e).splitlines()[0][:120]}"))
            return
        for x, y in batches:
            (reference(x, y).sum() / world).backward()
        wrong = [name for (name, p), (_, q) in zip(model.named_parameters(), reference.named_parameters(), strict=True)
                 if p.grad is None or (p.grad.full_tensor() - q.grad).abs().max() > 1e-5]
        queue.put((rank, "bug" if wrong else "ok", f"gradients off: {', '.join(wrong)}" if wrong else ""))
        dist.destroy_process_group()
    except Exception as e:  # noqa: BLE001
        queue.put((rank, "error", f"{type(e).__name__}: {str(e).splitlines()[0][:160]}"))


def main():
    results = launch(run)
    if results is None:
        print("ERROR: a rank died or the world hung")
        return 2
    kinds = {kind for _, kind, _ in results}
    if "error" in kinds:
        print(f"ERROR: the scenario cannot run here: {next(d for _, k, d in results if k == 'error')}")
        return 2
    if "bug" in kinds:
        print(f"REPRODUCED: an in-place add on a view returned by a fully_shard module skips its backward "
              f"all-gather: {next(d for _, k, d in sorted(results) if k == 'bug')}")
        return 1
    print("NOT REPRODUCED: the gradients equal the unsharded model's after an in-place op on a returned view")
    return 0


if __name__ == "__main__":
    sys.exit(main())
