"""Module trees for FSDP2 (``fully_shard``): a pure-data spec on top of
:class:`~pytest_fsdpcheck.generators.trees.TreeSpec`, its builder, and
hypothesis strategies that shrink towards one root, no nested groups, no
ignored parameters and no buffers.

Children always have higher indices than their parents (a ``TreeSpec``
rule), so applying nested groups in descending index order applies every
group before the groups above it, as FSDP2 wants (inner first).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from hypothesis import strategies as st

from .trees import BuiltTree, TreeSpec, _byte_list, _byte_table, build_tree, module_trees


@dataclass(frozen=True)
class Fsdp2Spec:
    """A tree plus what ``fully_shard`` sees: the roots of the group being
    sharded, modules that already have their own FSDP2 group, ignored
    parameters, buffers and scalar parameters. ``tree.replicate`` marks
    modules owned by ``replicate`` (non-composable)."""

    tree: TreeSpec
    roots: tuple[int, ...] = (0,)
    groups: frozenset[int] = frozenset()  # modules with their own FSDP2 state
    #: ``None``: fully_shard's default; else ``(module, k)``: the k-th own
    #: parameter of module (registration order; a missing one is skipped),
    #: or with ``k == SCALAR`` the module's scalar parameter ``s``
    ignored: frozenset[tuple[int, int]] | None = None
    buffers: tuple[int, ...] = ()  # own buffers per module
    scalars: frozenset[int] = frozenset()  # modules given a scalar parameter ``s``
    #: modules of a class whose instances all compare equal (``==``) while
    #: hashing by identity: only identity tells them apart, as it must (FS2-1)
    equal: frozenset[int] = frozenset()
    #: modules of a container class with a forward of its own (an
    #: ``nn.ModuleList`` subclass that runs its modules in turn, as model
    #: zoos write their stages): ``fully_shard`` takes one like any module
    #: (FS2-7; torch 2.3-2.11 refused every ModuleList/ModuleDict)
    containers: frozenset[int] = frozenset()

    @property
    def size(self) -> int:
        return self.tree.size

    def restricted(self, several_roots: bool = True, ignored: bool = True) -> Fsdp2Spec:
        """The spec as a ``fully_shard`` without several roots (its first
        root kept) or without ``ignored_params`` (none) can take it."""
        roots = self.roots if several_roots else self.roots[:1]
        ign = self.ignored if ignored else None
        if roots == self.roots and ign == self.ignored:
            return self
        # a scalar drawn to be ignored leaves with its ignored_params: kept,
        # it would be a scalar the call shards, which is another example
        scalars = self.scalars - ignored_scalars(self) if ign is None else self.scalars
        return dataclasses.replace(self, roots=roots, ignored=ign, scalars=scalars)

    def to_source(self) -> str:
        parts = [f"tree={self.tree.to_source()}"]
        if self.roots != (0,):
            parts.append(f"roots={self.roots!r}")
        for name in ("groups", "scalars", "equal", "containers"):
            value = getattr(self, name)
            if value:
                parts.append(f"{name}=frozenset({sorted(value)!r})")
        if self.ignored is not None:
            parts.append(f"ignored=frozenset({sorted(self.ignored)!r})")
        if self.buffers:
            parts.append(f"buffers={self.buffers!r}")
        return "Fsdp2Spec(" + ", ".join(parts) + ")"


@dataclass
class BuiltFsdp2:
    spec: Fsdp2Spec
    tree: BuiltTree
    roots: tuple  # root modules, in the spec's order
    ignored: set | None  # parameter objects, or None
    params: list = field(default_factory=list)  # every parameter, for labels

    @property
    def modules(self) -> list:
        return self.tree.modules

    def label(self, obj) -> str:
        index = getattr(self, "_index", None)
        if index is None:
            index = {id(m): f"m{i}" for i, m in enumerate(self.tree.modules)}
            for i, m in enumerate(self.tree.modules):
                for name, p in m._parameters.items():
                    if p is not None:
                        index.setdefault(id(p), f"m{i}.{name}")
                for name, b in m._buffers.items():
                    if b is not None:
                        index.setdefault(id(b), f"m{i}.{name}")
            self._index = index
        return index.get(id(obj), repr(obj))

    def labels(self, objs) -> list[str]:
        return [self.label(o) for o in objs]


def build_fsdp2(spec: Fsdp2Spec, area=None, groups: bool = True) -> BuiltFsdp2:
    """Real modules for ``spec``; with an FSDP2 area, its marks: ``replicate``
    and (``groups=True``) the nested groups' own states. Pass
    ``groups=False`` when the groups are to be made by real ``fully_shard``
    calls instead."""
    import torch
    from torch import nn

    from ..core.profiles import note_example

    note_example(repr(spec))
    tree = build_tree(spec.tree)
    modules = tree.modules
    for i, count in enumerate(spec.buffers):
        for k in range(count):
            modules[i].register_buffer(f"b{k}", torch.zeros(k + 1))
    for i in sorted(spec.scalars):
        modules[i].register_parameter("s", nn.Parameter(torch.tensor(float(i))))
    for i in sorted(spec.equal):
        modules[i].__class__ = equal_module_class()
    for i in sorted(spec.containers - spec.equal):
        modules[i].__class__ = container_module_class()
    ignored = ignored_parameters(spec, modules)
    if area is not None:
        for i in sorted(spec.tree.replicate):
            area.mark_incompatible(modules[i], "replicate")
        if groups:
            for i in sorted(spec.groups):
                area.mark_own_group(modules[i])
    return BuiltFsdp2(spec, tree, tuple(modules[i] for i in spec.roots), ignored)


#: Not run state: one class a process, built on first use (torch is imported
#: lazily); every session's modules may share it.
_EQUAL_MODULE: list = []


def equal_module_class():
    """An ``nn.Module`` subclass whose instances all compare equal to each
    other, hashing by identity as every module does: a model may define
    ``__eq__`` (a config-like module comparing its fields), and FSDP2 must
    still tell its modules apart by identity."""
    if not _EQUAL_MODULE:
        from torch import nn

        class EqualModule(nn.Module):
            def __eq__(self, other):
                return True if isinstance(other, EqualModule) else NotImplemented

            __hash__ = nn.Module.__hash__

        _EQUAL_MODULE.append(EqualModule)
    return _EQUAL_MODULE[0]


#: Not run state: one class a process, as for :data:`_EQUAL_MODULE`.
_CONTAINER_MODULE: list = []


def container_module_class():
    """An ``nn.ModuleList`` subclass with a forward of its own (its modules
    in turn): a container that is a module like any other, which
    ``fully_shard`` must take as a group's root (FS2-7)."""
    if not _CONTAINER_MODULE:
        from torch import nn

        class Stage(nn.ModuleList):
            def forward(self, x):
                for module in self:
                    x = module(x)
                return x

        _CONTAINER_MODULE.append(Stage)
    return _CONTAINER_MODULE[0]


