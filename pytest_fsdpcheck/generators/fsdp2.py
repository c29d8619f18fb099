"""Module trees for FSDP2 (``fully_shard``): a pure-data spec on top of
:class:`~pytest_fsdpcheck.generators.trees.TreeSpec`, its builder, and
hypothesis strategies that shrink towards one root, no nested groups, no
ignored parameters and no buffers.

Children always have higher indices than their parents (a ``TreeSpec``
rule), so applying nested groups in descending index order applies every
group before the groups above it, as FSDP2 wants (inner first).
"""

from __future__ import annotations

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
    #: parameter of module (registration order; a missing one is skipped)
    ignored: frozenset[tuple[int, int]] | None = None
    buffers: tuple[int, ...] = ()  # own buffers per module
    scalars: frozenset[int] = frozenset()  # modules given a scalar parameter ``s``

    @property
    def size(self) -> int:
        return self.tree.size

    def to_source(self) -> str:
        parts = [f"tree={self.tree.to_source()}"]
        if self.roots != (0,):
            parts.append(f"roots={self.roots!r}")
        for name in ("groups", "scalars"):
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

    from ..profiles import note_example

    note_example(repr(spec))
    tree = build_tree(spec.tree)
    modules = tree.modules
    for i, count in enumerate(spec.buffers):
        for k in range(count):
            modules[i].register_buffer(f"b{k}", torch.zeros(k + 1))
    for i in sorted(spec.scalars):
        modules[i].register_parameter("s", nn.Parameter(torch.tensor(float(i))))
    ignored = ignored_parameters(spec, modules)
    if area is not None:
        for i in sorted(spec.tree.replicate):
            area.mark_incompatible(modules[i], "replicate")
        if groups:
            for i in sorted(spec.groups):
                area.mark_own_group(modules[i])
    return BuiltFsdp2(spec, tree, tuple(modules[i] for i in spec.roots), ignored)


def ignored_parameters(spec: Fsdp2Spec, modules) -> set | None:
    """The parameter objects ``spec.ignored`` names (a missing one skipped)."""
    if spec.ignored is None:
        return None
    ignored = set()
    for i, k in sorted(spec.ignored):
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
    return dataclasses.replace(spec, tree=tree, groups=groups, scalars=frozenset())


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
    return fsdp2_specs(max_modules=max_modules, shared=conflicts).map(lambda s: _for_fully_shard(s, conflicts))
