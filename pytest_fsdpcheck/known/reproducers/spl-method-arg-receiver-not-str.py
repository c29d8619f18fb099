"""DDPOptimizer.compile_fn skips parameter args of a call_method on a computed tensor.

torch._dynamo.backends.distributed.DDPOptimizer counts a call_method node's parameter
arguments only when `node.args[0].target` is a str. For `torch.tanh(h).mul(p)` the
receiver is a call_function node (target is a function), so p is never counted:
expected bucket bytes == p's bytes, got 0.
"""
import sys

import torch
import torch.fx as fx

try:
    from torch._dynamo.backends.distributed import DDPOptimizer
except Exception as e:  # ImportError, or torch._dynamo unusable
    print(f"n/a: {type(e).__name__}: {e}")
    sys.exit(2)
if not hasattr(DDPOptimizer, "add_param_args"):
    print("n/a: this DDPOptimizer never reads parameters from placeholders (no add_param_args)")
    sys.exit(2)


def placeholder(g, name, value):
    node = g.placeholder(name)
    node.meta["example_value"] = value  # what Dynamo records on graph inputs
    return node


# Dynamo-form graph of `return torch.tanh(h).mul(self.p)`, p lifted to a graph input.
p = torch.nn.Parameter(torch.randn(4, 4))
g = fx.Graph()
h, lp = placeholder(g, "l_h_", torch.randn(4, 4)), placeholder(g, "l_self_p", p)
t = g.call_function(torch.tanh, (h,))
g.output(g.call_method("mul", (t, lp)))
gm = fx.GraphModule(torch.nn.Module(), g)

opt = DDPOptimizer(bucket_bytes_cap=10**9, backend_compile_fn=lambda gm, ex: gm.forward,
                   first_bucket_cap=10**9)
opt.compile_fn(gm, [torch.randn(4, 4), p])
got = sum(b.size for b in opt.buckets)
expected = p.untyped_storage().nbytes()
if got != expected:
    print(f"BUG: bucket bytes for tanh(h).mul(p) expected {expected}, got {got}")
    sys.exit(1)
print(f"fixed: bucket bytes for tanh(h).mul(p) == {expected}")
sys.exit(0)
