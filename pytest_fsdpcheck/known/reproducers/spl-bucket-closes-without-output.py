"""DDPOptimizer.compile_fn closes a bucket that has no output.

A bucket becomes one compiled submodule: it must have an output used outside
it, so a full bucket is extended until one of its nodes is used later. torch
2.0 starts a new bucket as soon as the current one is full; here the last
bucket then holds only an in-place add whose result nothing reads.
"""
import sys

import torch
import torch.fx as fx
import torch.nn as nn

try:
    from torch._dynamo.backends.distributed import DDPOptimizer
except Exception as e:  # noqa: BLE001 - ImportError, or Dynamo unusable
    print(f"n/a: {type(e).__name__}: {e}")
    sys.exit(2)


class InPlaceTail(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.w = nn.Parameter(torch.randn(4))

    def forward(self, x):
        h = self.lin(x)
        y = h * 2
        h.add_(self.w)  # the graph's last op: its result is not used again
        return y


gm = fx.symbolic_trace(InPlaceTail())
opt = DDPOptimizer(bucket_bytes_cap=1, backend_compile_fn=lambda g, ex: g.forward, first_bucket_cap=1)
try:
    opt.compile_fn(gm, [torch.randn(2, 4)])
except Exception as e:  # noqa: BLE001 - splitting an output-less bucket can fail outright
    print(f"BUG: compile_fn failed on a bucket without an output: {type(e).__name__}: {e}")
    sys.exit(1)
for i, bucket in enumerate(opt.buckets):
    names = {n.name for n in bucket.nodes}
    if not any(u.op == "output" or u.name not in names for n in bucket.nodes for u in n.users):
        print(f"BUG: bucket {i} ({sorted(names)}) has no output used outside it")
        sys.exit(1)
print(f"fixed: every one of {len(opt.buckets)} buckets has an external output")
