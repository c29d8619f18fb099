"""The ``torch`` implementation: the installed torch's private functions.

Every function is looked up on its torch module at call time, so a patched or
forked torch (or a monkeypatch in a user's conftest) is what gets checked.
"""

from __future__ import annotations

import importlib
import sys

from ..contract import Implementation
from .composable import mark_composable_api
from .torch_bugs import TORCH_BUGS


def torch_version() -> tuple[int, int]:
    import torch

    major, minor = torch.__version__.split(".")[:2]
    return int(major), int(minor)


def _mod(name: str):
    # sys.modules first: import_module's machinery cost ~15 us a call, which
    # dominated building large trees. Attributes are still read per call.
    return sys.modules.get(name) or importlib.import_module(name)


class TorchTraversal:
    """``torch.distributed.fsdp._traversal_utils`` (and ``_runtime_utils`` for roots)."""

    def __init__(self):
        # torch >= 2.1 keeps one handle per state; the seed era a ``_handles`` list.
        self.single_handle = torch_version() >= (2, 1)

    def new_state(self, handle, is_root):
        cls = _mod("torch.distributed.fsdp._common_utils")._FSDPState
        try:
            state = cls()
        except (RuntimeError, AssertionError):
            # torch 2.0's __init__ asks CUDA for its current device and fails
            # without a GPU; the traversal reads only the fields set below.
            state = cls.__new__(cls)
            state._fully_sharded_module_to_handles = {}
        if self.single_handle:
            state._handle = handle
        else:
            state._handles = [] if handle is None else [handle]
        state._is_root = is_root
        return state

    def attach_state(self, module, state):
        _mod("torch.distributed._composable_state")._insert_module_state(module, state)

    def mark_incompatible(self, module, api):
        mark_composable_api(module, api)

    def states_with_modules(self, root):
        utils = _mod("torch.distributed.fsdp._traversal_utils")
        states, modules = utils._get_fsdp_states_with_modules(root)
        return list(states), list(modules)

    def handles(self, root):
        return list(_mod("torch.distributed.fsdp._traversal_utils")._get_fsdp_handles(root))

    def root_states(self, root):
        return list(_mod("torch.distributed.fsdp._runtime_utils")._get_fsdp_root_states(root))


class TorchAnnotation:
    def annotate(self, root, ignored_modules, use_orig_params):
        utils = _mod("torch.distributed.fsdp._dynamo_utils")
        utils._annotate_modules_for_dynamo(root, set(ignored_modules), use_orig_params)


class TorchImplementation(Implementation):
    name = "torch"
    known_bugs = TORCH_BUGS

    def __init__(self):
        import torch.distributed as dist

        if not dist.is_available():  # FSDP internals need the distributed package
            self.traversal = self.annotation = None
        else:
            self.traversal = TorchTraversal()
            self.annotation = TorchAnnotation()
            # One import for both areas (0.6 s, most of it FSDP pulling in
            # parts of Dynamo), made here with the session rather than inside
            # whichever test happens to run first. Functions are still looked
            # up per call.
            _mod("torch.distributed.fsdp._dynamo_utils")
            _mod("torch.distributed.fsdp._traversal_utils")
        self.splitting = _optional("TorchSplitting")
        self.exec_order = _optional("TorchExecOrder")
        self.fsdp2 = _optional_fsdp2()


def _optional_fsdp2():
    # None on a torch without FSDP2 (before ~2.4) or without torch.distributed.
    try:
        from .torch_fsdp2 import TorchFsdp2

        return TorchFsdp2()
    except ImportError:
        return None


def _optional(cls: str):
    # Adapters for further areas live in sibling modules as they land.
    module = {"TorchSplitting": "torch_splitting", "TorchExecOrder": "torch_exec_order"}[cls]
    try:
        mod = importlib.import_module(f"pytest_fsdpcheck.impls.{module}")
    except ModuleNotFoundError:
        return None
    return getattr(mod, cls)()
