"""Splitting conformance (SPL-1..15): DDPOptimizer's bucket plan, split and
per-bucket compile, on generated FX graphs in each implementation's form.
The fixed cases of the compile around the split (lazily, in the caller's
context, with compiler configs, inside Dynamo's compile of a model) are
``test_splitting_compiled.py``'s."""

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from pytest_fsdpcheck.checks import Violation
from pytest_fsdpcheck.checks import splitting as chk
from pytest_fsdpcheck.checks import splitting_compiled as cchk
from pytest_fsdpcheck.checks.repro import snippet
from pytest_fsdpcheck.core.not_provided import NotProvided
from pytest_fsdpcheck.core.profiles import examples
from pytest_fsdpcheck.generators.graphs import (
    GraphSpec,
    ModuleSpec,
    OpSpec,
    ParamSpec,
    build_graph,
    graph_specs,
)
from pytest_fsdpcheck.known.judge import conform

# every parameter read by exactly one node: counting-once rules (SPL-4) and
# parameters as call_method arguments are exercised by their own tests
single_use = graph_specs(multi_use=False, method_args=False)
full = graph_specs()


@st.composite
def caps(draw):
    cap = draw(st.integers(1, 600))
    return cap, draw(st.integers(1, cap))


class Recorder:
    """The backend handed to the implementation: records each call and
    returns the graph module itself (eager)."""

    def __init__(self):
        self.calls = []

    def __call__(self, gm, example_inputs):
        self.calls.append((gm, list(example_inputs)))
        return gm


def split(impl, built, cap, first, backend=None, **options):
    backend = backend or Recorder()
    result = impl.splitting.split(built.gm, built.example_inputs, bucket_bytes_cap=cap, first_bucket_cap=first, backend=backend,
                                  **options)
    return result, backend


def reproducer(impl, spec, cap, first, check, device="cpu", reference=False, form="dynamo", before=(), catch=None,
               lazy=False, after=(), backend="lambda gm, ex: calls.append((gm, ex)) or gm", split_kwargs=""):
    """The script a failure prints: builds the graph, splits it, and asserts
    ``check`` (an expression over the names set here). ``before`` runs
    ahead of the split (what the check compares against), ``after`` after
    it; ``catch`` names an exception class the split may raise: it is kept
    in ``error`` and the check judges it. With reference=True a second copy
    of the graph is built for the reference implementation (the
    differential check); with lazy=True the split is asked to compile lazily;
    ``backend`` is the backend's source (it may use the names set here)."""
    ref_lines = [f"ref = build_graph(spec, {form!r})"] if reference else []
    ref_imports = ["from pytest_fsdpcheck.reference.splitting import ReferenceSplitting"] if reference else []
    call = [
        f"result = impl.splitting.split(built.gm, built.example_inputs, bucket_bytes_cap={cap}, first_bucket_cap={first},",
        f"                               backend={backend}{split_kwargs}"
        + (", lazy_compile=True)" if lazy else ")"),
    ]
    if catch is not None:
        call = ["error = result = None", "try:", *("    " + line for line in call),
                f"except {catch} as exc:", "    error = exc"]
    call += after
    return snippet(
        impl,
        [
            f"spec = {spec.to_source()}",
            f"built = build_graph(spec, {form!r}, device={device!r})",
            *ref_lines,
            "facts = chk.graph_facts(built.gm, built.example_inputs)",
            *before,
            "calls = []",
            *call,
        ],
        [f"violations = {check}", "assert not violations, violations"],
        imports=[
            "import torch",
            "from pytest_fsdpcheck.generators.graphs import GraphSpec, ModuleSpec, ParamSpec, OpSpec, build_graph",
            "from pytest_fsdpcheck.checks import splitting as chk",
            "from pytest_fsdpcheck.checks import splitting_compiled as cchk",
            *ref_imports,
        ],
    )


#: lines of a reproducer computing what ``_grad_targets`` and ``evaluate`` give the tests
EVALUATE = [
    "wrt = list({id(t): t for t in [*built.example_inputs, *built.gm.parameters()] if getattr(t, 'requires_grad', False)}.values())",
    "expected = cchk.evaluate(built.gm, built.example_inputs, wrt)",
]