#: ``(module, SCALAR)`` in ``Fsdp2Spec.ignored``: that module's scalar parameter ``s``
SCALAR = -1


def ignored_scalars(spec: Fsdp2Spec) -> frozenset[int]:
    """Modules whose scalar parameter ``s`` the spec ignores."""
    return frozenset(i for i, k in spec.ignored or () if k == SCALAR and i in spec.scalars)


def ignored_parameters(spec: Fsdp2Spec, modules) -> set | None:
    """The parameter objects ``spec.ignored`` names (a missing one skipped)."""
    if spec.ignored is None:
        return None
    ignored = set()
    for i, k in sorted(spec.ignored):
        if k == SCALAR:
            if modules[i]._parameters.get("s") is not None:
                ignored.add(modules[i]._parameters["s"])
            continue
        own = list(dict.fromkeys(p for p in modules[i]._parameters.values() if p is not None))
        if k < len(own):
            ignored.add(own[k])
    return ignored


# --- strategies ------------------------------------------------------------------


@st.composite
def fsdp2_specs(
    draw,
    *,
    max_modules: int = 14,
    multi_root: bool = True,
    groups: bool = True,
    ignored: bool = True,
    buffers: bool = True,
    replicate: bool = True,
    scalars: bool = False,
    shared: bool = True,
) -> Fsdp2Spec:
    """Random FSDP2 situations. Shrinks towards a single root over a star
    with nothing attached."""
    tree = draw(module_trees(max_modules=max_modules, states=False, ignored=False, replicate=replicate, shared=shared))
    n = tree.size

    roots: tuple[int, ...] = (0,)
    if multi_root and n > 2:
        picks = _byte_list(draw, 3)
        chosen = tuple(dict.fromkeys(1 + b % (n - 1) for b in picks))
        below = sorted(_below(tree, chosen[0])) if chosen else []
        if below and draw(st.booleans()):
            # nesting on purpose, not by chance: a module below the first
            # root joins the group, before or after it (FS2-5)
            inner = below[draw(st.integers(0, len(below) - 1))]
            pair = (chosen[0], inner) if draw(st.booleans()) else (inner, chosen[0])
            chosen = tuple(dict.fromkeys((*pair, *chosen[1:])))
        if len(chosen) >= 2:
            roots = chosen  # several modules forming one group (maybe nested)
    root_set = set(roots)

    group_set = frozenset()
    if groups and n > 1:
        group_set = frozenset(
            1 + (b >> 1) % (n - 1) for b in _byte_list(draw, 4) if b & 1
        ) - root_set

    ignored_set = None
    if ignored and draw(st.booleans()):
        # per module: 0 nothing, 1 every own parameter, 2 the first, 3 the second
        ignored_set = set()
        for i, b in enumerate(_byte_table(draw, n)):
            mode = b % 4
            if mode == 1:
                ignored_set.update((i, k) for k in range(4))
            elif mode >= 2:
                ignored_set.add((i, mode - 2))
        ignored_set = frozenset(ignored_set)

    bufs: tuple[int, ...] = ()
    if buffers:
        bufs = tuple(1 if b % 4 == 3 else 0 for b in _byte_table(draw, n))
        if not any(bufs):
            bufs = ()
    scalar_set = frozenset()
    if scalars:
        scalar_set = frozenset((b >> 1) % n for b in _byte_list(draw, 2) if b & 1)
    if scalar_set and ignored and draw(st.booleans()):
        # an ignored scalar on purpose (fully_shard never touches an ignored
        # parameter, so it is no error, FS2-4); with a buffer, its module
        # stays managed and its states are collected past it
        pick = sorted(scalar_set)[draw(st.integers(0, len(scalar_set) - 1))]
        ignored_set = (ignored_set or frozenset()) | {(pick, SCALAR)}
        if draw(st.booleans()):
            bufs = tuple(1 if i == pick else b for i, b in enumerate(bufs or (0,) * n))
    return Fsdp2Spec(tree, roots, group_set, ignored_set, bufs, scalar_set)


