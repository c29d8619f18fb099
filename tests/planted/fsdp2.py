"""Planted FSDP2 bugs (FS2-1..8): the reference with one realistic mistake each."""

from __future__ import annotations

import weakref

from pytest_fsdpcheck.contract import Implementation
from pytest_fsdpcheck.impls.torch_bugs import FULLY_SHARD_RUNTIME_BUGS
from pytest_fsdpcheck.reference.fsdp2 import (
    ReferenceFsdp2,
    descendants,
    own_buffers,
    own_params,
    unique_children,
)


class _PreOrder(ReferenceFsdp2):
    # Parents before children: the traversal area's order, not FSDP2's.
    def managed_modules(self, roots, ignored_params):
        out = super().managed_modules(roots, ignored_params)
        return self._preorder(out)

    @staticmethod
    def _preorder(mods):
        keep = {id(m) for m in mods}
        order, seen = [], set()
        for m in reversed(mods):  # post-order reversed puts each root first
            stack = [m]
            while stack:
                x = stack.pop()
                if id(x) in seen or id(x) not in keep:
                    continue
                seen.add(id(x))
                order.append(x)
                stack.extend(reversed(unique_children(x)))
        return order if len(order) == len(mods) else mods


class _EntersGroups(ReferenceFsdp2):
    # Nested fully_shard modules are not pruned.
    def managed_modules(self, roots, ignored_params):
        saved, self._own_group = self._own_group, {}
        try:
            return super().managed_modules(roots, ignored_params)
        finally:
            self._own_group = saved


class _IgnoresOwnParamsOnly(ReferenceFsdp2):
    # Drops a module when its own parameters are all ignored, whatever its children and buffers hold.
    def _ignorable(self, module, ignored, memo):
        return all(id(p) in ignored for _, p in own_params(module))


class _KeepsIgnoredParams(ReferenceFsdp2):
    # Ignored parameters still end up in the states.
    def managed_states(self, modules, ignored_params):
        return super().managed_states(modules, None)


class _ScalarCheckBeforeIgnore(ReferenceFsdp2):
    # Rejects a scalar (0-dim) parameter before asking whether it is ignored:
    # an ignored scalar, which fully_shard never touches, raises.
    def managed_states(self, modules, ignored_params):
        for module in modules:
            for name, p in own_params(module):
                if p.dim() == 0 and not self._accept_scalars:
                    raise ValueError(f"fully_shard does not support scalar parameters: {name!r}")
        return super().managed_states(modules, ignored_params)


class _ParamsOnly(ReferenceFsdp2):
    # Only parameters are collected, as FSDP1's flat parameters did; buffers are left out.
    def managed_states(self, modules, ignored_params):
        params, _ = super().managed_states(modules, ignored_params)
        return params, []


class _NoRootReduction(ReferenceFsdp2):
    # A root below another root is walked again (torch's raw _get_managed_modules
    # without fully_shard's _get_root_modules): it is listed twice.
    def _roots(self, roots):
        return list(roots)

    def managed_modules(self, roots, ignored_params):
        out = []
        for r in roots:
            out += super().managed_modules((r,), ignored_params)
        return out


class _IgnoreRuleNoMemo(ReferenceFsdp2):
    # The ignore rule decides a module from its whole subtree, again for every
    # path reaching it: right, and linear on trees, exponential on diamonds.
    def _ignorable(self, module, ignored, memo):
        stack = [module]
        while stack:
            m = stack.pop()
            if not self._own_ignorable(m, ignored):
                return False
            stack.extend(unique_children(m))
        return True


class _IgnoreRuleWholeSubtree(ReferenceFsdp2):
    # Asks each module for the buffers of its whole subtree (buffers() with
    # recurse left on), walked recursively, each module once, as
    # named_modules does: the same decisions, as a buffer below keeps a
    # module anyway, but each module costs its subtree.
    def _own_ignorable(self, module, ignored):
        if self._subtree_has_buffer(module, set()):
            return False
        return all(id(p) in ignored for _, p in own_params(module))

    def _subtree_has_buffer(self, module, seen):
        seen.add(id(module))
        if own_buffers(module):
            return True
        for child in unique_children(module):
            if id(child) not in seen and self._subtree_has_buffer(child, seen):
                return True
        return False


