"""Golden corpus: canonical models whose bucket plan, traversal order, exec
order and FSDP2 groups are fixed in ``fixtures/golden/<model>.txt`` (the spec's answer,
shared by every implementation). A run only reads them: no setting turns a
difference into a pass. A maintainer changes the answer in a source checkout
with ``python -m pytest_fsdpcheck.checks.golden_files regenerate``, which
renders from the reference, and reviews the diff."""

import pytest

from pytest_fsdpcheck.checks import golden_files as golden
from pytest_fsdpcheck.checks.fsdp2 import check_managed, check_states, expected_managed
from pytest_fsdpcheck.checks.golden import check_golden
from pytest_fsdpcheck.checks.repro import snippet
from pytest_fsdpcheck.contract import accepted_forms
from pytest_fsdpcheck.core.not_provided import NotProvided
from pytest_fsdpcheck.generators.corpus import (
    CORPUS,
    capture_unavailable,
    captured,
    fsdp2_calls,
    fsdp2_plan,
    missing,
    untraceable,
)
from pytest_fsdpcheck.known.judge import conform

#: building and capturing a real architecture: the corpus class; the goldens a
#: walk answers (no capture, one call per fixed model, 0.01-0.2 s) are marked
#: as the cheapest checks of their areas
pytestmark = pytest.mark.fsdpcheck_cost("corpus")

MODELS = list(CORPUS)


def _require(model):
    reason = missing(model)
    if reason is not None:
        raise NotProvided(reason)


def _require_capture(model):
    """The graph Dynamo captures is this check's input, made by torch (and,
    for the real architectures, transformers) before any implementation
    runs. Where a probe of this torch says it cannot capture the model, the
    check has no input; any other failure to capture (an exception, more
    than one graph) is the suite's own error and fails the test with it."""
    _require(model)
    reason = capture_unavailable(model)
    if reason is not None:
        raise NotProvided(reason)
    captured(model)


def _compare(impl, model, section, render_call):
    _require(model)
    expected = golden.read_sections(golden.golden_dir() / f"{model}.txt").get(section)
    conform(
        impl,
        lambda impl: check_golden(section, expected, golden.render_section(model, section, impl),
                                  f"fixtures/golden/{model}.txt"),
        snippet(
            impl,
            [f"got = {render_call}"],
            [f"expected = golden.read_sections(golden.golden_dir() / '{model}.txt')[{section!r}]",
             "assert got == expected, (expected, got)"],
            imports=["from pytest_fsdpcheck.checks import golden_files as golden", "from pytest_fsdpcheck.generators import corpus"],
        ),
    )


@pytest.mark.invariant("SPL-3", "SPL-4", "SPL-5", "SPL-7")
@pytest.mark.parametrize("model", MODELS)
def test_golden_buckets(fsdpcheck_impl, model):
    _require_capture(model)  # the corpus graphs are the ones Dynamo really captures
    _compare(fsdpcheck_impl, model, "buckets", f"golden.render_section({model!r}, 'buckets', impl)")


@pytest.mark.fsdpcheck_cost("single call")
@pytest.mark.invariant("TRV-3", "TRV-6", "TRV-7")
@pytest.mark.parametrize("model", MODELS)
def test_golden_traversal(fsdpcheck_impl, model):
    _compare(fsdpcheck_impl, model, "traversal", f"corpus.render_traversal({model!r}, impl.traversal)")


@pytest.mark.fsdpcheck_cost("single call")
@pytest.mark.invariant("EXO-2", "EXO-3")
@pytest.mark.parametrize("model", MODELS)
def test_golden_exec_order(fsdpcheck_impl, model):
    _require(model)
    reason = untraceable(model)
    if reason is not None:
        raise NotProvided(reason)
    _compare(fsdpcheck_impl, model, "exec order", f"corpus.render_exec_order({model!r}, impl.exec_order)")


def _corpus_split_input(impl, model):
    """The captured graph, its facts, the corpus caps and the graph's form;
    a skip where this implementation's splitting does not take that form."""
    from pytest_fsdpcheck.checks import splitting as chk

    _require_capture(model)
    spec = CORPUS[model]
    _, gm, example_inputs, _ = captured(model)
    # Dynamo kept modules as call_module nodes before it inlined them (torch < 2.5):
    # such a capture is a module-form graph, and only module-form bugs explain it.
    form = "module" if any(n.op == "call_module" for n in gm.graph.nodes) else "dynamo"
    if form not in accepted_forms(impl.splitting):
        raise NotProvided(f"this torch's Dynamo captured {model} as a {form}-form graph, "
                    f"which this implementation's splitting does not accept")
    return gm, example_inputs, chk.graph_facts(gm, example_inputs), spec.bucket_bytes_cap, spec.first_bucket_cap, form