# --- explicit shapes (FS2-6) -----------------------------------------------------


def _with_params(children, every: int) -> TreeSpec:
    n = len(children)
    return TreeSpec(tuple(children), params=tuple(1 if i % every == 0 else 0 for i in range(n)))


def fsdp2_deep_chain(depth: int, ignored: bool = False) -> Fsdp2Spec:
    """``depth`` modules in a chain, a parameter on every 7th; with
    ``ignored``, every 3rd module's parameters are ignored."""
    children = [(i + 1,) for i in range(depth - 1)] + [()]
    return _shape(_with_params(children, 7), ignored)


def fsdp2_wide_tree(width: int, ignored: bool = False) -> Fsdp2Spec:
    children = [tuple(range(1, width + 1))] + [()] * width
    return _shape(_with_params(children, 3), ignored)


def fsdp2_diamond_chain(diamonds: int, ignored: bool = False) -> Fsdp2Spec:
    children: list[tuple[int, ...]] = []
    for d in range(diamonds):
        top = 3 * d
        children += [(top + 1, top + 2), (top + 3,), (top + 3,)]
    children.append(())
    return _shape(_with_params(children, 2), ignored)


def _nested(children, roots, groups=(), replicate=()) -> Fsdp2Spec:
    tree = TreeSpec(tuple(children), replicate=frozenset(replicate), params=(1,) * len(children))
    return Fsdp2Spec(tree, tuple(roots), frozenset(groups))