# --------------------------------------------------------------------------- fixed plans

# A chain of four linear modules, 80 bytes of parameters each (a 4x4 weight
# and a bias, float32), cut with caps that name every rule of the walk: the
# bucket holding the graph's end closes at the first-bucket cap, the others
# at exactly the bucket cap (`>=`, not `>`), a bucket never closes before the
# node that brings it to its cap, and the earliest bucket keeps what is left.
# A bug in any of these fails here in a second, with no search; the
# properties below look for the rest.
_CHAIN4 = GraphSpec(4, 2, tuple(ModuleSpec("linear") for _ in range(4)), (), 0, tuple(OpSpec("module", i) for i in range(4)))
_FORWARD3 = GraphSpec(4, 2, _CHAIN4.modules[:3], (), 0, (OpSpec("module", 0), OpSpec("forward", 1), OpSpec("module", 2)))
SPLIT_CASES = {
    # buckets [l0] [l1 l2] [l3]: 80 B first, 160 B next (exactly the cap), 80 B left over
    "first-cap-below-cap": (_CHAIN4, 160, 80),
    # one module per bucket: every bucket exactly at its cap
    "caps-equal-module-size": (_CHAIN4, 80, 80),
    # [l0 l1] [l2 l3]: the first cap equal to the cap is no special case
    "first-cap-equal-cap": (_CHAIN4, 160, 160),
    # caps above the graph's bytes: one bucket, the original graph compiled once, unsplit
    "one-bucket": (_CHAIN4, 10**6, 10**6),
    # the last bucket meets its cap inside an in-place tail with no outside user: extended to the next output
    "extended-to-an-output": (GraphSpec(4, 2, (ModuleSpec("linear"),), (ParamSpec("matrix"),), 0,
                                        (OpSpec("module", 0), OpSpec("accum", 0))), 1, 1),
    # a parameter-free preamble: fused into the bucket after it
    "preamble-fused": (GraphSpec(4, 2, (ModuleSpec("linear"), ModuleSpec("norm")), (), 0,
                                 (OpSpec("act"), OpSpec("mutate"), OpSpec("module", 0), OpSpec("module", 1))), 16, 16),
    # the last bucket meets its cap in a dropped parameter read (64 B) and takes one op more, the
    # linear before it: extended by exactly one op absorbing 80 bytes (SPL-7, the log's table SPL-13)
    "extended-by-one-op": (GraphSpec(4, 2, (ModuleSpec("linear"), ModuleSpec("linear")), (ParamSpec("matrix"),), 0,
                                     (OpSpec("module", 0), OpSpec("module", 1), OpSpec("scratch", 0))), 1, 1),
    # the graph's end closes its bucket at a linear; the next bucket meets its cap in a dropped read
    # and takes the linear before it: a later bucket, not the first, extended by one op absorbing 80 bytes
    "extended-later-bucket": (GraphSpec(4, 2, (ModuleSpec("linear"), ModuleSpec("linear"), ModuleSpec("linear")),
                                        (ParamSpec("matrix"),), 0,
                                        (OpSpec("module", 0), OpSpec("module", 1), OpSpec("scratch", 0), OpSpec("module", 2))), 1, 1),
    # both buckets meet their cap in a dropped read and take the linear before it: each was extended by one
    # op absorbing 80 bytes, the earlier bucket's measured from its own size at its cap (SPL-7), not from
    # where the bucket holding the graph's end began its extension
    "two-buckets-extended": (GraphSpec(4, 2, (ModuleSpec("linear"), ModuleSpec("linear")), (ParamSpec("matrix"), ParamSpec("matrix")), 0,
                                       (OpSpec("module", 0), OpSpec("scratch", 0), OpSpec("module", 1), OpSpec("scratch", 1))), 1, 1),
    # two dropped reads: the bucket goes on over the first read's nodes to the linear, absorbing 144 bytes
    "extended-by-several-ops": (GraphSpec(4, 2, (ModuleSpec("linear"), ModuleSpec("linear")), (ParamSpec("matrix"), ParamSpec("matrix")), 0,
                                          (OpSpec("module", 0), OpSpec("module", 1), OpSpec("scratch", 0), OpSpec("scratch", 1))), 1, 1),
    # [l0 l1] [l2 skip l3]: the skip reads l0's output, so the earlier bucket has two outputs and its
    # submodule returns a two-element tuple, handed to the backend as it is (SPL-10), the others one
    "bucket-with-two-outputs": (GraphSpec(4, 2, _CHAIN4.modules, (), 0, (*_CHAIN4.ops[:3], OpSpec("skip", 1), _CHAIN4.ops[3])), 160, 160),
    # [p0 l0] [l1]: the preamble reads a trainable parameter of zero elements, so it holds no bytes and
    # is fused into the bucket after it (SPL-8), which then lists that parameter too (SPL-3)
    "zero-element-param-in-preamble": (GraphSpec(4, 2, (ModuleSpec("linear"), ModuleSpec("linear")), (ParamSpec("empty"),), 0,
                                                 (OpSpec("param", 0), OpSpec("module", 0), OpSpec("module", 1))), 80, 80),
    # [l0] [l1 add]: the input's method call `x.add(h)` takes l1's output as its argument; an argument that
    # is a module's output reads none of that module's parameters, so l1's bytes count at l1's own call (SPL-3)
    "module-output-as-method-argument": (GraphSpec(4, 2, (ModuleSpec("linear"), ModuleSpec("linear")), (), 0,
                                                   (OpSpec("module", 0), OpSpec("module", 1), OpSpec("skip", 0, method=True))), 80, 80),
    # [l0 t] [l1 b] [l2 s] [l3]: each later bucket takes an activation that is not contiguous, a (3, 4)
    # tensor column-major (strides (1, 3)), broadcast along the width (stride 0) and a strided slice
    # (strides (8, 2)): each backend call gets example inputs laid out as the run's (SPL-17)
    "non-contiguous-activations": (GraphSpec(4, 3, _CHAIN4.modules, (), 0,
                                             (OpSpec("module", 0), OpSpec("layout", 0), OpSpec("module", 1), OpSpec("layout", 1),
                                              OpSpec("module", 2), OpSpec("layout", 2), OpSpec("module", 3))), 80, 80),
    # [l0] [forward] [l2] in module form: the middle linear is read by get_attr and called through its
    # forward (`self.mods[1].forward(h)`, as torch 2.4's Dynamo captures it), its bytes counted at that
    # call (SPL-3); the get_attr closes no bucket and stays in the parent graph, handing the module to
    # the bucket that calls it (SPL-10). In Dynamo form, the same linear inlined.
    "module-forward-one-bucket": (_FORWARD3, 10**6, 10**6),
    "module-forward-two-buckets": (_FORWARD3, 80, 80),
}


