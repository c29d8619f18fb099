"""FS2-4: fully_shard's state collection accepts a scalar (0-dim) parameter.

A scalar cannot be sharded along dim 0; releases that check reject it in
_get_managed_states with a ValueError naming the parameter. Without the
check, the parameter is collected and fully_shard fails later, far from the
module that holds it.
"""
import importlib
import inspect
import sys

import torch
import torch.nn as nn

init = None
for name in ("torch.distributed.fsdp._fully_shard._fsdp_init", "torch.distributed._composable.fsdp._fsdp_init"):
    try:
        init = importlib.import_module(name)
        break
    except ImportError:
        continue
if init is None or not hasattr(init, "_get_managed_states"):
    print("n/a: this torch has no FSDP2 (fully_shard)")
    sys.exit(2)

module = nn.Linear(2, 2)
module.scale = nn.Parameter(torch.tensor(1.0))
collect = init._get_managed_states
args = ([module], None) if "ignored_params" in inspect.signature(collect).parameters else ([module],)
try:
    params, _ = collect(*args)
except ValueError as e:
    print(f"fixed: the scalar parameter is rejected: {e}")
    sys.exit(0)
names = [n for n, p in module.named_parameters() if any(p is q for q in params)]
print(f"BUG: scalar parameter 'scale' accepted; collected {names}")
sys.exit(1)
