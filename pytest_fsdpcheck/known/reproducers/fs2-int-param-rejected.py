"""FS2-12: fully_shard cannot shard a module holding an integer parameter.

An index kept as a frozen nn.Parameter (requires_grad=False) is a state
like any other. Until 2.12 FSDPParam wrapped its sharded DTensor in
nn.Parameter with the default requires_grad=True before setting the
original flag, and raised 'Only Tensors of floating point and complex dtype
can require gradients'.
"""
import socket
import sys

import torch
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


class Indexed(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(6, 260)
        self.idx = nn.Parameter(torch.tensor([1, 257, 3]), requires_grad=False)

    def forward(self, x):
        return self.lin(x)[..., self.idx]


with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
try:
    model = Indexed()
    try:
        fully_shard(model, mesh=init_device_mesh("cpu", (1,)))
    except RuntimeError as e:
        print(f"BUG: fully_shard refuses the frozen integer parameter: {e}")
        sys.exit(1)
    print("fixed: the frozen integer parameter is sharded like any state")
    sys.exit(0)
finally:
    dist.destroy_process_group()
