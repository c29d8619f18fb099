"""FSDP2 (fully_shard) given a list of modules, one of which is called once
more after the group's forward ended in the same step (pytorch/pytorch#183702's
shape: a grouped module reused later in the iteration). Two forms, each
against the unsharded model:

- fp32: after a forward in which the group had no trainable parameter (a
  first forward with it frozen), the step's gradients are wrong: the reused
  module's off, the other module's missing;
- a group with a bf16 mp_policy: the reused module's second call computes on
  an input left in fp32 and raises "expected m1 and m2 to have the same dtype".

Exit 1 = bug, 0 = fixed, 2 = not applicable (no FSDP2, no list of modules
for fully_shard, or it cannot run a CPU step on this release)."""
import copy
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


class Block(torch.nn.Module):
    def __init__(self, generator):
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(4, 4, generator=generator) / 2)

    def forward(self, x):
        for weight in self._parameters.values():
            x = torch.tanh(x @ weight)
        return x


class Root(torch.nn.Module):
    def __init__(self):
        super().__init__()
        generator = torch.Generator().manual_seed(0)
        self.a, self.b = Block(generator), Block(generator)
        self.b.tied = self.a.w  # b computes with a's weight too: one group holds both
        self.mix = torch.nn.Parameter(torch.randn(4, 4, generator=generator) / 2)

    def forward(self, x):
        y = x @ self.mix
        y = y + self.a(y)
        y = y + self.b(y)
        return y + self.a(y)  # a again, after the group [a, b] ended its forward


def step(rank, world, form):
    """``None`` where the step's gradients are the unsharded model's, else what is wrong."""
    from torch.distributed.device_mesh import init_device_mesh

    fully_shard, MixedPrecisionPolicy = fsdp2()
    model = Root()
    plain = copy.deepcopy(model)
    x = torch.randn(2, 4, generator=torch.Generator().manual_seed(1))
    mesh = init_device_mesh("cpu", (world,))
    if form == "bf16":
        policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
        fully_shard([model.a, model.b], mesh=mesh, mp_policy=policy)
    else:
        fully_shard([model.a, model.b], mesh=mesh)
    fully_shard(model, mesh=mesh)
    if form == "fp32":  # a first forward with the group frozen (FSDP2's lazy init runs here)
        group = [*model.a.parameters(), *model.b.parameters()]
        for p in group:
            p.requires_grad_(False)
        model(x)
        for p in group:
            p.requires_grad_(True)
    try:
        model(x).float().square().mean().backward()
    except RuntimeError as e:
        return f"the step raised RuntimeError: {(str(e).splitlines() or [''])[0][:160]}"
    if form == "bf16":
        return None  # the uncast input is this form's bug; bf16 gradients are another check's
    plain(x).square().mean().backward()
    wrong = []
    for (name, p), (_, q) in zip(model.named_parameters(), plain.named_parameters(), strict=True):
        grad = None if p.grad is None else p.grad.full_tensor()
        if grad is None:
            wrong.append(f"{name} has no gradient")
        elif not torch.allclose(grad, q.grad, atol=1e-5):
            wrong.append(f"{name}'s gradient is off by {(grad - q.grad).abs().max().item():.3g}")
    return "; ".join(wrong) or None


def run(rank, world, port, out):
    try:
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        dist.init_process_group("gloo", rank=rank, world_size=world)
        found = {form: step(rank, world, form) for form in ("fp32", "bf16")}
        if rank == 0:
            out.put(("compared", found))
        dist.destroy_process_group()
    except TypeError as e:  # a release whose fully_shard takes one module only
        out.put(("error", f"TypeError: {(str(e).splitlines() or [''])[0]}"))
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
        print(f"n/a: fully_shard cannot run this step here: {value}")
        sys.exit(2)
    shown = {form: what for form, what in value.items() if what}
    if shown:
        print("BUG: a module of fully_shard([a, b]) called again after the group's forward: "
              + "; ".join(f"{form}: {what}" for form, what in shown.items()))
        sys.exit(1)
    print("fixed: a grouped module called again after its group's forward gets the unsharded gradients")
