"""FSDP2 generators: valid specs, shrinking to minimal situations, exact shapes."""

from __future__ import annotations

from hypothesis import find, given, settings

from pytest_fsdpcheck.generators.fsdp2 import (
    Fsdp2Spec,
    build_fsdp2,
    fsdp2_deep_chain,
    fsdp2_diamond_chain,
    fsdp2_specs,
    fully_shard_specs,
)
from pytest_fsdpcheck.generators.trees import TreeSpec

FIND = settings(database=None, derandomize=True, max_examples=2000, deadline=None)


@settings(max_examples=150, database=None, derandomize=True, deadline=None)
@given(spec=fsdp2_specs(scalars=True))
def test_specs_are_consistent_and_round_trip(spec):
    n = spec.size
    assert spec.roots and all(0 <= r < n for r in spec.roots) and len(set(spec.roots)) == len(spec.roots)
    assert not (spec.groups & set(spec.roots)) and all(0 < g < n for g in spec.groups)
    assert all(0 <= i < n for i, _ in spec.ignored or ())
    assert not spec.buffers or len(spec.buffers) == n
    assert eval(spec.to_source(), {"Fsdp2Spec": Fsdp2Spec, "TreeSpec": TreeSpec}) == spec
    built = build_fsdp2(spec)
    assert [m for m in built.roots] == [built.modules[i] for i in spec.roots]
    assert (built.ignored is None) == (spec.ignored is None)


def test_shrinks_to_one_root_over_a_star():
    spec = find(fsdp2_specs(max_modules=8), lambda s: s.size >= 4, settings=FIND)
    assert spec.tree.children == ((1, 2, 3), (), (), ()) and not any(spec.tree.params)
    assert spec == Fsdp2Spec(spec.tree)  # one root, nothing else attached


def test_shrinks_to_the_smallest_nested_group():
    spec = find(fsdp2_specs(max_modules=8), lambda s: bool(s.groups), settings=FIND)
    assert spec.size == 2 and spec.groups == {1} and spec.roots == (0,)
    assert spec.ignored is None and not spec.buffers and not spec.tree.replicate


def test_shrinks_to_the_smallest_group_of_several_roots():
    spec = find(fsdp2_specs(max_modules=8), lambda s: len(s.roots) > 1, settings=FIND)
    assert spec.size == 3 and sorted(spec.roots) == [1, 2] and not spec.groups


def test_shrinks_to_the_smallest_ignored_set():
    spec = find(fsdp2_specs(max_modules=8), lambda s: bool(s.ignored), settings=FIND)
    assert spec.size <= 3 and spec.roots == (0,) and not spec.groups and not spec.buffers


def test_conflict_free_specs_have_no_group_above_a_root():
    @settings(max_examples=150, database=None, derandomize=True, deadline=None)
    @given(spec=fully_shard_specs(conflicts=False))
    def check(spec):
        assert not spec.tree.tied and not spec.scalars
        for g in spec.groups:
            below, stack = set(), list(spec.tree.children[g])
            while stack:
                i = stack.pop()
                below.add(i)
                stack.extend(spec.tree.children[i])
            assert not below & set(spec.roots), spec

    check()


def test_exact_shapes():
    deep = fsdp2_deep_chain(50)
    assert deep.size == 50 and all(deep.tree.children[i] == (i + 1,) for i in range(49))
    diamonds = fsdp2_diamond_chain(3, ignored=True)
    assert diamonds.size == 10 and diamonds.ignored == {(i, 0) for i in range(0, 10, 3)}
