"""Every excuse, killed through torch's column.

Each path of the suite that turns a failing check into something other than
FAIL (DESIGN.md, "Excuses") is a place a real torch bug could hide. For each,
a fault is planted in the installed torch itself (``tests/planted/
torch_faults.py``: the ``torch`` implementation looks torch's functions up at
call time, so it runs the fault), and the suite must still read FAIL in the
``torch`` column, with the invariant's ID in the failure: a bug beside a
known one, a declared test, a probe's n/p, a user's case, a re-import, a
stop under xdist, an example that will not replay, a fuzz budget, a walk in a
thread. DESIGN.md's table names these tests; ``test_every_excuse_has_its_killer``
holds the two together.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.demands import assert_leaked, demand_torch_failures
from tests.helpers import PLANTED_RUN
from tests.planted.torch_faults import FAULT_ENV

pytestmark = pytest.mark.kill

ROOT = Path(__file__).resolve().parents[1]

KNOWN = {"tests.planted.torch_faults:RootStatesDropLast": ("TRV-7", "test_traversal and test_root_states")}
KNOWN_DYNAMO = {"tests.planted.torch_faults:AnnotationBreaksGraphs": ("ANN-8", "test_dynamo_specialisation")}
UNREPLAYABLE = {"tests.planted.torch_faults:RootStatesDropLastSometimes": ("TRV-7", "test_traversal and test_root_states")}
DECLARED = {"tests.planted.torch_faults:RootStatesDropLast": (
    "TRV-7", "test_traversal and (test_root_states or test_matches_reference)")}
PROBE = {"tests.planted.torch_faults:DynamoCompilesNothing": ("ANN-7", "test_dynamo_effect")}
CASE_ERROR = {"tests.planted.torch_faults:ManagedModulesDropLast": ("FS2-2", "test_model_case or test_model_fsdp2_walk")}
REFUSED_CALL = {"tests.planted.torch_faults:FullyShardRefusesNoReshard": (
    "FS2-7", "test_model_case or test_model_fsdp2_recorded")}
REIMPORT = {"tests.planted.torch_faults:AnnotationReimportsDynamoOff": (
    "ANN-7", "test_annotation and (test_annotate or test_dynamo_effect)")}
STOP = {"tests.planted.torch_faults:RootStatesDropLast": ("TRV-7", "test_traversal")}
BUDGET = {"tests.planted.torch_faults:RootStatesDropLast": ("TRV-7", "test_traversal")}
HUNG = {"tests.planted.torch_faults:ReduceScatterHangs": ("FS2-9", "test_model_plan_end_to_end")}
SCALED = {"tests.planted.torch_faults:ReduceScatterScalesTenPercent": ("FS2-9", "test_model_plan_end_to_end")}
#: leaks beside a compile, no violation: the leak alone FAILs torch's TRV-7 (known
#: on 2.13), a FAIL of the run that kills no invariant (assert_leaked, not a demand)
COMPILE_LIMIT = {"tests.planted.torch_faults:RootStatesRaiseRecursionLimit": ("TRV-7", "test_traversal and test_root_states")}
COMPILE_THREAD = {"tests.planted.torch_faults:RootStatesLeavePoolThread": ("TRV-7", "test_traversal and test_root_states")}
THREADED = {"tests.planted.torch_faults:StatesWalkQuadraticInThread": ("TRV-8", "test_traversal and test_linear_growth")}
SIMULATED = {"tests.planted.torch_faults:LastShardRowMissing": ("FS2-10", "test_uneven_worlds")}
MIXED_DTYPE = {"tests.planted.torch_faults:ForwardRaisesMixedDtype": (
    "FS2-9", "test_model_case or test_model_plan_end_to_end")}
OPERATOR_BF16 = {"tests.planted.torch_faults:LinearRaisesInBFloat16": (
    "FS2-9", "test_model_case or test_model_plan_end_to_end")}
#: the framework's own step (ModelCase.micro_batches, .optimizer): a bug only accumulation or an
#: optimizer step on sharded parameters reaches
NO_SYNC = {"tests.planted.torch_faults:NoSyncBackwardLosesGradients": ("FS2-9", "test_model_plan_end_to_end")}
OPTIMIZER = {"tests.planted.torch_faults:ShardedAddcdivTwice": ("FS2-9", "test_model_plan_end_to_end")}
#: each rank its own data (issue 57): a plan that keeps FSDP2's per-rank step (unused parameters
#: reduced, every group's module called on every rank) is never the user's mistake
UNUSED_IGNORED = {"tests.planted.torch_faults:UnusedParamsFlagIgnored": ("FS2-9", "test_model_plan_end_to_end")}
UNUSED_ONES = {"tests.planted.torch_faults:UnusedParamsGradientOnes": ("FS2-9", "test_model_plan_end_to_end")}
SPLIT_HOOKS = {"tests.planted.torch_faults:DDPOptimizerHooksSeeCompile": ("SPL-18", "test_compile_hooks_cases")}
SPLIT_CONFIGS = {"tests.planted.torch_faults:DDPOptimizerDropsCompilerConfigs": ("SPL-19", "test_compiler_configs_cases")}
SPLIT_SIZES = {"tests.planted.torch_faults:DDPOptimizerSpecializesSizes": ("SPL-10", "test_split_inside_compile_cases")}
REJECTS_HOPS = {"tests.planted.torch_faults:DDPOptimizerRejectsHigherOrderOps": (
    "SPL-14", "test_higher_order_cases or (test_higher_order_inside_compile_cases and eager)")}

#: a baseline written against the first (one bucket compiled twice) must not hold the second (every bucket thrice)
BASELINED = {"tests.planted.torch_faults:DDPOptimizerCompilesABucketTwice": (
    "SPL-10", "test_split_cases and torch-module-two-buckets-extended")}
GROWN = {"tests.planted.torch_faults:DDPOptimizerCompilesEveryBucketThrice": (
    "SPL-10", "test_split_cases and torch-module-two-buckets-extended")}


@pytest.fixture
def run_faulted(run_suite, monkeypatch):
    """A suite run whose torch holds ``table``'s one fault, without
    Hypothesis' shrink phase (PLANTED_RUN): the shrinker keeps only examples
    that still fail, so it cannot turn a FAIL into an excused cell; it only
    makes the printed example smaller, at up to a minute a run where every
    shrink step runs the fault again."""

    def run(table: dict, *impls: str, extra=()):
        (killer, (_, selection)), = table.items()
        monkeypatch.setenv(FAULT_ENV, killer.rpartition(":")[2])
        return run_suite(*(impls or ("torch",)), k=selection,
                         extra=("-p", "tests.planted.torch_faults", *PLANTED_RUN, *extra))

    return run


def test_a_second_torch_bug_beside_a_known_one_fails(run_faulted, tmp_path):
    """known: torch 2.13's ``trv-root-states-walk-modules`` explains TRV-7
    examples by their order; a root state torch loses is no replay of it."""
    junit = tmp_path / "ci" / "fsdpcheck.xml"
    result, report = run_faulted(KNOWN, extra=("--fsdpcheck-junit", str(junit)))
    demand_torch_failures(result, report, KNOWN)
    # as a CI reads it: the cell a failure of its own, the reproducer in it
    import xml.etree.ElementTree as ET

    case = next(c for c in ET.parse(junit).iter("testcase") if c.get("name") == "TRV-7[torch]")
    assert case.find("failure") is not None and "re-run: pytest --fsdpcheck" in case.find("failure").text


def test_graphs_torchs_annotation_breaks_beside_dynamos_known_bug_fail_ann8(run_faulted):
    """known, a predicate's: Dynamo lifting a managed module's int
    attributes (``ann-fsdp-int-attr-symbolic``) explains those inputs only;
    torch's annotation breaking the compiled model into more graphs than the
    plain model's is torch's ANN-8 FAIL beside it."""
    result, report = run_faulted(KNOWN_DYNAMO)
    demand_torch_failures(result, report, KNOWN_DYNAMO)


def test_a_torch_bug_showing_every_other_call_fails(run_faulted):
    """a retried example: the failure does not replay (Hypothesis' Flaky),
    and is still torch's FAIL, never a pass or the suite's error."""
    result, report = run_faulted(UNREPLAYABLE)
    demand_torch_failures(result, report, UNREPLAYABLE)


def test_a_declared_test_masks_that_test_only(run_faulted, tmp_path):
    """declared: a divergence naming one test id turns that test into xfail,
    and an invariant entry whose torch range has ended masks nothing: the
    same bug seen by another test of the invariant is torch's FAIL."""
    divergences = tmp_path / "divergences.toml"
    divergences.write_text(
        '[[divergence]]\nmatch = "test_traversal.py::test_root_states[torch]"\nimplementation = "torch"\n'
        'reason = "one test declared"\n\n'
        '[[divergence]]\nmatch = "TRV-7"\nimplementation = "torch"\ntorch = "<2.0"\n'
        'reason = "a range that ended before this torch"\n'
    )
    result, report = run_faulted(DECLARED, extra=("--fsdpcheck-divergences", str(divergences), "-rx"))
    demand_torch_failures(result, report, DECLARED)
    assert any("test_root_states[torch]" in line and "declared divergence" in line for line in result.outlines), (
        "the declared test was not masked: the run shows nothing of the declaration")


def test_a_torch_bug_outside_the_baseline_fails(run_faulted, tmp_path):
    """baselined (--fsdpcheck-baseline): an entry holds one invariant in one
    test of one implementation. The same torch bug seen by another test of
    TRV-7, an entry for that test in another implementation's cell, and an
    entry of another invariant on that test all leave torch's TRV-7 a FAIL."""
    baseline = tmp_path / "baseline.toml"
    baseline.write_text(
        '[[divergence]]\nmatch = "TRV-7"\ntest = "test_traversal.py::test_root_states[torch]"\n'
        'implementation = "torch"\nreason = "held"\n\n'
        '[[divergence]]\nmatch = "TRV-7"\ntest = "test_traversal.py::test_matches_reference[reference]"\n'
        'implementation = "reference"\nreason = "another cell"\n\n'
        '[[divergence]]\nmatch = "TRV-1"\ntest = "test_traversal.py::test_matches_reference[torch]"\n'
        'implementation = "torch"\nreason = "another invariant"\n'
    )
    result, report = run_faulted(DECLARED, extra=("--fsdpcheck-baseline", str(baseline), "-rx"))
    demand_torch_failures(result, report, DECLARED)
    assert any("test_root_states[torch]" in line and "declared divergence: TRV-7: held" in line
               for line in result.outlines), "the baselined test was not held: the run shows nothing of the baseline"


def test_a_torch_bug_grown_past_its_baseline_fails(run_faulted, tmp_path):
    """baselined, the same failure grown: a baseline written while torch
    compiled one bucket twice ("called 2 times, got 3") holds that failure on
    the next run, and not torch compiling every bucket three times ("got 6"):
    the same test failing its invariant with another count is torch's FAIL."""
    baseline = tmp_path / "baseline.toml"
    written, _ = run_faulted(BASELINED, extra=("--fsdpcheck-write-baseline", str(baseline)))
    assert written.ret == pytest.ExitCode.TESTS_FAILED, "\n".join(written.outlines[-20:])
    assert 'example = "with 2 buckets the backend should be called 2 times, got 3"' in baseline.read_text()
    held, _ = run_faulted(BASELINED, extra=("--fsdpcheck-baseline", str(baseline)))
    assert held.ret == pytest.ExitCode.OK, "the baseline does not hold the failure it recorded: " + "\n".join(held.outlines[-20:])
    result, report = run_faulted(GROWN, extra=("--fsdpcheck-baseline", str(baseline)))
    assert result.ret == pytest.ExitCode.TESTS_FAILED, "\n".join(result.outlines[-20:])
    demand_torch_failures(result, report, GROWN)


def test_torchs_dynamo_failing_the_probe_fails_ann7(run_faulted):
    """n/p by a probe: ANN-7 asks torch's Dynamo first. On a release that has
    the effect (provided.py), Dynamo capturing nothing is torch's ANN-7
    FAIL, not an n/p that strict then excuses as 'probed away'."""
    result, report = run_faulted(PROBE, extra=("--fsdpcheck-strict",))
    demand_torch_failures(result, report, PROBE)


def test_a_torch_walk_bug_on_a_users_model_is_torchs_not_the_cases(run_faulted):
    """case error: the user's case is sound (its case test passes), so the
    walk's bug on it is a cell of torch's, never the case's one line."""
    result, report = run_faulted(CASE_ERROR, extra=("--fsdpcheck-model", "tests.planted.plans:good"))
    demand_torch_failures(result, report, CASE_ERROR)
    assert result.parseoutcomes().get("passed", 0) >= 1, "test_model_case did not pass: " + "\n".join(result.outlines[-20:])


def test_torch_refusing_a_call_it_takes_is_torchs_not_the_cases(run_faulted):
    """case error for a call fully_shard does not take: decided from its
    signature and argument kinds, never by torch raising; a call that fits
    and that torch refuses is torch's FAIL, the case passing."""
    result, report = run_faulted(REFUSED_CALL, extra=("--fsdpcheck-model", "tests.planted.plans:no_reshard"))
    demand_torch_failures(result, report, REFUSED_CALL)
    assert result.parseoutcomes().get("passed", 0) >= 1, "test_model_case did not pass: " + "\n".join(result.outlines[-20:])


def test_a_reimport_in_torchs_call_is_charged_to_torch(run_faulted):
    """first import: a module torch's call drops and imports again is no
    library's first import; what its import changed (Dynamo off) is torch's
    leak, restored before the next test, so the reference beside it passes."""
    result, report = run_faulted(REIMPORT, "torch", "reference")
    demand_torch_failures(result, report, REIMPORT)
    reference = report["matrix"]["reference"]
    assert {inv: cell["outcome"] for inv, cell in reference.items() if cell["outcome"] != "pass"} == {}


def test_a_stop_under_xdist_keeps_torchs_fail(run_faulted):
    """skipped at a stop: under ``-x -n 2`` the tests the stop ends read
    skipped, the failure that reached the limit stays torch's FAIL."""
    pytest.importorskip("xdist")
    result, report = run_faulted(STOP, extra=("-x", "-n", "2"))
    demand_torch_failures(result, report, STOP)


def test_a_fuzz_budget_still_reaches_torchs_bug(run_faulted):
    """not run in budget: a fuzz budget skips what it cannot fit (the cell
    then reads skipped, never pass); one that fits the fixed cases runs
    them first, so a bug they show is torch's FAIL however the properties'
    rounds are cut."""
    result, report = run_faulted(BUDGET, extra=("--fsdpcheck-fuzz-time", "20s"))
    demand_torch_failures(result, report, BUDGET)


def test_a_torch_walk_quadratic_in_a_thread_fails_growth(run_faulted):
    """growth timing: the time a call spends in a thread it starts and joins
    is the call's own."""
    result, report = run_faulted(THREADED)
    demand_torch_failures(result, report, THREADED)


def test_a_torch_step_that_hangs_is_torchs_fail_not_a_slow_world(run_faulted, monkeypatch):
    """ERROR for a world killed at FS2-9's time limit: only where the world
    is slow. fully_shard's reduction hanging in the sharded step only (the
    unsharded control done in a fraction of a second) is torch's FAIL,
    named as a hang, never the environment's ERROR."""
    monkeypatch.setenv("FSDPCHECK_COMPILE_BACKEND", "aot_eager")
    result, report = run_faulted(HUNG, extra=("--fsdpcheck-model", "tests.planted.plans:good", "--fsdpcheck-timeout", "8"))
    demand_torch_failures(result, report, HUNG)
    assert "the plan's step did not finish" in result.stdout.str(), "\n".join(result.outlines[-30:])


def test_a_torch_reduction_ten_percent_off_fails_beyond_the_compiled_tolerance(run_faulted, monkeypatch):
    """tolerance: the compiled tolerance of a gradient computed through
    bf16 (4 bf16 ulps and twice the unsharded model's own compiled-vs-eager
    difference, on the fp32 router, the widest the suite gives) never
    hides torch's reduction off by ten percent; the message states the
    tolerance and the measured difference. Nor does a model that compiles
    its own blocks hide it (its eager step judged at the compiled
    tolerance, its compiled step owing no graph)."""
    monkeypatch.setenv("FSDPCHECK_COMPILE_BACKEND", "aot_eager")
    blocks = "tests.planted.plans:compiled_blocks"
    result, report = run_faulted(SCALED, extra=("--fsdpcheck-model", "tests.planted.plans:fp32_router",
                                                "--fsdpcheck-model", blocks))
    demand_torch_failures(result, report, SCALED)
    # a model compiling its own blocks takes the compiled tolerance in both steps and owes the
    # outer compile no graph (issue 56): torch's reduction off by ten percent still FAILs it
    assert report["models"][blocks]["torch"]["FS2-9"]["outcome"] == "fail", report["models"].get(blocks)
    out = result.stdout.str()
    assert ", compiled: " in out and "the gradient of router.weight differs" in out and "tolerance" in out, \
        "\n".join(result.outlines[-30:])


def test_a_torch_step_raising_what_a_users_mistake_raises_is_torchs_fail(run_faulted, monkeypatch):
    """case error for a plan whose step fails the same way in the unsharded
    control at its precision: only where the control fails too. torch's
    pre-forward raising a mixed-dtype error on a sound bf16 plan, whose
    control runs fine, is torch's FS2-9 FAIL (the case test passing), never
    the case's one line."""
    monkeypatch.setenv("FSDPCHECK_COMPILE_BACKEND", "aot_eager")
    result, report = run_faulted(MIXED_DTYPE, extra=("--fsdpcheck-model", "tests.planted.plans:bf16"))
    demand_torch_failures(result, report, MIXED_DTYPE)
    assert report["case_errors"] == {}, report["case_errors"]
    assert result.parseoutcomes().get("passed", 0) >= 1, "test_model_case did not pass: " + "\n".join(result.outlines[-20:])
    assert "mat1 and mat2 must have the same dtype" in result.stdout.str()


def test_a_torch_operator_failing_in_the_control_too_is_torchs_fail(run_faulted, monkeypatch):
    """case error for a step failing in the control too: only where the
    model cast wholly to the plan's dtype runs. torch's bf16 linear raising
    a mixed-dtype error fails the control and the step alike on a sound
    bf16 plan; the whole-bf16 step fails too, so it is torch's FS2-9 FAIL,
    never the user's (issue 56 audit: it read "case error (yours)", exit 11)."""
    monkeypatch.setenv("FSDPCHECK_COMPILE_BACKEND", "aot_eager")
    result, report = run_faulted(OPERATOR_BF16, extra=("--fsdpcheck-model", "tests.planted.plans:bf16"))
    demand_torch_failures(result, report, OPERATOR_BF16)
    assert report["case_errors"] == {}, report["case_errors"]
    assert "cast wholly to bfloat16 (no dtypes mixed, no fully_shard) fails the same way" in result.stdout.str()


def test_torch_losing_an_accumulated_micro_batch_fails_the_frameworks_step(run_faulted, monkeypatch):
    """A framework's step accumulates micro-batches with gradient sync off
    (issue 56: its own training step in FS2-9). torch losing what a backward
    with sync off computed is invisible to a one-step check and FAILs FS2-9
    in torch's column on a plan that accumulates, with the gradients' summary."""
    monkeypatch.setenv("FSDPCHECK_COMPILE_BACKEND", "aot_eager")
    result, report = run_faulted(NO_SYNC, extra=("--fsdpcheck-model", "tests.planted.plans:accumulating"))
    demand_torch_failures(result, report, NO_SYNC)
    assert report["case_errors"] == {}, report["case_errors"]
    assert "gradients are wrong; worst: the gradient of" in result.stdout.str()


def test_torchs_optimizer_step_wrong_on_sharded_parameters_fails(run_faulted, monkeypatch):
    """The framework's optimizer stepped on the sharded parameters: DTensor's
    in-place addcdiv_ (Adam's update) applied twice leaves every gradient
    right and FAILs FS2-9 in torch's column against the same optimizer on
    plain tensors holding the step's own gradients."""
    monkeypatch.setenv("FSDPCHECK_COMPILE_BACKEND", "aot_eager")
    result, report = run_faulted(OPTIMIZER, extra=("--fsdpcheck-model", "tests.planted.plans:accumulating"))
    demand_torch_failures(result, report, OPTIMIZER)
    out = result.stdout.str()
    assert "after the framework's optimizer step on the sharded parameters" in out, "\n".join(result.outlines[-30:])
    assert "gradients are wrong" not in out


def test_torch_ignoring_unused_parameters_on_per_rank_data_fails_not_the_users(run_faulted, monkeypatch):
    """case error for a plan breaking FSDP2's per-rank step: the routed
    plan reduces unused parameters and calls every group's module on every
    rank, so torch's reduce-scatter ignoring that switch (the ranks'
    gradients mixed or the step crashing) is torch's FS2-9 FAIL naming
    what only some ranks reach, never the user's case error."""
    monkeypatch.setenv("FSDPCHECK_COMPILE_BACKEND", "aot_eager")
    result, report = run_faulted(UNUSED_IGNORED, extra=("--fsdpcheck-model", "tests.planted.plans:routed"))
    demand_torch_failures(result, report, UNUSED_IGNORED)
    assert report["case_errors"] == {}, report["case_errors"]
    assert "the ranks' batches reach different parameters experts.0.weight only on rank 0" in result.stdout.str()


def test_torchs_unused_parameters_gradient_other_than_zero_fails(run_faulted, monkeypatch):
    """A parameter no rank reached may hold FSDP2's documented zero
    gradient where its group reduces unused parameters (the control has
    none): a gradient of ones there, and the wrong term it adds where some
    rank reached the parameter, is torch's FS2-9 FAIL."""
    monkeypatch.setenv("FSDPCHECK_COMPILE_BACKEND", "aot_eager")
    result, report = run_faulted(UNUSED_ONES, extra=("--fsdpcheck-model", "tests.planted.plans:routed"))
    demand_torch_failures(result, report, UNUSED_ONES)
    assert report["case_errors"] == {}, report["case_errors"]
    assert "experts.2.weight exists, the unsharded model has none" in result.stdout.str()


def test_a_torch_limit_raised_beside_a_compile_is_a_leak(run_faulted):
    """Inductor's compile-time state: the recursion limit its compile raises
    is torch's bookkeeping; torch raising it outside the compile, in a test
    that compiled, is still a leak."""
    result, report = run_faulted(COMPILE_LIMIT)
    assert_leaked(result, report, COMPILE_LIMIT, column="torch")
    assert "recursion_limit" in result.stdout.str()


def test_a_torch_thread_left_beside_a_compile_is_a_leak(run_faulted):
    """Inductor's compile-time state: its compile thread pool is torch's
    bookkeeping, known by the pool object; another ThreadPoolExecutor torch
    leaves running, named like Inductor's, is still a leak."""
    result, report = run_faulted(COMPILE_THREAD)
    assert_leaked(result, report, COMPILE_THREAD, column="torch")
    assert "threads left running (ThreadPoolExecutor-" in result.stdout.str()


# --- the table in DESIGN.md ----------------------------------------------------------


def _excuse_rows() -> list[tuple[str, str]]:
    text = (ROOT / "DESIGN.md").read_text(encoding="utf-8")
    section = text.split("### Excuses", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"^\| (?!excuse|---)(.+?) \| .*?`(tests/[\w/]+\.py::\w+)`", section, re.M)


def test_every_excuse_has_its_killer():
    """Each row of DESIGN.md's excuse table names a killer test that exists,
    and each killer test here is named by a row."""
    rows = _excuse_rows()
    assert len(rows) >= 10, rows
    for excuse, killer in rows:
        path, _, name = killer.partition("::")
        assert f"def {name}(" in (ROOT / path).read_text(encoding="utf-8"), f"{excuse}: {killer} does not exist"
    named = {killer for _, killer in rows}
    here = {f"tests/test_excuses.py::{name}" for name in globals() if name.startswith("test_a") or name.startswith("test_torchs")}
    assert here <= named, f"killers no excuse row names: {sorted(here - named)}"


def test_torchs_shard_missing_a_row_fails_fs2_10(run_faulted):
    """n/p by release or by an area without ``sharded_groups``: on a torch
    that provides the simulated worlds (2.13, ``provided.py``), a row lost
    from the last rank's shard by torch's own chunking is torch's FS2-10
    FAIL on the fixed uneven worlds, with ``--fsdpcheck-strict`` on."""
    result, report = run_faulted(SIMULATED, extra=("--fsdpcheck-strict",))
    demand_torch_failures(result, report, SIMULATED)


def test_torchs_compile_letting_the_callers_hooks_fire_fails_spl18(run_faulted):
    """n/p by release (SPL-18's hooks before 2.7): on a release that defers
    the caller's saved-tensors hooks, DDPOptimizer without the deferral is
    torch's FAIL."""
    result, report = run_faulted(SPLIT_HOOKS)
    demand_torch_failures(result, report, SPLIT_HOOKS)


def test_torchs_buckets_losing_the_compiler_configs_fails_spl19(run_faulted):
    """n/p by release (SPL-19 before 2.13): on a release whose compile_fn
    takes compiler configs, a per-bucket compiler dropping them is torch's
    FAIL."""
    result, report = run_faulted(SPLIT_CONFIGS)
    demand_torch_failures(result, report, SPLIT_CONFIGS)


def test_torchs_split_recompiling_per_length_fails_spl10(run_faulted):
    """n/p where Dynamo alone compiles the model more than once: graphs the
    split adds (torch's compile_fn specializing every symbolic size) are
    counted against that Dynamo-only control and are torch's FAIL."""
    result, report = run_faulted(SPLIT_SIZES)
    demand_torch_failures(result, report, SPLIT_SIZES)



def test_torchs_split_rejecting_higher_order_ops_where_it_splits_them_fails_spl14(run_faulted):
    """SPL-14 accepts a clear NotImplementedError only where the release's
    DDPOptimizer rejects higher-order ops (torch 2.1-2.5; n/p by release for
    the compiled models): torch 2.13 doing it is its FAIL, on the fixed
    graph and on the checkpointed and FlexAttention models."""
    result, report = run_faulted(REJECTS_HOPS)
    demand_torch_failures(result, report, REJECTS_HOPS)
