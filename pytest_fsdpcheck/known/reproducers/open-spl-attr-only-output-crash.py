"""Open finding (not yet modelled as a known bug): DDPOptimizer.compile_fn
crashes on a module-form graph where a bucket's only node used outside it is
a parameter's get_attr. Measured: bug on torch 2.4.1, fixed on 2.13.0 (the
README's history table gives the releases where the suite met it); exit
1 = bug, 0 = fixed, 2 = not applicable.

A bucket may close only where it has an output used outside it (SPL-5/6).
compile_fn counts a get_attr node read by a later bucket as such an output,
but split_module keeps get_attr nodes in the parent graph, so that bucket's
submodule returns nothing; fake-tensor propagation then deep-copies it and
fx asserts (`isinstance(output_vals, tuple)`). Here `p` is read by both
halves, and each half ends in an in-place op whose result is never used.
"""
import sys

import torch
import torch.fx as fx
import torch.nn as nn

try:
    from torch._dynamo.backends.distributed import DDPOptimizer
except Exception as e:  # noqa: BLE001
    print(f"n/a: {type(e).__name__}: {e}")
    sys.exit(2)


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(4, 4)
        self.b = nn.LayerNorm(4)
        self.p = nn.Parameter(torch.randn(4, 4))


root = Model()
g = fx.Graph()
x = g.placeholder("x")
h = g.call_module("a", (x,))
m = g.call_function(torch.mul, (h, 2))
p = g.get_attr("p")
g.call_method("add_", (m, g.call_function(torch.matmul, (h, g.call_method("t", (p,))))))
h2 = g.call_module("b", (m,))
m2 = g.call_function(torch.mul, (h2, 2))
g.call_method("add_", (m2, g.call_function(torch.matmul, (h2, g.call_method("t", (p,))))))
g.output(m2)
gm = fx.GraphModule(root, g)
example = torch.randn(1, 4)
for node in gm.graph.nodes:
    if node.op == "placeholder":
        node.meta["example_value"] = example
        node._dynamo_source = None
gm._param_name_to_source = {}
opt = DDPOptimizer(bucket_bytes_cap=1, backend_compile_fn=lambda g, ex: g.forward, first_bucket_cap=1)
try:
    opt.compile_fn(gm, [example])
except AssertionError as e:
    print(f"BUG: compile_fn raised AssertionError: {str(e).splitlines()[0]}")
    sys.exit(1)
print("fixed: the graph was split and compiled")