class _SkipsNestedRoot(ReferenceFsdp2):
    # A given module below another given one is taken for a boundary, like a
    # module with a group of its own: it and its subtree are left out.
    def managed_modules(self, roots, ignored_params):
        roots = list(dict.fromkeys(roots))
        nested = [r for r in roots if id(r) in descendants(roots)]
        saved, self._own_group = self._own_group, weakref.WeakKeyDictionary(self._own_group)
        try:
            for r in nested:
                self._own_group[r] = True
            return super().managed_modules([r for r in roots if r not in nested], ignored_params)
        finally:
            self._own_group = saved


class _RootsByWalk(ReferenceFsdp2):
    # The roots are not reduced: each is walked in the order given unless an
    # earlier root's walk reached it. Right when outer roots come first and
    # nothing lies between; an inner root given first leads, and one the
    # outer walk does not enter (past another group) is walked on its own.
    def _roots(self, roots):
        return list(dict.fromkeys(roots))


class _RootsByEquality(ReferenceFsdp2):
    # Tells the group's roots from the modules below them by ``==`` (``!=``,
    # ``in`` on a list of the roots) where the reference asks ``is``: a module
    # with a group of its own that compares equal to a root is taken for one
    # and entered. nn.Module compares by identity, so only a class defining
    # __eq__ shows it.
    def managed_modules(self, roots, ignored_params):
        roots = list(roots)
        saved = self._own_group
        self._own_group = weakref.WeakKeyDictionary({m: v for m, v in saved.items() if m not in roots})
        try:
            return super().managed_modules(roots, ignored_params)
        finally:
            self._own_group = saved


class _VisitedByEquality(ReferenceFsdp2):
    # Keeps the visited modules in a list, so ``in`` compares by ``==``: a
    # module equal to one visited before is skipped as if it had been.
    def managed_modules(self, roots, ignored_params):
        roots, visited, out = self._roots(roots), [], []

        def dfs(module):
            if not self._composable(module) or (all(module is not r for r in roots) and module in self._own_group):
                return
            visited.append(module)
            for child in unique_children(module):
                if child not in visited:
                    dfs(child)
            out.append(module)

        for root in roots:
            if root not in visited:
                dfs(root)
        if ignored_params is None:
            return out
        ignored, memo = {id(p) for p in ignored_params}, {}
        return [m for m in out if not self._ignorable(m, ignored, memo)]


class _Recursive(ReferenceFsdp2):
    def __init__(self):
        super().__init__(recursive=True)


class _NoFlags(ReferenceFsdp2):
    # Forgets _fsdp_use_orig_params on leaf modules.
    def annotate(self, roots, mesh, ignored_params):
        super().annotate(roots, mesh, ignored_params)
        for m in self.managed_modules(roots, ignored_params):
            if not m._modules:
                m.__dict__.pop("_fsdp_use_orig_params", None)


class _FlagsWrapperOnly(ReferenceFsdp2):
    # Writes the flags into a compiled block's wrapper itself (its
    # ``__dict__``, past ``OptimizedModule``'s forwarding) and leaves the
    # block it wraps unmarked: torch reads the wrapper as managed, but the
    # block Dynamo traces is not.
    def annotate(self, roots, mesh, ignored_params):
        super().annotate(roots, mesh, ignored_params)
        for m in self.managed_modules(roots, ignored_params):
            inner = m._modules.get("_orig_mod") if any(c.__name__ == "OptimizedModule" for c in type(m).__mro__) else None
            if inner is not None:
                for flag in ("_is_fsdp_managed_module", "_fsdp_use_orig_params"):
                    m.__dict__[flag] = True
                    inner.__dict__.pop(flag, None)


class _KeepsModules(ReferenceFsdp2):
    # Keeps every root it was given in a registry of its own, for the life
    # of the process, as torch 2.3-2.5's composable-state mapping did
    # (pytorch#139650): the flags are right, the model is never freed.
    registry: list = []

    def annotate(self, roots, mesh, ignored_params):
        super().annotate(roots, mesh, ignored_params)
        self.registry.extend(roots)


class _RefusesStages(ReferenceFsdp2):
    # Refuses a ModuleList subclass with a forward of its own, as torch
    # 2.3-2.11 did (fs2-container-with-forward-rejected): a stage of a model
    # is a module like any other.
    def __init__(self):
        super().__init__(containers="torch")


class _NoConflictCheck(ReferenceFsdp2):
    def __init__(self):
        super().__init__(group_conflicts="torch")