#: one ``fully_shard`` call whose modules nest (FS2-5): torch documents the
#: group's roots as the given modules not below another given one
#: (``_get_root_modules``, in the composable contract and before the walk),
#: so a nested module is part of the outer one's walk, where that walk puts
#: it, and not where or whether it was given
NESTED_ROOTS = {
    # 0 -> (1, 2), 2 -> (3, 4): the inner roots are not their parent's first child
    "outer-first": _nested([(1, 2), (), (3, 4), (), ()], (0, 2)),
    "inner-first": _nested([(1, 2), (), (3, 4), (), ()], (2, 0)),
    "three-levels": _nested([(1, 2), (), (3, 4), (), ()], (4, 0, 2)),
    "beside-an-outer-root": _nested([(1, 2), (), (3, 4), (), ()], (4, 2, 1)),
    # 0 -> (1, 2) -> 3 -> 4: 3 is below the given 2 (and 1, not given)
    "through-a-shared-module": _nested([(1, 2), (3,), (3,), (4,), ()], (3, 2)),
    # 0 -> 1 -> 2 -> 3: 2 is below 0, past a module the walk does not enter
    "below-another-group": _nested([(1,), (2,), (3,), ()], (2, 0), groups=(1,)),
    "below-replicate": _nested([(1,), (2,), (3,), ()], (0, 2), replicate=(1,)),
}


#: modules that all compare equal (FS2-1/2/5): a walk must tell a root from
#: a module with its own group, a visited module from its sibling and a root
#: from the modules below another root by identity, never by ``==``
#: (``!=``, ``in`` on a list); equality would enter the group, skip the
#: sibling or drop the root
EQUAL_MODULES = {
    # 0 -> (1, 2), 1 -> 3: 1 has its own group and equals the root
    "own-group-below-the-root": Fsdp2Spec(
        TreeSpec(((1, 2), (3,), (), ()), params=(1, 1, 1, 1)), groups=frozenset({1}), equal=frozenset(range(4))),
    # 0 -> (1, 2, 3), 1 -> 4: every sibling equals the one visited before it
    "equal-siblings": Fsdp2Spec(
        TreeSpec(((1, 2, 3), (4,), (), (), ()), params=(1, 1, 1, 1, 1)), equal=frozenset(range(5))),
    # 0 -> (1, 2), 1 -> 3, 2 -> 4: the roots 1 and 2 are side by side, each
    # equal to the other (neither is below the other) and to 4, which has
    # its own group
    "several-roots": Fsdp2Spec(
        TreeSpec(((1, 2), (3,), (4,), (), ()), params=(1, 1, 1, 1, 1)), roots=(1, 2), groups=frozenset({4}),
        equal=frozenset(range(5))),
}


#: scalar (0-dim) parameters that ``ignored_params`` names (FS2-4): an
#: ignored parameter is never touched, so fully_shard takes these and leaves
#: them out of its states; a walk that rejects a scalar before asking
#: whether it is ignored raises on them. A non-ignored scalar beside one is
#: still rejected, by its own name.
IGNORED_SCALARS = {
    # 0 -> 1: the root holds w0 and the ignored s
    "ignored-on-the-root": Fsdp2Spec(
        TreeSpec(((1,), ()), params=(1, 1)), ignored=frozenset({(0, SCALAR)}), scalars=frozenset({0})),
    # 0 -> (1, 2): 1 holds only the ignored s and a buffer, which keeps it managed
    "ignored-beside-a-buffer": Fsdp2Spec(
        TreeSpec(((1, 2), (), ()), params=(1, 0, 1)), ignored=frozenset({(1, SCALAR)}), buffers=(0, 1, 0),
        scalars=frozenset({1})),
    # 0 -> (1, 2): 2 holds only the ignored s, so the ignore rule drops it (FS2-3)
    "ignored-module-dropped": Fsdp2Spec(
        TreeSpec(((1, 2), (), ()), params=(1, 1, 0)), ignored=frozenset({(2, SCALAR)}), scalars=frozenset({2})),
    # 0 -> (1, 2): 1's s is ignored, 2's is not: the call rejects 2's
    "beside-a-scalar-not-ignored": Fsdp2Spec(
        TreeSpec(((1, 2), (), ()), params=(1, 1, 1)), ignored=frozenset({(1, SCALAR)}), scalars=frozenset({1, 2})),
}