def _case_inputs(spec, form):
    """A fixed case's graph, what the checks compare the split with (its
    facts, its values' metadata) and what it computes before any split."""
    built = build_graph(spec, form)
    wrt = _grad_targets(built)
    return (built, chk.graph_facts(built.gm, built.example_inputs), cchk.value_meta(built.gm, built.example_inputs),
            wrt, cchk.evaluate(built.gm, built.example_inputs, wrt), cchk.run_time_layouts(built.gm, built.example_inputs))


@pytest.mark.invariant("SPL-2", "SPL-3", "SPL-5", "SPL-6", "SPL-7", "SPL-8", "SPL-9", "SPL-10", "SPL-11", "SPL-12", "SPL-13",
                       "SPL-17")
@pytest.mark.parametrize("case", list(SPLIT_CASES))
def test_split_cases(fsdpcheck_impl, fsdpcheck_graph_form, case):
    spec, cap, first = SPLIT_CASES[case]
    form = fsdpcheck_graph_form

    def body(impl):
        built, facts, meta, wrt, expected, layouts = _case_inputs(spec, form)
        result, backend = split(impl, built, cap, first)
        return (chk.check_plan(facts, result.buckets, cap, first) or chk.check_table(result.table, result.buckets, cap, facts, first)
                or cchk.check_backend_calls(facts, result.buckets, backend.calls, built.gm, built.example_inputs, meta)
                or cchk.check_example_inputs(result.buckets, backend.calls, built.gm, layouts)
                or cchk.compare(expected, cchk.evaluate(result.compiled, built.example_inputs, wrt), "the split module", "SPL-11")
                or cchk.compare(expected, cchk.evaluate(built.gm, built.example_inputs, wrt),
                               "the original graph module after the split", "SPL-12", exact=True))

    check = (f"chk.check_plan(facts, result.buckets, {cap}, {first}) or chk.check_table(result.table, result.buckets, {cap}, facts, {first})"
             " or cchk.check_backend_calls(facts, result.buckets, calls, built.gm, built.example_inputs, meta)"
             " or cchk.check_example_inputs(result.buckets, calls, built.gm, layouts)"
             " or cchk.compare(expected, cchk.evaluate(result.compiled, built.example_inputs, wrt), 'the split module', 'SPL-11')"
             " or cchk.compare(expected, cchk.evaluate(built.gm, built.example_inputs, wrt),"
             " 'the original graph module after the split', 'SPL-12', exact=True)")
    before = ["meta = cchk.value_meta(built.gm, built.example_inputs)", *EVALUATE, LAYOUTS]
    conform(fsdpcheck_impl, body, reproducer(fsdpcheck_impl, spec, cap, first, check, form=form, before=before), form=form)


