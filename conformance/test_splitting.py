"""Splitting conformance (SPL-1..15): DDPOptimizer's bucket plan, split and
per-bucket compile, on generated FX graphs in each implementation's form."""

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from pytest_fsdpcheck.checks import Violation, error_of
from pytest_fsdpcheck.checks import splitting as chk
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
from pytest_fsdpcheck.runs.dynamic_split import (
    DYNAMIC_BACKENDS,
    DYNAMIC_CASES,
    HOP_CASES,
    judge,
    reproducer_lines,
    run_dynamic_split,
)

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
            *ref_imports,
        ],
    )


#: lines of a reproducer computing what ``_grad_targets`` and ``evaluate`` give the tests
EVALUATE = [
    "wrt = list({id(t): t for t in [*built.example_inputs, *built.gm.parameters()] if getattr(t, 'requires_grad', False)}.values())",
    "expected = chk.evaluate(built.gm, built.example_inputs, wrt)",
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
    return (built, chk.graph_facts(built.gm, built.example_inputs), chk.value_meta(built.gm, built.example_inputs),
            wrt, chk.evaluate(built.gm, built.example_inputs, wrt), chk.run_time_layouts(built.gm, built.example_inputs))


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
                or chk.check_backend_calls(facts, result.buckets, backend.calls, built.gm, built.example_inputs, meta)
                or chk.check_example_inputs(result.buckets, backend.calls, built.gm, layouts)
                or chk.compare(expected, chk.evaluate(result.compiled, built.example_inputs, wrt), "the split module", "SPL-11")
                or chk.compare(expected, chk.evaluate(built.gm, built.example_inputs, wrt),
                               "the original graph module after the split", "SPL-12", exact=True))

    check = (f"chk.check_plan(facts, result.buckets, {cap}, {first}) or chk.check_table(result.table, result.buckets, {cap}, facts, {first})"
             " or chk.check_backend_calls(facts, result.buckets, calls, built.gm, built.example_inputs, meta)"
             " or chk.check_example_inputs(result.buckets, calls, built.gm, layouts)"
             " or chk.compare(expected, chk.evaluate(result.compiled, built.example_inputs, wrt), 'the split module', 'SPL-11')"
             " or chk.compare(expected, chk.evaluate(built.gm, built.example_inputs, wrt),"
             " 'the original graph module after the split', 'SPL-12', exact=True)")
    before = ["meta = chk.value_meta(built.gm, built.example_inputs)", *EVALUATE, LAYOUTS]
    conform(fsdpcheck_impl, body, reproducer(fsdpcheck_impl, spec, cap, first, check, form=form, before=before), form=form)


#: the reproducers' line computing what ``_case_inputs`` gives the tests as ``layouts``
LAYOUTS = "layouts = chk.run_time_layouts(built.gm, built.example_inputs)"


@pytest.mark.invariant("SPL-9", "SPL-10", "SPL-11", "SPL-12", "SPL-17")
@pytest.mark.parametrize("case", list(SPLIT_CASES))
def test_lazy_split_cases(fsdpcheck_impl, fsdpcheck_graph_form, case):
    """The fixed cases split with lazy compile on (torch: DDPOptimizer's
    second path, taken with ``optimize_ddp_lazy_compile``, which compiles
    each submodule at its first call and unwraps what it wrapped): after
    the split module's first call on the example inputs, and its second,
    the backend calls and what the split module returns are what SPL-9..12
    say of any split."""
    _require_lazy(fsdpcheck_impl)
    spec, cap, first = SPLIT_CASES[case]
    form = fsdpcheck_graph_form

    def body(impl):
        built, facts, meta, wrt, expected, layouts = _case_inputs(spec, form)
        result, backend = split(impl, built, cap, first, lazy_compile=True)
        # the first call compiles, the second runs what was compiled: each
        # submodule is still handed to the backend once (SPL-10)
        got = []
        for nth in ("first", "second"):
            try:
                got.append(chk.evaluate(result.compiled, built.example_inputs, wrt))
            except Exception as exc:  # noqa: BLE001 - a lazy split compiles here: what it raises is the split's
                return [Violation("SPL-11", f"the split module raised {type(exc).__name__} on its {nth} call (a lazy "
                                            "split compiles its submodules at the first)", detail=str(exc), error=error_of(exc))]
        return (chk.check_backend_calls(facts, result.buckets, backend.calls, built.gm, built.example_inputs, meta)
                or chk.check_example_inputs(result.buckets, backend.calls, built.gm, layouts)
                or chk.compare(expected, got[0], "the split module", "SPL-11")
                or chk.compare(expected, got[1], "the split module on its second call", "SPL-11")
                or chk.compare(expected, chk.evaluate(built.gm, built.example_inputs, wrt),
                               "the original graph module after the split", "SPL-12", exact=True))

    check = ("chk.check_backend_calls(facts, result.buckets, calls, built.gm, built.example_inputs, meta)"
             " or chk.check_example_inputs(result.buckets, calls, built.gm, layouts)"
             " or chk.compare(expected, got, 'the split module', 'SPL-11')"
             " or chk.compare(expected, again, 'the split module on its second call', 'SPL-11')"
             " or chk.compare(expected, chk.evaluate(built.gm, built.example_inputs, wrt),"
             " 'the original graph module after the split', 'SPL-12', exact=True)")
    before = ["meta = chk.value_meta(built.gm, built.example_inputs)", *EVALUATE, LAYOUTS]
    after = ["got = chk.evaluate(result.compiled, built.example_inputs, wrt)  # a lazy split compiles here",
             "again = chk.evaluate(result.compiled, built.example_inputs, wrt)"]
    conform(fsdpcheck_impl, body, reproducer(fsdpcheck_impl, spec, cap, first, check, form=form, before=before, lazy=True,
                                             after=after), form=form)


