"""Traversal conformance (TRV-1..9): FSDP state collection over module DAGs."""

import pytest
from hypothesis import given

from pytest_fsdpcheck.checks import Violation
from pytest_fsdpcheck.checks.growth import check_linear_growth, growth_times
from pytest_fsdpcheck.checks.repro import snippet
from pytest_fsdpcheck.checks.traversal import (
    check_handles,
    check_root_states,
    check_states_with_modules,
    check_unmutated,
    expected_traversal,
    snapshot,
)
from pytest_fsdpcheck.core.profiles import examples
from pytest_fsdpcheck.generators.trees import (
    build_tree,
    deep_chain,
    diamond_chain,
    module_trees,
    wide_tree,
)
from pytest_fsdpcheck.known.judge import conform

CALLS = {
    "states_with_modules": "states, modules = impl.traversal.states_with_modules(tree.root)",
    "handles": "handles = impl.traversal.handles(tree.root)",
    "root_states": "roots = impl.traversal.root_states(tree.root)",
}
# What a reproducer runs per check; "reference" replays the differential check.
REPRO_CALLS = {
    **CALLS,
    "reference": "reference = ReferenceImplementation().traversal\nref = build_tree(tree.spec, reference)",
}
CHECKS = {
    "reference": "diff_against_reference(ref, reference, tree, impl.traversal)",
    "states_with_modules": "check_states_with_modules(tree, states, modules)",
    "handles": "check_handles(tree, handles)",
    "root_states": "check_root_states(tree, roots)",
}


def reproducer(impl, spec, call):
    return snippet(
        impl,
        [f"tree = build_tree({spec.to_source()}, impl.traversal)", REPRO_CALLS[call]],
        [f"violations = {CHECKS[call]}", "assert not violations, violations"],
        imports=[
            "from pytest_fsdpcheck.generators.trees import TreeSpec, build_tree",
            "from pytest_fsdpcheck.checks.traversal import check_states_with_modules, check_handles, check_root_states",
            "from pytest_fsdpcheck.checks.traversal import diff_against_reference",
            "from pytest_fsdpcheck.impls.reference import ReferenceImplementation",
        ],
    )


@pytest.mark.invariant("TRV-1", "TRV-2", "TRV-3", "TRV-4", "TRV-5", "TRV-9")
@examples(150)
@given(spec=module_trees())
def test_states_with_modules(fsdpcheck_impl, spec):
    def body(impl):
        tree = build_tree(spec, impl.traversal)
        before = snapshot(tree)
        states, modules = impl.traversal.states_with_modules(tree.root)
        return check_states_with_modules(tree, states, modules) + check_unmutated(tree, before)

    conform(fsdpcheck_impl, body, reproducer(fsdpcheck_impl, spec, "states_with_modules"))


@pytest.mark.invariant("TRV-6", "TRV-9")
@examples(100)
@given(spec=module_trees(params=False))
def test_handles(fsdpcheck_impl, spec):
    def body(impl):
        tree = build_tree(spec, impl.traversal)
        before = snapshot(tree)
        handles = impl.traversal.handles(tree.root)
        return check_handles(tree, handles) + check_unmutated(tree, before)

    conform(fsdpcheck_impl, body, reproducer(fsdpcheck_impl, spec, "handles"))


@pytest.mark.invariant("TRV-7", "TRV-9")
@examples(100)
@given(spec=module_trees(params=False))
def test_root_states(fsdpcheck_impl, spec):
    def body(impl):
        tree = build_tree(spec, impl.traversal)
        before = snapshot(tree)
        roots = impl.traversal.root_states(tree.root)
        return check_root_states(tree, roots) + check_unmutated(tree, before)

    conform(fsdpcheck_impl, body, reproducer(fsdpcheck_impl, spec, "root_states"))


SHAPES = {
    "deep-5000": lambda: deep_chain(5000),
    "wide-100000": lambda: wide_tree(100_000),
    "diamonds-2000": lambda: diamond_chain(2000),
}


@pytest.mark.fsdpcheck_cost("large inputs")
@pytest.mark.invariant("TRV-8")
@pytest.mark.parametrize("shape", list(SHAPES))
@pytest.mark.parametrize("call", list(CALLS))
def test_large_trees(fsdpcheck_impl, shape, call):
    spec = SHAPES[shape]()

    def body(impl):
        tree = build_tree(spec, impl.traversal)
        expected = expected_traversal(tree)
        traversal = impl.traversal
        try:
            if call == "states_with_modules":
                states, modules = traversal.states_with_modules(tree.root)
                violations = check_states_with_modules(tree, states, modules, expected)
            elif call == "handles":
                violations = check_handles(tree, traversal.handles(tree.root), expected)
            else:
                violations = check_root_states(tree, traversal.root_states(tree.root), expected)
        except RecursionError:
            return [Violation("TRV-8", f"{call} raised RecursionError on a {shape} tree")]
        # A wrong answer on a large tree is still a TRV-8 failure: it did not "complete".
        return [Violation("TRV-8", f"on a {shape} tree: {v}") for v in violations]

    conform(fsdpcheck_impl, body)


@pytest.mark.fsdpcheck_cost("large inputs")
@pytest.mark.invariant("TRV-8")
@pytest.mark.parametrize("shape", ["chain", "wide"])
def test_linear_growth(fsdpcheck_impl, shape):
    """Work grows linearly: 4x the modules may cost at most ~10x the time
    (linear gives ~4x, quadratic ~16x). A ratio, not a wall-clock budget."""
    make = {"chain": lambda n: deep_chain(n, state_every=1), "wide": lambda n: wide_tree(n, state_every=1)}[shape]
    small, large = 2500, 10_000
    traversal = fsdpcheck_impl.traversal
    trees = {n: build_tree(make(n), traversal) for n in (small, large)}
    try:
        t_small, t_large = growth_times(lambda: traversal.states_with_modules(trees[small].root),
                                        lambda: traversal.states_with_modules(trees[large].root), 10)
    except RecursionError:
        violations = [Violation("TRV-8", f"states_with_modules raised RecursionError on a {large}-module {shape}")]
    else:
        violations = check_linear_growth("TRV-8", t_small, t_large, large // small, 10, f"modules ({shape})")
    # Timings are never replayed: a slow implementation is not explained by a known bug.
    conform(fsdpcheck_impl, violations)


@pytest.mark.fsdpcheck_cost(round_s=0.7)
@pytest.mark.invariant("TRV-1", "TRV-2", "TRV-3", "TRV-4", "TRV-6", "TRV-7")
@examples(100)
@given(spec=module_trees(params=False))
def test_matches_reference(fsdpcheck_impl, spec):
    """Differential: the same spec through this implementation and the reference."""
    from pytest_fsdpcheck.checks.traversal import diff_against_reference
    from pytest_fsdpcheck.impls.reference import ReferenceImplementation

    reference = ReferenceImplementation().traversal
    ref = build_tree(spec, reference)

    def body(impl):
        return diff_against_reference(ref, reference, build_tree(spec, impl.traversal), impl.traversal)

    conform(fsdpcheck_impl, body, reproducer(fsdpcheck_impl, spec, "reference"))
