"""Module trees for traversal and annotation: a pure-data spec, its builder,
and hypothesis strategies that shrink towards small, flat, unmarked trees.

A ``TreeSpec`` is plain tuples of ints, so an example prints, pickles and
replays without torch; ``build_tree`` turns it into real modules and lets an
implementation attach its own FSDP states and ``replicate`` marks.
"""

from __future__ import annotations

import contextlib
import gc
from dataclasses import dataclass, field

from hypothesis import strategies as st


@dataclass(frozen=True)
class TreeSpec:
    """A module DAG. Module 0 is the root; children only point to higher
    indices, so the graph is acyclic. A child listed twice under one parent is
    registered under two names (``children()`` yields it once)."""

    children: tuple[tuple[int, ...], ...]
    #: state id per module (``None``: no state); equal ids share one state
    states: tuple[int | None, ...] = ()
    root_states: frozenset[int] = frozenset()  # state ids with ``_is_root``
    handled_states: frozenset[int] = frozenset()  # state ids holding a handle
    replicate: frozenset[int] = frozenset()  # modules marked ``replicate``
    ignored: frozenset[int] = frozenset()  # modules in the ignored set
    params: tuple[int, ...] = ()  # own parameters per module
    frozen: frozenset[int] = frozenset()  # modules whose parameters are frozen
    tied: tuple[tuple[int, int], ...] = ()  # (a, b): b also registers a's first parameter

    @property
    def size(self) -> int:
        return len(self.children)

    def state_of(self, module: int) -> int | None:
        return self.states[module] if self.states else None

    def state_ids(self) -> list[int]:
        return sorted({s for s in self.states if s is not None})

    def to_source(self) -> str:
        """A Python expression rebuilding this spec (for reproducers)."""
        parts = [f"children={self.children!r}"]
        for name in ("states", "params", "tied"):
            value = getattr(self, name)
            if value:
                parts.append(f"{name}={value!r}")
        for name in ("root_states", "handled_states", "replicate", "ignored", "frozen"):
            value = getattr(self, name)
            if value:
                parts.append(f"{name}=frozenset({sorted(value)!r})")
        return "TreeSpec(" + ", ".join(parts) + ")"


class Handle:
    """Stand-in for a ``FlatParamHandle``: only its identity matters."""

    __slots__ = ("state_id",)

    def __init__(self, state_id: int):
        self.state_id = state_id

    def __repr__(self) -> str:
        return f"Handle({self.state_id})"


@dataclass
class BuiltTree:
    spec: TreeSpec
    root: object
    modules: list  # index -> module
    states: dict = field(default_factory=dict)  # state id -> state object
    handles: dict = field(default_factory=dict)  # state id -> Handle

    def label(self, obj) -> str:
        """``m3`` for module 3, ``s1`` for state 1, else ``repr``."""
        index = self._index()
        if id(obj) in index:
            return index[id(obj)]
        return repr(obj)

    def labels(self, objs) -> list[str]:
        return [self.label(o) for o in objs]

    def _index(self) -> dict:
        cached = getattr(self, "_label_index", None)
        if cached is None:
            cached = {id(m): f"m{i}" for i, m in enumerate(self.modules)}
            cached.update({id(s): f"s{k}" for k, s in self.states.items()})
            cached.update({id(h): f"h{k}" for k, h in self.handles.items()})
            self._label_index = cached
        return cached


def build_tree(spec: TreeSpec, traversal=None) -> BuiltTree:
    """Real modules for ``spec``; with a traversal area, also its states and marks."""
    import torch
    from torch import nn

    from ..core.profiles import note_example

    note_example(repr(spec))
    with _gc_paused():
        return _build(spec, traversal, torch, nn)