#: the reproducers' line computing what ``_case_inputs`` gives the tests as ``layouts``
LAYOUTS = "layouts = cchk.run_time_layouts(built.gm, built.example_inputs)"


#: the log without ``tabulate`` (an optional package torch never installs):
#: the cases cut a chain without extending a bucket, and extend one by an op
NO_TABULATE_CASES = ("first-cap-below-cap", "extended-by-one-op")
#: run before the split, in the test and in its reproducer: ``import tabulate`` raises ImportError
BLOCK_TABULATE = "sys.modules['tabulate'] = None"


@pytest.mark.invariant("SPL-13")
@pytest.mark.parametrize("case", NO_TABULATE_CASES)
def test_bucket_log_without_tabulate(fsdpcheck_impl, fsdpcheck_graph_form, case):
    """Where ``tabulate`` cannot be imported the split still works, and its
    log still states the cap and the bucket count and says whether buckets
    were extended (the tables are what needs ``tabulate``)."""
    import sys

    spec, cap, first = SPLIT_CASES[case]
    form = fsdpcheck_graph_form

    def body(impl):
        built = build_graph(spec, form)
        facts = chk.graph_facts(built.gm, built.example_inputs)
        saved = sys.modules.get("tabulate", _ABSENT)
        exec(BLOCK_TABULATE, {"sys": sys})
        try:
            result, _ = split(impl, built, cap, first)
        except ImportError as exc:
            return [Violation("SPL-13", f"the split fails where tabulate cannot be imported: {type(exc).__name__}: {exc}")]
        finally:
            if saved is _ABSENT:
                del sys.modules["tabulate"]
            else:
                sys.modules["tabulate"] = saved
        return chk.check_table(result.table, result.buckets, cap, facts, first, count_logged)

    # torch 2.0 gives the count only in the table tabulate prints (provided:
    # splitting.log_bucket_count)
    count_logged = getattr(fsdpcheck_impl.splitting, "logs_bucket_count", True)
    check = f"chk.check_table(result.table, result.buckets, {cap}, facts, {first}, {count_logged})"
    before = ["import sys", BLOCK_TABULATE]
    conform(fsdpcheck_impl, body, reproducer(fsdpcheck_impl, spec, cap, first, check, form=form, before=before), form=form)


_ABSENT = object()


#: SPL-14's fixed case: a linear module, then a higher-order op (``wrap``)
#: reading a parameter, in one bucket and split at every node
HOP_CASE = GraphSpec(4, 2, (ModuleSpec("linear"),), (ParamSpec("matrix"),), 0, (OpSpec("module", 0), OpSpec("hop", 0)))


