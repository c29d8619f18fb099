"""DDPOptimizer closes a bucket at a node whose only use outside it is a
parameter's get_attr, taking that read for the bucket's output. But
split_module keeps get_attr nodes in the parent graph, so the bucket's
submodule has no output at all: torch 2.1-2.5 assert in Graph.__deepcopy__
when DDPOptimizer copies the submodule to fake tensors, and later releases
return a split graph with an output-less submodule (DDPOptimizer extends
buckets precisely so that every submodule has an output). torch 2.0 closes
a full bucket without looking for an output at all, a different bug. Exit
1 = bug, 0 = fixed, 2 = not applicable.

Here `p` is read by both halves, and each half ends in an in-place op whose
result is never used: the later bucket's only outward node is `p`'s get_attr.
"""
import sys

import torch
import torch.fx as fx
import torch.nn as nn

if tuple(int(v) for v in torch.__version__.split(".")[:2]) < (2, 1):
    print("n/a: torch 2.0's DDPOptimizer never looks for a bucket's output")
    sys.exit(2)
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
    split = opt.compile_fn(gm, [example])
except (AssertionError, IndexError) as e:
    print(f"BUG: compile_fn raised {type(e).__name__}: {(str(e).splitlines() or [''])[0]}")
    sys.exit(1)
calls = [n for n in split.graph.nodes if n.op == "call_module"]
silent = [n.target for n in calls if not n.users]
if len(calls) < 2:
    print(f"n/a: the graph was not split ({len(calls)} submodule)")
    sys.exit(2)
if silent:
    print(f"BUG: submodule(s) {silent} of the split graph have no output")
    sys.exit(1)
print("fixed: every submodule of the split graph has an output")
