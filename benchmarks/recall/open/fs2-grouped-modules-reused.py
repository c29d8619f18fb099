"""FSDP2: a module of a grouped fully_shard([a, b]) called once more after
the group's forward ended, in the same step, breaks the step.

Upstream: https://github.com/pytorch/pytorch/issues/183702 ("grouped
fully_shard(list) fails when a grouped module is reused later in the same
iteration", open; a comment of 2026-05-18 says it "still reproduces on
PyTorch 2.12.0a0", grouped mode failing with "RuntimeError: setStorage: ...
out of bounds for storage of size 0" where split mode passes). The suite's
catalog reads the fix as https://github.com/pytorch/pytorch/pull/180428, in
2.13.0 (known bug fs2-grouped-module-reused, 2.9 ... 2.12).

Area: FSDP2 fully_shard (a list of roots sharing one group; the group's
unshard, cast and reshard around forward and backward).

What should happen: fully_shard accepts a list of modules that share one
group; a module may run more than once in a step, and the step's gradients
equal the unsharded model's (as when the modules are sharded separately).

What happens (2.12): the reused module's second call runs outside the
group's forward hooks. With a bf16 mp_policy its input is left in fp32 and
the call raises "expected m1 and m2 to have the same dtype"; in fp32, after
a first forward with the group frozen, the reused module's gradient is off
and the other module's is missing.

The report's own model (an MTP head reusing the grouped final norm and
output head, its logits kept on the module) is only partly quoted in the
thread; a script following that description did not reproduce on 2.12.1
either, so this one uses the shape the suite's catalog measured for the
report (its reproducer fs2-grouped-module-reused): b computes with a's
weight too, so [a, b] must be one group, and a runs again after b.
Two gloo ranks on CPU, checked against the unsharded model.
Exit 1 and "REPRODUCED: ..." when the bug shows; exit 0 and "NOT REPRODUCED:
..." when both forms give the unsharded model's gradients (bf16: the step
runs); exit 2 and "ERROR: ..." when the scenario cannot be run here.
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


class Block(nn.Module):
    def __init__(self, generator):
        super().__init__()
        self.w = nn.Parameter(torch.randn(4, 4, generator=generator) / 2)

    def forward(self, x):
        for weight in self._parameters.values():
            x = torch.tanh(x @ weight)
        return x


class Root(nn.Module):
    def __init__(self):
        super().__init__()
        generator = torch.Generator().manual_seed(0)
        self.a, self.b = Block(generator), Block(generator)
        self.b.tied = self.a.w  # b computes with a's weight too: one group holds both
        self.mix = nn.Parameter(torch.randn(4, 4, generator=generator) / 2)

    def forward(self, x):
        y = x @ self.mix
        y = y + self.a(y)
        y = y + self.b(y)
        return y + self.a(y)  # a again, after the group [a, b] ended its forward


def step(world, form):
    """None where the step is right, else what is wrong."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    model = Root()
    plain = copy.deepcopy(model)
    x = torch.randn(2, 4, generator=torch.Generator().manual_seed(1))  # the same batch on every rank
    mesh = init_device_mesh("cpu", (world,))
    policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32) if form == "bf16" else None
    fully_shard([model.a, model.b], mesh=mesh, **({"mp_policy": policy} if policy else {}))
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
        return f"the step raised RuntimeError: {str(e).splitlines()[0][:100]}"
    if form == "bf16":
        return None  # the uncast input is this form's bug; its bf16 gradients are not compared
    plain(x).square().mean().backward()
    wrong = []
    for (name, p), (_, q) in zip(model.named_parameters(), plain.named_parameters(), strict=True):
        if p.grad is None:
            wrong.append(f"{name} has no gradient")
        elif (p.grad.full_tensor() - q.grad).abs().max() > 1e-5:
            wrong.append(f"{name}'s gradient is off")
    return "; ".join(wrong) or None


def run(rank, world, port, queue):
    try:
        init(rank, world, port)
        warnings.simplefilter("ignore")
        found = {form: step(world, form) for form in ("fp32", "bf16")}
        queue.put((rank, "bug" if any(found.values()) else "ok",
                   "; ".join(f"{form}: {what}" for form, what in found.items() if what)))
        dist.destroy_process_group()
    except Exception as e:  # noqa: BLE001 - e.g. a fully_shard that takes one module only
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
        print(f"REPRODUCED: a module of fully_shard([a, b]) called again after the group's forward breaks the "
              f"step: {bug}")
        return 1
    print("NOT REPRODUCED: a grouped module called again after its group's forward gets the unsharded gradients")
    return 0


if __name__ == "__main__":
    sys.exit(main())
