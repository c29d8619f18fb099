"""FSDP2 (``fully_shard``) adapter: torch's ``_fully_shard._fsdp_init`` walk
and states, and the real ``fully_shard``.

Functions are looked up on their modules at call time (a patched torch is
what gets checked). On a torch without FSDP2 (before ~2.4) the adapter is not
constructed and the area is not provided.
"""

from __future__ import annotations

import collections
import importlib
import sys
import weakref

# FSDP2's home by release: torch >= 2.6 ``torch.distributed.fsdp._fully_shard``;
# 2.4/2.5 ``torch.distributed._composable.fsdp``.
_INIT_MODULES = (
    "torch.distributed.fsdp._fully_shard._fsdp_init",
    "torch.distributed._composable.fsdp._fsdp_init",
)
_STATE_MODULES = (
    "torch.distributed.fsdp._fully_shard._fsdp_state",
    "torch.distributed._composable.fsdp._fsdp_state",
)
_API = (
    ("torch.distributed.fsdp", "fully_shard"),
    ("torch.distributed._composable.fsdp", "fully_shard"),
)


def _mod(name: str):
    return sys.modules.get(name) or importlib.import_module(name)


def _first_module(names):
    for name in names:
        try:
            return _mod(name)
        except ImportError:
            continue
    return None


def fsdp2_available() -> bool:
    import torch.distributed as dist

    if not dist.is_available():
        return False
    init = _first_module(_INIT_MODULES)
    return init is not None and hasattr(init, "_get_managed_modules")


class TorchFsdp2:
    def __init__(self):
        if not fsdp2_available():
            raise ImportError("this torch has no FSDP2 (fully_shard)")
        # states must outlive the modules' weak references to them
        self._states = weakref.WeakKeyDictionary()

    @staticmethod
    def _init():
        return _first_module(_INIT_MODULES)

    def mark_own_group(self, module):
        registry = _mod("torch.distributed._composable_state")
        if registry._get_module_state(module) is not None:
            return  # a real fully_shard gave it one already (FS2-9 tells every area)
        state = _first_module(_STATE_MODULES).FSDPState()
        registry._insert_module_state(module, state)
        self._states[module] = state

    def mark_incompatible(self, module, api):
        key = _mod("torch.distributed._composable.contract").REGISTRY_KEY
        registry = module.__dict__.get(key)
        if registry is None:
            registry = module.__dict__[key] = collections.OrderedDict()
        registry[api] = object()

    def managed_modules(self, roots, ignored_params):
        roots = tuple(roots)
        if len(roots) > 1:  # what fully_shard does with a list of modules
            roots = tuple(_mod("torch.distributed.utils")._get_root_modules(list(roots)))
        ignored = None if ignored_params is None else set(ignored_params)
        return list(self._init()._get_managed_modules(roots, ignored))

    def managed_states(self, modules, ignored_params):
        ignored = None if ignored_params is None else set(ignored_params)
        params, buffers = self._init()._get_managed_states(list(modules), ignored)
        return list(params), list(buffers)

    def annotate(self, roots, mesh, ignored_params):
        fully_shard = None
        for module, attr in _API:
            try:
                fully_shard = getattr(_mod(module), attr)
                break
            except (ImportError, AttributeError):
                continue
        roots = list(roots)
        target = roots[0] if len(roots) == 1 else roots
        ignored = None if ignored_params is None else set(ignored_params)
        fully_shard(target, mesh=mesh, ignored_params=ignored)
