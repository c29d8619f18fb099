"""The cap rules' bugs fail a fixed case, not only a property: run on
``test_split_cases`` alone (no search, no shrinking), every planted splitter
of ``FIXED_CASE_TARGETS`` FAILs its invariant with the ID in the failure, and
the reference passes the same cases. Under ``pytest --fsdpcheck -x`` these
cases run before any splitting property (collection's cheapest-first order),
so such a bug stops the run within a second of its first test."""

import pytest

from tests.demands import demand_failures
from tests.planted import splitting, splitting_compiled
from tests.planted.splitting import (
    COUNTLESS_TARGETS,
    FIXED_CASE_TARGETS,
    HOP_CASE_TARGETS,
    NO_TABULATE_TARGETS,
)
from tests.planted.splitting_compiled import (
    CONFIG_CASE_TARGETS,
    CONTEXT_CASE_TARGETS,
    DYNAMIC_CASE_TARGETS,
    HOOK_CASE_TARGETS,
    HOP_COMPILE_TARGETS,
    LAZY_CASE_TARGETS,
)

pytestmark = pytest.mark.kill


def _spec(name: str) -> str:
    """The planted splitter ``name``'s spec: the tables name splitters of
    both planted splitting modules (FIXED_CASE_TARGETS and
    HOP_COMPILE_TARGETS each name some of the other's)."""
    module = splitting_compiled if name in vars(splitting_compiled) else splitting
    assert hasattr(module, name), name
    return f"{module.__name__}:{name}"


#: each planted splitter on the fixed cases only
PLANTED = {_spec(name): (inv, "test_split_cases") for name, inv in FIXED_CASE_TARGETS.items()}
PLANTED.update({_spec(name): (inv, "test_higher_order_cases") for name, inv in HOP_CASE_TARGETS.items()})
#: loggers that break only where ``tabulate`` cannot be imported
NO_TABULATE = {_spec(name): (inv, "test_bucket_log_without_tabulate")
               for name, inv in NO_TABULATE_TARGETS.items()}
#: loggers that say their count is in their table only (torch 2.0) and get something else wrong
COUNTLESS = {_spec(name): (inv, "test_bucket_log_without_tabulate")
             for name, inv in COUNTLESS_TARGETS.items()}
COUNTLESS_CONTROL = "tests.planted.splitting:LogsAsTorch20"

#: splitters that compile their buckets in a context the caller can see (SPL-18)
CONTEXT = {_spec(name): (inv, "test_compile_context_cases") for name, inv in CONTEXT_CASE_TARGETS.items()}
CONTEXT.update({_spec(name): (inv, "test_compile_hooks_cases") for name, inv in HOOK_CASE_TARGETS.items()})

#: splitters that lose the compiler configs on the way to a bucket's compile (SPL-19)
CONFIGS = {_spec(name): (inv, "test_compiler_configs_cases") for name, inv in CONFIG_CASE_TARGETS.items()}

#: splitters that hand a bucket's compile static example inputs inside Dynamo's compile (SPL-17)
DYNAMIC = {_spec(name): (inv, "test_split_inside_compile_cases") for name, inv in DYNAMIC_CASE_TARGETS.items()}

#: splitters that crash on, reject, or bend a split of a model with a
#: higher-order op compiled by Dynamo (activation checkpointing, FlexAttention)
HOP_COMPILE = {_spec(name): (inv, "test_higher_order_inside_compile_cases")
               for name, inv in HOP_COMPILE_TARGETS.items()}

#: splitters that get the lazy compile mode wrong (DDPOptimizer's lazy path), right compiling at the split
LAZY = {_spec(name): (inv, "test_lazy_split_cases") for name, inv in LAZY_CASE_TARGETS.items()}


def test_cap_bugs_fail_a_fixed_case(run_suite):
    result, report = run_suite("reference", *PLANTED, k="test_split_cases or test_higher_order_cases", extra=("-p", "no:logging"))
    assert result.ret == 1, "\n".join(result.outlines[-40:])
    demand_failures(result, report, PLANTED)


def test_log_bugs_without_tabulate_fail_their_case(run_suite):
    """Both loggers log as they should where ``tabulate`` imports; the case
    run without it is what fails them."""
    result, report = run_suite("reference", *NO_TABULATE, k="test_bucket_log_without_tabulate",
                               extra=("-p", "no:logging"))
    assert result.ret == 1, "\n".join(result.outlines[-40:])
    demand_failures(result, report, NO_TABULATE)


def test_a_log_with_its_count_in_the_table_only_is_excused_the_count_alone(run_suite):
    """torch 2.0's log without tabulate states the cap and not the count
    (provided: splitting.log_bucket_count): declared so, it passes; the same
    declaration with the cap missing or wrong, through the reference or
    torch's own DDPOptimizer, or the same log undeclared, FAILs SPL-13."""
    result, report = run_suite(COUNTLESS_CONTROL, *COUNTLESS, k="test_bucket_log_without_tabulate",
                               extra=("-p", "no:logging"))
    assert result.ret == 1, "\n".join(result.outlines[-40:])
    demand_failures(result, report, COUNTLESS, control=COUNTLESS_CONTROL)


