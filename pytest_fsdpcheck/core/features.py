"""Generator feature coverage: what the examples of a run had.

Every feature is one ``feature(kind, name, has)`` line below: ``kind`` is
the class name of a generated value a property receives (``TreeSpec``,
``GraphSpec``, ``ModelSpec``, ``Fsdp2Spec``), ``has(spec, where)`` says
whether one example has it (``where`` is the :class:`Where` of the test
item: the implementation under test and the graph form the item runs in,
for what depends on them). Each example's features are
counted and sent to Hypothesis as ``event()``s (``--hypothesis-show-statistics``
and HypoFuzz's dashboard list them); the report flags a feature no example
of its kind had.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Feature:
    kind: str
    name: str
    has: Callable


FEATURES: list[Feature] = []


def feature(kind: str, name: str, has: Callable) -> None:
    if any(f.kind == kind and f.name == name for f in FEATURES):
        raise ValueError(f"feature {kind}: {name} is registered twice")
    FEATURES.append(Feature(kind, name, has))


def label(f: Feature) -> str:
    return f"{f.kind}: {f.name}"


# --- helpers the predicates share ---------------------------------------------------


def _parents(children) -> Counter:
    """child -> number of distinct parents."""
    return Counter(c for kids in children for c in set(kids))


def _registrations(children) -> Counter:
    return Counter(c for kids in children for c in kids)


def _descendants(children, start: int) -> set[int]:
    seen, stack = set(), list(children[start])
    while stack:
        node = stack.pop()
        if node not in seen:
            seen.add(node)
            stack.extend(children[node])
    return seen


def _nested_roots(spec) -> bool:
    roots = set(spec.roots)
    return any(roots & _descendants(spec.tree.children, r) for r in roots)


def _steps(spec) -> set[str]:
    return {step[0] for program in spec.programs for step in program}


def _param_uses(spec) -> Counter:
    return Counter(op.ref for op in spec.ops if op.kind in ("param", "hop", "accum", "scratch"))


@dataclass(frozen=True)
class Where:
    """What an example's item adds to it: the implementation under test and,
    for a splitting test, the graph form it is parametrized with (each
    item runs one form; the implementation's own ``graph_form`` is only the
    one it prefers)."""

    impl: object = None
    form: str | None = None


def _graph_form(where) -> str | None:
    return where.form or getattr(getattr(where.impl, "splitting", None), "graph_form", None)


# --- module trees (traversal, annotation) ---------------------------------------------
feature("TreeSpec", "shared modules", lambda s, _: max(_registrations(s.children).values(), default=0) > 1)
feature("TreeSpec", "diamond chains", lambda s, _: max(_parents(s.children).values(), default=0) > 1)
feature("TreeSpec", "a module registered twice under one parent", lambda s, _: any(len(set(k)) < len(k) for k in s.children))
feature("TreeSpec", "replicate marks", lambda s, _: bool(s.replicate))
feature("TreeSpec", "states shared by several modules", lambda s, _: max(Counter(x for x in s.states if x is not None).values(), default=0) > 1)
feature("TreeSpec", "root states", lambda s, _: bool(s.root_states))
feature("TreeSpec", "states with a handle", lambda s, _: bool(s.handled_states))
feature("TreeSpec", "ignored modules", lambda s, _: bool(s.ignored))
feature("TreeSpec", "tied parameters", lambda s, _: bool(s.tied))
feature("TreeSpec", "frozen parameters", lambda s, _: bool(s.frozen) and any(s.params[m] for m in s.frozen if m < len(s.params)))

# --- FX graphs (splitting) -------------------------------------------------------------
#: graph form -> the label of its feature: only an item of that form can reach it
FORM_FEATURES: dict[str, str] = {}
for _form, _shape in (("dynamo", "placeholders"), ("module", "call_module/get_attr")):
    feature("GraphSpec", f"graph form: {_form} ({_shape})", lambda s, where, f=_form: _graph_form(where) == f)
    FORM_FEATURES[_form] = f"GraphSpec: graph form: {_form} ({_shape})"
feature("GraphSpec", "tied parameters", lambda s, _: any(m.tied_to is not None for m in s.modules))
feature("GraphSpec", "frozen parameters", lambda s, _: any(m.frozen for m in s.modules) or any(p.frozen for p in s.params))
feature("GraphSpec", "DDP-ignored parameters", lambda s, _: any(m.ignored for m in s.modules) or any(p.ignored for p in s.params))
for _dtype in ("float32", "float64", "bfloat16"):
    feature("GraphSpec", f"dtype {_dtype}", lambda s, _, d=_dtype: any(p.dtype == d for p in s.params))
feature("GraphSpec", "buffers", lambda s, _: s.buffers > 0 and any(op.kind == "buffer" for op in s.ops))
feature("GraphSpec", "higher-order ops", lambda s, _: s.has_hop)
feature("GraphSpec", "in-place tails", lambda s, _: any(op.kind in ("mutate", "accum") for op in s.ops))
feature("GraphSpec", "method calls on parameters", lambda s, _: any(op.kind == "param" and op.method for op in s.ops))
feature("GraphSpec", "a parameter used twice", lambda s, _: max(_param_uses(s).values(), default=0) > 1)
feature("GraphSpec", "extra outputs", lambda s, _: bool(s.outputs))
feature("GraphSpec", "non-contiguous activations", lambda s, _: any(op.kind == "layout" for op in s.ops))
for _kind in ("linear", "norm", "conv", "embedding"):
    feature("GraphSpec", f"module {_kind}", lambda s, _, k=_kind: any(m.kind == k for m in s.modules))

# --- traceable models (exec order) -------------------------------------------------------
feature("ModelSpec", "tracer subclasses", lambda s, _: s.tracer != "default")
feature("ModelSpec", "concrete_args", lambda s, _: s.concrete_mode is not None)
feature("ModelSpec", "leaf blocks", lambda s, _: bool(s.leaf_blocks))
feature("ModelSpec", "shared modules", lambda s, _: max(_parents(s.children).values(), default=0) > 1)
feature("ModelSpec", "a module called several times", lambda s, _: "call_n" in _steps(s))
feature("ModelSpec", "a parent using a child's parameter", lambda s, _: "child_param" in _steps(s))
feature("ModelSpec", "a parameter passed by keyword", lambda s, _: "kw_linear" in _steps(s))
feature("ModelSpec", "a parameter inside a list argument", lambda s, _: "stack_use" in _steps(s))
feature("ModelSpec", "an op using two parameters", lambda s, _: "addcmul" in _steps(s))
feature("ModelSpec", "a trace that raises", lambda s, _: "fail" in _steps(s))

# --- FSDP2 (fully_shard) ------------------------------------------------------------------
feature("Fsdp2Spec", "multi-root groups", lambda s, _: len(s.roots) > 1)
feature("Fsdp2Spec", "nested roots", lambda s, _: _nested_roots(s))
feature("Fsdp2Spec", "modules with their own group", lambda s, _: bool(s.groups))
feature("Fsdp2Spec", "ignored-parameter sets", lambda s, _: bool(s.ignored))
feature("Fsdp2Spec", "scalar parameters", lambda s, _: bool(s.scalars))
feature("Fsdp2Spec", "ignored scalar parameters",
        lambda s, _: any(k == -1 and i in s.scalars for i, k in s.ignored or ()))  # generators.fsdp2.SCALAR
feature("Fsdp2Spec", "buffers", lambda s, _: any(s.buffers))
feature("Fsdp2Spec", "replicate-owned modules", lambda s, _: bool(s.tree.replicate))
feature("Fsdp2Spec", "shared modules", lambda s, _: max(_registrations(s.tree.children).values(), default=0) > 1)
feature("Fsdp2Spec", "tied parameters", lambda s, _: bool(s.tree.tied))


# --- FSDP2 whole plans (sequences of fully_shard calls) ----------------------------------


def _plan_roots_before(plan, k) -> set[int]:
    return {r for call in plan.calls[:k] for r in call.roots}


def _grouped_root_at(plan, where: str) -> bool:
    """Some call gives a module an earlier call made a root, at that position of its roots."""
    for k, call in enumerate(plan.calls):
        earlier = _plan_roots_before(plan, k)
        roots = list(call.roots)
        for pos, r in enumerate(roots):
            if r in earlier and len(roots) > 1:
                at = "first" if pos == 0 else "last" if pos == len(roots) - 1 else "middle"
                if at == where:
                    return True
    return False


def _later_call_depends(plan) -> bool:
    """A later call's root is above an earlier call's root: its walk stops at that group."""
    children = plan.tree.children
    return any(set(plan.calls[j].roots) & set().union(*(_descendants(children, r) for r in call.roots))
               for k, call in enumerate(plan.calls) for j in range(k))


def _calls_overlap(plan, roots_a, roots_b) -> set[int]:
    children = plan.tree.children
    below = lambda roots: set(roots).union(*(_descendants(children, r) for r in roots))  # noqa: E731
    return below(roots_a) & below(roots_b)


def _ignored_differs(plan) -> bool:
    """Two calls reaching a common module ignore different parameters of it."""
    calls = plan.calls
    for a in range(len(calls)):
        for b in range(a + 1, len(calls)):
            ia, ib = calls[a].ignored, calls[b].ignored
            if ia == ib:
                continue
            for m in _calls_overlap(plan, calls[a].roots, calls[b].roots):
                if {k for i, k in ia or () if i == m} != {k for i, k in ib or () if i == m}:
                    return True
    return False


def _roots_share(plan) -> bool:
    """Two roots of one call, neither below the other, reach a common module."""
    children = plan.tree.children
    for call in plan.calls:
        roots = list(call.roots)
        below = {r: _descendants(children, r) for r in roots}
        for x in range(len(roots)):
            for y in range(x + 1, len(roots)):
                a, b = roots[x], roots[y]
                if a not in below[b] and b not in below[a] and below[a] & below[b]:
                    return True
    return False


feature("Fsdp2Plan", "several calls", lambda p, _: len(p.calls) > 1)
feature("Fsdp2Plan", "multi-root calls", lambda p, _: any(len(c.roots) > 1 for c in p.calls))
feature("Fsdp2Plan", "roots of one call sharing submodules", lambda p, _: _roots_share(p))
feature("Fsdp2Plan", "roots of one call containing one another",
        lambda p, _: any(set(c.roots) & set().union(*(_descendants(p.tree.children, r) for r in c.roots)) for c in p.calls))
for _where in ("first", "middle", "last"):
    feature("Fsdp2Plan", f"a root already holding a group, {_where} among several",
            lambda p, _, w=_where: _grouped_root_at(p, w))
feature("Fsdp2Plan", "a single-root call on a module already holding a group",
        lambda p, _: any(len(c.roots) == 1 and c.roots[0] in _plan_roots_before(p, k) for k, c in enumerate(p.calls)))
feature("Fsdp2Plan", "a later call depending on an earlier group", lambda p, _: _later_call_depends(p))
feature("Fsdp2Plan", "an inner group applied after its ancestor's",
        lambda p, _: any(set(c.roots) & set().union(*(_descendants(p.tree.children, r) for r in p.calls[j].roots))
                         for k, c in enumerate(p.calls) for j in range(k)))
feature("Fsdp2Plan", "the root not sharded last", lambda p, _: 0 not in p.calls[-1].roots)
feature("Fsdp2Plan", "ignored parameters differing between calls on a module both reach", lambda p, _: _ignored_differs(p))
feature("Fsdp2Plan", "a buffer shared between modules", lambda p, _: len(p.shared_buffer) > 1)
feature("Fsdp2Plan", "FSDP1 units", lambda p, _: bool(p.fsdp1_units))
feature("Fsdp2Plan", "replicate-owned modules", lambda p, _: bool(p.tree.replicate))
feature("Fsdp2Plan", "shared modules", lambda p, _: max(_registrations(p.tree.children).values(), default=0) > 1)
feature("Fsdp2Plan", "tied parameters", lambda p, _: bool(p.tree.tied))


# --- floors: which property reaches each feature under a time budget -----------------------

#: Each feature's floor: the suite property (``module::function``) that draws
#: it at the least cost, one round of it taking 0.2-0.8 s on one free core
#: (the slow properties, 1-6 s a round, are nobody's floor). Under
#: ``--fsdpcheck-fuzz-time`` these properties' first streams start before
#: every other property and take rounds until an example of each of their
#: features has been checked (``fuzz.FLOOR_ROUNDS`` at most): a budget too
#: short for one round of every property still reaches every feature.
#: ``tests/test_feature_reach.py`` checks each floor draws its features.
FLOORS: dict[str, tuple[str, ...]] = {
    "test_traversal.py::test_matches_reference": tuple(
        f"TreeSpec: {n}" for n in ("replicate marks", "root states", "states shared by several modules",
                                   "states with a handle")),
    "test_annotation.py::test_matches_reference": tuple(
        f"TreeSpec: {n}" for n in ("shared modules", "diamond chains", "a module registered twice under one parent",
                                   "ignored modules", "tied parameters", "frozen parameters")),
    "test_fsdp2.py::test_managed_states": tuple(label(f) for f in FEATURES if f.kind == "Fsdp2Spec"),
    "test_fsdp2_plans.py::test_plan_walk_ignored_params": tuple(label(f) for f in FEATURES if f.kind == "Fsdp2Plan"),
    # both graph forms' items: each reaches its form
    "test_splitting.py::test_counted_once": tuple(label(f) for f in FEATURES
                                                  if f.kind == "GraphSpec" and f.name != "higher-order ops"),
    "test_splitting.py::test_higher_order_ops": ("GraphSpec: higher-order ops",),
    "test_exec_order.py::test_param_uses_by_keyword_and_in_lists_drawn": tuple(
        f"ModelSpec: {n}" for n in ("a parameter passed by keyword", "a parameter inside a list argument",
                                    "a module called several times", "shared modules", "an op using two parameters",
                                    "a parent using a child's parameter")),
    "test_exec_order.py::test_tracer_restored": tuple(
        f"ModelSpec: {n}" for n in ("a trace that raises", "tracer subclasses", "leaf blocks")),
    "test_exec_order.py::test_matches_reference": ("ModelSpec: concrete_args",),
}


def floor_of(module: str, function: str, form: str | None = None) -> frozenset[str]:
    """The features a property item is the floor of: its function's, less
    the graph-form features of the forms other than its own."""
    others = {label for f, label in FORM_FEATURES.items() if f != form}
    return frozenset(FLOORS.get(f"{module}::{function}", ())) - others


# --- counting ----------------------------------------------------------------------------


def observe(values, where: Where) -> tuple[list[str], list[str]]:
    """(kinds seen, feature labels present) for one example's arguments."""
    kinds, present = [], []
    by_kind = {f.kind for f in FEATURES}
    for value in values:
        kind = type(value).__name__
        if kind not in by_kind:
            continue
        kinds.append(kind)
        for f in FEATURES:
            if f.kind == kind:
                try:
                    hit = f.has(value, where)
                except Exception:  # noqa: BLE001 - a predicate that cannot read a value says "no"
                    hit = False
                if hit:
                    present.append(label(f))
    return kinds, present