def _require_lazy(impl):
    """n/p, before anything runs, for an implementation with no lazy compile
    mode (``splitting.lazy_compile`` false or absent; the torch adapter's
    is decided by release, ``provided``)."""
    if getattr(impl.splitting, "lazy_compile", False):
        return
    from pytest_fsdpcheck.core.provided import installed_torch, releases

    name = getattr(impl, "_fsdpcheck_spec", "the implementation")
    raise NotProvided(f"{name} has no lazy compile mode (torch's DDPOptimizer has the lazy path in torch "
                      f"{releases('splitting.lazy_compile')}; this is torch {'.'.join(map(str, installed_torch()))})",
                      release_lacks="splitting.lazy_compile")


class ContextRecorder(Recorder):
    """A backend recording, besides each call, the grad mode and autocast
    state each call runs in (SPL-18)."""

    def __init__(self):
        super().__init__()
        self.states = []

    def __call__(self, gm, example_inputs):
        self.states.append(chk.compile_context())
        return super().__call__(gm, example_inputs)


#: SPL-18's cases: one bucket, a chain cut in three, and activations laid out otherwise
CONTEXT_CASES = ("one-bucket", "first-cap-below-cap", "non-contiguous-activations")


@pytest.mark.invariant("SPL-18")
@pytest.mark.parametrize("case", CONTEXT_CASES)
def test_compile_context_cases(fsdpcheck_impl, fsdpcheck_graph_form, case):
    """Each backend call runs in the caller's grad mode and autocast state,
    and the split leaves them as it found them."""
    spec, cap, first = SPLIT_CASES[case]
    form = fsdpcheck_graph_form

    def body(impl):
        built = build_graph(spec, form)
        backend = ContextRecorder()
        caller = chk.compile_context()
        split(impl, built, cap, first, backend=backend)
        return chk.check_compile_context(caller, backend.states, chk.compile_context(), 0)

    check = "chk.check_compile_context(caller, states, chk.compile_context(), 0)"
    example = reproducer(fsdpcheck_impl, spec, cap, first, check, form=form, before=["caller, states = chk.compile_context(), []"],
                         backend="lambda gm, ex: states.append(chk.compile_context()) or calls.append((gm, ex)) or gm")
    conform(fsdpcheck_impl, body, example, form=form)


@pytest.mark.invariant("SPL-18")
@pytest.mark.parametrize("case", CONTEXT_CASES)
def test_compile_hooks_cases(fsdpcheck_impl, fsdpcheck_graph_form, case):
    """The split compiles inside the caller's ``saved_tensors_hooks`` (as
    Dynamo compiles at the first call of a compiled model, in whatever
    context the user made that call): none of the caller's hooks fires
    (nor does anything else of SPL-18 change under them)."""
    import torch

    _require_hooks_deferred(fsdpcheck_impl)
    spec, cap, first = SPLIT_CASES[case]
    form = fsdpcheck_graph_form

    def body(impl):
        built = build_graph(spec, form)
        packed = []
        backend = ContextRecorder()
        caller = chk.compile_context()
        with torch.autograd.graph.saved_tensors_hooks(lambda t: packed.append(1) or t, lambda t: t):
            split(impl, built, cap, first, backend=backend)
        return chk.check_compile_context(caller, backend.states, chk.compile_context(), len(packed))

    check = "chk.check_compile_context(caller, states, chk.compile_context(), len(packed))"
    before = ["caller, states, packed = chk.compile_context(), [], []",
              "hooks = torch.autograd.graph.saved_tensors_hooks(lambda t: packed.append(1) or t, lambda t: t)",
              "hooks.__enter__()"]
    example = reproducer(fsdpcheck_impl, spec, cap, first, check, form=form, before=before, after=["hooks.__exit__(None, None, None)"],
                         backend="lambda gm, ex: states.append(chk.compile_context()) or calls.append((gm, ex)) or gm")
    conform(fsdpcheck_impl, body, example, form=form)


