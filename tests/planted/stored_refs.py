"""Plans that reach ``fully_shard`` through a reference they hold, not a
name bound at import: an attribute, a closure, containers, a
``functools.partial``, a framework's decorator, a module global filled at
run time. Each shards the planted TinyLM correctly (layers, the tied pair in
one group, the root last), so every FS2/PLN check passes once the calls are
recorded."""

import functools

from torch.distributed.fsdp import fully_shard as _imported

from pytest_fsdpcheck.cases import ModelCase
from tests.planted.plans import TinyLM, _inputs

# Every reference below is taken at import, before any recorder runs, and
# held where no module attribute names it.


def _shard_all(shard, model, mesh):
    for layer in model.layers:
        shard(layer, mesh=mesh)
    shard([model.embed, model.lm_head], mesh=mesh)
    shard(model, mesh=mesh)


class Sharder:
    """self.shard_fn = fully_shard, then self.shard_fn(block) (issue 28)."""

    def __init__(self, fn):
        self.shard_fn = fn

    def __call__(self, model, mesh):
        _shard_all(self.shard_fn, model, mesh)


def _closure_plan(fs):
    def plan(model, mesh):
        _shard_all(fs, model, mesh)

    return plan


def framework_wrapper(fn):
    """A framework's decorator around fully_shard (argument defaults)."""

    @functools.wraps(fn)
    def wrapped(module, **kwargs):
        kwargs.setdefault("reshard_after_forward", True)
        return fn(module, **kwargs)

    return wrapped


_SHARDER = Sharder(_imported)
_CLOSURE = _closure_plan(_imported)
_TABLE = {"fsdp2": _imported}
_TUPLE = (_imported,)
_PARTIAL = functools.partial(_imported, reshard_after_forward=True)
_WRAPPED = framework_wrapper(_imported)
# a global of a namespace that is no module's (code a framework generates)
_GENERATED: dict = {"_shard_all": _shard_all, "fs": _imported}
exec("def generated_plan(model, mesh):\n    _shard_all(fs, model, mesh)\n", _GENERATED)
del _imported  # only the holders above keep it


def _dict_plan(model, mesh):
    _shard_all(_TABLE["fsdp2"], model, mesh)


def _tuple_plan(model, mesh):
    _shard_all(_TUPLE[0], model, mesh)


def _partial_plan(model, mesh):
    _shard_all(_PARTIAL, model, mesh)


def _framework_plan(model, mesh):
    _shard_all(_WRAPPED, model, mesh)


def _generated_plan(model, mesh):
    _GENERATED["generated_plan"](model, mesh)


def _case(name, plan):
    import torch

    torch.manual_seed(0)
    return ModelCase(name, TinyLM(), _inputs(), plan=plan)


def attribute():
    return _case("attribute", _SHARDER)


def closure():
    return _case("closure", _CLOSURE)


def dict_entry():
    return _case("dict_entry", _dict_plan)


def tuple_entry():
    return _case("tuple_entry", _tuple_plan)


def generated_global():
    return _case("generated_global", _generated_plan)


def partial():
    return _case("partial", _partial_plan)


def framework():
    return _case("framework", _framework_plan)


FACTORIES = (attribute, closure, dict_entry, tuple_entry, generated_global, partial, framework)
