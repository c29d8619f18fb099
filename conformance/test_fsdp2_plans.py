"""FSDP2 conformance on whole plans: drawn sequences of ``fully_shard`` calls
on one model, applied call by call through the implementation, each call
judged by the single-call oracle (FS2-1..5 on the walk and states, FS2-7/8 on
a real ``fully_shard``) on the model as the earlier calls leave it: their
roots holding a group, ``replicate`` owners and FSDP1 units in place.

The body functions are importable (``pytest_fsdpcheck.conformance.
test_fsdp2_plans``), so a failure's reproducer calls the same code."""

import pytest
from hypothesis import given

from pytest_fsdpcheck.checks import Violation, error_of, short
from pytest_fsdpcheck.checks.fsdp2 import (
    accepted,
    call_label,
    check_managed,
    check_states,
    effective_roots,
    expected_managed,
    expected_states,
    names_for,
    names_it,
    structure,
    world_of_one,
)
from pytest_fsdpcheck.checks.growth import check_linear_growth, growth_times
from pytest_fsdpcheck.checks.repro import snippet
from pytest_fsdpcheck.core.not_provided import NotProvided
from pytest_fsdpcheck.core.profiles import examples
from pytest_fsdpcheck.generators.fsdp2 import (
    Fsdp2Plan,
    PlanCall,
    build_fsdp2_plan,
    fsdp2_plans,
    fsdp2_shared_ignored,
)
from pytest_fsdpcheck.generators.trees import TreeSpec
from pytest_fsdpcheck.known.judge import conform


def _build(impl, plan):
    return build_fsdp2_plan(plan, impl.fsdp2, getattr(impl, "traversal", None))


def _on_call(k, call, found):
    return [Violation(v.invariant, f"call {k + 1} fully_shard{call_label(call.roots)}: {v.message}", v.detail, error=v.error)
            for v in found]


def plan_walk(impl, plan) -> list[Violation]:
    """FS2-1..5 for every call: the implementation's walk and states against
    the oracle, earlier calls' roots marked as holding a group."""
    area = impl.fsdp2
    bp = _build(impl, plan)
    groups: set[int] = set()
    out: list[Violation] = []
    for k, call in enumerate(plan.calls):
        built = bp.at(k, groups)
        found = check_managed(built, area.managed_modules(built.roots, built.ignored))
        order = expected_managed(built)
        modules = [built.modules[i] for i in order]
        found += check_states(built, order, lambda modules=modules, ignored=built.ignored: area.managed_states(modules, ignored))
        out += _on_call(k, call, found)
        roots = effective_roots(built.spec)
        for i in roots:
            area.mark_own_group(built.modules[i])
        groups |= set(roots)
    return out