@pytest.mark.invariant("SPL-2", "SPL-3", "SPL-4", "SPL-5", "SPL-6", "SPL-7", "SPL-8")
@pytest.mark.parametrize("model", MODELS)
def test_corpus_split_invariants(fsdpcheck_impl, model):
    """The splitting checkers on the graph Dynamo really captured."""

    from pytest_fsdpcheck.checks import splitting as chk

    gm, example_inputs, facts, cap, first, form = _corpus_split_input(fsdpcheck_impl, model)

    def body(impl):
        return chk.check_captured_split(impl.splitting, gm, example_inputs, facts, cap, first)

    conform(fsdpcheck_impl, body, form=form)


@pytest.mark.invariant("SPL-15")
@pytest.mark.parametrize("model", MODELS)
def test_corpus_ddp_assignment(fsdpcheck_impl, model):
    """Where the spec's plan extends no bucket, DDP's own assignment of the
    same parameter bytes groups the nodes as the plan does; elsewhere n/p
    with the reason (never a pass that compared nothing)."""

    from pytest_fsdpcheck.checks import splitting as chk

    gm, example_inputs, facts, cap, first, form = _corpus_split_input(fsdpcheck_impl, model)
    reason = chk.ddp_assignment_unjudgeable(gm, example_inputs, facts, cap, first)
    if reason is not None:
        raise NotProvided(f"{model}: {reason}")

    def body(impl):
        return chk.check_captured_assignment(impl.splitting, gm, example_inputs, facts, cap, first)

    conform(fsdpcheck_impl, body, form=form)


def _require_fsdp2_plan(impl, model):
    _require(model)
    if not getattr(impl.fsdp2, "several_roots", True) and any(len(call) > 1 for call in fsdp2_calls(model)):
        raise NotProvided(f"{model}'s plan shards tied modules in one fully_shard call, "
                    "and this implementation's fully_shard takes one module per group")


@pytest.mark.fsdpcheck_cost("single call")
@pytest.mark.invariant("FS2-1", "FS2-2", "FS2-4", "FS2-5")
@pytest.mark.parametrize("model", MODELS)
def test_golden_fsdp2(fsdpcheck_impl, model):
    """The fully_shard calls a user makes (layers first, tied modules in one
    call, the root last): each call's managed modules and states."""
    _require_fsdp2_plan(fsdpcheck_impl, model)
    _compare(fsdpcheck_impl, model, "fsdp2", f"corpus.render_fsdp2({model!r}, impl.fsdp2)")


@pytest.mark.fsdpcheck_cost("single call")
@pytest.mark.invariant("FS2-1", "FS2-2", "FS2-4", "FS2-5")
@pytest.mark.parametrize("model", MODELS)
def test_corpus_fsdp2_invariants(fsdpcheck_impl, model):
    """The FSDP2 checkers on the same calls, judged by the oracle rather
    than by the golden text."""
    _require_fsdp2_plan(fsdpcheck_impl, model)

    def body(impl):
        violations = []
        for _call, built in fsdp2_plan(model, impl.fsdp2):
            violations += check_managed(built, impl.fsdp2.managed_modules(built.roots, None))
            managed = expected_managed(built)
            modules = [built.modules[i] for i in managed]
            violations += check_states(built, managed, lambda modules=modules: impl.fsdp2.managed_states(modules, None))
        return violations

    conform(
        fsdpcheck_impl,
        body,
        snippet(
            fsdpcheck_impl,
            ["violations = []",
             f"for call, built in corpus.fsdp2_plan({model!r}, impl.fsdp2):",
             "    violations += check_managed(built, impl.fsdp2.managed_modules(built.roots, None))",
             "    managed = expected_managed(built)",
             "    modules = [built.modules[i] for i in managed]",
             "    violations += check_states(built, managed, lambda modules=modules: impl.fsdp2.managed_states(modules, None))"],
            ["assert not violations, violations"],
            imports=["from pytest_fsdpcheck.generators import corpus",
                     "from pytest_fsdpcheck.checks.fsdp2 import check_managed, check_states, expected_managed"],
        ),
    )