class _FirstFullyShard(ReferenceFsdp2):
    # Not a bug: torch 2.3/2.4's fully_shard takes one module and no
    # ignored_params; checks of those features are not provided, the rest run.
    several_roots = False
    takes_ignored_params = False

    def managed_modules(self, roots, ignored_params):
        assert len(roots) == 1 and ignored_params is None, "an example this fully_shard cannot take was drawn"
        return super().managed_modules(roots, ignored_params)

    def annotate(self, roots, mesh, ignored_params):
        assert len(roots) == 1 and ignored_params is None, "an example this fully_shard cannot take was drawn"
        return super().annotate(roots, mesh, ignored_params)


class _ReshardedRows(ReferenceFsdp2):
    # The reference's groups with each parameter's local rows taken by
    # ``rows_of`` (rank, ranks, rows, chunk) -> (start, end) instead.
    def annotate(self, roots, mesh, ignored_params):
        from pytest_fsdpcheck.reference.fsdp2 import shard_coordinate

        self._coordinate = shard_coordinate(mesh)
        return super().annotate(roots, mesh, ignored_params)

    def sharded_groups(self, modules):
        from pytest_fsdpcheck.contract import ShardedParam

        groups = super().sharded_groups(modules)
        rank, ranks = self._coordinate
        for group in groups:
            for i, sp in enumerate(group.params):
                full = sp.module._parameters[sp.name].detach()
                start, end = self.rows_of(rank, ranks, full.shape[0], sp.padded_rows)
                group.params[i] = ShardedParam(sp.module, sp.name, full[start:end], sp.padded_rows)
        return groups


class _PaddingFirst(_ReshardedRows):
    # FS2-10: the remainder taken from the front: rank r holds the chunk the
    # spec gives rank S-1-r, so the first ranks are the short (padded) ones.
    @staticmethod
    def rows_of(rank, ranks, rows, chunk):
        start = min((ranks - 1 - rank) * chunk, rows)
        return start, min(start + chunk, rows)


class _LastRowMissing(_ReshardedRows):
    # FS2-10: an off-by-one at the end of dim 0 (``rows - 1`` as the bound):
    # the rank holding a parameter's last row stops one row short.
    @staticmethod
    def rows_of(rank, ranks, rows, chunk):
        start = min(rank * chunk, rows)
        return start, min(start + chunk, rows - 1) if start < rows else start


class _PaddingFirstPastEight(_ReshardedRows):
    # FS2-10: right up to 8 ranks, the remainder taken from the front past
    # them (a layout tuned on one node): only a world past 8 shows it.
    @staticmethod
    def rows_of(rank, ranks, rows, chunk):
        if ranks <= 8:
            start = min(rank * chunk, rows)
        else:
            start = min((ranks - 1 - rank) * chunk, rows)
        return start, min(start + chunk, rows)


class _RankDisagrees(ReferenceFsdp2):
    # FS2-10: a rank-dependent walk: the last rank of the sharding dimension
    # leaves the first managed module of a group without its Dynamo flags
    # (a module list built from a rank-local cache, say).
    def annotate(self, roots, mesh, ignored_params):
        from pytest_fsdpcheck.reference.fsdp2 import shard_coordinate

        managed = self.managed_modules(tuple(roots), ignored_params)
        super().annotate(roots, mesh, ignored_params)
        rank, ranks = shard_coordinate(mesh)
        if ranks > 1 and rank == ranks - 1 and managed:
            del managed[0]._is_fsdp_managed_module
            del managed[0]._fsdp_use_orig_params


def _impl(cls, known_bugs=()):
    class Planted(Implementation):
        name = cls.__name__.lstrip("_")

        def __init__(self):
            self.fsdp2 = cls()

    if known_bugs:
        Planted.known_bugs = known_bugs
    Planted.__name__ = Planted.__qualname__ = Planted.name
    return Planted


