"""FSDP2 (``fully_shard``) adapter: torch's ``_fully_shard._fsdp_init`` walk
and states, and the real ``fully_shard``.

Functions are looked up on their modules at call time (a patched torch is
what gets checked). On a torch without FSDP2 (before 2.3) the adapter is not
constructed and the area is not provided.

The walk's signature changed twice: one ``root_module`` (2.3, 2.4), a tuple
of ``root_modules`` (2.5), then ``ignored_params`` (2.7) and the composability
and state functions of ``replicate`` (2.11). What a release's functions cannot
take is reported as not provided (``several_roots``, ``takes_ignored_params``),
never emulated: the check is of torch's own code. What a release takes is
read from ``provided.PROVIDED_FROM`` by its version, not from signatures: a
release that should take a feature but does not fails the checks using it.
"""

from __future__ import annotations

import importlib
import sys
import weakref

# FSDP2's home by release: torch >= 2.6 ``torch.distributed.fsdp._fully_shard``;
# 2.3-2.5 ``torch.distributed._composable.fsdp``.
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


def _fully_shard():
    for module, attr in _API:
        try:
            return getattr(_mod(module), attr)
        except (ImportError, AttributeError):
            continue
    raise ImportError("this torch has no fully_shard")


class TorchFsdp2:
    def __init__(self):
        from ..core.provided import expected_provided, first_release, installed_torch

        # What this release takes is decided by its version, never by probing
        # for a function: a renamed one fails the checks that call it rather
        # than making them n/p. Only a torch the table says predates FSDP2
        # (or one without torch.distributed) has no area.
        version = installed_torch()
        if not fsdp2_available():
            if expected_provided("fsdp2", version):
                #: the plugin's --fsdpcheck-strict fails on an area the table says this torch provides
                raise ImportError(
                    f"torch {version[0]}.{version[1]} should provide FSDP2 (from "
                    f"{first_release('fsdp2')}), but no _fsdp_init._get_managed_modules was found"
                )
            raise ImportError("this torch has no FSDP2 (fully_shard)")
        # states must outlive the modules' weak references to them
        self._states = weakref.WeakKeyDictionary()
        #: the walk takes a group of several modules (torch >= 2.5)
        self.several_roots = expected_provided("fsdp2.several_roots", version)
        #: the walk, the states and ``fully_shard`` take ``ignored_params`` (torch >= 2.7)
        self.takes_ignored_params = expected_provided("fsdp2.ignored_params", version)
        #: FS2-10's simulated worlds (a fake process group, one rank's view at a
        #: time) are measured from 2.13: before it, FS2-10 is n/p by release
        self.simulated_world = expected_provided("fsdp2.simulated_world", version)

    @staticmethod
    def _init():
        return _first_module(_INIT_MODULES)

    def _ignored(self, ignored_params):
        if ignored_params is None:
            return None
        if not self.takes_ignored_params:
            raise NotImplementedError("this torch's fully_shard takes no ignored_params")
        return set(ignored_params)

    def mark_own_group(self, module):
        registry = _mod("torch.distributed._composable_state")
        if registry._get_module_state(module) is not None:
            return  # a real fully_shard gave it one already (FS2-9 tells every area)
        state = _first_module(_STATE_MODULES).FSDPState()
        registry._insert_module_state(module, state)
        self._states[module] = state

    def mark_incompatible(self, module, api):
        from .composable import mark_composable_api

        mark_composable_api(module, api)

    def managed_modules(self, roots, ignored_params):
        roots = tuple(roots)
        ignored = self._ignored(ignored_params)
        walk = self._init()._get_managed_modules
        if not self.several_roots:
            if len(roots) > 1:
                raise NotImplementedError("this torch's fully_shard takes one module, not a group")
            return list(walk(roots[0]))
        if len(roots) > 1:  # what fully_shard does with a list of modules
            roots = tuple(_mod("torch.distributed.utils")._get_root_modules(list(roots)))
        if not self.takes_ignored_params:
            return list(walk(roots))
        return list(walk(roots, ignored))

    def managed_states(self, modules, ignored_params):
        ignored = self._ignored(ignored_params)
        states = self._init()._get_managed_states
        if self.takes_ignored_params:
            params, buffers = states(list(modules), ignored)
        else:
            params, buffers = states(list(modules))
        return list(params), list(buffers)

    def annotate(self, roots, mesh, ignored_params):
        roots = list(roots)
        if len(roots) > 1 and not self.several_roots:
            raise NotImplementedError("this torch's fully_shard takes one module, not a group")
        target = roots[0] if len(roots) == 1 else roots
        ignored = self._ignored(ignored_params)
        if ignored is None:
            _fully_shard()(target, mesh=mesh)
        else:
            _fully_shard()(target, mesh=mesh, ignored_params=ignored)

    def sharded_groups(self, modules):
        """This rank's view of the groups ``fully_shard`` made on ``modules``
        (FS2-10): each state's parameter groups as torch holds them, each
        parameter's local rows (the DTensor's local tensor) and the rows its
        padded sharded storage holds (the storage itself, not torch's claim
        of its size)."""
        from ..contract import ShardedGroup, ShardedParam

        registry = _mod("torch.distributed._composable_state")
        states, groups = set(), []
        for module in modules:
            state = registry._get_module_state(module)
            if state is None or id(state) in states:
                continue
            if not hasattr(state, "_fsdp_param_groups") and not hasattr(state, "_fsdp_param_group"):
                continue  # another composable API's state
            states.add(id(state))
            # 2.13 keeps a list of parameter groups; earlier releases one (or none)
            param_groups = getattr(state, "_fsdp_param_groups", None)
            if param_groups is None:
                one = getattr(state, "_fsdp_param_group", None)
                param_groups = [] if one is None else [one]
            roots = list(getattr(state, "_modules", ()) or ())
            group = ShardedGroup(roots)
            for param_group in param_groups:
                for fsdp_param in param_group.fsdp_params:
                    info = fsdp_param._module_info
                    sharded = fsdp_param.sharded_param
                    local = sharded.to_local() if hasattr(sharded, "to_local") else sharded
                    storage = fsdp_param._sharded_param_data
                    row = 1
                    for size in tuple(local.shape)[1:]:
                        row *= size
                    padded = storage.numel() // row if row else 0
                    group.params.append(ShardedParam(info.module, info.param_name, local.detach(), padded))
            groups.append(group)
        return groups