def fsdp2_ignored_diamonds(diamonds: int, chains: int = 16) -> Fsdp2Spec:
    """``chains`` diamond chains of ``diamonds`` diamonds each under a root
    whose own parameter is kept; every module below it has one parameter,
    ignored, and no buffer. So the ignore rule drops everything below the
    root, deciding each module from all of its children: the bottom of a
    chain is below each top by 2**diamonds paths, and only an implementation
    that remembers its decisions (one per module) stays linear (FS2-6)."""
    children: list[tuple[int, ...]] = [()]
    tops = []
    for _ in range(chains):
        top = len(children)
        tops.append(top)
        for d in range(diamonds):
            t = top + 3 * d
            children += [(t + 1, t + 2), (t + 3,), (t + 3,)]
        children.append(())
    children[0] = tuple(tops)
    tree = TreeSpec(tuple(children), params=(1,) * len(children))
    return Fsdp2Spec(tree, ignored=frozenset((i, 0) for i in range(1, tree.size)))


def fsdp2_ignored_chains(depth: int, chains: int = 8) -> Fsdp2Spec:
    """``chains`` chains of ``depth`` modules under a root, every module with
    one parameter: the root's kept; in each chain, every other parameter of
    the upper half ignored and all of the lower half; every other chain ends
    in a module with a buffer. So the ignore rule drops the lower halves of
    the chains without a buffer and keeps every other module, a buffer
    deep below keeping its whole chain. A rule deciding each module from its
    whole subtree (its buffers, say, as ``buffers()`` collects them) is
    quadratic in ``depth`` (FS2-6)."""
    children: list[tuple[int, ...]] = [()]
    tops, ignored, buffered = [], set(), set()
    for c in range(chains):
        top = len(children)
        tops.append(top)
        for pos in range(depth):
            children.append((top + pos + 1,) if pos + 1 < depth else ())
            if pos >= depth // 2 or pos % 2:
                ignored.add((top + pos, 0))
        if c % 2:
            buffered.add(top + depth - 1)
    children[0] = tuple(tops)
    tree = TreeSpec(tuple(children), params=(1,) * len(children))
    buffers = tuple(1 if i in buffered else 0 for i in range(tree.size))
    return Fsdp2Spec(tree, ignored=frozenset(ignored), buffers=buffers)


def _shape(tree: TreeSpec, ignored: bool) -> Fsdp2Spec:
    if not ignored:
        return Fsdp2Spec(tree)
    return Fsdp2Spec(tree, ignored=frozenset((i, 0) for i in range(0, tree.size, 3)))


def _for_fully_shard(spec: Fsdp2Spec, conflicts: bool) -> Fsdp2Spec:
    import dataclasses

    tree = spec.tree
    groups = spec.groups
    if not conflicts:
        tree = dataclasses.replace(tree, tied=())
        # an earlier group above a root would manage that root, and the
        # group of the roots would take it again: a conflict (FS2-8)
        groups = frozenset(g for g in groups if not set(spec.roots) & _below(tree, g))
    # fully_shard on a replicate-owned module is another API's business
    tree = dataclasses.replace(tree, replicate=tree.replicate - set(spec.roots) - spec.groups)
    # a scalar the call would shard is a call the spec rejects (test_managed_states
    # and the case probe's business); an ignored one is never touched, so stays
    return dataclasses.replace(spec, tree=tree, groups=groups, scalars=ignored_scalars(spec))


def _below(tree: TreeSpec, top: int) -> set[int]:
    seen, stack = set(), list(tree.children[top])
    while stack:
        i = stack.pop()
        if i not in seen:
            seen.add(i)
            stack.extend(tree.children[i])
    return seen


