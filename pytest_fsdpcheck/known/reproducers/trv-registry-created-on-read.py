"""Collecting FSDP states adds an attribute to every module it visits.

torch.distributed.fsdp._traversal_utils._composable() asks
torch.distributed._composable.contract._get_registry(module), which stores an
empty registry on a module that has none (fixed by pytorch/pytorch#113654). A read-only
traversal should leave the modules as they were.
"""
import sys

import torch.nn as nn

try:
    from torch.distributed.fsdp._traversal_utils import _get_fsdp_states
except Exception as e:  # noqa: BLE001 - this torch lacks the function
    print(f"n/a: {type(e).__name__}: {e}")
    sys.exit(2)

model = nn.Sequential(nn.Linear(2, 2), nn.Sequential(nn.ReLU()))
before = {name: set(vars(m)) for name, m in model.named_modules()}
_get_fsdp_states(model)
added = {name: sorted(set(vars(m)) - before[name]) for name, m in model.named_modules()}
added = {name or "<root>": keys for name, keys in added.items() if keys}
if added:
    print(f"BUG: _get_fsdp_states added attributes to modules: {added}")
    sys.exit(1)
print("fixed: the traversal leaves every module as it was")
