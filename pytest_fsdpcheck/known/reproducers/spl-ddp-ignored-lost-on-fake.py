"""DDPOptimizer counts a DDP-ignored parameter on a graph Dynamo really captured.

torch._dynamo.backends.distributed.DDPOptimizer must skip parameters with
`p._ddp_ignored = True` (DDP does not all-reduce them). When Dynamo lifts the
parameter to a graph input, DDPOptimizer reads placeholder.meta["example_value"],
a FakeTensor without `_ddp_ignored`, so the ignored parameter is counted anyway.
"""
import sys

import torch

try:
    import torch._dynamo
    from torch._dynamo.backends.distributed import DDPOptimizer
except Exception as e:  # ImportError, or torch._dynamo unusable
    print(f"n/a: {type(e).__name__}: {e}")
    sys.exit(2)


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.used = torch.nn.Linear(8, 8)
        self.ignored = torch.nn.Linear(8, 8)

    def forward(self, x):
        return self.ignored(torch.relu(self.used(x)))


def bucket_bytes(model, x):
    graphs = []

    def capture(gm, example_inputs):  # the graph Dynamo hands to a backend
        graphs.append((gm, example_inputs))
        return gm.forward

    torch._dynamo.reset()
    try:
        torch.compile(model, backend=capture)(x)
    except Exception as e:  # e.g. torch 2.0: "Python 3.11+ not yet supported for torch.compile"
        print(f"n/a: torch.compile unusable: {type(e).__name__}: {str(e).splitlines()[0]}")
        sys.exit(2)
    gm, example_inputs = graphs[0]
    opt = DDPOptimizer(bucket_bytes_cap=10**9, backend_compile_fn=lambda gm, ex: gm.forward,
                       first_bucket_cap=10**9)
    opt.compile_fn(gm, example_inputs)
    lifted = any(n.op == "placeholder" and isinstance(n.meta.get("example_value"), torch.nn.Parameter)
                 for n in gm.graph.nodes)
    return sum(b.size for b in opt.buckets), lifted


torch.manual_seed(0)
model, x = Model(), torch.randn(2, 8)
for p in model.ignored.parameters():
    p._ddp_ignored = True  # what DDP._set_params_and_buffers_to_ignore_for_model marks
got, lifted = bucket_bytes(model, x)
form = "params lifted to placeholders" if lifted else "params as get_attr/call_module"
expected = sum(p.numel() * p.element_size() for p in model.used.parameters())
if got != expected:
    print(f"BUG: bucket bytes with model.ignored marked _ddp_ignored expected {expected}, got {got} ({form})")
    sys.exit(1)
print(f"fixed: _ddp_ignored parameters count zero (bucket bytes {got}, {form})")
sys.exit(0)
