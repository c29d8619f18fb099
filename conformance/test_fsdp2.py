"""FSDP2 conformance (FS2-1..8): fully_shard's managed-module walk, its
states, and a real fully_shard on a gloo world of one."""

import pytest
from hypothesis import given

from pytest_fsdpcheck.checks import Violation
from pytest_fsdpcheck.checks.fsdp2 import (
    check_fully_shard,
    check_fully_shard_released,
    check_managed,
    check_states,
    expected_managed,
    world_of_one,
)
from pytest_fsdpcheck.checks.growth import check_growth_within, check_linear_growth, growth_times
from pytest_fsdpcheck.checks.repro import snippet
from pytest_fsdpcheck.core.not_provided import NotProvided
from pytest_fsdpcheck.core.profiles import examples
from pytest_fsdpcheck.generators.fsdp2 import (
    EQUAL_MODULES,
    IGNORED_SCALARS,
    NESTED_ROOTS,
    build_fsdp2,
    fsdp2_deep_chain,
    fsdp2_diamond_chain,
    fsdp2_ignored_chains,
    fsdp2_ignored_diamonds,
    fsdp2_specs,
    fsdp2_wide_tree,
    fully_shard_specs,
)
from pytest_fsdpcheck.known.judge import conform

CALLS = {
    "managed": [
        "got = impl.fsdp2.managed_modules(built.roots, built.ignored)",
        "violations = check_managed(built, got)",
    ],
    "states": [
        "modules = [built.modules[i] for i in expected_managed(built)]",
        "violations = check_states(built, expected_managed(built), lambda: impl.fsdp2.managed_states(modules, built.ignored))",
    ],
    "fully_shard": [
        "with world_of_one() as mesh:",
        "    violations = check_fully_shard(built, impl.fsdp2, mesh)",
    ],
    # the model is handed over and dropped (FS2-7's lifetime): nothing here may hold it
    "fully_shard_released": [
        "holder = [built]",
        "del built",
        "with world_of_one() as mesh:",
        "    violations = check_fully_shard_released(holder, impl.fsdp2, mesh)",
    ],
}


def reproducer(impl, spec, call, groups=True):
    return snippet(
        impl,
        [f"built = build_fsdp2({spec.to_source()}, impl.fsdp2{'' if groups else ', groups=False'})", *CALLS[call]],
        ["assert not violations, violations"],
        imports=[
            "from pytest_fsdpcheck.generators.trees import TreeSpec",
            "from pytest_fsdpcheck.generators.fsdp2 import Fsdp2Spec, build_fsdp2",
            "from pytest_fsdpcheck.checks.fsdp2 import check_managed, check_states, check_fully_shard, "
            "check_fully_shard_released, expected_managed, world_of_one",
        ],
    )


def _require(impl, feature: str, what: str):
    """A check of a feature this implementation's ``fully_shard`` predates is
    not provided (torch's FSDP2 grew several roots in 2.5, ignored_params in 2.7)."""
    if not getattr(impl.fsdp2, feature, True):
        raise NotProvided(f"this implementation's fully_shard takes {what}")


def _takes(impl, spec):
    """The spec as this implementation's ``fully_shard`` can take it: its
    first root only before 2.5, no ignored_params before 2.7. Cut down, never
    drawn again, so those releases judge as many examples as the others."""
    area = impl.fsdp2
    return spec.restricted(getattr(area, "several_roots", True), getattr(area, "takes_ignored_params", True))


def _managed_body(spec):
    def body(impl):
        built = build_fsdp2(spec, impl.fsdp2)
        return check_managed(built, impl.fsdp2.managed_modules(built.roots, built.ignored))

    return body


@pytest.mark.invariant("FS2-1", "FS2-2")
@examples(120)
@given(spec=fsdp2_specs(multi_root=False))
def test_managed_modules(fsdpcheck_impl, spec):
    spec = _takes(fsdpcheck_impl, spec)
    conform(fsdpcheck_impl, _managed_body(spec), reproducer(fsdpcheck_impl, spec, "managed"))


@pytest.mark.invariant("FS2-3")
@examples(100)
@given(spec=fsdp2_specs(multi_root=False).filter(lambda s: s.ignored is not None))
def test_ignored_params(fsdpcheck_impl, spec):
    _require(fsdpcheck_impl, "takes_ignored_params", "no ignored_params")
    conform(fsdpcheck_impl, _managed_body(spec), reproducer(fsdpcheck_impl, spec, "managed"))


@pytest.mark.invariant("FS2-5")
@examples(80)
@given(spec=fsdp2_specs(multi_root=True))
def test_several_roots(fsdpcheck_impl, spec):
    _require(fsdpcheck_impl, "several_roots", "one module, not a group")
    spec = _takes(fsdpcheck_impl, spec)
    conform(fsdpcheck_impl, _managed_body(spec), reproducer(fsdpcheck_impl, spec, "managed"))