def test_lazy_compile_bugs_fail_the_lazy_cases(run_suite):
    """The fixed cases split lazily: a splitter handing the backend what the
    spec says only when it compiles at the split, or leaving a wrapped
    single output wrapped, FAILs them with the invariant's ID (and passes
    them compiled at the split: test_split_cases)."""
    result, report = run_suite("reference", *LAZY, k="test_lazy_split_cases or test_split_cases",
                               extra=("-p", "no:logging"))
    assert result.ret == 1, "\n".join(result.outlines[-40:])
    demand_failures(result, report, LAZY)
    compiled_at_split = [line for line in result.outlines if line.startswith("FAILED") and "::test_split_cases[" in line]
    assert not compiled_at_split, compiled_at_split


def test_compile_context_bugs_fail_the_context_cases(run_suite):
    """A splitter whose per-bucket compile lets the caller's saved-tensors
    hook fire, or runs the backend under no_grad or autocast, FAILs SPL-18
    on the fixed cases; the reference passes them."""
    result, report = run_suite("reference", *CONTEXT, k="test_compile_context_cases or test_compile_hooks_cases",
                               extra=("-p", "no:logging"))
    assert result.ret == 1, "\n".join(result.outlines[-40:])
    demand_failures(result, report, CONTEXT)


def test_compiler_config_bugs_fail_the_config_cases(run_suite):
    """A splitter handing the compiler configs to an unsplit graph's compile
    but to no bucket's FAILs SPL-19; the reference passes."""
    result, report = run_suite("reference", *CONFIGS, k="test_compiler_configs_cases", extra=("-p", "no:logging"))
    assert result.ret == 1, "\n".join(result.outlines[-40:])
    demand_failures(result, report, CONFIGS)


def test_static_example_inputs_inside_a_compile_fail_the_dynamic_cases(run_suite):
    """Inside ``torch.compile(..., dynamic=True)`` a splitter that hands a
    bucket's compile real values, or fakes of a fake mode of its own (torch
    2.0's DDPOptimizer, pytorch#98321), FAILs SPL-17 on the dynamic-shape
    cases, one that reads a symbolic size as a number (Dynamo then
    recompiles at every length) FAILs SPL-10; each passes every fixed case
    compiled outside Dynamo; the reference passes both."""
    result, report = run_suite("reference", *DYNAMIC, k="test_split_inside_compile_cases or test_split_cases",
                               extra=("-p", "no:logging"))
    assert result.ret == 1, "\n".join(result.outlines[-40:])
    demand_failures(result, report, DYNAMIC)
    outside = [line for line in result.outlines if line.startswith("FAILED") and "::test_split_cases[" in line]
    assert not outside, outside


def test_higher_order_splits_inside_a_compile_fail_spl14(run_suite):
    """A checkpointed model and a FlexAttention one compiled through the
    split: a splitter that crashes on the op's body, one that rejects every
    higher-order op with a clear NotImplementedError without saying it does
    (torch 2.1-2.5's behaviour, undeclared), and one that hands the buckets
    real values inside the compile each FAIL SPL-14; the reference passes."""
    result, report = run_suite("reference", *HOP_COMPILE, k="test_higher_order_inside_compile_cases and eager",
                               extra=("-p", "no:logging"))
    assert result.ret == 1, "\n".join(result.outlines[-40:])
    demand_failures(result, report, HOP_COMPILE)


@pytest.mark.plugin
def test_split_cases_run_before_the_splitting_properties(pytester):
    """The order ``-x`` meets them in: every fixed plan case ahead of the
    first splitting property, for one implementation."""
    import os
    import pathlib

    tests_dir = pathlib.Path(__file__).parent
    pytester._monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(tests_dir.parent), os.environ.get("PYTHONPATH", "")]))
    result = pytester.runpytest_subprocess("--fsdpcheck", "--fsdpcheck-impl", "reference", "-p", "no:randomly",
                                           "--collect-only", "-q", "-k", "test_splitting")
    ids = [line for line in result.outlines if "test_splitting.py::" in line]
    cases = [i for i, line in enumerate(ids) if "::test_split_cases[" in line or "::test_higher_order_cases[" in line]
    properties = [i for i, line in enumerate(ids) if line.split("::")[1].partition("[")[0] in _PROPERTIES]
    assert cases and properties, "\n".join(result.outlines[-20:])
    assert max(cases) < min(properties), [ids[i] for i in (max(cases), min(properties))]


_PROPERTIES = {"test_split_plan", "test_counted_once", "test_compiled_split", "test_agrees_with_ddp_assignment",
               "test_matches_reference", "test_sizes_with_method_arguments", "test_higher_order_ops",
               "test_first_cap_above_cap_rejected"}
