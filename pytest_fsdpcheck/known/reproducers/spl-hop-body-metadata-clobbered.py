"""DDPOptimizer overwrites a higher-order op's body's own metadata.

torch._dynamo.backends.distributed.DDPOptimizer.compile_fn splits the graph
with fx's split_module, which hoists a higher-order op's body (here
``wrap_body_0`` of ``torch.ops.higher_order.wrap``) into the split module.
Copying the captured graph's ``meta`` onto the split pieces must leave that
body's own ``meta`` alone (selective activation checkpointing keeps its
policy there, ``_checkpoint_context_fn``); 2.8 to 2.12 replaced it
(pytorch/pytorch#179496).
"""
import operator
import sys

import torch
import torch.fx as fx
import torch.nn as nn

try:
    import torch._higher_order_ops.wrap  # noqa: F401 - registers the op
    from torch._dynamo.backends.distributed import DDPOptimizer
except Exception as e:  # ImportError, or torch._dynamo unusable
    print(f"n/a: {type(e).__name__}: {e}")
    sys.exit(2)

body_graph = fx.Graph()
a = body_graph.placeholder("a")
body_graph.output((body_graph.call_function(torch.sin, (a,)),))
body = fx.GraphModule(nn.Module(), body_graph)
body.meta["_checkpoint_context_fn"] = "the body's own"

root = nn.Module()
root.lin1, root.lin2, root.wrap_body_0 = nn.Linear(4, 4), nn.Linear(4, 4), body
g = fx.Graph()
x = g.placeholder("x")
x._dynamo_source = None  # what Dynamo sets on every input (read by 2.8 on)
h = g.call_module("lin1", (x,))
wrapped = g.call_function(torch.ops.higher_order.wrap, (g.get_attr("wrap_body_0"), h))
g.output(g.call_module("lin2", (g.call_function(operator.getitem, (wrapped, 0)),)))
gm = fx.GraphModule(root, g)
gm.meta = {"dynamo_compile_id": "0/0"}
gm._param_name_to_source = {}  # as Dynamo leaves on a captured graph


def backend(submodule, example_inputs):
    return submodule.forward


try:
    split = DDPOptimizer(bucket_bytes_cap=1, backend_compile_fn=backend, first_bucket_cap=1).compile_fn(
        gm, [torch.randn(2, 4)])
except NotImplementedError as e:
    print(f"n/a: this DDPOptimizer rejects higher-order ops: {e}")
    sys.exit(2)
held = [m for name, m in split.named_modules() if name.rpartition(".")[2] == "wrap_body_0"]
if any(dict(m.meta) != {"_checkpoint_context_fn": "the body's own"} for m in held):
    print(f"BUG: the body's meta after the split: {[sorted(m.meta) for m in held]}")
    sys.exit(1)
print("fixed: the higher-order op's body keeps its own meta")
sys.exit(0)
