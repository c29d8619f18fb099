"""_ExecOrderTracer.patch_tracer leaves bound methods in the tracer's __dict__.

torch.distributed.fsdp._trace_utils._ExecOrderTracer.patch_tracer(tracer, root)
restores by assigning the bound methods it read before patching
(`tracer.call_module = orig_call_module`). Expected: after the `with` block the
tracer's instance __dict__ is as before. Got: `call_module` and `create_proxy` stay
shadowed by stale bound methods, so later class-level patches are ignored.
"""
import sys

import torch
import torch.nn as nn

try:
    from torch.distributed.fsdp import _trace_utils
except ImportError as e:
    print(f"n/a: {e}")
    sys.exit(2)

model = nn.Sequential(nn.Linear(2, 2))
tracer = torch.fx.Tracer()
before = set(vars(tracer))
if hasattr(_trace_utils, "_ExecOrderTracer"):
    exo = _trace_utils._ExecOrderTracer()
    with exo.patch_tracer(tracer, model):
        pass  # tracing here or not makes no difference
elif hasattr(_trace_utils, "_patch_tracer") and hasattr(_trace_utils, "_init_execution_info"):
    with _trace_utils._patch_tracer(tracer, model, _trace_utils._init_execution_info(model)):
        pass
else:
    print("n/a: neither _ExecOrderTracer nor _patch_tracer in torch.distributed.fsdp._trace_utils")
    sys.exit(2)

after = set(vars(tracer))
if after != before:
    print(f"BUG: tracer.__dict__ keys after exit expected == before, got extra {sorted(after - before)}")
    sys.exit(1)
print("fixed: patch_tracer leaves no call_module/create_proxy in tracer.__dict__")
sys.exit(0)