@pytest.mark.invariant("SPL-14")
@pytest.mark.parametrize("caps", [(10**6, 10**6), (1, 1)], ids=["one-bucket", "split"])
def test_higher_order_cases(fsdpcheck_impl, fsdpcheck_graph_form, caps):
    _check_higher_order(fsdpcheck_impl, HOP_CASE, *caps, fsdpcheck_graph_form)


def _check_higher_order(impl, spec, cap, first, form):
    from pytest_fsdpcheck.core.provided import PROVIDED_FROM, expected_provided, installed_torch

    # by release, not by trying the import: a torch that should have them
    # and does not fails here
    if not expected_provided("splitting.higher_order_ops", installed_torch()):
        since = ".".join(map(str, PROVIDED_FROM["splitting.higher_order_ops"]))
        raise NotProvided(f"torch has higher-order ops (torch._higher_order_ops) from {since}")

    def body(impl):
        built = build_graph(spec, form)
        facts = chk.graph_facts(built.gm, built.example_inputs)
        wrt = _grad_targets(built)
        expected = cchk.evaluate(built.gm, built.example_inputs, wrt)
        bodies = cchk.nested_meta(built.gm)
        result = error = None
        try:
            result, _ = split(impl, built, cap, first)
        except Exception as exc:  # noqa: BLE001 - the checker judges what was raised
            error = exc
        return cchk.check_higher_order(facts, result, error, cap, first, expected, built.example_inputs, wrt, bodies,
                                      may_reject)

    may_reject = not getattr(impl.splitting, "splits_higher_order_ops", True)
    check = (f"cchk.check_higher_order(facts, result, error, {cap}, {first}, expected, built.example_inputs, wrt, "
             f"bodies, may_reject={may_reject})")
    conform(impl, body, reproducer(impl, spec, cap, first, check, form=form,
                                   before=[*EVALUATE, "bodies = cchk.nested_meta(built.gm)"], catch="Exception"), form=form)


# --------------------------------------------------------------------------- SPL-1


@pytest.mark.invariant("SPL-1")
@examples(8)
@given(spec=single_use, cap=st.integers(1, 4096), excess=st.integers(1, 4096))
# the simplest case, first: a failure here needs no shrinking
@example(spec=GraphSpec(4, 2, (ModuleSpec("linear"),), (), 0, (OpSpec("module", 0),)), cap=1, excess=1)
def test_first_cap_above_cap_rejected(fsdpcheck_impl, fsdpcheck_graph_form, spec, cap, excess):
    form = fsdpcheck_graph_form
    def body(impl):
        built = build_graph(spec, form)
        error = None
        try:
            split(impl, built, cap, cap + excess)
        except Exception as exc:  # noqa: BLE001 - the checker judges what was raised
            error = exc
        return chk.check_cap_rejected(error, cap + excess, cap)

    check = f"chk.check_cap_rejected(error, {cap + excess}, {cap})"
    conform(fsdpcheck_impl, body, reproducer(fsdpcheck_impl, spec, cap, cap + excess, check, form=form, catch="Exception"),
            form=form)


@pytest.mark.invariant("SPL-1")
@pytest.mark.parametrize("cap", [4096, 2**20, 2**21])
def test_unset_first_cap_defaults(fsdpcheck_impl, fsdpcheck_graph_form, cap):
    form = fsdpcheck_graph_form
    import torch.distributed as dist

    default = dist._DEFAULT_FIRST_BUCKET_BYTES if dist.is_available() else cap
    spec = GraphSpec(4, 2, (ModuleSpec("linear"), ModuleSpec("linear")), (), 0, (OpSpec("module", 0), OpSpec("act"), OpSpec("module", 1)))

    def body(impl):
        outcomes = []
        for first in (None, default):
            try:
                outcomes.append((split(impl, build_graph(spec, form), cap, first)[0].buckets, None))
            except Exception as exc:  # noqa: BLE001
                outcomes.append((None, exc))
        (plan_default, err_default), (plan_explicit, err_explicit) = outcomes
        return chk.check_default_first_cap(plan_default, plan_explicit, err_default, err_explicit, default, cap)

    conform(fsdpcheck_impl, body, form=form)


