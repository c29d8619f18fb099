"""_ExecOrderTracer does not record a parameter inside a list argument.

torch.distributed.fsdp._trace_utils._ExecOrderTracer._patched_create_proxy looks
for parameter proxies only among the top-level positional args of call_function /
call_method nodes, never inside lists. Expected: `torch.stack([x, self.w])` records `w`
in exec_info.param_forward_order. Got: `w` is missing.
"""
import sys

import torch
import torch.nn as nn

try:
    from torch.distributed.fsdp import _trace_utils
except ImportError as e:
    print(f"n/a: {e}")
    sys.exit(2)


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(3, 3))

    def forward(self, x):
        return torch.stack([x, self.w])


model, tracer = Model(), torch.fx.Tracer()
if hasattr(_trace_utils, "_ExecOrderTracer"):
    exo = _trace_utils._ExecOrderTracer()
    with exo.patch_tracer(tracer, model):
        tracer.trace(model)
    exec_info = exo.exec_info
elif hasattr(_trace_utils, "_patch_tracer") and hasattr(_trace_utils, "_init_execution_info"):
    exec_info = _trace_utils._init_execution_info(model)
    with _trace_utils._patch_tracer(tracer, model, exec_info):
        tracer.trace(model)
else:
    print("n/a: neither _ExecOrderTracer nor _patch_tracer in torch.distributed.fsdp._trace_utils")
    sys.exit(2)

names = {id(p): n for n, p in model.named_parameters()}
got = [names.get(id(p), "?") for p in exec_info.param_forward_order]
if got != ["w"]:
    print(f"BUG: param_forward_order for torch.stack([x, self.w]) expected ['w'], got {got}")
    sys.exit(1)
print("fixed: torch.stack([x, self.w]) records ['w'] in param_forward_order")
sys.exit(0)
