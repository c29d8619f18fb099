"""Compiled DDP: DDPOptimizer's split graph hands a Python float to the
bucket compiler as a partition output and AOTAutograd crashes.

Upstream: https://github.com/pytorch/pytorch/issues/196227 (open, opened
2026-09-07: "torch.compile with DDP - FakifiedOutWrapper crashes on float
partition outputs from recompiled stochastic-depth blocks"); proposed fix
https://github.com/pytorch/pytorch/pull/197420 (open).

Area: DDPOptimizer graph splitting (torch/_dynamo/backends/distributed.py).

What should happen: torch.compile of a DistributedDataParallel model
computes what eager DDP computes; DDPOptimizer only adds graph breaks at
bucket boundaries (the same program compiles with
torch._dynamo.config.optimize_ddp=False, which this script checks as a
control).

What happens: a stochastic-depth block whose drop probability is a module
attribute (a float; the second, recompiled block has p=0.1, so Dynamo turns
the float into a symbolic input) is split into buckets; the float computed
in one bucket and used in the next becomes a partition output, and the
bucket's compile raises AttributeError: 'float' object has no attribute
'meta'.

The upstream report uses torchvision's StochasticDepth; this script inlines
the same computation (torch only). One process, a gloo group of world size
1, backend aot_eager (no C++ compiler needed), bucket_cap_mb=1.

Exit 1 and "REPRODUCED: ..." when the split compile fails; exit 0 and
"NOT REPRODUCED: ..." when it runs and matches eager; exit 2 and "ERROR:
..." when the scenario cannot be run here (the control fails too).
"""
import os
import sys
import tempfile

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP


def stochastic_depth(x, p, training):
    if not training or p == 0.0:
        return x
    survival = 1.0 - p
    noise = torch.empty([x.shape[0]] + [1] * (x.ndim - 1), dtype=x.dtype).bernoulli_(survival)
    if survival > 0.0:
        noise.div_(survival)
    return x * noise


class DropPath(nn.Module):
    def __init__(self, p):
        super().__init__()
        self.p = p

    def forward(self, x):
        return stochastic_depth(x, self.p, self.training)


class Block(nn.Module):
    def __init__(self, p):
        super().__init__()
        self.fc1, self.fc2, self.drop_path = nn.Linear(512, 512), nn.Linear(512, 512), DropPath(p)

    def forward(self, x):
        x = x + self.drop_path(self.fc1(x))
        return x + self.drop_path(self.fc2(x))


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList([Block(0.0), Block(0.1)])

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
            torch._dynamo.graph_break()
        return x


def step(optimize_ddp):
    torch._dynamo.reset()
    torch._dynamo.config.optimize_ddp = optimize_ddp
    torch.manual_seed(0)
    model = DDP(Model(), bucket_cap_mb=1)
    compiled = torch.compile(model, backend="aot_eager")
    torch.manual_seed(1)
    out = compiled(torch.randn(4, 512))
    out.sum().backward()
    return out


def main():
    store = tempfile.NamedTemporaryFile(delete=False)
    dist.init_process_group("gloo", init_method=f"file://{store.name}", rank=0, world_size=1)
    try:
        try:
            step(optimize_ddp=False)
        except Exception as e:  # noqa: BLE001
            print(f"ERROR: the control (optimize_ddp=False) fails too: {type(e).__name__}: {str(e).splitlines()[0][:160]}")
            return 2
        try:
            step(optimize_ddp=True)
        except Exception as e:  # noqa: BLE001
            first = next((line for line in str(e).splitlines() if "Error" in line), str(e).splitlines()[0])
            print(f"REPRODUCED: torch.compile of DDP with DDPOptimizer fails on a float partition output "
                  f"({type(e).__name__}: {first.strip()[:140]}); the same model compiles with optimize_ddp=False")
            return 1
        print("NOT REPRODUCED: the split compile of the stochastic-depth model runs, as with optimize_ddp=False")
        return 0
    finally:
        dist.destroy_process_group()
        os.unlink(store.name)


if __name__ == "__main__":
    sys.exit(main())
