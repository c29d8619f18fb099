"""FSDP2 (fully_shard) latches a group's mixed-precision dtypes at its first
forward: a group whose parameters all had requires_grad=False when that
forward ran (FSDP2's lazy init) keeps no original/reduce dtype, so after the
parameters are unfrozen the first backward cannot hand the bf16 gradient
back in fp32 (torch 2.13 raises "attempting to assign a gradient with dtype
'c10::BFloat16' to a tensor with grad_dtype 'Float'"), or, where nothing
checks the dtype, reduces it in bf16 (pytorch/pytorch#186998).
Exit 1 = bug, 0 = fixed, 2 = not applicable (no FSDP2 or MixedPrecisionPolicy,
or it cannot run a CPU step on this release)."""
import os
import socket
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def fsdp2():
    try:
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
    except ImportError:
        from torch.distributed._composable.fsdp import MixedPrecisionPolicy, fully_shard
    return fully_shard, MixedPrecisionPolicy


class Two(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = torch.nn.Linear(4, 4), torch.nn.Linear(4, 4)

    def forward(self, x):
        return self.b(self.a(x).float())  # a computes in bf16 under its policy, b in fp32


def run(rank, world, port, out):
    try:
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        dist.init_process_group("gloo", rank=rank, world_size=world)
        from torch.distributed.device_mesh import init_device_mesh

        fully_shard, MixedPrecisionPolicy = fsdp2()
        torch.manual_seed(0)
        model = Two()
        reference = Two()
        reference.load_state_dict(model.state_dict())
        mesh = init_device_mesh("cpu", (world,))
        policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
        fully_shard(model.a, mesh=mesh, mp_policy=policy)
        fully_shard(model, mesh=mesh)
        batches = [torch.randn(2, 4, generator=torch.Generator().manual_seed(10 + r)) for r in range(world)]
        x = batches[rank]
        model.a.requires_grad_(False)
        model(x)  # the first forward: lazy init sees model.a's group with no trainable parameter
        model.a.requires_grad_(True)
        try:
            model(x).float().square().mean().backward()
        except RuntimeError as e:
            out.put(("bug", f"RuntimeError: {(str(e).splitlines() or [''])[0][:160]}"))
            return
        got = model.a.weight.grad.full_tensor()
        # the same step unsharded: model.a computing in bf16 on each rank's batch,
        # its gradients averaged over the ranks in fp32 (the policy's reduce_dtype)
        want = torch.zeros(4, 4)
        for batch in batches:
            low = torch.nn.Linear(4, 4).to(torch.bfloat16)
            low.load_state_dict({k: v.to(torch.bfloat16) for k, v in reference.a.state_dict().items()})
            reference.b(low(batch.to(torch.bfloat16)).float()).float().square().mean().backward()
            want += low.weight.grad.float() / world
        if rank == 0:
            out.put(("compared", (got.dtype == torch.float32, (got - want).abs().max().item())))
        dist.destroy_process_group()
    except Exception as e:  # noqa: BLE001
        out.put(("error", f"{type(e).__name__}: {(str(e).splitlines() or [''])[0]}"))


if __name__ == "__main__":
    if not dist.is_available() or not dist.is_gloo_available():
        print("n/a: no gloo")
        sys.exit(2)
    try:
        fsdp2()
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
    if kind == "bug":
        print(f"BUG: the first backward after unfreezing a group frozen at its first forward raised {value}")
        sys.exit(1)
    fp32, diff = value
    if not fp32 or diff > 1e-5:
        print(f"BUG: the gradient after unfreezing is {'not fp32' if not fp32 else f'off by {diff:.3g}'}: "
              "reduced in the latched dtype")
        sys.exit(1)
    print("fixed: a group frozen at its first forward reduces in its reduce_dtype once unfrozen")
