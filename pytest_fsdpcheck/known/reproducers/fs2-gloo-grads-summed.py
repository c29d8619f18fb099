"""FSDP2 (fully_shard) on gloo sums the gradients of sharded parameters over
ranks instead of averaging them: after one step on two ranks, each sharded
gradient is twice the gradient of the mean loss over both ranks' batches.
Exit 1 = bug, 0 = fixed, 2 = not applicable (no FSDP2, or it cannot run a
CPU step on this release)."""
import os
import socket
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def fully_shard_fn():
    try:
        from torch.distributed.fsdp import fully_shard
    except ImportError:
        from torch.distributed._composable.fsdp import fully_shard
    return fully_shard


def run(rank, world, port, out):
    try:
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        dist.init_process_group("gloo", rank=rank, world_size=world)
        from torch.distributed.device_mesh import init_device_mesh

        torch.manual_seed(0)
        model = torch.nn.Linear(4, 4, bias=False)
        reference = torch.nn.Linear(4, 4, bias=False)
        reference.load_state_dict(model.state_dict())
        batches = [torch.randn(2, 4, generator=torch.Generator().manual_seed(10 + r)) for r in range(world)]
        fully_shard_fn()(model, mesh=init_device_mesh("cpu", (world,)))
        model(batches[rank]).square().mean().backward()
        got = model.weight.grad.full_tensor()
        (sum(reference(x).square().mean() for x in batches) / world).backward()
        if rank == 0:
            out.put(("ratio", (got / reference.weight.grad).flatten()[:4].tolist()))
        dist.destroy_process_group()
    except Exception as e:  # noqa: BLE001
        out.put(("error", f"{type(e).__name__}: {(str(e).splitlines() or [''])[0]}"))


if __name__ == "__main__":
    if not dist.is_available() or not dist.is_gloo_available():
        print("n/a: no gloo")
        sys.exit(2)
    try:
        fully_shard_fn()
    except ImportError as e:
        print(f"n/a: {e}")
        sys.exit(2)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    procs = [ctx.Process(target=run, args=(r, 2, port, out)) for r in range(2)]
    for p in procs:
        p.start()
    kind, value = out.get(timeout=300)
    for p in procs:
        p.join(timeout=60)
        if p.is_alive():
            p.kill()
    if kind == "error":
        print(f"n/a: fully_shard cannot run a CPU step here: {value}")
        sys.exit(2)
    if any(abs(r - 1) > 1e-4 for r in value):
        print(f"BUG: sharded gradient / expected averaged gradient = {value}")
        sys.exit(1)
    print("fixed: sharded gradients are averaged over ranks")