class ConfigRecorder(Recorder):
    """A backend taking keyword arguments, as Dynamo's compiler functions
    do (``config_patches``), recording each call's (SPL-19)."""

    def __init__(self):
        super().__init__()
        self.configs = []

    def __call__(self, gm, example_inputs, **kwargs):
        self.configs.append(kwargs)
        return super().__call__(gm, example_inputs)


#: SPL-19's configs: an inductor config patch, as Dynamo passes one to compile_fn
COMPILER_CONFIGS = {"config_patches": {"max_autotune": True}}


@pytest.mark.invariant("SPL-19")
@pytest.mark.parametrize("case", ("one-bucket", "first-cap-below-cap"))
def test_compiler_configs_cases(fsdpcheck_impl, fsdpcheck_graph_form, case):
    """Asked to compile with compiler configs (torch: ``compile_fn(gm,
    example_inputs, **compiler_configs)``, as Dynamo calls it with the
    ``config_patches`` of a per-graph inductor override), the split hands
    them to every backend call: the one compile of an unsplit graph and
    each bucket's."""
    _require_configs(fsdpcheck_impl)
    spec, cap, first = SPLIT_CASES[case]
    form = fsdpcheck_graph_form

    def body(impl):
        built = build_graph(spec, form)
        backend = ConfigRecorder()
        split(impl, built, cap, first, backend=backend, compiler_configs=COMPILER_CONFIGS)
        return chk.check_compiler_configs(COMPILER_CONFIGS, backend.configs)

    check = f"chk.check_compiler_configs({COMPILER_CONFIGS!r}, configs)"
    example = reproducer(fsdpcheck_impl, spec, cap, first, check, form=form, before=["configs = []"],
                         backend="lambda gm, ex, **kw: configs.append(kw) or calls.append((gm, ex)) or gm",
                         split_kwargs=f", compiler_configs={COMPILER_CONFIGS!r}")
    conform(fsdpcheck_impl, body, example, form=form)


@pytest.mark.invariant("SPL-17", "SPL-10", "SPL-11")
@pytest.mark.parametrize("kind", DYNAMIC_BACKENDS)
@pytest.mark.parametrize("case", DYNAMIC_CASES)
def test_split_inside_compile_cases(fsdpcheck_impl, case, kind):
    """Inside ``torch.compile(model, dynamic=True)``: every bucket's compile
    is handed fakes of the compile's fake mode with the symbolic sizes of
    Dynamo's graph, each bucket is compiled once for every length, and the
    compiled model computes the eager one's outputs and gradients at each;
    behind AOTAutograd each bucket's backward is compiled against its own
    forward's metadata (with static shapes, lazily: ``aot-static``)
    (``runs/dynamic_split.py``)."""
    from pytest_fsdpcheck.contract import accepted_forms
    from pytest_fsdpcheck.core.torch_support import compile_unsupported

    if getattr(fsdpcheck_impl, "splitting", None) is None:
        raise NotProvided("this implementation has no splitting area")
    reason = compile_unsupported()
    if reason:
        raise NotProvided(reason)
    _require_symbols_by_release(case, kind)

    def body(impl):
        return judge(run_dynamic_split(impl.splitting, case, kind, accepted_forms(impl.splitting)))

    conform(fsdpcheck_impl, body, snippet(fsdpcheck_impl, [], reproducer_lines(case, kind)))