@pytest.mark.invariant("FS2-1", "FS2-5")
@pytest.mark.parametrize("case", list(NESTED_ROOTS))
def test_nested_roots(fsdpcheck_impl, case):
    """Fixed groups whose modules nest, in every order and past modules the
    walk does not enter: each module once (FS2-5), where the outermost
    root's walk puts it (FS2-1)."""
    _require(fsdpcheck_impl, "several_roots", "one module, not a group")
    spec = NESTED_ROOTS[case]

    def body(impl):
        built = build_fsdp2(spec, impl.fsdp2)
        return check_managed(built, impl.fsdp2.managed_modules(built.roots, built.ignored))

    conform(fsdpcheck_impl, body, reproducer(fsdpcheck_impl, spec, "managed"))


@pytest.mark.invariant("FS2-1", "FS2-2")
@pytest.mark.parametrize("case", [
    pytest.param(c, marks=pytest.mark.invariant("FS2-5")) if len(s.roots) > 1 else c for c, s in EQUAL_MODULES.items()
])
def test_equal_modules(fsdpcheck_impl, case):
    """Modules of a class whose instances all compare equal: the walk tells
    a root from a module with its own group, a visited module from its
    sibling and (FS2-5) one root from another by identity."""
    spec = EQUAL_MODULES[case]
    if len(spec.roots) > 1:
        _require(fsdpcheck_impl, "several_roots", "one module, not a group")
    conform(fsdpcheck_impl, _managed_body(spec), reproducer(fsdpcheck_impl, spec, "managed"))


@pytest.mark.invariant("FS2-4")
@examples(100)
@given(spec=fsdp2_specs(scalars=True))
def test_managed_states(fsdpcheck_impl, spec):
    spec = _takes(fsdpcheck_impl, spec)
    conform(fsdpcheck_impl, _states_body(spec), reproducer(fsdpcheck_impl, spec, "states"))


def _states_body(spec):
    def body(impl):
        built = build_fsdp2(spec, impl.fsdp2)
        order = expected_managed(built)
        modules = [built.modules[i] for i in order]
        return check_states(built, order, lambda: impl.fsdp2.managed_states(modules, built.ignored))

    return body


@pytest.mark.invariant("FS2-4")
@pytest.mark.parametrize("case", list(IGNORED_SCALARS))
def test_ignored_scalars(fsdpcheck_impl, case):
    """Scalar parameters in ignored_params: left out of the states, never
    rejected (an ignored parameter is never touched); a scalar that is not
    ignored beside one is still rejected."""
    _require(fsdpcheck_impl, "takes_ignored_params", "no ignored_params")
    spec = IGNORED_SCALARS[case]
    conform(fsdpcheck_impl, _states_body(spec), reproducer(fsdpcheck_impl, spec, "states"))


@pytest.mark.invariant("FS2-7")
@examples(40)
@given(spec=fully_shard_specs(conflicts=False))
def test_fully_shard_flags(fsdpcheck_impl, spec):
    spec = _takes(fsdpcheck_impl, spec)
    def body(impl):
        with world_of_one() as mesh:
            return check_fully_shard_released([build_fsdp2(spec, impl.fsdp2, groups=False)], impl.fsdp2, mesh)

    conform(fsdpcheck_impl, body, reproducer(fsdpcheck_impl, spec, "fully_shard_released", groups=False))


@pytest.mark.invariant("FS2-8")
@examples(40)
@given(spec=fully_shard_specs(conflicts=True))
def test_fully_shard_conflicts(fsdpcheck_impl, spec):
    spec = _takes(fsdpcheck_impl, spec)
    def body(impl):
        built = build_fsdp2(spec, impl.fsdp2, groups=False)
        with world_of_one() as mesh:
            return check_fully_shard(built, impl.fsdp2, mesh)

    conform(fsdpcheck_impl, body, reproducer(fsdpcheck_impl, spec, "fully_shard", groups=False))


SHAPES = {
    "deep-3000": lambda ign: fsdp2_deep_chain(3000, ign),
    "wide-100000": lambda ign: fsdp2_wide_tree(100_000, ign),
    "diamonds-1500": lambda ign: fsdp2_diamond_chain(1500, ign),
}
LARGE_CALLS = ["managed", "managed-ignored", "states"]


