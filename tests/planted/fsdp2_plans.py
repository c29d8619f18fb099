"""Planted FSDP2 bugs that only repeated ``fully_shard`` calls show: the
reference with one realistic mistake each, invisible to single-call checks."""

from __future__ import annotations

from pytest_fsdpcheck.reference.fsdp2 import ReferenceFsdp2
from tests.planted.fsdp2 import _impl


class _PrunesGroupedRoots(ReferenceFsdp2):
    # The root-set exemption covers the first root only: a later root that
    # already holds a group (from an earlier call) is pruned like a nested group.
    def managed_modules(self, roots, ignored_params):
        roots = [r for k, r in enumerate(self._roots(roots)) if k == 0 or r not in self._own_group]
        return super().managed_modules(roots, ignored_params)


class _SharedIgnoreMemo(ReferenceFsdp2):
    # The ignore rule's memo outlives the call (a module-level cache), so a
    # module's decision under one call's ignored parameters is reused by the next.
    # (check_managed names a module it wrongly drops FS2-3, FS2-2 or, in a
    # multi-root call, FS2-5, by why the oracle keeps it)
    def __init__(self):
        super().__init__()
        self._memo: dict[int, bool] = {}
        self._alive: list = []  # keeps the memo's ids valid

    def _ignorable(self, module, ignored, memo):
        self._alive.append(module)
        return super()._ignorable(module, ignored, self._memo)


PrunesGroupedRoots = _impl(_PrunesGroupedRoots)
SharedIgnoreMemo = _impl(_SharedIgnoreMemo)

PLANTED = {
    "tests.planted.fsdp2_plans:PrunesGroupedRoots": ("FS2-5", "test_plan_walk_several_roots"),
    "tests.planted.fsdp2_plans:SharedIgnoreMemo": (("FS2-3", "FS2-2", "FS2-5"), "test_plan_walk_ignored_params"),
}