@pytest.mark.invariant("SPL-14")
@pytest.mark.parametrize("kind", DYNAMIC_BACKENDS)
@pytest.mark.parametrize("case", HOP_CASES)
def test_higher_order_inside_compile_cases(fsdpcheck_impl, case, kind):
    """SPL-14 as users meet it: a model with activation checkpointing, or
    FlexAttention, compiled through the split with ``dynamic=True`` and run
    at several lengths, judged as ``test_split_inside_compile_cases`` judges
    its models (SPL-17's example inputs, SPL-10's compiles, SPL-11's results
    at every length); a release whose DDPOptimizer rejects such graphs
    (before 2.6) is n/p by release, and a rejection on one that splits them
    is SPL-14's FAIL (``runs/dynamic_split.py``)."""
    from dataclasses import replace

    from pytest_fsdpcheck.contract import accepted_forms
    from pytest_fsdpcheck.core.torch_support import compile_unsupported

    if getattr(fsdpcheck_impl, "splitting", None) is None:
        raise NotProvided("this implementation has no splitting area")
    reason = compile_unsupported()
    if reason:
        raise NotProvided(reason)
    _require_by_release(fsdpcheck_impl, "splits_higher_order_ops", True, "splitting.splits_higher_order_ops",
                        "rejects graphs with higher-order ops (NotImplementedError)", "DDPOptimizer splits them")
    _require_case_by_release(case, kind)

    def body(impl):
        try:
            record = run_dynamic_split(impl.splitting, case, kind, accepted_forms(impl.splitting))
        except NotProvided:
            raise
        except Exception as exc:  # noqa: BLE001 - the checker judges what the split raised
            return chk.check_higher_order_rejected(exc, may_reject=False)
        return [replace(v, invariant="SPL-14", message=f"with {case} inside the compile, {v.invariant}: {v.message}")
                for v in judge(record)]

    conform(fsdpcheck_impl, body, snippet(fsdpcheck_impl, [], reproducer_lines(case, kind)))


def _require_case_by_release(case, kind):
    """n/p, for every implementation, where the installed torch cannot run
    ``case`` behind ``kind``'s backend: FlexAttention before 2.5; an
    AOTAutograd backend before 2.8, whose AOTAutograd refuses the Dynamo
    sources SPL-10 asks a split to carry once a bucket takes two values of
    earlier buckets (the checkpointed model's last bucket does)."""
    from pytest_fsdpcheck.core.provided import expected_provided, installed_torch, releases

    here = ".".join(map(str, installed_torch()))
    if case == "flex-attention" and not expected_provided("splitting.flex_attention", installed_torch()):
        raise NotProvided(f"torch has FlexAttention in {releases('splitting.flex_attention')}; this is torch {here}",
                          release_lacks="splitting.flex_attention")
    if kind != "eager" and not expected_provided("splitting.aot_sourceless_inputs", installed_torch()):
        raise NotProvided("AOTAutograd takes a bucket's inputs without a Dynamo source (values of earlier buckets) in "
                          f"torch {releases('splitting.aot_sourceless_inputs')}; this is torch {here}, whose "
                          "aot_module_simplified asserts one distinct source per input",
                          release_lacks="splitting.aot_sourceless_inputs")


#: the inside-compile cases whose buckets hand on values of two symbolic sizes (batch and length)
TWO_SYMBOLS = ("sequence-mean",)


def _require_symbols_by_release(case, kind):
    """n/p, for every implementation (the reference splits with torch.fx's
    split_module too), where two symbolic sizes cross a bucket boundary and
    the installed torch's split_module cannot sort them (before 2.3); the
    static kind and the one-symbol cases run on every release."""
    from pytest_fsdpcheck.core.provided import expected_provided, installed_torch, releases

    if case not in TWO_SYMBOLS or kind == "aot-static" or expected_provided("splitting.symbolic_cross_bucket",
                                                                           installed_torch()):
        return
    here = ".".join(map(str, installed_torch()))
    raise NotProvided(f"torch.fx's split_module sorts two symbolic sizes crossing a bucket boundary in torch "
                      f"{releases('splitting.symbolic_cross_bucket')}; this is torch {here}, whose sympy symbols do "
                      "not compare", release_lacks="splitting.symbolic_cross_bucket")


def _require_by_release(impl, attribute, default, feature, lacks, provides):
    """n/p, before anything runs, for an implementation whose splitting area
    declares ``attribute`` false (``default`` where it says nothing; the torch
    adapter's is decided by release, ``provided``): ``lacks`` says what it
    does not do, ``provides`` what torch does in the releases that have
    ``feature``."""
    if getattr(impl.splitting, attribute, default):
        return
    from pytest_fsdpcheck.core.provided import installed_torch, releases

    name = getattr(impl, "_fsdpcheck_spec", "the implementation")
    raise NotProvided(f"{name} {lacks} ({provides}, in torch {releases(feature)}; this is torch "
                      f"{'.'.join(map(str, installed_torch()))})", release_lacks=feature)


