"""FS2-6: fully_shard's managed-module walk is recursive.

_get_managed_modules' inner dfs (and _ignore_module, where the release has
ignored parameters) recurses once per level, so a module chain deeper than
the interpreter's recursion limit raises RecursionError instead of being
walked.
"""
import importlib
import inspect
import sys

import torch.nn as nn

init = None
for name in ("torch.distributed.fsdp._fully_shard._fsdp_init", "torch.distributed._composable.fsdp._fsdp_init"):
    try:
        init = importlib.import_module(name)
        break
    except ImportError:
        continue
if init is None or not hasattr(init, "_get_managed_modules"):
    print("n/a: this torch has no FSDP2 (fully_shard)")
    sys.exit(2)

root = m = nn.Module()
for _ in range(3000):
    m.add_module("c", nn.Module())
    m = m.c
walk = init._get_managed_modules
takes = list(inspect.signature(walk).parameters)
calls = {"one root": lambda: walk(root)} if takes[0] == "root_module" else {"roots": lambda: walk((root,))}
if "ignored_params" in takes:
    calls["ignored_params=set()"] = lambda: walk((root,), set())
for what, call in calls.items():
    try:
        call()
    except RecursionError:
        print(f"BUG: RecursionError walking a 3000-deep chain ({what})")
        sys.exit(1)
print("fixed: a 3000-deep chain is walked")
