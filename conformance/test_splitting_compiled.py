"""Splitting conformance, the compile around the split (SPL-9..12, 14,
17..19) on fixed cases: each bucket compiled lazily at its first call, in
the caller's grad mode, autocast state and saved-tensors hooks, with the
compiler configs the split was asked for, and the split inside Dynamo's
compile of a whole model (``runs/dynamic_split.py``). The fixed graphs
(``SPLIT_CASES``), the recording backend and the reproducers are
``test_splitting.py``'s."""

import pytest

from pytest_fsdpcheck.checks import Violation, error_of
from pytest_fsdpcheck.checks import splitting_compiled as cchk
from pytest_fsdpcheck.checks.repro import snippet
from pytest_fsdpcheck.core.not_provided import NotProvided
from pytest_fsdpcheck.generators.graphs import build_graph
from pytest_fsdpcheck.known.judge import conform
from pytest_fsdpcheck.runs.dynamic_split import (
    DYNAMIC_BACKENDS,
    DYNAMIC_CASES,
    HOP_CASES,
    judge,
    reproducer_lines,
    run_dynamic_split,
)

# relative: the suite is the package `conformance` in a checkout and
# `pytest_fsdpcheck.conformance` installed, and pytest imports it as either
from .test_splitting import (
    EVALUATE,
    LAYOUTS,
    SPLIT_CASES,
    Recorder,
    _case_inputs,
    reproducer,
    split,
)


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
                got.append(cchk.evaluate(result.compiled, built.example_inputs, wrt))
            except Exception as exc:  # noqa: BLE001 - a lazy split compiles here: what it raises is the split's
                return [Violation("SPL-11", f"the split module raised {type(exc).__name__} on its {nth} call (a lazy "
                                            "split compiles its submodules at the first)", detail=str(exc), error=error_of(exc))]
        return (cchk.check_backend_calls(facts, result.buckets, backend.calls, built.gm, built.example_inputs, meta)
                or cchk.check_example_inputs(result.buckets, backend.calls, built.gm, layouts)
                or cchk.compare(expected, got[0], "the split module", "SPL-11")
                or cchk.compare(expected, got[1], "the split module on its second call", "SPL-11")
                or cchk.compare(expected, cchk.evaluate(built.gm, built.example_inputs, wrt),
                               "the original graph module after the split", "SPL-12", exact=True))

    check = ("cchk.check_backend_calls(facts, result.buckets, calls, built.gm, built.example_inputs, meta)"
             " or cchk.check_example_inputs(result.buckets, calls, built.gm, layouts)"
             " or cchk.compare(expected, got, 'the split module', 'SPL-11')"
             " or cchk.compare(expected, again, 'the split module on its second call', 'SPL-11')"
             " or cchk.compare(expected, cchk.evaluate(built.gm, built.example_inputs, wrt),"
             " 'the original graph module after the split', 'SPL-12', exact=True)")
    before = ["meta = cchk.value_meta(built.gm, built.example_inputs)", *EVALUATE, LAYOUTS]
    after = ["got = cchk.evaluate(result.compiled, built.example_inputs, wrt)  # a lazy split compiles here",
             "again = cchk.evaluate(result.compiled, built.example_inputs, wrt)"]
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
        self.states.append(cchk.compile_context())
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
        caller = cchk.compile_context()
        split(impl, built, cap, first, backend=backend)
        return cchk.check_compile_context(caller, backend.states, cchk.compile_context(), 0)

    check = "cchk.check_compile_context(caller, states, cchk.compile_context(), 0)"
    example = reproducer(fsdpcheck_impl, spec, cap, first, check, form=form, before=["caller, states = cchk.compile_context(), []"],
                         backend="lambda gm, ex: states.append(cchk.compile_context()) or calls.append((gm, ex)) or gm")
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
        caller = cchk.compile_context()
        with torch.autograd.graph.saved_tensors_hooks(lambda t: packed.append(1) or t, lambda t: t):
            split(impl, built, cap, first, backend=backend)
        return cchk.check_compile_context(caller, backend.states, cchk.compile_context(), len(packed))

    check = "cchk.check_compile_context(caller, states, cchk.compile_context(), len(packed))"
    before = ["caller, states, packed = cchk.compile_context(), [], []",
              "hooks = torch.autograd.graph.saved_tensors_hooks(lambda t: packed.append(1) or t, lambda t: t)",
              "hooks.__enter__()"]
    example = reproducer(fsdpcheck_impl, spec, cap, first, check, form=form, before=before, after=["hooks.__exit__(None, None, None)"],
                         backend="lambda gm, ex: states.append(cchk.compile_context()) or calls.append((gm, ex)) or gm")
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
        return cchk.check_compiler_configs(COMPILER_CONFIGS, backend.configs)

    check = f"cchk.check_compiler_configs({COMPILER_CONFIGS!r}, configs)"
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
            return cchk.check_higher_order_rejected(exc, may_reject=False)
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
