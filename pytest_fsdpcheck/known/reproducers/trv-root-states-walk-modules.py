"""torch.distributed.fsdp._runtime_utils._get_fsdp_root_states walks module.modules().

Every other FSDP traversal (_traversal_utils._get_fsdp_states) stops at a module
marked by the `replicate` composable API. Expected: the root states are exactly
the root states of _get_fsdp_states(root). Got: a root state owned by a module
inside a replicate-marked subtree is returned as well, and a 5,000-deep module
chain raises RecursionError (_get_fsdp_states walks it iteratively).
"""
import collections
import sys

import torch.nn as nn

try:
    from torch.distributed._composable.contract import REGISTRY_KEY
    from torch.distributed._composable_state import _insert_module_state
    from torch.distributed.fsdp._common_utils import _FSDPState
    from torch.distributed.fsdp._runtime_utils import _get_fsdp_root_states
    from torch.distributed.fsdp._traversal_utils import _get_fsdp_states
except (ImportError, AttributeError) as e:
    print(f"n/a: {e}")
    sys.exit(2)


def attach_root_state(module):
    s = _FSDPState.__new__(_FSDPState)
    try:
        s.__init__()
    except RuntimeError:  # torch 2.0: __init__ ends by querying the CUDA device
        pass
    s._is_root = True  # already "lazily initialized": no process group needed
    s._handle = None
    s._handles = []  # torch < 2.1 reads the list form
    _insert_module_state(module, s)
    return s


root = nn.Sequential(nn.Linear(2, 2), nn.Sequential(nn.Linear(2, 2)))
replicated = root[1]
# what `replicate(replicated)` records in the composable-API registry
replicated.__dict__.setdefault(REGISTRY_KEY, collections.OrderedDict())["replicate"] = object()
top = attach_root_state(root)
inner = attach_root_state(replicated[0])  # lives inside the replicate subtree

names = {id(top): "root", id(inner): "root[1][0] (under replicate)"}
exp_n = [names[id(s)] for s in _get_fsdp_states(root) if s._is_root]
got_n = [names[id(s)] for s in _get_fsdp_root_states(root)]

chain = nn.Module()
for _ in range(5000):  # _get_fsdp_states handles this depth: it walks iteratively
    chain = nn.Sequential(chain)
try:
    deep = f"{_get_fsdp_root_states(chain)}"
except RecursionError:
    deep = "RecursionError"
if got_n != exp_n or deep != "[]":
    print(f"BUG: _get_fsdp_root_states expected {exp_n}, got {got_n}; "
          f"on a 5000-deep chain expected [], got {deep}")
    sys.exit(1)
print(f"fixed: _get_fsdp_root_states returns {got_n}, matching _get_fsdp_states; deep chain ok")
sys.exit(0)
