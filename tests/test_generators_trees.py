"""Module-tree generators: valid specs, small shrunk examples, exact shapes."""

from __future__ import annotations

import pytest
from hypothesis import find, given, settings
from hypothesis import strategies as st

from pytest_fsdpcheck.generators.trees import (
    TreeSpec,
    build_tree,
    deep_chain,
    diamond_chain,
    module_trees,
    wide_tree,
)
from pytest_fsdpcheck.reference.traversal import ReferenceTraversal

pytestmark = pytest.mark.unit

FIND = settings(database=None, derandomize=True, max_examples=2000, deadline=None)


def _parents(spec: TreeSpec) -> dict[int, set[int]]:
    parents: dict[int, set[int]] = {i: set() for i in range(spec.size)}
    for parent, kids in enumerate(spec.children):
        for child in kids:
            parents[child].add(parent)
    return parents


@settings(max_examples=200, database=None, derandomize=True, deadline=None)
@given(spec=module_trees())
def test_specs_are_rooted_dags_with_consistent_annotations(spec):
    n = spec.size
    assert 1 <= n <= 24
    for parent, kids in enumerate(spec.children):
        # Children only point forwards: acyclic by construction.
        assert all(parent < child < n for child in kids), spec
    parents = _parents(spec)
    assert all(parents[i] for i in range(1, n)), f"unreachable module in {spec}"
    assert len(spec.states) == n and len(spec.params) == n
    used = {s for s in spec.states if s is not None}
    assert spec.root_states <= used and spec.handled_states <= used
    for marks in (spec.replicate, spec.ignored, spec.frozen):
        assert all(0 <= i < n for i in marks)
    for a, b in spec.tied:
        assert a != b and spec.params[a] > 0
    assert eval(spec.to_source(), {"TreeSpec": TreeSpec}) == spec


def test_module_trees_shrink_to_a_bare_star():
    spec = find(module_trees(max_modules=8), lambda s: s.size >= 5, settings=FIND)
    assert spec == TreeSpec(children=((1, 2, 3, 4), (), (), (), ()), states=(None,) * 5, params=(0,) * 5)


def test_module_trees_shrink_to_the_smallest_shared_state():
    def shares_a_state(spec):
        owned = [s for s in spec.states if s is not None]
        return len(owned) != len(set(owned))

    spec = find(module_trees(max_modules=8), shares_a_state, settings=FIND)
    assert spec.size == 3
    assert [s for s in spec.states if s is not None] == [0, 0]
    assert not (spec.replicate or spec.ignored or spec.root_states or spec.handled_states or spec.tied)


def test_module_trees_shrink_to_the_smallest_shared_module():
    spec = find(module_trees(max_modules=8), lambda s: any(len(set(p)) > 1 for p in _parents(s).values()), settings=FIND)
    assert spec.size == 3
    assert sum(len(k) for k in spec.children) == 3  # a tree of 3 needs 2 edges: one extra


def test_strategy_switches_turn_features_off():
    spec = find(module_trees(states=False, replicate=False, ignored=False, params=False), lambda s: s.size > 3, settings=FIND)
    assert (spec.states, spec.replicate, spec.ignored, spec.params) == ((), frozenset(), frozenset(), ())


@settings(max_examples=30, database=None, derandomize=True, deadline=None)
@given(spec=module_trees(), data=st.data())
def test_build_tree_realises_the_spec(spec, data):
    traversal = ReferenceTraversal()
    tree = build_tree(spec, traversal)
    assert len(tree.modules) == spec.size and tree.root is tree.modules[0]
    for i, module in enumerate(tree.modules):
        registered = [tree.modules.index(c) for c in module._modules.values()]
        assert registered == list(spec.children[i])
    assert sorted(tree.states) == spec.state_ids()
    assert sorted(tree.handles) == sorted(spec.handled_states)
    for sid, state in tree.states.items():
        assert state._is_root is (sid in spec.root_states)
        assert state._handle is tree.handles.get(sid)
    for i, module in enumerate(tree.modules):
        own = [p for name, p in module._parameters.items() if name != "tied"]
        assert len(own) == spec.params[i]
        assert all(p.requires_grad is (i not in spec.frozen) for p in own)
    for a, b in spec.tied:
        assert tree.modules[b]._parameters["tied"] is next(iter(tree.modules[a]._parameters.values()))
    i = data.draw(st.integers(0, spec.size - 1))
    assert tree.label(tree.modules[i]) == f"m{i}"


def test_deep_chain_shape():
    spec = deep_chain(5000)
    assert spec.size == 5000
    assert spec.children[:-1] == tuple((i + 1,) for i in range(4999)) and spec.children[-1] == ()
    assert spec.states[0] == 0 and spec.states[7] == 1 and spec.states[1] is None
    assert spec.root_states == {0}
    assert spec.handled_states == set(spec.state_ids())
    assert set(deep_chain(10, state_every=1).states) == set(range(10))


def test_wide_tree_of_100k_modules_builds():
    spec = wide_tree(100_000)
    assert spec.size == 100_001
    assert spec.children[0] == tuple(range(1, 100_001))
    assert all(kids == () for kids in spec.children[1:])
    tree = build_tree(spec, ReferenceTraversal())
    assert len(tree.modules) == 100_001
    assert len(tree.root._modules) == 100_000
    assert len(tree.states) == len(spec.state_ids()) == 33_334


def test_diamond_chain_shape():
    for diamonds in (1, 2, 2000):
        spec = diamond_chain(diamonds)
        assert spec.size == 3 * diamonds + 1
        parents = _parents(spec)
        for d in range(diamonds):
            top = 3 * d
            assert spec.children[top] == (top + 1, top + 2)
            assert parents[top + 3] == {top + 1, top + 2}
    # Paths to the last top double per diamond: a walk without a visited set explodes.
    spec = diamond_chain(20)
    paths = [0] * spec.size
    paths[0] = 1
    for parent, kids in enumerate(spec.children):
        for child in kids:
            paths[child] += paths[parent]
    assert paths[-1] == 2**20


def test_large_trees_are_made_of_modules_like_constructed_ones():
    import torch.nn as nn

    tree = build_tree(wide_tree(2000))
    fresh = nn.Module()
    for module in (tree.modules[0], tree.modules[1], tree.modules[-1]):
        assert type(module) is nn.Module
        # children registered, otherwise what __init__ leaves
        assert {k: v for k, v in vars(module).items() if k != "_modules"} == {k: v for k, v in vars(fresh).items() if k != "_modules"}
        assert [type(v) for v in vars(module).values()] == [type(v) for v in vars(fresh).values()]
    # no container is shared between two modules
    a, b = vars(tree.modules[1]), vars(tree.modules[2])
    assert not [k for k, v in a.items() if isinstance(v, (dict, set, list)) and v is b[k]]
    tree.modules[1].register_buffer("x", None)
    assert "x" not in tree.modules[2]._buffers
