"""FS2-6: fully_shard's managed-module walk is recursive (torch 2.13).

_get_managed_modules' inner dfs and _ignore_module recurse once per level, so a
module chain deeper than the recursion limit raises RecursionError.
"""
import torch.nn as nn
from torch.distributed.fsdp._fully_shard._fsdp_init import _get_managed_modules

root = m = nn.Module()
for _ in range(3000):
    m.add_module("c", nn.Module())
    m = m.c
for ignored in (None, set()):
    try:
        _get_managed_modules((root,), ignored)
        print("ok")
    except RecursionError:
        print(f"RecursionError (ignored_params={ignored!r})")
        raise SystemExit(1)
