"""FS2-12: a fully_shard group with a frozen bf16 base beside trainable fp32
adapters fails its first forward.

At lazy init FSDPParamGroup._init_mp_dtypes asked every parameter of the
group, frozen or not, for one original dtype, and raised AssertionError
'FSDP expects uniform original parameter dtype' (pytorch/pytorch#154082,
fixed by #154103 in 2.8: frozen parameters are never reduced).
"""
import socket
import sys

import torch
import torch.distributed as dist
import torch.nn as nn

try:
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
except ImportError:
    try:
        from torch.distributed._composable.fsdp import MixedPrecisionPolicy, fully_shard
    except ImportError:
        print("n/a: this torch has no FSDP2 (fully_shard)")
        sys.exit(2)
from torch.distributed.device_mesh import init_device_mesh


class Adapted(nn.Module):
    def __init__(self):
        super().__init__()
        self.adapter = nn.Linear(6, 6)
        self.base = nn.Parameter(torch.randn(6, 6).to(torch.bfloat16), requires_grad=False)

    def forward(self, x):
        return self.adapter(x) + x @ self.base.t()


with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
try:
    model = Adapted()
    policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    fully_shard(model, mesh=init_device_mesh("cpu", (1,)), mp_policy=policy)
    try:
        model(torch.randn(3, 6)).float().sum().backward()
    except AssertionError as e:
        print(f"BUG: the group's lazy init asserts one dtype over its frozen parameters too: {e}")
        sys.exit(1)
    print("fixed: the frozen bf16 base beside fp32 adapters takes its step")
    sys.exit(0)
finally:
    dist.destroy_process_group()
