"""FSDP2 generators: valid specs, shrinking to minimal situations, exact shapes."""

from __future__ import annotations

import pytest
from hypothesis import find, given, settings

from pytest_fsdpcheck.generators.fsdp2 import (
    Fsdp2Spec,
    build_fsdp2,
    fsdp2_deep_chain,
    fsdp2_diamond_chain,
    fsdp2_specs,
    fully_shard_specs,
    ignored_scalars,
)
from pytest_fsdpcheck.generators.trees import TreeSpec

pytestmark = pytest.mark.unit

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
        # a scalar only where ignored_params names it: one the call would shard is a rejected call
        assert not spec.tree.tied and spec.scalars == ignored_scalars(spec)
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


def test_ignored_scalars_are_drawn_in_managed_modules():
    """An ignored 0-dim parameter reaches the states check (FS2-4): drawn in
    a module that stays managed, it is no error and not in the states; a
    spec without ignored_params keeps no scalar it drew to ignore."""
    from pytest_fsdpcheck.checks.fsdp2 import expected_managed, expected_states

    def managed_ignored_scalar(spec):
        if not ignored_scalars(spec):
            return False
        built = build_fsdp2(spec)
        return bool(ignored_scalars(spec) & set(expected_managed(built)))

    spec = find(fsdp2_specs(scalars=True, max_modules=8), managed_ignored_scalar, settings=FIND)
    built = build_fsdp2(spec)
    i = min(ignored_scalars(spec) & set(expected_managed(built)))
    scalar = built.modules[i]._parameters["s"]
    assert scalar in built.ignored and scalar.dim() == 0
    params, _, rejected = expected_states(built, expected_managed(built))
    assert all(p is not scalar for p in params) and rejected is None, (spec, rejected)
    cut = spec.restricted(ignored=False)
    assert cut.ignored is None and not cut.scalars & ignored_scalars(spec)
