"""_ExecOrderTracer takes a method call for a root parameter that has the method's name.

torch.distributed.fsdp._trace_utils._ExecOrderTracer._patched_create_proxy records an
argument as a parameter use when `arg.node.target in fqn_to_param`, without asking
whether the node is a get_attr: a call_method node's target is the method's name.
With a root parameter named `t`, `F.linear(x, self.w.t())` records `t` as used.
Expected: param_forward_order == ['w'] (`t` is never used). Got: ['w', 't'].
"""
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

try:
    from torch.distributed.fsdp import _trace_utils
except ImportError as e:
    print(f"n/a: {e}")
    sys.exit(2)


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(3, 3))
        self.t = nn.Parameter(torch.randn(3))  # never used by forward

    def forward(self, x):
        return F.linear(x, self.w.t())


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
    print(f"BUG: param_forward_order for F.linear(x, self.w.t()) with an unused root parameter `t` expected ['w'], got {got}")
    sys.exit(1)
print("fixed: F.linear(x, self.w.t()) records ['w'] only")
sys.exit(0)
