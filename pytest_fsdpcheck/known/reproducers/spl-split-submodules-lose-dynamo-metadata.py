"""DDPOptimizer hands the backend split submodules without the captured graph's metadata.

torch._dynamo.backends.distributed.DDPOptimizer.compile_fn splits the graph
Dynamo captured with fx's split_module and compiles each piece with the user's
backend. The pieces must carry what the backend reads of the captured graph:
the graph module's `meta` (dynamo_flat_name_to_original_fqn, ...) and
`_param_name_to_source`, and each input placeholder's `_dynamo_source`.
Without them aot_autograd finds no static input indices and cudagraphs
re-record on every call (pytorch/pytorch#140395, fixed by #155746).
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
        self.a, self.b, self.c = (torch.nn.Linear(8, 8) for _ in range(3))

    def forward(self, x):
        return self.c(torch.relu(self.b(torch.relu(self.a(x)))))


graphs = []


def capture(gm, example_inputs):  # the graph Dynamo hands to a backend
    graphs.append((gm, example_inputs))
    return gm.forward


torch.manual_seed(0)
torch._dynamo.reset()
try:
    torch.compile(Model(), backend=capture)(torch.randn(2, 8))
except Exception as e:  # e.g. torch 2.0: "Python 3.11+ not yet supported for torch.compile"
    print(f"n/a: torch.compile unusable: {type(e).__name__}: {str(e).splitlines()[0]}")
    sys.exit(2)
gm, example_inputs = graphs[0]

compiled = []


def backend(submod, inputs):
    compiled.append(submod)
    return submod.forward


# one bucket per linear layer (320 bytes each); compile every piece now, not at its first call
config = torch._dynamo.config
lazy = getattr(config, "optimize_ddp_lazy_compile", None)
if lazy is not None:
    config.optimize_ddp_lazy_compile = False
DDPOptimizer(bucket_bytes_cap=1, backend_compile_fn=backend, first_bucket_cap=1).compile_fn(gm, example_inputs)
if lazy is not None:
    config.optimize_ddp_lazy_compile = lazy
if len(compiled) < 2:
    print(f"n/a: DDPOptimizer did not split the graph ({len(compiled)} backend call(s))")
    sys.exit(2)

sources = {n.name: getattr(n, "_dynamo_source", None) for n in gm.graph.nodes if n.op == "placeholder"}
lost = []
for i, submod in enumerate(compiled):
    meta = getattr(submod, "meta", None) or {}
    missing = [key for key in getattr(gm, "meta", {}) if key not in meta]
    if missing:
        lost.append(f"submodule {i}: meta lacks {missing}")
    if hasattr(gm, "_param_name_to_source") and getattr(submod, "_param_name_to_source", None) != gm._param_name_to_source:
        lost.append(f"submodule {i}: _param_name_to_source not carried")
    unsourced = [n.name for n in submod.graph.nodes
                 if n.op == "placeholder" and n.name in sources and getattr(n, "_dynamo_source", None) != sources[n.name]]
    if unsourced:
        lost.append(f"submodule {i}: placeholders {unsourced} without their _dynamo_source")
if lost:
    print("BUG: the split submodules handed to the backend lose the captured graph's metadata: " + "; ".join(lost))
    sys.exit(1)
print(f"fixed: all {len(compiled)} split submodules carry the captured graph's meta, _param_name_to_source and sources")
sys.exit(0)
