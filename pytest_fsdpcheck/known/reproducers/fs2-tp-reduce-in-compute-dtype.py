"""FS2-15: on a 2-D (dp, tp) mesh, fully_shard with
MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32) sums a
tensor-parallel replicated parameter's gradient over tp (its Partial ->
Replicate redistribution) in the bf16 compute dtype, before its own fp32
reduction over dp.

pytorch/pytorch#190626 (open), fix pytorch/pytorch#190627 (open).
A norm's weight as SequenceParallel leaves it (Replicate over tp, its input
Shard on the sequence): the two tp ranks' partial gradients are 1 and 2**-9,
both exact in bf16; summed in fp32 that is 1.001953125, in bf16 it rounds
to 1.0. Two gloo ranks on CPU, mesh (dp=1, tp=2). BUG (exit 1): the bf16
sum; fixed (exit 0): the fp32 sum; n/a (exit 2): this torch cannot run it.
"""
import os
import socket
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn


class Scale(nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(4))

    def forward(self, x):
        return x * self.weight


def rank_main(rank, port, queue):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=2)
    try:
        try:
            from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
        except ImportError:
            from torch.distributed._composable.fsdp import MixedPrecisionPolicy, fully_shard
        try:
            from torch.distributed.tensor import DTensor, Replicate, Shard, distribute_tensor
        except ImportError:
            from torch.distributed._tensor import DTensor, Replicate, Shard, distribute_tensor
        from torch.distributed.device_mesh import init_device_mesh
    except ImportError as e:
        queue.put((rank, "n/a", f"this torch has no FSDP2 with DTensor: {e}"))
        return
    try:
        mesh = init_device_mesh("cpu", (1, 2), mesh_dim_names=("dp", "tp"))
        model = Scale()
        model.weight = nn.Parameter(distribute_tensor(model.weight.data, mesh["tp"], [Replicate()]))
        fully_shard(model, mesh=mesh["dp"],
                    mp_policy=MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32))
        local = torch.full((1, 1, 4), 1.0 if rank == 0 else 2.0 ** -9)
        x = DTensor.from_local(local, mesh["tp"], [Shard(1)], run_check=False)
        model(x).to_local().float().sum().backward()
        queue.put((rank, "ok", model.weight.grad.full_tensor().tolist()))
    except Exception as e:  # noqa: BLE001 - 2.3 ... 2.6 take no CPU step
        queue.put((rank, "n/a", f"{type(e).__name__}: {str(e).splitlines()[0][:160]}"))
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    procs = [ctx.Process(target=rank_main, args=(rank, port, queue)) for rank in range(2)]
    for p in procs:
        p.start()
    results = sorted(queue.get(timeout=180) for _ in procs)
    for p in procs:
        p.join(timeout=30)
    failed = [detail for _, kind, detail in results if kind != "ok"]
    if failed:
        print(f"n/a: the step cannot run on this torch: {failed[0]}")
        sys.exit(2)
    grads = [v for _, _, grad in results for v in grad]
    if all(v == 1.0 for v in grads):
        print("BUG: with reduce_dtype=fp32 the tp sum of a replicated parameter's gradient ran in bf16: "
              "1 + 2**-9 came out 1.0")
        sys.exit(1)
    if all(abs(v - (1.0 + 2.0 ** -9)) < 1e-7 for v in grads):
        print("fixed: the tp sum of a replicated parameter's gradient ran in reduce_dtype (fp32): 1.001953125")
        sys.exit(0)
    print(f"n/a: unexpected gradient {grads}")
    sys.exit(2)
