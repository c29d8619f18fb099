"""SPL-16: torch.compile of a DistributedDataParallel model whose residual
branches are scaled by a float module attribute fails in DDPOptimizer's
split: a symbolic float computed in one bucket and used in the next becomes
a partition output, and the bucket's compile raises AttributeError: 'float'
object has no attribute 'meta'.

Each block has its own drop probability (stochastic depth rising with depth,
here at its expectation, without noise), so Dynamo compiles the block's
frame again for the second block and takes the float as a symbolic input; a
graph break between blocks gives one graph per block, each split into
buckets. The same program compiles with optimize_ddp=False (checked as a
control). pytorch/pytorch#196227 (open), fix proposed in
pytorch/pytorch#197420 (open).

One process, a gloo group of world size 1, AOTAutograd running the traced
graphs (no C++ compiler needed), 1 MiB buckets.
"""
import contextlib
import os
import sys
import tempfile
import warnings

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP


class Block(nn.Module):
    def __init__(self, p):
        super().__init__()
        self.fc1, self.fc2, self.p = nn.Linear(512, 512), nn.Linear(512, 512), p

    def scale(self, x):
        return x if not self.training or self.p == 0.0 else x * (1.0 - self.p)

    def forward(self, x):
        x = x + self.scale(self.fc1(x))
        return x + self.scale(self.fc2(x))


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList([Block(0.0), Block(0.1), Block(0.2)])

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
            torch._dynamo.graph_break()
        return x


def step(optimize_ddp):
    from functorch.compile import make_boxed_func
    from torch._dynamo.backends.common import aot_autograd

    def run_traced(gm, _example_inputs):
        return make_boxed_func(gm.forward)

    torch._dynamo.reset()
    torch.manual_seed(0)
    model = DDP(Model(), bucket_cap_mb=1)
    backend = aot_autograd(fw_compiler=run_traced, bw_compiler=run_traced)
    with torch._dynamo.config.patch(optimize_ddp=optimize_ddp):
        torch.compile(model, backend=backend)(torch.randn(4, 512)).sum().backward()


warnings.simplefilter("ignore")
store = tempfile.NamedTemporaryFile(delete=False)
dist.init_process_group("gloo", init_method=f"file://{store.name}", rank=0, world_size=1)
try:
    try:
        step(optimize_ddp=False)
    except Exception as e:  # noqa: BLE001 - e.g. torch.compile unsupported on this Python
        print(f"n/a: the control (optimize_ddp=False) cannot run here: {type(e).__name__}: {str(e).splitlines()[0][:160]}")
        sys.exit(2)
    try:
        step(optimize_ddp=True)
    except Exception as e:  # noqa: BLE001
        inner = e.__cause__ or getattr(e, "inner_exception", None) or e
        print(f"BUG: DDPOptimizer's split fails on a float crossing buckets: {type(inner).__name__}: "
              f"{str(inner).splitlines()[0][:160]} (the same program compiles with optimize_ddp=False)")
        sys.exit(1)
    print("fixed: the split compile of the float-scaled blocks runs, as with optimize_ddp=False")
finally:
    dist.destroy_process_group()
    with contextlib.suppress(FileNotFoundError):  # some releases' FileStore removes it
        os.unlink(store.name)