# --------------------------------------------------------------------------- SPL-2..8, 13


# canonical cases: the last bucket reaches its cap inside a mutation whose
# operands have no other users (it must be extended to the next output), and
# a parameter-free preamble that must be fused
_W = ModuleSpec("linear")
EXTEND_AT_END = GraphSpec(4, 2, (ModuleSpec("linear"),), (ParamSpec("matrix"),), 0, (OpSpec("module", 0), OpSpec("accum", 0)))
PREAMBLE = GraphSpec(4, 2, (ModuleSpec("linear"), ModuleSpec("norm")), (), 0, (OpSpec("act"), OpSpec("mutate"), OpSpec("module", 0), OpSpec("module", 1)))
# module form: walking back, the middle bucket meets its cap at `p`'s get_attr,
# read again later; that read is no output (split_module hoists get_attr
# nodes), so the bucket must go on to `mul`
ATTR_READ_LATER = GraphSpec(4, 1, (_W, _W), (ParamSpec("matrix"),), 0, (OpSpec("module", 0), OpSpec("accum", 0), OpSpec("module", 1), OpSpec("accum", 0)))


@pytest.mark.fsdpcheck_cost(slow=True, round_s=1.0)
@pytest.mark.invariant("SPL-2", "SPL-3", "SPL-5", "SPL-6", "SPL-7", "SPL-8", "SPL-13")
@examples(60)
@given(spec=single_use, caps=caps())
@example(spec=EXTEND_AT_END, caps=(1, 1))
@example(spec=PREAMBLE, caps=(16, 16))
@example(spec=ATTR_READ_LATER, caps=(1, 1))
def test_split_plan(fsdpcheck_impl, fsdpcheck_graph_form, spec, caps):
    form = fsdpcheck_graph_form
    cap, first = caps

    def body(impl):
        built = build_graph(spec, form)
        facts = chk.graph_facts(built.gm, built.example_inputs)
        result, _ = split(impl, built, cap, first)
        return chk.check_plan(facts, result.buckets, cap, first) or chk.check_table(result.table, result.buckets, cap, facts, first)

    check = f"chk.check_plan(facts, result.buckets, {cap}, {first}) or chk.check_table(result.table, result.buckets, {cap}, facts, {first})"
    conform(fsdpcheck_impl, body, reproducer(fsdpcheck_impl, spec, cap, first, check, form=form), form=form)


#: SPL-3's canonical cases, each with one thing that counts zero bytes or
#: counts although no module holds it; one bucket (caps far above the sizes).
SIZE_CASES = {
    "frozen-module": GraphSpec(4, 2, (_W, ModuleSpec("linear", frozen=True)), (), 0, (OpSpec("module", 0), OpSpec("module", 1))),
    "frozen-parameter": GraphSpec(4, 2, (_W,), (ParamSpec("matrix", frozen=True),), 0, (OpSpec("module", 0), OpSpec("param", 0))),
    "ignored-module": GraphSpec(4, 2, (_W, ModuleSpec("linear", ignored=True)), (), 0, (OpSpec("module", 0), OpSpec("module", 1))),
    "buffer": GraphSpec(4, 2, (_W,), (), 1, (OpSpec("module", 0), OpSpec("buffer", 0))),
    "method-argument": GraphSpec(4, 2, (_W,), (ParamSpec("vector"),), 0, (OpSpec("module", 0), OpSpec("param", 0, method=True))),
}


@pytest.mark.invariant("SPL-3")
@pytest.mark.parametrize("case", sorted(SIZE_CASES))
def test_sizes_cases(fsdpcheck_impl, fsdpcheck_graph_form, case):
    _check_sizing(fsdpcheck_impl, SIZE_CASES[case], 10**6, 10**6, "check_sizes", fsdpcheck_graph_form)


