"""FS2-14: an in-place op on a view a fully_shard module returned drops the
module's pre-backward hook, so its backward never all-gathers the
parameters it resharded after forward.

A residual block returning a view of its result (here
``unsqueeze(0).squeeze(0)``), its caller adding into it in place (``out +=
skip``): autograd rebases the view's history on the add, and the hook
FSDP2 registered on the module's output never runs. The block's backward
then reads the freed unsharded parameters: "setStorage: ... out of bounds
for storage of size 0". pytorch/pytorch#181832 (closed by #181850, which
only warns; the fix is left to a follow-up).
"""
import socket
import sys
import warnings

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


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin0, self.lin1 = nn.Linear(8, 8), nn.Linear(8, 8)

    def forward(self, x):
        return self.lin1(torch.relu(self.lin0(x))).unsqueeze(0).squeeze(0)


class Residual(nn.Module):
    def __init__(self):
        super().__init__()
        self.block, self.head = Block(), nn.Linear(8, 2)

    def forward(self, x, skip):
        out = self.block(x)
        out += skip
        return self.head(out)


warnings.simplefilter("ignore")  # 2.13's own warning about the returned view
with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
try:
    torch.manual_seed(0)
    model = Residual()
    mesh = init_device_mesh("cpu", (1,))
    fully_shard(model.block, mesh=mesh, reshard_after_forward=True)
    fully_shard(model, mesh=mesh)
    x, skip = torch.randn(4, 8), torch.randn(4, 8)
    try:
        model(x, skip).square().mean().backward()
    except RuntimeError as e:
        print(f"BUG: the block's backward ran without its all-gather: {str(e).splitlines()[0]}")
        sys.exit(1)
    print("fixed: the in-place add into the returned view keeps the block's pre-backward all-gather")
    sys.exit(0)
finally:
    dist.destroy_process_group()
