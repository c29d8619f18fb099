"""Whole-plan FSDP2 generators: every plan builds, every feature is drawn,
failures shrink to one call on a small star, and conflict-free plans are
plans the PLN rules accept."""

from __future__ import annotations

import pytest
from hypothesis import find, given, settings

from pytest_fsdpcheck.checks.fsdp2 import expected_managed
from pytest_fsdpcheck.checks.plan import check_plan
from pytest_fsdpcheck.core.features import FEATURES
from pytest_fsdpcheck.generators.fsdp2 import (
    Fsdp2Plan,
    PlanCall,
    build_fsdp2_plan,
    fsdp2_plans,
    fsdp2_shared_ignored,
)
from pytest_fsdpcheck.generators.trees import TreeSpec
from pytest_fsdpcheck.reference.fsdp2 import ReferenceFsdp2
from pytest_fsdpcheck.reference.traversal import ReferenceTraversal

pytestmark = pytest.mark.unit

FIND = settings(database=None, derandomize=True, max_examples=3000, deadline=None)
SOURCE = {"Fsdp2Plan": Fsdp2Plan, "PlanCall": PlanCall, "TreeSpec": TreeSpec}


@settings(max_examples=150, database=None, derandomize=True, deadline=None)
@given(plan=fsdp2_plans())
def test_plans_are_consistent_build_and_round_trip(plan):
    n = plan.size
    roots = {r for c in plan.calls for r in c.roots}
    assert plan.calls and all(c.roots and len(set(c.roots)) == len(c.roots) for c in plan.calls)
    assert all(0 <= r < n for r in roots)
    assert all(0 <= i < n for c in plan.calls for i, _ in c.ignored or ())
    assert not (plan.tree.replicate & roots) and not (plan.fsdp1_units & roots)
    assert not plan.shared_buffer or len(plan.shared_buffer) > 1
    assert eval(plan.to_source(), SOURCE) == plan
    area, traversal = ReferenceFsdp2(), ReferenceTraversal()
    bp = build_fsdp2_plan(plan, area, traversal)
    rope = {id(bp.modules[i]._buffers["rope"]) for i in plan.shared_buffer}
    assert len(rope) <= 1  # one tensor, registered by every module named
    for k, (call_roots, ignored) in enumerate(bp.calls()):
        assert call_roots == tuple(bp.modules[i] for i in plan.calls[k].roots)
        assert (ignored is None) == (plan.calls[k].ignored is None)
    assert len(bp.fsdp1_states) == len(plan.fsdp1_units)


@settings(max_examples=150, database=None, derandomize=True, deadline=None)
@given(plan=fsdp2_plans(conflicts=False))
def test_conflict_free_plans_keep_the_plan_rules(plan):
    """No shared modules, no ties, inner calls first, the root last: PLN-1..4 hold."""
    bp = build_fsdp2_plan(plan)
    assert not plan.tree.tied and plan.calls[-1].roots == (0,)
    assert check_plan(bp.root, bp.calls(), bp.replicate()) == []


def test_reordered_and_overlapping_plans_break_the_plan_rules():
    """What conflicts=True adds is drawn: a root sharded before another
    call (PLN-4) and a module two calls manage (PLN-2)."""
    for rule in ("PLN-4", "PLN-2"):
        def breaks(plan, rule=rule):
            bp = build_fsdp2_plan(plan)
            return any(v.invariant == rule for v in check_plan(bp.root, bp.calls(), bp.replicate()))

        find(fsdp2_plans(), breaks, settings=FIND)


@pytest.mark.parametrize("feature", [f for f in FEATURES if f.kind == "Fsdp2Plan"], ids=lambda f: f.name)
def test_every_plan_feature_is_drawn(feature):
    find(fsdp2_plans(), lambda p: feature.has(p, None), settings=FIND)


def test_shrinks_to_one_call_on_the_root_of_a_star():
    plan = find(fsdp2_plans(max_modules=8), lambda p: p.size >= 4, settings=FIND)
    assert plan == Fsdp2Plan(TreeSpec(((1, 2, 3), (), (), ()), params=(0, 0, 0, 0)))


def test_shrinks_to_two_calls_for_a_later_call_on_a_grouped_root():
    plan = find(fsdp2_plans(max_modules=8),
                lambda p: any(r in {x for c in p.calls[:k] for x in c.roots} for k, c in enumerate(p.calls) for r in c.roots),
                settings=FIND)
    assert plan.size == 2 and len(plan.calls) <= 3, plan


def test_shared_ignored_shape():
    plan = fsdp2_shared_ignored(6, depth=3)
    bp = build_fsdp2_plan(plan)
    chain = bp.modules[7]
    assert all(bp.modules[i].c0 is chain for i in range(1, 7))
    built = bp.at(0)
    # the shared block and the odd layers are dropped; the root and even layers stay
    assert expected_managed(built) == [2, 4, 6, 0]