@pytest.mark.invariant("SPL-3")
@examples(15)
@given(spec=graph_specs(multi_use=False, method_args=True), caps=caps())
def test_sizes_with_method_arguments(fsdpcheck_impl, fsdpcheck_graph_form, spec, caps):
    """Parameters passed to ``call_method`` nodes (``h.mul(p)``) count too."""
    cap, first = caps
    _check_sizing(fsdpcheck_impl, spec, cap, first, "check_sizes", fsdpcheck_graph_form)


# --------------------------------------------------------------------------- SPL-4

COUNT_ONCE_CASES = {
    "module-called-twice": GraphSpec(4, 2, (_W,), (), 0, (OpSpec("module", 0), OpSpec("act"), OpSpec("module", 0))),
    "tied-weights": GraphSpec(4, 2, (_W, ModuleSpec("linear", tied_to=0)), (), 0, (OpSpec("module", 0), OpSpec("module", 1))),
    "param-read-twice": GraphSpec(4, 2, (), (ParamSpec("matrix"),), 0, (OpSpec("param", 0), OpSpec("act"), OpSpec("param", 0))),
}


def _check_sizing(impl, spec, cap, first, rule, form):
    """A sizing rule (``chk.<rule>``) over a valid partition, with a
    reproducer that runs exactly the same expression."""

    def body(impl):
        built = build_graph(spec, form)
        facts = chk.graph_facts(built.gm, built.example_inputs)
        result, _ = split(impl, built, cap, first)
        return chk.check_partition(facts, result.buckets) or getattr(chk, rule)(facts, result.buckets)

    check = f"chk.check_partition(facts, result.buckets) or chk.{rule}(facts, result.buckets)"
    conform(impl, body, reproducer(impl, spec, cap, first, check, form=form), form=form)


@pytest.mark.invariant("SPL-4")
@pytest.mark.parametrize("case", sorted(COUNT_ONCE_CASES))
def test_counted_once_cases(fsdpcheck_impl, fsdpcheck_graph_form, case):
    _check_sizing(fsdpcheck_impl, COUNT_ONCE_CASES[case], 10**6, 10**6, "check_counted_once", fsdpcheck_graph_form)


@pytest.mark.invariant("SPL-4")
@examples(15)
@given(spec=full, caps=caps())
def test_counted_once(fsdpcheck_impl, fsdpcheck_graph_form, spec, caps):
    _check_sizing(fsdpcheck_impl, spec, *caps, "check_counted_once", fsdpcheck_graph_form)


# --------------------------------------------------------------------------- SPL-9..12


def _grad_targets(built):
    seen, targets = set(), []
    for t in [*built.example_inputs, *built.gm.parameters()]:
        if getattr(t, "requires_grad", False) and id(t) not in seen:
            seen.add(id(t))
            targets.append(t)
    return targets


@pytest.mark.fsdpcheck_cost("compile", round_s=1.0)
@pytest.mark.invariant("SPL-9", "SPL-10", "SPL-11", "SPL-12", "SPL-17")
@examples(40)
@given(spec=full, caps=caps())
def test_compiled_split(fsdpcheck_impl, fsdpcheck_graph_form, fsdpcheck_device, spec, caps):
    form = fsdpcheck_graph_form
    cap, first = caps

    def body(impl):
        built = build_graph(spec, form, device=fsdpcheck_device)
        facts = chk.graph_facts(built.gm, built.example_inputs)
        meta = cchk.value_meta(built.gm, built.example_inputs)
        layouts = cchk.run_time_layouts(built.gm, built.example_inputs)
        wrt = _grad_targets(built)
        code_before = built.gm.code
        expected = cchk.evaluate(built.gm, built.example_inputs, wrt)
        result, backend = split(impl, built, cap, first)
        violations = cchk.check_backend_calls(facts, result.buckets, backend.calls, built.gm, built.example_inputs, meta)
        violations += cchk.check_example_inputs(result.buckets, backend.calls, built.gm, layouts)
        violations += cchk.compare(expected, cchk.evaluate(result.compiled, built.example_inputs, wrt), "the split module", "SPL-11")
        after = cchk.evaluate(built.gm, built.example_inputs, wrt)
        violations += cchk.compare(expected, after, "the original graph module after the split", "SPL-12", exact=True)
        if built.gm.code != code_before:
            violations.append(Violation("SPL-12", "the original graph module's code changed during the split"))
        return violations

    check = (
        "(cchk.check_backend_calls(facts, result.buckets, calls, built.gm, built.example_inputs, meta)"
        " + cchk.check_example_inputs(result.buckets, calls, built.gm, layouts)"
        " + cchk.compare(expected, cchk.evaluate(result.compiled, built.example_inputs, wrt), 'the split module', 'SPL-11')"
        " + cchk.compare(expected, cchk.evaluate(built.gm, built.example_inputs, wrt), 'the original graph module after the split', 'SPL-12', exact=True)"
        " + ([] if built.gm.code == code_before else ['SPL-12: the original graph module changed its code']))"
    )
    before = ["meta = cchk.value_meta(built.gm, built.example_inputs)", LAYOUTS, *EVALUATE, "code_before = built.gm.code"]
    conform(fsdpcheck_impl, body, reproducer(fsdpcheck_impl, spec, cap, first, check, fsdpcheck_device, form=form, before=before),
            form=form)