PreOrder = _impl(_PreOrder)
FlagsWrapperOnly = _impl(_FlagsWrapperOnly)
EntersGroups = _impl(_EntersGroups)
IgnoresOwnParamsOnly = _impl(_IgnoresOwnParamsOnly)
KeepsIgnoredParams = _impl(_KeepsIgnoredParams)
NoRootReduction = _impl(_NoRootReduction)
ParamsOnly = _impl(_ParamsOnly)
ScalarCheckBeforeIgnore = _impl(_ScalarCheckBeforeIgnore)
IgnoreRuleNoMemo = _impl(_IgnoreRuleNoMemo)
IgnoreRuleWholeSubtree = _impl(_IgnoreRuleWholeSubtree)
RootsByEquality = _impl(_RootsByEquality)
VisitedByEquality = _impl(_VisitedByEquality)
RecursiveWalk = _impl(_Recursive)
SkipsNestedRoot = _impl(_SkipsNestedRoot)
RootsByWalk = _impl(_RootsByWalk)
NoFlags = _impl(_NoFlags)
KeepsModules = _impl(_KeepsModules)
RefusesStages = _impl(_RefusesStages)
NoConflictCheck = _impl(_NoConflictCheck)
# it drives torch's fully_shard runtime, as every walk does in the steps
FirstFullyShard = _impl(_FirstFullyShard, known_bugs=FULLY_SHARD_RUNTIME_BUGS)
PaddingFirst = _impl(_PaddingFirst)
LastRowMissing = _impl(_LastRowMissing)
RankDisagrees = _impl(_RankDisagrees)
PaddingFirstPastEight = _impl(_PaddingFirstPastEight)

PLANTED = {
    "tests.planted.fsdp2:PreOrder": ("FS2-1", "test_managed_modules"),
    "tests.planted.fsdp2:EntersGroups": ("FS2-2", "test_managed_modules"),
    "tests.planted.fsdp2:IgnoresOwnParamsOnly": ("FS2-3", "test_ignored_params"),
    "tests.planted.fsdp2:KeepsIgnoredParams": ("FS2-4", "test_managed_states"),
    "tests.planted.fsdp2:ScalarCheckBeforeIgnore": ("FS2-4", "test_ignored_scalars"),
    "tests.planted.fsdp2:NoRootReduction": ("FS2-5", "test_several_roots"),
    "tests.planted.fsdp2:RecursiveWalk": ("FS2-6", "test_large_trees and deep"),
    "tests.planted.fsdp2:IgnoreRuleNoMemo": ("FS2-6", "test_linear_growth_shared_ignored"),
    "tests.planted.fsdp2:NoFlags": ("FS2-7", "test_fully_shard_flags"),
    "tests.planted.fsdp2:KeepsModules": ("FS2-7", "test_fully_shard_flags"),
    "tests.planted.fsdp2:RefusesStages": ("FS2-7", "test_fully_shard_flags"),
    "tests.planted.fsdp2:NoConflictCheck": ("FS2-8", "test_fully_shard_conflicts"),
}

#: the same kinds of mistake on the corpus models' fully_shard plans: the
#: golden text and the oracle both catch them
CORPUS_PLANTED = {
    "tests.planted.fsdp2:PreOrder": ("FS2-1", "test_golden_fsdp2 or test_corpus_fsdp2"),
    "tests.planted.fsdp2:EntersGroups": ("FS2-2", "test_corpus_fsdp2"),
    "tests.planted.fsdp2:ParamsOnly": ("FS2-4", "test_golden_fsdp2 or test_corpus_fsdp2"),
}

#: nested roots in one fully_shard call, on the fixed groups of
#: test_nested_roots (the drawn groups of test_several_roots catch them too,
#: by chance; these fail in a second, every run)
NESTED_PLANTED = {
    "tests.planted.fsdp2:NoRootReduction": ("FS2-5", "test_nested_roots"),
    "tests.planted.fsdp2:SkipsNestedRoot": ("FS2-5", "test_nested_roots"),
    "tests.planted.fsdp2:RootsByWalk": ("FS2-5", "test_nested_roots"),
}

#: modules of a class defining __eq__ (all instances equal), on the fixed
#: trees of test_equal_modules: a walk comparing modules by equality enters
#: a group that compares equal to its root, or skips a module equal to one
#: it visited
EQUAL_PLANTED = {
    "tests.planted.fsdp2:RootsByEquality": ("FS2-2", "test_equal_modules"),
    "tests.planted.fsdp2:VisitedByEquality": ("FS2-2", "test_equal_modules"),
}

#: FS2-10 on the simulated worlds' fixed uneven cases (the drawn ones catch
#: them too): padding on the first ranks, a row missing on the last one, a
#: rank whose managed modules differ from the others'
WORLD_PLANTED = {
    "tests.planted.fsdp2:PaddingFirst": ("FS2-10", "test_uneven_worlds"),
    "tests.planted.fsdp2:LastRowMissing": ("FS2-10", "test_uneven_worlds"),
    "tests.planted.fsdp2:RankDisagrees": ("FS2-10", "test_uneven_worlds"),
}