def fully_shard_specs(*, conflicts: bool = False, max_modules: int = 10):
    """Specs for real ``fully_shard`` calls (groups applied inner first). With
    ``conflicts=False``: no shared modules and no tied parameters, so no
    group can reach another's modules; with ``True``: both, so some do."""
    specs = fsdp2_specs(max_modules=max_modules, shared=conflicts, scalars=True).map(
        lambda s: _for_fully_shard(s, conflicts))
    # containers with a forward of their own where the calls must succeed (FS2-7)
    return specs if conflicts else specs.flatmap(_with_containers)


def _with_containers(spec: Fsdp2Spec):
    """Some of the modules a call gives ``fully_shard`` (the spec's roots,
    the earlier groups) made containers with a forward of their own;
    shrinks towards none."""
    given = sorted(set(spec.roots) | spec.groups)
    return st.sets(st.sampled_from(given), max_size=len(given)).map(
        lambda picked: dataclasses.replace(spec, containers=frozenset(picked)))


# --- whole plans: sequences of fully_shard calls on one model ---------------------


@dataclass(frozen=True)
class PlanCall:
    """One ``fully_shard`` call: its roots (module indices, in the order
    given) and its ``ignored_params`` (``None``: the default; else
    ``(module, k)`` pairs as in :class:`Fsdp2Spec`)."""

    roots: tuple[int, ...]
    ignored: frozenset[tuple[int, int]] | None = None

    def to_source(self) -> str:
        if self.ignored is None:
            return f"PlanCall({self.roots!r})"
        return f"PlanCall({self.roots!r}, frozenset({sorted(self.ignored)!r}))"


@dataclass(frozen=True)
class Fsdp2Plan:
    """A model and the ``fully_shard`` calls a plan makes on it, in order.
    ``tree.replicate`` marks modules ``replicate`` owns; ``shared_buffer``
    names modules that all register one tensor (a rotary cache registered in
    every layer); ``fsdp1_units`` modules carrying an FSDP1 state, as models
    migrating from FSDP1 do (FSDP2's walk passes through them)."""

    tree: TreeSpec
    calls: tuple[PlanCall, ...] = (PlanCall((0,)),)
    buffers: tuple[int, ...] = ()
    shared_buffer: frozenset[int] = frozenset()
    fsdp1_units: frozenset[int] = frozenset()

    @property
    def size(self) -> int:
        return self.tree.size

    def call_spec(self, k: int, groups=frozenset()) -> Fsdp2Spec:
        """Call ``k`` as the single-call oracle sees it, ``groups`` (module
        indices) holding a group of their own from earlier calls."""
        call = self.calls[k]
        return Fsdp2Spec(self.tree, call.roots, frozenset(groups), call.ignored, self.buffers)

    def restricted(self, several_roots: bool = True, ignored: bool = True) -> Fsdp2Plan:
        """The plan as a ``fully_shard`` without several roots (each call
        keeps its first root) or without ``ignored_params`` can make it."""
        calls = tuple(PlanCall(c.roots if several_roots else c.roots[:1], c.ignored if ignored else None)
                      for c in self.calls)
        return self if calls == self.calls else dataclasses.replace(self, calls=calls)

    def to_source(self) -> str:
        parts = [f"tree={self.tree.to_source()}",
                 "calls=(" + "".join(c.to_source() + ", " for c in self.calls) + ")"]
        if self.buffers:
            parts.append(f"buffers={self.buffers!r}")
        for name in ("shared_buffer", "fsdp1_units"):
            value = getattr(self, name)
            if value:
                parts.append(f"{name}=frozenset({sorted(value)!r})")
        return "Fsdp2Plan(" + ", ".join(parts) + ")"