def plan_fully_shard(impl, plan) -> list[Violation]:
    """FS2-7/8: the calls through the implementation's ``annotate`` (torch:
    the real ``fully_shard``) on a world of one. The first call given a root
    an earlier call made a root (fully_shard applies to a module once, even
    where that group manages nothing under it), or reaching a module or
    parameter an earlier group manages, must be rejected with a clear error
    naming it; if none does, exactly the modules the calls
    manage carry the Dynamo flags and nothing else changed."""
    area = impl.fsdp2
    bp = _build(impl, plan)
    before = structure(bp.built)
    groups: set[int] = set()
    managed_by: dict[int, int] = {}
    sharded: set[int] = set()  # ids of parameters an earlier group took
    with world_of_one() as mesh:
        for k, call in enumerate(plan.calls):
            built = bp.at(k, groups)
            managed = expected_managed(built)
            params, _, _ = expected_states(built, managed)
            taken = {id(p) for p in params}
            conflicts = [("root", r, None) for r in effective_roots(built.spec) if r in groups]
            conflicts += [("module", i, None) for i in managed if i in managed_by]
            if not conflicts:
                conflicts = [("parameter", i, name) for i in managed for name, p in built.modules[i]._parameters.items()
                             if p is not None and id(p) in taken and id(p) in sharded]
            where = f"call {k + 1} fully_shard{call_label(call.roots)}"
            try:
                area.annotate(built.roots, mesh, built.ignored)
            except Exception as exc:  # noqa: BLE001 - judged below
                if not conflicts:
                    return [Violation("FS2-7", f"{where} raised, but shares nothing with an earlier group",
                                      detail=f"{type(exc).__name__}: {exc}", error=error_of(exc))]
                kind, i, param = conflicts[0]
                what = f"{kind} m{i}{'.' + param if param else ''}"
                if not isinstance(exc, (ValueError, RuntimeError)) or isinstance(exc, NotImplementedError):
                    return [Violation("FS2-8", f"{where} shares {what} with an earlier group and failed with an "
                                               "internal error, not a clear one naming it",
                                      detail=f"{type(exc).__name__}: {exc}", error=error_of(exc))]
                names = set()
                for _kind, j, pn in conflicts:
                    names |= names_for(built, call.roots, j, pn)
                if not any(names_it(str(exc), n) for n in names):
                    return [Violation("FS2-8", f"{where}: the error for the {what}, shared with an earlier group, "
                                               f"names none of {short(sorted(names))}",
                                      detail=f"{type(exc).__name__}: {exc}", error=error_of(exc))]
                return []
            if conflicts:
                kind, i, param = conflicts[0]
                return [Violation("FS2-8", f"{where} accepted {accepted(kind, i, param)}")]
            for i in managed:
                managed_by.setdefault(i, k)
            sharded |= taken
            groups |= set(effective_roots(built.spec))
    out = []
    wrong = []
    for i, m in enumerate(bp.modules):
        flags = (m.__dict__.get("_is_fsdp_managed_module"), m.__dict__.get("_fsdp_use_orig_params"))
        if flags != ((True, True) if i in managed_by else (None, None)):
            wrong.append(f"m{i}={flags}")
    if wrong:
        out.append(Violation("FS2-7", f"after the plan, flags (_is_fsdp_managed_module, _fsdp_use_orig_params) wrong "
                                      f"on {short(wrong)}; managed: {short(sorted(f'm{i}' for i in managed_by))}"))
    after = structure(bp.built)
    if after != before:
        diff = [f"m{i}" for i, (a, b) in enumerate(zip(before, after, strict=True)) if a != b]
        out.append(Violation("FS2-7", f"after the plan, structure changed (children, parameter or buffer names, "
                                      f"training flag) on {short(diff)}"))
    return out


def reproducer(impl, plan, check: str) -> str:
    return snippet(
        impl,
        [f"plan = {plan.to_source()}", f"violations = {check}(impl, plan)"],
        ["assert not violations, violations"],
        imports=[
            "from pytest_fsdpcheck.generators.trees import TreeSpec",
            "from pytest_fsdpcheck.generators.fsdp2 import Fsdp2Plan, PlanCall",
            f"from pytest_fsdpcheck.conformance.test_fsdp2_plans import {check}",
        ],
    )


def _takes(impl, plan):
    """The plan as this implementation's ``fully_shard`` can take it: one
    root per call before 2.5, no ignored_params before 2.7 (dropped, never
    drawn again, so those releases see as many plans as the others)."""
    area = impl.fsdp2
    return plan.restricted(getattr(area, "several_roots", True), getattr(area, "takes_ignored_params", True))


def _require(impl, feature: str, what: str):
    if not getattr(impl.fsdp2, feature, True):
        raise NotProvided(f"this implementation's fully_shard takes {what}")


def _check(impl, plan, check):
    plan = _takes(impl, plan)
    conform(impl, lambda i: check(i, plan), reproducer(impl, plan, check.__name__))


def _ignores(plan) -> bool:
    return any(c.ignored is not None for c in plan.calls)


def _several(plan) -> bool:
    return any(len(c.roots) > 1 for c in plan.calls)


@pytest.mark.invariant("FS2-1", "FS2-2", "FS2-4")
@examples(60)
@given(plan=fsdp2_plans())
def test_plan_walk(fsdpcheck_impl, plan):
    _check(fsdpcheck_impl, plan, plan_walk)


@pytest.mark.invariant("FS2-3")
@examples(40)
@given(plan=fsdp2_plans().filter(_ignores))
def test_plan_walk_ignored_params(fsdpcheck_impl, plan):
    """Ignored parameters that differ from one call to the next."""
    _require(fsdpcheck_impl, "takes_ignored_params", "no ignored_params")
    _check(fsdpcheck_impl, plan, plan_walk)


@pytest.mark.invariant("FS2-5")
@examples(40)
@given(plan=fsdp2_plans().filter(_several))
def test_plan_walk_several_roots(fsdpcheck_impl, plan):
    """Roots sharing submodules, containing one another, or holding a group already."""
    _require(fsdpcheck_impl, "several_roots", "one module, not a group")
    _check(fsdpcheck_impl, plan, plan_walk)


