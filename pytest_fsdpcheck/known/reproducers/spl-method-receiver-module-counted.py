"""DDPOptimizer.compile_fn counts a module's parameters at a later method call.

A parameter counts in the bucket of the last node that reads it. In the
module-form graph of `self.lin(x).mul(2)`, only the call_module node reads the
Linear's parameters, but compile_fn (torch >= 2.4) takes the `mul` node's
receiver target ("lin") as a submodule and counts the Linear there. From 2.5
Dynamo hands it Dynamo-form graphs by default; module-form graphs still reach
this code from a direct caller or with inline_inbuilt_nn_modules=False, so the
graph below carries what Dynamo puts on one.
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
class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.pre = nn.Linear(4, 2)  # a size of its own, so a misplaced count shows
        self.lin = nn.Linear(2, 4)
        self.out = nn.Linear(4, 4)

    def forward(self, x):
        # `pre` keeps the bucket of `lin` from being the parameter-free first one that is fused
        h = self.lin(self.pre(x)).mul(2)
        return self.out(torch.relu(h))


gm = fx.symbolic_trace(Model())
example = torch.randn(2, 4)
for node in gm.graph.nodes:
    if node.op == "placeholder":
        node.meta["example_value"] = example
        node._dynamo_source = None
gm._param_name_to_source = {}
lin_bytes = sum(p.untyped_storage().nbytes() for p in gm.lin.parameters())
# a cap of 1 byte: every parameter-holding node closes a bucket
opt = DDPOptimizer(bucket_bytes_cap=1, backend_compile_fn=lambda g, ex: g.forward, first_bucket_cap=1)
opt.compile_fn(gm, [example])
holder = [b for b in opt.buckets if any(n.name == "lin" for n in b.nodes)]
got = holder[0].size if holder else None
if got != lin_bytes:
    where = [[n.name for n in b.nodes] for b in opt.buckets if b.size]
    print(f"BUG: the bucket of the `lin` call holds {got} bytes, expected {lin_bytes}; buckets with bytes: {where}")
    sys.exit(1)
print(f"fixed: the Linear's {lin_bytes} bytes are counted where it is called")