@contextlib.contextmanager
def _gc_paused():
    # Building 100,000 modules allocates ~1.5M dicts; the cyclic collector
    # rescanning them cost three quarters of the build time.
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def _module_factory(nn):
    """A maker of plain ``nn.Module`` objects that skips ``__init__``'s ~15
    attribute assignments through ``super().__setattr__``: it copies the
    ``__dict__`` of a freshly constructed one, with a new empty container
    wherever that has one. Half the cost of building a 100,000-module tree.
    Any attribute it cannot copy that way (not an empty builtin container,
    not an immutable atom) means a torch it does not know: construct normally."""
    template = vars(nn.Module())
    atoms = {k: v for k, v in template.items() if v is None or isinstance(v, (bool, int, float, str))}
    containers = tuple((k, type(v)) for k, v in template.items() if k not in atoms and isinstance(v, (dict, set, list)) and not v)
    if len(atoms) + len(containers) != len(template):
        return nn.Module
    new = object.__new__
    module_cls = nn.Module
    ordered = dict.fromkeys(template)  # keep __init__'s attribute order

    def make():
        module = new(module_cls)
        attrs = module.__dict__
        attrs.update(ordered)
        attrs.update(atoms)
        for key, kind in containers:
            attrs[key] = kind()
        return module

    return make


def _build(spec, traversal, torch, nn) -> BuiltTree:
    make = _module_factory(nn) if spec.size > 1000 else nn.Module
    modules = [make() for _ in range(spec.size)]
    for parent, kids in enumerate(spec.children):
        registry = modules[parent]._modules
        for k, child in enumerate(kids):
            # What add_module does once the name is known to be valid and new.
            registry[f"c{k}"] = modules[child]
    for i, count in enumerate(spec.params):
        for p in range(count):
            param = nn.Parameter(torch.full((p + 1,), float(i)), requires_grad=i not in spec.frozen)
            modules[i].register_parameter(f"w{p}", param)
    for a, b in spec.tied:
        first = next(iter(modules[a]._parameters.values()), None)
        if first is not None:
            modules[b].register_parameter("tied", first)
    tree = BuiltTree(spec, modules[0], modules)
    if traversal is not None:
        attach_states(tree, traversal)
    return tree


def attach_states(tree: BuiltTree, traversal) -> None:
    spec = tree.spec
    with _calls_together(traversal, f"building a {spec.size}-module tree"):
        for sid in spec.state_ids():
            handle = Handle(sid) if sid in spec.handled_states else None
            if handle is not None:
                tree.handles[sid] = handle
            tree.states[sid] = traversal.new_state(handle, sid in spec.root_states)
        for i, sid in enumerate(spec.states):
            if sid is not None:
                traversal.attach_state(tree.modules[i], tree.states[sid])
        for i in sorted(spec.replicate):
            traversal.mark_incompatible(tree.modules[i], "replicate")


def _calls_together(traversal, what: str):
    # The plugin's guard (plugin/guard.py) contains a run of calls as one
    # where its area offers to (two calls per module, each otherwise paying
    # for its own containment); any other area is called plainly. Looked up
    # on the type: an area's own __getattr__ must not answer for it.
    span = getattr(type(traversal), "_fsdpcheck_span", None)
    return span(traversal, what) if span is not None else contextlib.nullcontext()


# --- explicit shapes ---------------------------------------------------------


