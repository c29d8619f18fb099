"""DDPOptimizer raises on a graph that calls a submodule through its forward.

Dynamo captures ``self.lin.forward(x)`` (nn-module inlining off) as a
``get_attr`` of the module and a ``call_method`` ``forward``. Before torch
2.4, compile_fn reads ``requires_grad`` off every get_attr target, so the
module raises AttributeError, with one bucket as with several (fixed by
pytorch/pytorch#121771, which counts the module's parameters at the call).
Exit 1 = bug, 0 = fixed, 2 = not applicable.
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

root = nn.Module()
root.a = nn.Linear(4, 4)
root.b = nn.Linear(4, 4)
graph = fx.Graph()
x = graph.placeholder("x")
h = graph.call_module("a", (x,))
lin = graph.get_attr("b")
graph.output(graph.call_method("forward", (lin, h)))
gm = fx.GraphModule(root, graph)
example = torch.randn(2, 4)
x.meta["example_value"] = example
x._dynamo_source = None
gm._param_name_to_source = {}
opt = DDPOptimizer(bucket_bytes_cap=10**9, backend_compile_fn=lambda g, ex: g.forward, first_bucket_cap=10**9)
try:
    compiled = opt.compile_fn(gm, [example])
except AttributeError as e:
    print(f"BUG: compile_fn raised AttributeError: {(str(e).splitlines() or [''])[0]}")
    sys.exit(1)
sizes = [b.size for b in opt.buckets]
if sizes != [160] or not torch.allclose(compiled(example), root.b(root.a(example))):
    print(f"n/a: not the expected plan (bucket sizes {sizes}, 160 bytes of two linears expected)")
    sys.exit(2)
print("fixed: one bucket of 160 bytes, the called module's parameters counted at its call")
