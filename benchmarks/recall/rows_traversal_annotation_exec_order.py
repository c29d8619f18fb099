"""Real bugs of torch's FSDP traversal, Dynamo annotation and exec-order
tracer, read from the released wheels' source 2.0.1 … 2.15.0 (latest patch of
each minor). The survey beside this file
(``survey_traversal_annotation_exec_order.md``) lists every change of those
functions and why the others are not rows.
"""

from __future__ import annotations

import collections
import importlib

from benchmarks.recall.row import RealBug

#: every torch module that binds ``_get_registry`` by name in 2.13.0 (grep of
#: the wheel's source): the contract itself and the modules that import it
_REGISTRY_READERS = (
    "torch.distributed._composable.contract",
    "torch.distributed.fsdp._traversal_utils",
    "torch.distributed._composable.replicate",
    "torch.distributed.fsdp._fully_shard._fsdp_common",
)


def _patch_registry_created_on_read(mp) -> None:
    """torch 2.1.2's ``_get_registry``: read the registry with ``getattr`` and,
    where a module has none, store an empty one on it and return it (2.0.1
    did the same through ``module.__dict__.setdefault``). 2.2 returns None
    instead and leaves the module alone."""
    contract = importlib.import_module("torch.distributed._composable.contract")
    key = contract.REGISTRY_KEY

    def _get_registry(module):
        registry = getattr(module, key, None)
        if registry is None:
            registry = collections.OrderedDict()
            setattr(module, key, registry)
        return registry

    for name in _REGISTRY_READERS:
        try:
            module = importlib.import_module(name)
        except ImportError:  # a torch without that module
            continue
        if hasattr(module, "_get_registry"):
            mp.setattr(module, "_get_registry", _get_registry)


def _witness_registry_created_on_read():
    """Which modules ``_get_fsdp_states`` leaves with attributes they did not
    have, in a tree with one child marked ``replicate`` the way the composable
    API marks it (its own registry holding the API)."""
    import torch.nn as nn

    contract = importlib.import_module("torch.distributed._composable.contract")
    traversal = importlib.import_module("torch.distributed.fsdp._traversal_utils")
    model = nn.Sequential(nn.Linear(2, 2), nn.Sequential(nn.ReLU()), nn.Sequential(nn.Tanh()))
    model[2].__dict__[contract.REGISTRY_KEY] = collections.OrderedDict(replicate=object())
    before = {name: set(vars(m)) for name, m in model.named_modules()}
    traversal._get_fsdp_states(model)
    return sorted(name or "<root>" for name, m in model.named_modules() if set(vars(m)) != before[name])


ROWS: tuple[RealBug, ...] = (
    RealBug(
        id="trv-registry-created-on-read",
        area="traversal",
        behaviour="Collecting FSDP states (_get_fsdp_states and the other traversal helpers) stores an empty "
        "composable registry on every module it visits that has none: a read-only walk adds an attribute to "
        "the user's modules (not to one marked `replicate`, which holds its own, nor below it).",
        had="2.0.1 … 2.1.2",
        fixed_in="2.2.2",
        upstream=("pytorch/pytorch#113654",),
        patch=_patch_registry_created_on_read,
        witness=_witness_registry_created_on_read,
        invariants=("TRV-9",),
        known="trv-registry-created-on-read",
        note="Read from the wheels' source: contract._get_registry is `module.__dict__.setdefault(REGISTRY_KEY, "
        "OrderedDict())` in 2.0.1 and getattr-then-setattr in 2.1.2 (the Dynamo rewrite, pytorch/pytorch#106886), "
        "both storing a registry on read; 2.2.2 returns `getattr(module, REGISTRY_KEY, None)` and "
        "_traversal_utils._composable takes None as composable (pytorch/pytorch#113654, seen in the issue "
        "search). The patch puts 2.1.2's function back wherever 2.13.0 binds the name (contract, "
        "_traversal_utils, replicate, FSDP2's _fsdp_common); 2.13's _composable still handles the dict it "
        "returns. On plain modules 2.0.1's form gives the same answer. The suite already models it "
        "(reference traversal `registry_on_read`).",
    ),
)
