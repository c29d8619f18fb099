"""DDPOptimizer.compile_fn counts a module called twice twice.

torch._dynamo.backends.distributed.DDPOptimizer sizes its buckets like DDP
does: each parameter should count once. In a module-form graph (what Dynamo
hands DDPOptimizer before torch 2.5) where one Linear is called twice, torch
before 2.4 adds the Linear's bytes at both call_module nodes.
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


class CalledTwice(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        return self.lin(torch.relu(self.lin(x)))


model = CalledTwice()
gm = fx.symbolic_trace(model)
expected = sum(p.untyped_storage().nbytes() for p in model.parameters())
opt = DDPOptimizer(bucket_bytes_cap=10**9, backend_compile_fn=lambda g, ex: g.forward, first_bucket_cap=10**9)
opt.compile_fn(gm, [torch.randn(2, 4)])
got = sum(b.size for b in opt.buckets)
if got != expected:
    print(f"BUG: bucket sizes add up to {got} bytes, expected {expected} (the Linear counted per call)")
    sys.exit(1)
print(f"fixed: the Linear called twice is counted once ({got} bytes)")