#: Fixed plans, each a rule the properties above reach only after a search
#: (6-18 s). FS2-5: a call given several roots, one of which an earlier
#: call made a root (its group held already): every root given is walked,
#: wherever it stands among them; only a non-root module holding a group is
#: pruned (FS2-2). FS2-3: the ignore rule decides with each call's own
#: ignored parameters: a module shared by two subtrees, all of whose
#: parameters the first call ignores, is managed by a second call that
#: ignores nothing (a module wrongly dropped is named by why the spec keeps
#: it: FS2-2 here, as the walk reaches it below the second call's root).
_SIBLINGS = TreeSpec(children=((1, 2), (), ()), params=(1, 1, 1))
_SHARED_LEAF = TreeSpec(children=((1, 2), (3,), (3,), ()), params=(1, 1, 1, 1))
PLAN_CASES = {
    "grouped-root-given-second": Fsdp2Plan(tree=_SIBLINGS, calls=(PlanCall((2,)), PlanCall((1, 2)))),
    "grouped-root-given-first": Fsdp2Plan(tree=_SIBLINGS, calls=(PlanCall((1,)), PlanCall((1, 2)))),
    "ignored-by-the-first-call-only": Fsdp2Plan(
        tree=_SHARED_LEAF, calls=(PlanCall((1,), frozenset([(3, 0)])), PlanCall((2,), frozenset()))),
}


@pytest.mark.invariant("FS2-2", "FS2-3", "FS2-5")
@pytest.mark.parametrize("case", list(PLAN_CASES))
def test_plan_walk_cases(fsdpcheck_impl, case):
    _require(fsdpcheck_impl, "several_roots", "one module, not a group")
    _check(fsdpcheck_impl, PLAN_CASES[case], plan_walk)


@pytest.mark.invariant("FS2-7")
@examples(40)
@given(plan=fsdp2_plans(conflicts=False))
def test_plan_fully_shard(fsdpcheck_impl, plan):
    _check(fsdpcheck_impl, plan, plan_fully_shard)


@pytest.mark.invariant("FS2-8")
@examples(40)
@given(plan=fsdp2_plans(conflicts=True))
def test_plan_conflicts(fsdpcheck_impl, plan):
    _check(fsdpcheck_impl, plan, plan_fully_shard)


def _require_ignored(impl):
    if not getattr(impl.fsdp2, "takes_ignored_params", True):
        raise NotProvided("this implementation's fully_shard takes no ignored_params")


@pytest.mark.invariant("FS2-6")
def test_shared_ignored_subtree_large(fsdpcheck_impl):
    """20,000 layers sharing one ignored block: walked right, no RecursionError."""
    _require_ignored(fsdpcheck_impl)
    plan = fsdp2_shared_ignored(20_000)

    def body(impl):
        built = _build(impl, plan).at(0)
        try:
            violations = check_managed(built, impl.fsdp2.managed_modules(built.roots, built.ignored))
        except RecursionError:
            return [Violation("FS2-6", "managed_modules raised RecursionError on layers sharing an ignored block")]
        return [Violation("FS2-6", f"on layers sharing an ignored block: {v}") for v in violations]

    conform(fsdpcheck_impl, body)


@pytest.mark.invariant("FS2-6")
def test_shared_ignored_subtree_linear_growth(fsdpcheck_impl):
    """4x the layers sharing one ignored block may cost at most ~10x the time:
    the ignore rule decides the shared block once, not once per layer."""
    _require_ignored(fsdpcheck_impl)
    area = fsdpcheck_impl.fsdp2
    small, large = 5000, 20_000
    builts = {n: _build(fsdpcheck_impl, fsdp2_shared_ignored(n, depth=32)).at(0) for n in (small, large)}
    try:
        t_small, t_large = growth_times(
            *(lambda b=builts[n]: area.managed_modules(b.roots, b.ignored) for n in (small, large)), 10)
    except RecursionError:
        violations = [Violation("FS2-6", "managed_modules raised RecursionError on layers sharing an ignored block")]
    else:
        violations = check_linear_growth("FS2-6", t_small, t_large, large // small, 10,
                                         "layers sharing an ignored block")
    conform(fsdpcheck_impl, violations)
