"""A known bug declared for one graph form explains nothing in the other:
the same miscount in both forms, declared for module form only."""

from __future__ import annotations

import dataclasses

from pytest_fsdpcheck.impls.torch_bugs import TORCH_BUGS
from pytest_fsdpcheck.known.reference_with import reference_with

_PER_USE = next(b for b in TORCH_BUGS if b.id == "spl-param-counted-per-use")
#: the miscount declared for module form only, on every torch
MODULE_ONLY = dataclasses.replace(_PER_USE, affects="", forms=("module",))


class PerUseDeclaredForModuleForm:
    """Counts a parameter per use in both forms; declares it for module form."""

    def __init__(self):
        impl = reference_with([MODULE_ONLY])
        vars(self).update(vars(impl))
        self.known_bugs = (MODULE_ONLY,)


class DynamoFormOnly:
    """The reference, accepting only Dynamo-form graphs: module-form checks are n/p."""

    def __init__(self):
        impl = reference_with([])
        impl.splitting.graph_forms = ("dynamo",)
        vars(self).update(vars(impl))
