"""DDPOptimizer.compile_fn counts a parameter's bytes once per use, not once.

torch._dynamo.backends.distributed.DDPOptimizer sizes its buckets like DDP does:
each parameter should count once. A parameter placeholder (Dynamo form) read by
two call_function nodes, or two get_attr nodes of one parameter (module form),
make the single bucket 2x the parameter's bytes.
"""
import sys

import torch
import torch.fx as fx

try:
    from torch._dynamo.backends.distributed import DDPOptimizer
except Exception as e:  # ImportError, or torch._dynamo unusable
    print(f"n/a: {type(e).__name__}: {e}")
    sys.exit(2)

w = torch.nn.Parameter(torch.randn(4, 4))
nbytes = w.untyped_storage().nbytes()


def bucket_bytes(gm, example_inputs):
    opt = DDPOptimizer(bucket_bytes_cap=10**9, backend_compile_fn=lambda gm, ex: gm.forward,
                       first_bucket_cap=10**9)
    opt.compile_fn(gm, example_inputs)
    return sum(b.size for b in opt.buckets)


def placeholder(g, name, value):
    node = g.placeholder(name)
    node.meta["example_value"] = value  # what Dynamo records on graph inputs
    return node


# Dynamo form: the parameter is a graph input with meta["example_value"] = the Parameter.
g = fx.Graph()
x, p = placeholder(g, "l_x_", torch.randn(4, 4)), placeholder(g, "l_self_w", w)
g.output(g.call_function(torch.add, (g.call_function(torch.mul, (x, p)), p)))
dynamo_form = bucket_bytes(fx.GraphModule(torch.nn.Module(), g), [torch.randn(4, 4), w])

# Module form: the parameter is read twice through get_attr.
root = torch.nn.Module()
root.w = w
g = fx.Graph()
x = placeholder(g, "l_x_", torch.randn(4, 4))
g.output(g.call_function(torch.add, (g.call_function(torch.mul, (x, g.get_attr("w"))), g.get_attr("w"))))
module_form = bucket_bytes(fx.GraphModule(root, g), [torch.randn(4, 4)])

if hasattr(DDPOptimizer, "add_param_args"):
    forms = {"dynamo-form": dynamo_form, "module-form": module_form}
else:  # this release does not read parameters from placeholders at all
    forms = {"module-form": module_form}
bad = {k: v for k, v in forms.items() if v != nbytes}
if bad:
    got = ", ".join(f"{k} {v}" for k, v in bad.items())
    print(f"BUG: bucket bytes expected {nbytes} (parameter counted once), got {got}")
    sys.exit(1)
print(f"fixed: bucket bytes == {nbytes} for {', '.join(forms)}")
sys.exit(0)