def _require_hooks_deferred(impl):
    """The saved-tensors hooks case: torch defers the caller's hooks while it
    traces from 2.7 on, and DDPOptimizer's per-bucket pass with them."""
    _require_by_release(impl, "defers_saved_tensors_hooks", True, "splitting.saved_tensors_hooks_deferred",
                        "does not keep the caller's saved-tensors hooks from its compile",
                        "torch defers them while DDPOptimizer compiles its buckets, "
                        "_disable_saved_tensors_hooks_during_tracing")


def _require_configs(impl):
    """The compiler-configs case (``splitting.compiler_configs``, absent: false)."""
    _require_by_release(impl, "compiler_configs", False, "splitting.compiler_configs",
                        "takes no compiler configs",
                        "torch's DDPOptimizer.compile_fn hands them to each bucket's compile")


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
        expected = chk.evaluate(built.gm, built.example_inputs, wrt)
        bodies = chk.nested_meta(built.gm)
        result = error = None
        try:
            result, _ = split(impl, built, cap, first)
        except Exception as exc:  # noqa: BLE001 - the checker judges what was raised
            error = exc
        return chk.check_higher_order(facts, result, error, cap, first, expected, built.example_inputs, wrt, bodies,
                                      may_reject)

    may_reject = not getattr(impl.splitting, "splits_higher_order_ops", True)
    check = (f"chk.check_higher_order(facts, result, error, {cap}, {first}, expected, built.example_inputs, wrt, "
             f"bodies, may_reject={may_reject})")
    conform(impl, body, reproducer(impl, spec, cap, first, check, form=form,
                                   before=[*EVALUATE, "bodies = chk.nested_meta(built.gm)"], catch="Exception"), form=form)


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


@pytest.mark.invariant("SPL-9", "SPL-10", "SPL-11", "SPL-12", "SPL-17")
@examples(40)
@given(spec=full, caps=caps())
def test_compiled_split(fsdpcheck_impl, fsdpcheck_graph_form, fsdpcheck_device, spec, caps):
    form = fsdpcheck_graph_form
    cap, first = caps

    def body(impl):
        built = build_graph(spec, form, device=fsdpcheck_device)
        facts = chk.graph_facts(built.gm, built.example_inputs)
        meta = chk.value_meta(built.gm, built.example_inputs)
        layouts = chk.run_time_layouts(built.gm, built.example_inputs)
        wrt = _grad_targets(built)
        code_before = built.gm.code
        expected = chk.evaluate(built.gm, built.example_inputs, wrt)
        result, backend = split(impl, built, cap, first)
        violations = chk.check_backend_calls(facts, result.buckets, backend.calls, built.gm, built.example_inputs, meta)
        violations += chk.check_example_inputs(result.buckets, backend.calls, built.gm, layouts)
        violations += chk.compare(expected, chk.evaluate(result.compiled, built.example_inputs, wrt), "the split module", "SPL-11")
        after = chk.evaluate(built.gm, built.example_inputs, wrt)
        violations += chk.compare(expected, after, "the original graph module after the split", "SPL-12", exact=True)
        if built.gm.code != code_before:
            violations.append(Violation("SPL-12", "the original graph module's code changed during the split"))
        return violations

    check = (
        "(chk.check_backend_calls(facts, result.buckets, calls, built.gm, built.example_inputs, meta)"
        " + chk.check_example_inputs(result.buckets, calls, built.gm, layouts)"
        " + chk.compare(expected, chk.evaluate(result.compiled, built.example_inputs, wrt), 'the split module', 'SPL-11')"
        " + chk.compare(expected, chk.evaluate(built.gm, built.example_inputs, wrt), 'the original graph module after the split', 'SPL-12', exact=True)"
        " + ([] if built.gm.code == code_before else ['SPL-12: the original graph module changed its code']))"
    )
    before = ["meta = chk.value_meta(built.gm, built.example_inputs)", LAYOUTS, *EVALUATE, "code_before = built.gm.code"]
    conform(fsdpcheck_impl, body, reproducer(fsdpcheck_impl, spec, cap, first, check, fsdpcheck_device, form=form, before=before),
            form=form)


# --------------------------------------------------------------------------- SPL-14


@pytest.mark.invariant("SPL-14")
@examples(12)
@given(spec=graph_specs(hop=True, multi_use=False).filter(lambda s: s.has_hop), caps=caps())
def test_higher_order_ops(fsdpcheck_impl, fsdpcheck_graph_form, spec, caps):
    _check_higher_order(fsdpcheck_impl, spec, *caps, fsdpcheck_graph_form)


# --------------------------------------------------------------------------- SPL-15


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