class Tally:
    """Examples and features of one test (one item)."""

    def __init__(self):
        self.examples = 0  # valid examples: the test ran to a verdict on them
        self.rejected = 0  # examples the test rejected (``assume``) before any verdict
        self.kinds: Counter = Counter()
        self.features: Counter = Counter()

    def add(self, kinds, present) -> None:
        self.examples += 1
        self.kinds.update(kinds)
        self.features.update(present)

    def reject(self) -> None:
        self.rejected += 1

    def valid_share(self) -> float:
        seen = self.examples + self.rejected
        return self.examples / seen if seen else 1.0

    def to_json(self) -> dict:
        return {"rejected": self.rejected, "kinds": dict(self.kinds), "features": dict(self.features)}


def coverage(tallies) -> dict:
    """Feature counts over a run's tests (``Tally.to_json`` dicts): every
    feature of every kind the run generated, and those no example had."""
    kinds: Counter = Counter()
    counts: Counter = Counter()
    for t in tallies:
        kinds.update(t.get("kinds", {}))
        counts.update(t.get("features", {}))
    rows = {label(f): counts.get(label(f), 0) for f in FEATURES if kinds.get(f.kind)}
    return {
        "examples_by_kind": dict(kinds),
        "features": rows,
        "missing": sorted(name for name, n in rows.items() if n == 0),
    }
