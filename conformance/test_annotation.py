"""Annotation conformance (ANN-1..7): marking managed modules for Dynamo."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pytest_fsdpcheck.checks import assert_conforms
from pytest_fsdpcheck.checks.annotation import (
    check_annotated,
    check_dynamo_effect,
    check_idempotent,
    snapshot,
)
from pytest_fsdpcheck.generators.trees import build_tree, module_trees
from pytest_fsdpcheck.profiles import examples
from pytest_fsdpcheck.repro import snippet

trees = module_trees(states=False, replicate=False)


def reproducer(impl, spec, flag, check):
    return snippet(
        impl,
        [
            f"tree = build_tree({spec.to_source()})",
            "ignored = {tree.modules[i] for i in tree.spec.ignored}",
            "before = snapshot(tree)",
            f"impl.annotation.annotate(tree.root, ignored, {flag})",
        ],
        [f"violations = {check}", "assert not violations, violations"],
        imports=[
            "from pytest_fsdpcheck.generators.trees import TreeSpec, build_tree",
            "from pytest_fsdpcheck.checks.annotation import snapshot, check_annotated, check_idempotent",
        ],
    )


def annotate(impl, tree, flag):
    impl.annotation.annotate(tree.root, {tree.modules[i] for i in tree.spec.ignored}, flag)


@pytest.mark.invariant("ANN-1", "ANN-2", "ANN-3", "ANN-4", "ANN-6")
@examples(150)
@given(spec=trees, flag=st.booleans())
def test_annotate(fsdpcheck_impl, spec, flag):
    tree = build_tree(spec)
    before = snapshot(tree)
    annotate(fsdpcheck_impl, tree, flag)
    violations = check_annotated(tree, before, flag)
    assert_conforms(violations, reproducer(fsdpcheck_impl, spec, flag, f"check_annotated(tree, before, {flag})"))


@pytest.mark.invariant("ANN-5")
@examples(100)
@given(spec=trees, flag=st.booleans())
def test_idempotent(fsdpcheck_impl, spec, flag):
    tree = build_tree(spec)
    annotate(fsdpcheck_impl, tree, flag)
    once = snapshot(tree)
    annotate(fsdpcheck_impl, tree, flag)
    twice = snapshot(tree)
    annotate(fsdpcheck_impl, tree, not flag)
    violations = check_idempotent(tree, once, twice, snapshot(tree), flag)
    assert_conforms(violations, reproducer(fsdpcheck_impl, spec, flag, "check_idempotent(...)  # annotate twice, then flip"))


@pytest.mark.invariant("ANN-1", "ANN-2", "ANN-3")
@examples(100)
@given(spec=trees, flag=st.booleans())
def test_matches_reference(fsdpcheck_impl, spec, flag):
    from pytest_fsdpcheck.checks.annotation import diff_against_reference
    from pytest_fsdpcheck.impls.reference import ReferenceImplementation

    ref, got = build_tree(spec), build_tree(spec)
    annotate(ReferenceImplementation(), ref, flag)
    annotate(fsdpcheck_impl, got, flag)
    assert_conforms(diff_against_reference(ref, got), reproducer(fsdpcheck_impl, spec, flag, "check_annotated(tree, before, flag)"))


@pytest.mark.invariant("ANN-7")
@pytest.mark.parametrize("model", ["mlp", "nested", "shared"])
def test_dynamo_effect(fsdpcheck_impl, model):
    assert_conforms(check_dynamo_effect(fsdpcheck_impl.annotation, model))