@pytest.mark.fsdpcheck_cost("large inputs")
@pytest.mark.invariant("FS2-6")
@pytest.mark.parametrize("shape", list(SHAPES))
@pytest.mark.parametrize("call", LARGE_CALLS)
def test_large_trees(fsdpcheck_impl, shape, call):
    if shape.startswith("wide") and call != "managed":
        pytest.skip("wide trees: the walk only (the ignore rule is timed by test_linear_growth; states are a flat loop)")
    if call == "managed-ignored":
        _require(fsdpcheck_impl, "takes_ignored_params", "no ignored_params")
    spec = SHAPES[shape](call == "managed-ignored")

    def body(impl):
        built = build_fsdp2(spec, impl.fsdp2)
        try:
            if call == "states":
                order = expected_managed(built)
                modules = [built.modules[i] for i in order]
                violations = check_states(built, order, lambda: impl.fsdp2.managed_states(modules, built.ignored))
            else:
                violations = check_managed(built, impl.fsdp2.managed_modules(built.roots, built.ignored))
        except RecursionError:
            return [Violation("FS2-6", f"{call} raised RecursionError on a {shape} tree")]
        return [Violation("FS2-6", f"on a {shape} tree: {v}") for v in violations]

    conform(fsdpcheck_impl, body)


@pytest.mark.fsdpcheck_cost("large inputs")
@pytest.mark.invariant("FS2-6")
def test_linear_growth(fsdpcheck_impl):
    """4x the modules (a wide tree, ignore rule on where taken) may cost at most ~10x the time."""
    small, large = 5000, 20_000
    area = fsdpcheck_impl.fsdp2
    ignored = getattr(area, "takes_ignored_params", True)
    builts = {n: build_fsdp2(fsdp2_wide_tree(n, ignored=ignored), area) for n in (small, large)}
    try:
        t_small, t_large = growth_times(
            *(lambda b=builts[n]: area.managed_modules(b.roots, b.ignored) for n in (small, large)), 10)
    except RecursionError:
        violations = [Violation("FS2-6", "managed_modules raised RecursionError on a wide tree")]
    else:
        violations = check_linear_growth("FS2-6", t_small, t_large, large // small, 10, "modules (wide)")
    conform(fsdpcheck_impl, violations)


@pytest.mark.fsdpcheck_cost("large inputs")
@pytest.mark.invariant("FS2-6")
def test_linear_growth_shared_ignored(fsdpcheck_impl):
    """The ignore rule on shared subtrees: diamond chains 4x as long, every
    parameter below the root ignored, may cost at most ~10x the time. An
    implementation deciding a shared module once per path to it is
    exponential in the chains' length: its long run is cut once the ratio
    is broken, never waited for."""
    _require(fsdpcheck_impl, "takes_ignored_params", "no ignored_params")
    # diamonds per chain, 128 chains: over a thousand modules either way, so
    # both sides pay the same cache misses; 33 levels stay below any recursion limit
    short, long = 4, 16
    area = fsdpcheck_impl.fsdp2
    builts = {n: build_fsdp2(fsdp2_ignored_diamonds(n, chains=128), area) for n in (short, long)}

    def run(n):
        return lambda: area.managed_modules(builts[n].roots, builts[n].ignored)

    violations = check_managed(builts[short], run(short)())
    if not violations:
        violations = check_growth_within("FS2-6", run(short), run(long), long // short, 10,
                                         "diamond chains (ignore rule on shared modules)")
    conform(fsdpcheck_impl, violations)


@pytest.mark.fsdpcheck_cost("large inputs")
@pytest.mark.invariant("FS2-6")
def test_linear_growth_deep_ignored(fsdpcheck_impl):
    """The ignore rule down deep chains: chains 4x as deep, parameters
    ignored down each one and a buffer at the bottom of every other, may
    cost at most ~10x the time. A rule deciding each module from its whole
    subtree is quadratic in the depth; its long run is cut once the ratio
    is broken. 400 levels stay below the recursion limit, so a recursive
    walk (torch's, a known bug beyond it) is timed too, not excused."""
    _require(fsdpcheck_impl, "takes_ignored_params", "no ignored_params")
    shallow, deep = 100, 400
    area = fsdpcheck_impl.fsdp2
    builts = {n: build_fsdp2(fsdp2_ignored_chains(n), area) for n in (shallow, deep)}

    def run(n):
        return lambda: area.managed_modules(builts[n].roots, builts[n].ignored)

    try:
        violations = check_managed(builts[shallow], run(shallow)())
        if not violations:
            violations = check_growth_within("FS2-6", run(shallow), run(deep), deep // shallow, 10,
                                             "depth of chains (ignore rule on)")
    except RecursionError:
        violations = [Violation("FS2-6", f"managed_modules raised RecursionError on chains {deep} deep")]
    conform(fsdpcheck_impl, violations)


def _require_cpu_runtime() -> None:
    """FS2-12, FS2-13 and FS2-14 take a step on a CPU rank (gloo): n/p by release
    where fully_shard's runtime does not run there (provided.py)."""
    from pytest_fsdpcheck.core.provided import expected_provided, first_release, installed_torch

    if not expected_provided("fsdp2.cpu_runtime", installed_torch()):
        raise NotProvided("the step runs on a CPU rank (gloo), and fully_shard's runtime runs on CPU from torch "
                          f"{first_release('fsdp2.cpu_runtime')} (provided.py)", release_lacks="fsdp2.cpu_runtime")


def _frozen_step_violations(impl, case) -> list:
    """FS2-12's records of ``case`` for ``impl``, judged; where its step
    failed, the same step driven by torch's own walk is its second opinion."""
    from pytest_fsdpcheck.checks.fsdp2 import check_frozen_step
    from pytest_fsdpcheck.impls import load_implementation
    from pytest_fsdpcheck.runs.frozen_step import control_case, run_case

    with world_of_one() as mesh:
        got = run_case(case, impl.fsdp2, mesh)
        torch_own = None
        if "error" in got and getattr(impl, "_fsdpcheck_spec", None) != "torch":
            torch_own = run_case(case, load_implementation("torch").fsdp2, mesh)
    return check_frozen_step(got, control_case(case), torch_own)


@pytest.mark.invariant("FS2-12")
@pytest.mark.parametrize("case", ["frozen-low-base", "frozen-index"])
def test_frozen_params_step(fsdpcheck_impl, case):
    """A group holding a frozen bf16 base beside a trainable fp32 adapter,
    and one holding a frozen integer index, each takes a step under an
    mp_policy (bf16, reduced in fp32) as its control does. fully_shard's
    runtime on CPU ranks is the release's (provided.py), as for FS2-9."""
    _require_cpu_runtime()
    conform(fsdpcheck_impl, _frozen_step_violations(fsdpcheck_impl, case),
            snippet(fsdpcheck_impl, [f"violations = _frozen_step_violations(impl, {case!r})"],
                    ["assert not violations, violations"],
                    imports=["from pytest_fsdpcheck.conformance.test_fsdp2 import _frozen_step_violations"]))


def _sync_scope_violations(impl, case) -> list:
    """FS2-13's records of ``case`` for ``impl``, judged."""
    from pytest_fsdpcheck.checks.fsdp2 import check_sync_scope
    from pytest_fsdpcheck.runs.sync_scope import control_case, run_case

    with world_of_one() as mesh:
        got = run_case(case, impl.fsdp2, mesh)
    return check_sync_scope(got, control_case(case))


@pytest.mark.invariant("FS2-13")
@pytest.mark.parametrize("case", ["root-only", "recursive"])
def test_gradient_sync_scope(fsdpcheck_impl, case):
    """set_requires_gradient_sync(False) on the root stops its own group's
    reduction alone with recurse=False, and every group's below it with
    recurse=True (gradient accumulation's micro-batches)."""
    _require_cpu_runtime()
    conform(fsdpcheck_impl, _sync_scope_violations(fsdpcheck_impl, case),
            snippet(fsdpcheck_impl, [f"violations = _sync_scope_violations(impl, {case!r})"],
                    ["assert not violations, violations"],
                    imports=["from pytest_fsdpcheck.conformance.test_fsdp2 import _sync_scope_violations"]))


def _inplace_output_violations(impl, case) -> list:
    """FS2-14's records of ``case`` for ``impl``, judged; where its step
    failed, the same step driven by torch's own walk is its second opinion."""
    from pytest_fsdpcheck.checks.fsdp2 import check_inplace_output
    from pytest_fsdpcheck.impls import load_implementation
    from pytest_fsdpcheck.runs.inplace_output import control_case, run_case

    with world_of_one() as mesh:
        got = run_case(case, impl.fsdp2, mesh)
        torch_own = None
        if "error" in got and getattr(impl, "_fsdpcheck_spec", None) != "torch":
            torch_own = run_case(case, load_implementation("torch").fsdp2, mesh)
    return check_inplace_output(got, control_case(case), torch_own)


@pytest.mark.invariant("FS2-14")
@pytest.mark.parametrize("case", ["view-resharded", "view-kept"])
def test_inplace_output_step(fsdpcheck_impl, case):
    """A residual block's caller adds into the view the block's group
    returned (``out += skip``), the group resharded after forward or kept:
    the step's output and gradients are the unsharded model's."""
    _require_cpu_runtime()
    conform(fsdpcheck_impl, _inplace_output_violations(fsdpcheck_impl, case),
            snippet(fsdpcheck_impl, [f"violations = _inplace_output_violations(impl, {case!r})"],
                    ["assert not violations, violations"],
                    imports=["from pytest_fsdpcheck.conformance.test_fsdp2 import _inplace_output_violations"]))