@dataclass
class BuiltFsdp2Plan:
    plan: Fsdp2Plan
    built: BuiltFsdp2  # the modules, as the first call sees them
    #: the FSDP1 units' states (torch's registry holds them weakly)
    fsdp1_states: list = field(default_factory=list)

    @property
    def modules(self) -> list:
        return self.built.modules

    @property
    def root(self):
        return self.built.modules[0]

    def at(self, k: int, groups=frozenset()) -> BuiltFsdp2:
        """Call ``k`` over the same modules: its roots, its ignored parameter
        objects, and ``groups`` (module indices) holding earlier groups."""
        spec = self.plan.call_spec(k, groups)
        modules = self.built.modules
        return BuiltFsdp2(spec, self.built.tree, tuple(modules[i] for i in spec.roots), ignored_parameters(spec, modules))

    def calls(self) -> list[tuple[tuple, set | None]]:
        """``(root modules, ignored parameter objects or None)`` per call."""
        return [(b.roots, b.ignored) for b in (self.at(k) for k in range(len(self.plan.calls)))]

    def replicate(self) -> list:
        return [self.modules[i] for i in sorted(self.plan.tree.replicate)]

    def label(self, obj) -> str:
        return self.built.label(obj)


def build_fsdp2_plan(plan: Fsdp2Plan, area=None, traversal=None) -> BuiltFsdp2Plan:
    """Real modules for ``plan``; with an FSDP2 area, its ``replicate`` marks;
    with a traversal area, the FSDP1 units' states (an implementation without
    one gets none: its FSDP2 walk has nothing of FSDP1 to see)."""
    import torch

    base = Fsdp2Spec(plan.tree, plan.calls[0].roots, buffers=plan.buffers)
    built = build_fsdp2(base, area, groups=False)
    if plan.shared_buffer:
        rope = torch.arange(4.0)
        for i in sorted(plan.shared_buffer):
            built.modules[i].register_buffer("rope", rope)
    states = []
    if traversal is not None:
        for i in sorted(plan.fsdp1_units):
            states.append(traversal.new_state(None, False))
            traversal.attach_state(built.modules[i], states[-1])
    return BuiltFsdp2Plan(plan, built, states)


def _closed_below(children, tops) -> set[int]:
    seen, stack = set(tops), list(tops)
    while stack:
        for c in children[stack.pop()]:
            if c not in seen:
                seen.add(c)
                stack.append(c)
    return seen


def _sharing_parents(children) -> list[tuple[int, int]]:
    """Pairs of non-root modules, neither below the other, with a child in common."""
    parents: dict[int, list[int]] = {}
    for p, kids in enumerate(children):
        for c in dict.fromkeys(kids):
            parents.setdefault(c, []).append(p)
    pairs = []
    for ps in parents.values():
        ps = [p for p in ps if p]
        for i, a in enumerate(ps):
            for b in ps[i + 1:]:
                if b not in _closed_below(children, (a,)) and a not in _closed_below(children, (b,)):
                    pairs.append((a, b))
    return pairs


def _ignored_table(draw, n: int) -> frozenset[tuple[int, int]]:
    # per module: 0 nothing, 1 every own parameter, 2 the first, 3 the second
    out = set()
    for i, b in enumerate(_byte_table(draw, n)):
        mode = b % 4
        if mode == 1:
            out.update((i, k) for k in range(4))
        elif mode >= 2:
            out.add((i, mode - 2))
    return frozenset(out)