def deep_chain(depth: int, state_every: int = 7) -> TreeSpec:
    """``depth`` modules, each the only child of the previous one."""
    children = tuple((i + 1,) for i in range(depth - 1)) + ((),)
    states = tuple(i // state_every if i % state_every == 0 else None for i in range(depth))
    sids = frozenset(s for s in states if s is not None)
    return TreeSpec(children, states, root_states=frozenset({0}), handled_states=sids)


def wide_tree(width: int, state_every: int = 3) -> TreeSpec:
    """A root with ``width`` leaf children."""
    children = (tuple(range(1, width + 1)),) + ((),) * width
    states = (None,) + tuple(i if i % state_every == 0 else None for i in range(width))
    sids = frozenset(s for s in states if s is not None)
    return TreeSpec(children, states, handled_states=sids)


def diamond_chain(diamonds: int) -> TreeSpec:
    """``top -> (left, right) -> next top`` repeated: every top is reachable by
    ``2**k`` paths, so a traversal without a visited set explodes."""
    children: list[tuple[int, ...]] = []
    for d in range(diamonds):
        top = 3 * d
        children.append((top + 1, top + 2))
        children.append((top + 3,))
        children.append((top + 3,))
    children.append(())  # the final top
    n = len(children)
    states = tuple(i if i % 3 else None for i in range(n))
    sids = frozenset(s for s in states if s is not None)
    return TreeSpec(tuple(children), states, handled_states=sids)


# --- strategies ----------------------------------------------------------------


def _byte_table(draw, size: int) -> bytes:
    # One hypothesis choice per table instead of one per module: a draw costs
    # ~30 us of engine bookkeeping, and a 24-module tree made ~100 of them
    # (4 ms of the 6 ms an example took). Bytes still shrink one by one
    # towards 0, and every table below maps 0 to "nothing attached".
    return draw(st.binary(min_size=size, max_size=size)) if size else b""


def _byte_list(draw, max_size: int) -> bytes:
    # Variable length: the shrinker deletes entries.
    return draw(st.binary(max_size=max_size)) if max_size else b""


@st.composite
def module_trees(
    draw,
    *,
    min_modules: int = 1,
    max_modules: int = 24,
    shared: bool = True,
    states: bool = True,
    replicate: bool = True,
    ignored: bool = True,
    params: bool = True,
) -> TreeSpec:
    """Random module DAGs. Shrinks towards a star with nothing attached."""
    n = draw(st.integers(min_modules, max_modules))
    kids: list[list[int]] = [[] for _ in range(n)]
    for i, byte in enumerate(_byte_table(draw, n - 1), start=1):
        kids[byte % i].append(i)  # parent: any earlier module; 0 (the root) when shrunk
    if shared and n > 2:
        extra = _byte_list(draw, 2 * (n // 2))
        for a, b in zip(extra[0::2], extra[1::2], strict=False):
            child = 1 + b % (n - 1)
            # any earlier module; the child may already be its child: then it gets a second name
            kids[a % child].append(child)
    # A sort key per registration; stable, so all-zero keys keep the drawn order.
    keys = iter(_byte_table(draw, sum(len(k) for k in kids if len(k) > 1)))
    children = tuple(
        tuple(c for _, _, c in sorted((next(keys), pos, c) for pos, c in enumerate(k))) if len(k) > 1 else tuple(k)
        for k in kids
    )

    state_ids: tuple[int | None, ...] = ()
    roots = handled = frozenset()
    if states:
        n_states = max(1, n // 2)
        # even byte: no state (half the modules, as before); odd: a state id
        state_ids = tuple(None if b % 2 == 0 else (b >> 1) % n_states for b in _byte_table(draw, n))
        used = sorted({s for s in state_ids if s is not None})
        if used:
            flags = _byte_table(draw, len(used))
            roots = frozenset(s for s, f in zip(used, flags, strict=True) if f & 1)
            handled = frozenset(s for s, f in zip(used, flags, strict=True) if f & 2)

    def node_set(max_size):
        # odd bytes mark a module: about half the entries are blank, so most
        # trees carry few marks (a marked root would prune the whole traversal)
        return frozenset((b >> 1) % n for b in _byte_list(draw, max_size) if b & 1)

    marked = node_set(3) if replicate else frozenset()
    ignored_set = node_set(4) if ignored else frozenset()
    own_params: tuple[int, ...] = ()
    frozen = frozenset()
    tied: tuple[tuple[int, int], ...] = ()
    if params:
        own_params = tuple(b % 3 for b in _byte_table(draw, n))
        frozen = node_set(3)
        if n > 1:
            pairs = _byte_list(draw, 4)
            ties: dict[int, int] = {}  # b -> a: one ``tied`` name per module
            for a, b in zip(pairs[0::2], pairs[1::2], strict=False):
                if a % n != b % n and own_params[a % n]:
                    ties.setdefault(b % n, a % n)
            tied = tuple((a, b) for b, a in ties.items())
    return TreeSpec(
        children, state_ids, roots, handled, marked, ignored_set, own_params, frozen, tied
    )


def deep_trees(min_depth: int = 5000, max_depth: int = 6000):
    return st.integers(min_depth, max_depth).map(deep_chain)


def wide_trees(min_width: int = 100_000, max_width: int = 100_000):
    return st.integers(min_width, max_width).map(wide_tree)


def diamond_chains(min_diamonds: int = 1, max_diamonds: int = 2000):
    return st.integers(min_diamonds, max_diamonds).map(diamond_chain)
