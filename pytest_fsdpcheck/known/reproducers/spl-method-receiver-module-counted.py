"""DDPOptimizer.compile_fn counts a module's parameters at a later method call.

A parameter counts in the bucket of the last node that reads it. In the
module-form graph of `self.lin(x).mul(2)`, only the call_module node reads the
Linear's parameters, but compile_fn (torch >= 2.4) takes the `mul` node's
receiver target ("lin") as a submodule and counts the Linear there.
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
if hasattr(DDPOptimizer, "add_param_args"):
    # torch >= 2.5: Dynamo lifts parameters, so the graphs it hands DDPOptimizer
    # have no call_module nodes and this code path is not reached from torch.compile
    print("n/a: this DDPOptimizer is handed Dynamo-form graphs; the module-form path is not reached")
    sys.exit(2)


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.out = nn.Linear(4, 4)

    def forward(self, x):
        h = self.lin(x).mul(2)
        return self.out(torch.relu(h))


gm = fx.symbolic_trace(Model())
lin_bytes = sum(p.untyped_storage().nbytes() for p in gm.lin.parameters())
# a cap of 1 byte: every parameter-holding node closes a bucket
opt = DDPOptimizer(bucket_bytes_cap=1, backend_compile_fn=lambda g, ex: g.forward, first_bucket_cap=1)
opt.compile_fn(gm, [torch.randn(2, 4)])
holder = [b for b in opt.buckets if any(n.name == "lin" for n in b.nodes)]
got = holder[0].size if holder else None
if got != lin_bytes:
    where = [[n.name for n in b.nodes] for b in opt.buckets if b.size]
    print(f"BUG: the bucket of the `lin` call holds {got} bytes, expected {lin_bytes}; buckets with bytes: {where}")
    sys.exit(1)
print(f"fixed: the Linear's {lin_bytes} bytes are counted where it is called")