@st.composite
def fsdp2_plans(
    draw,
    *,
    max_modules: int = 10,
    max_calls: int = 4,
    conflicts: bool = True,
    multi_root: bool = True,
    grouped_roots: bool = True,
    ignored: bool = True,
    buffers: bool = True,
    shared_buffers: bool = True,
    replicate: bool = True,
    fsdp1_units: bool = True,
    reorder: bool = True,
) -> Fsdp2Plan:
    """Random plans: a model tree and the ``fully_shard`` calls made on it,
    inner groups first and the root last unless reordered. Shrinks towards a
    single call on the root of a small star with nothing attached.

    ``conflicts=False``: no shared modules, no tied parameters, no root that
    holds a group already, no call rooted inside an earlier call's subtree:
    no call can reach another's modules or parameters (what FS2-7 applies).
    With ``True`` (and ``grouped_roots``, ``reorder``) some calls do."""
    tree = draw(module_trees(max_modules=max_modules, states=False, ignored=False, replicate=replicate, shared=conflicts))
    if not conflicts:
        tree = dataclasses.replace(tree, tied=())
    n = tree.size

    inner: list[tuple[int, ...]] = []
    if n > 1:
        for _ in range(max_calls - 1):
            picks = _byte_list(draw, 3 if multi_root else 1)
            roots = tuple(dict.fromkeys(1 + b % (n - 1) for b in picks))
            if not roots:
                break
            inner.append(roots)
    pairs = _sharing_parents(tree.children) if multi_root and conflicts and n > 2 else []
    if pairs and draw(st.booleans()):
        # targeted, not by chance (about 2 % of plans, in a tenth of the
        # trees): one call's roots are two parents of a shared module,
        # neither below the other
        inner.append(pairs[draw(st.integers(0, len(pairs) - 1))])
    # inner first: a module's descendants have higher indices
    inner.sort(key=lambda roots: -min(roots))
    if not conflicts:
        kept, taken = [], set()
        for roots in inner:
            if not taken & set(roots):
                kept.append(roots)
                taken |= _closed_below(tree.children, roots)
        inner = kept
    root_picks = _byte_list(draw, 2) if multi_root and conflicts and n > 1 else b""
    last = tuple(dict.fromkeys((0, *(1 + b % (n - 1) for b in root_picks))))
    order = [*inner, last]

    if grouped_roots and conflicts and len(order) > 1:
        g = draw(st.integers(0, 255))
        if g & 1:
            # a later call given a module an earlier call made a root (first, middle or last of its roots)
            k = 1 + (g >> 1) % (len(order) - 1)
            earlier = [r for roots in order[:k] for r in roots]
            r = earlier[(g >> 3) % len(earlier)]
            roots = [x for x in order[k] if x != r]
            at = ((g >> 5) % 3) * len(roots) // 2
            order[k] = tuple(roots[:at] + [r] + roots[at:])
    if reorder and conflicts and len(order) > 1:
        move = draw(st.integers(0, len(order) - 1))
        if move:
            # a call moved past the others: an inner group after its parent's, or the root's before another
            order.append(order.pop(len(order) - 1 - move))

    calls = []
    for roots in order:
        ign = _ignored_table(draw, n) if ignored and draw(st.booleans()) else None
        calls.append(PlanCall(roots, ign))

    bufs: tuple[int, ...] = ()
    if buffers:
        bufs = tuple(1 if b % 4 == 3 else 0 for b in _byte_table(draw, n))
        if not any(bufs):
            bufs = ()
    shared = frozenset()
    if shared_buffers and n > 1:
        shared = frozenset((b >> 1) % n for b in _byte_list(draw, 4) if b & 1)
        if len(shared) < 2:
            shared = frozenset()
    all_roots = {r for roots in order for r in roots}
    units = frozenset()
    if fsdp1_units and n > 1:
        # never a call's root: fully_shard on an FSDP1 unit is FSDP1's business
        units = frozenset((b >> 1) % n for b in _byte_list(draw, 2) if b & 1) - all_roots
    # fully_shard on a replicate-owned module is another API's business
    tree = dataclasses.replace(tree, replicate=tree.replicate - all_roots)
    return Fsdp2Plan(tree, tuple(calls), bufs, shared, units)


def fsdp2_shared_ignored(width: int, depth: int = 8) -> Fsdp2Plan:
    """FS2-6 with the ignore rule over a shared subtree: ``width`` layers
    under the root, each registering the same chain of ``depth`` modules (a
    shared rotary/embedding block) whose parameters are all ignored, and
    each layer's own parameter ignored on every other layer; one call on the
    root. A rule without a memo re-walks the chain once per layer."""
    chain = list(range(width + 1, width + 1 + depth))
    children = [tuple(range(1, width + 1))] + [(chain[0],)] * width
    children += [(c + 1,) for c in chain[:-1]] + [()]
    n = len(children)
    params = tuple(1 if i else 0 for i in range(n))
    ignored = frozenset((i, 0) for i in range(1, n) if i > width or i % 2)
    tree = TreeSpec(tuple(children), params=params)
    return Fsdp2Plan(tree, (PlanCall((0,), ignored),))
