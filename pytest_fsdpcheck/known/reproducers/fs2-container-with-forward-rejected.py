"""FS2-7: fully_shard refuses a container that has a forward of its own.

A ``nn.ModuleList`` subclass that defines ``forward`` (a model's stage that
runs its layers in turn) is a module like any other; torch 2.12 on shard it.
torch 2.3 to 2.11 check only ``isinstance(module, (ModuleList, ModuleDict))``
and raise "fully_shard does not support containers that do not implement
forward" for it too (pytorch/pytorch#167856, fixed by #168905).
"""
import os
import socket
import sys

import torch.distributed as dist
import torch.nn as nn

try:
    from torch.distributed.fsdp import fully_shard
except ImportError:
    try:
        from torch.distributed._composable.fsdp import fully_shard
    except ImportError:
        print("n/a: this torch has no FSDP2 (fully_shard)")
        sys.exit(2)
from torch.distributed.device_mesh import init_device_mesh


class Stage(nn.ModuleList):
    def forward(self, x):
        for layer in self:
            x = layer(x)
        return x


with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
try:
    stage = Stage([nn.Linear(4, 4), nn.Linear(4, 4)])
    try:
        fully_shard(stage, mesh=init_device_mesh("cpu", (1,)))
    except ValueError as e:
        print(f"BUG: a ModuleList with its own forward is refused: {str(e).splitlines()[0]}")
        sys.exit(1)
    print("fixed: the container with a forward of its own is sharded like any module")
    sys.exit(0)
finally:
    dist.destroy_process_group()
