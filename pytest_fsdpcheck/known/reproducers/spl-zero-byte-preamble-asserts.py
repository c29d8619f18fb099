"""DDPOptimizer asserts where a trainable parameter of zero elements is read
in the graph's parameter-free preamble.

A bucket holding no bytes before the first one that does is fused into the
next, and a zero-element parameter weighs no bytes; but compile_fn also
lists that parameter in the preamble's bucket and then asserts that a
zero-byte bucket lists none ("Params should be empty if size is 0"), so the
split fails instead of fusing the preamble with its parameter. Exit 1 =
bug, 0 = fixed, 2 = not applicable.
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
        self.empty = nn.Parameter(torch.zeros(0))  # trainable, no elements, no bytes
        self.a = nn.Linear(4, 4)
        self.b = nn.Linear(4, 4)

    def forward(self, x):
        return self.b(self.a(x + self.empty.sum()))


gm = fx.symbolic_trace(Model())
example = torch.randn(2, 4)
for node in gm.graph.nodes:
    if node.op == "placeholder":
        node.meta["example_value"] = example
        node._dynamo_source = None
gm._param_name_to_source = {}
# a cap of 1 byte: each linear closes a bucket, leaving the read of `empty` a preamble of its own
opt = DDPOptimizer(bucket_bytes_cap=1, backend_compile_fn=lambda g, ex: g.forward, first_bucket_cap=1)
try:
    opt.compile_fn(gm, [example])
except AssertionError as e:
    print(f"BUG: compile_fn raised AssertionError: {(str(e).splitlines() or [''])[0]}")
    sys.exit(1)
holder = [b for b in opt.buckets if any(n.name == "empty" for n in b.nodes)]
if len(opt.buckets) != 2 or not holder or not holder[0].size:
    print(f"n/a: not the expected plan ({[[n.name for n in b.nodes] for b in opt.buckets]})")
    sys.exit(2)
print("fixed: the preamble reading the zero-element parameter is fused into the bucket after it")
