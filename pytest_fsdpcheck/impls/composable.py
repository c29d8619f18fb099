"""Marks of torch's composable APIs, shared by the torch adapters."""

from __future__ import annotations

import collections
import importlib
import sys


def mark_composable_api(module, api: str) -> None:
    """Register ``api`` in ``module``'s composable registry, as applying that
    composable API (e.g. ``replicate``) would."""
    name = "torch.distributed._composable.contract"
    key = (sys.modules.get(name) or importlib.import_module(name)).REGISTRY_KEY
    registry = module.__dict__.get(key)
    if registry is None:
        registry = module.__dict__[key] = collections.OrderedDict()
    registry[api] = object()