# --------------------------------------------------------------------------- SPL-14


@pytest.mark.fsdpcheck_cost(slow=True)
@pytest.mark.invariant("SPL-14")
@examples(12)
@given(spec=graph_specs(hop=True, multi_use=False).filter(lambda s: s.has_hop), caps=caps())
def test_higher_order_ops(fsdpcheck_impl, fsdpcheck_graph_form, spec, caps):
    _check_higher_order(fsdpcheck_impl, spec, *caps, fsdpcheck_graph_form)


# --------------------------------------------------------------------------- SPL-15


@pytest.mark.fsdpcheck_cost(round_s=1.2)
@pytest.mark.invariant("SPL-15")
@examples(25)
@given(spec=graph_specs(chain_only=True), caps=caps())
def test_agrees_with_ddp_assignment(fsdpcheck_impl, fsdpcheck_graph_form, spec, caps):
    form = fsdpcheck_graph_form
    import torch.distributed as dist

    if not dist.is_available():
        pytest.skip("torch.distributed is not available")
    cap, first = caps

    def assign(tensors, limits):
        return dist._compute_bucket_assignment_by_size(tensors, limits)[0]

    def body(impl):
        built = build_graph(spec, form)
        facts = chk.graph_facts(built.gm, built.example_inputs)
        result, _ = split(impl, built, cap, first)
        return chk.check_ddp_assignment(facts, result.buckets, cap, first, assign)

    check = f"chk.check_ddp_assignment(facts, result.buckets, {cap}, {first}, lambda t, l: torch.distributed._compute_bucket_assignment_by_size(t, l)[0])"
    conform(fsdpcheck_impl, body, reproducer(fsdpcheck_impl, spec, cap, first, check, form=form), form=form)


# --------------------------------------------------------------------------- differential


@pytest.mark.fsdpcheck_cost(slow=True, round_s=0.7)
@pytest.mark.invariant("SPL-3", "SPL-5")
@examples(30)
@given(spec=single_use, caps=caps())
def test_matches_reference(fsdpcheck_impl, fsdpcheck_graph_form, spec, caps):
    form = fsdpcheck_graph_form
    from pytest_fsdpcheck.reference.splitting import ReferenceSplitting

    cap, first = caps
    ref, _ = split(type("Ref", (), {"splitting": ReferenceSplitting()})(), build_graph(spec, form), cap, first)

    def body(impl):
        got, _ = split(impl, build_graph(spec, form), cap, first)
        return chk.diff_against_reference(got.buckets, ref.buckets)

    check = (
        "chk.diff_against_reference(result.buckets, ReferenceSplitting().split(ref.gm, ref.example_inputs, "
        f"bucket_bytes_cap={cap}, first_bucket_cap={first}, backend=lambda gm, ex: gm).buckets)"
    )
    conform(fsdpcheck_impl, body, reproducer(fsdpcheck_impl, spec, cap, first, check, reference=True, form=form), form=form)
