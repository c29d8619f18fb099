"""DDPOptimizer crashes splitting a graph that calls a submodule through its
forward, when the module's get_attr falls in an earlier bucket than its call.

Dynamo (torch 2.4, nn-module inlining off) captures ``self.b.forward(h)`` as
a ``get_attr`` of the module, with the module itself as its
``example_value``, and a ``call_method`` ``forward``. With a cap that gives
each linear a bucket of its own, the get_attr (no bytes) joins the bucket
before its call; torch.fx's split_module, which compile_fn hands the graph,
reads the free symbols of every value a partition passes on and raises
AssertionError on the module. Exit 1 = bug, 0 = fixed, 2 = not applicable.
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
h.meta["example_value"] = root.a(example)
lin.meta["example_value"] = root.b  # as Dynamo records a module it reads
x._dynamo_source = None
gm._param_name_to_source = {}
# 80 bytes (a 4x4 weight and a bias): each linear closes a bucket
opt = DDPOptimizer(bucket_bytes_cap=80, backend_compile_fn=lambda g, ex: g.forward, first_bucket_cap=80)
try:
    compiled = opt.compile_fn(gm, [example])
except AttributeError as e:  # torch < 2.4 reads requires_grad off the module first: spl-get-attr-module-raises
    print(f"n/a: compile_fn raised AttributeError before splitting: {(str(e).splitlines() or [''])[0]}")
    sys.exit(2)
except AssertionError as e:
    print(f"BUG: compile_fn raised AssertionError: {(str(e).splitlines() or [''])[0]}")
    sys.exit(1)
if len(opt.buckets) != 2 or not torch.allclose(compiled(example), root.b(root.a(example))):
    print(f"n/a: not the expected plan ({[[n.name for n in b.nodes] for b in opt.buckets]})")
    sys.exit(2)
print("fixed: two buckets, the module handed to the bucket that calls it")
