"""SPL-16 can fail: planted splitters against a real compiled DDP run, and
the checker on hand-made rank results for the parts a splitter cannot break
(gradients, compile reasons, dead ranks)."""

import pytest
import torch

from pytest_fsdpcheck.checks.distributed import check_ddp_end_to_end
from tests.demands import demand_failures
from tests.helpers import fs2_9_on_this_torch, fs2_15_on_this_torch, spl16_on_this_torch

pytestmark = pytest.mark.unit

PLANTED = "tests.planted.distributed:"
#: splitters planning one bucket too many / too few
SPL16_PLANTED = {PLANTED + name: ("SPL-16", "test_distributed") for name in ("ExtraBucket", "MissingBucket")}
#: walks that shard the wrong parameters
FS29_PLANTED = {PLANTED + name: ("FS2-9", "test_fully_shard_end_to_end")
                for name in ("DropsFirstLeaf", "ShardsIgnored", "ParentFirst")}
#: a walk right on FS2-9's 1-D mesh that leaves tensor-parallel parameters out of every group
FS215_PLANTED = {PLANTED + "DTensorsAsSharded": ("FS2-15", "test_fully_shard_on_a_tp_mesh")}


@pytest.mark.e2e
def test_wrong_bucket_count_is_caught_and_control_passes(run_suite):
    control = PLANTED + "Unchanged"
    result, report = run_suite(control, *SPL16_PLANTED, k="test_distributed")
    demand_failures(result, report, SPL16_PLANTED, control=None)
    assert report["matrix"][control]["SPL-16"]["outcome"] == spl16_on_this_torch(), report["matrix"][control]
    result.stdout.fnmatch_lines(["*SPL-16: ranks 0, 1: expected one compiled subgraph per planned bucket*"])


def _rank(rank=0, **changes):
    grads = {"w": torch.ones(3)}
    result = {
        "rank": rank,
        "error": None,
        "ddp_bucket_bytes_cap": 100,
        "param_bytes": 400,
        "graphs_handed": 1,
        "compiled_subgraphs": 2,
        "reasons": ["DDPOptimizer intentional graph-break"] * 2,
        "plans": {"impl": {"error": None, "buckets": [2]}},
        # the control: the unsharded model's gradients averaged with plain all_reduce
        "control": {"grads": dict(grads), "params": dict(grads)},
        "eager": {"grads": grads, "params": grads},
        "compiled": {"grads": dict(grads), "params": dict(grads)},
    }
    result.update(changes)
    return result


def test_checker_accepts_consistent_ranks():
    assert check_ddp_end_to_end([_rank(0), _rank(1)], "impl") == []


def test_checker_catches_gradient_mismatch():
    bad = _rank(compiled={"grads": {"w": torch.tensor([1.0, 1.0, 1.5])}, "params": {"w": torch.ones(3)}})
    (violation,) = check_ddp_end_to_end([bad], "impl")
    assert violation.invariant == "SPL-16" and "gradient of w" in violation.message
    assert violation.message.endswith("; eager DDP gives the control's")


def test_checker_judges_against_the_control_with_eager_ddp_a_second_opinion_only():
    """The compiled step is compared with the control (no DDP), not with
    eager DDP: compiled and eager DDP wrong alike (DDP's own reduction) is a
    violation naming eager DDP's agreement; eager DDP alone wrong is none."""
    wrong = {"w": torch.full((3,), 2.0)}
    both = _rank(eager={"grads": wrong, "params": wrong}, compiled={"grads": dict(wrong), "params": dict(wrong)})
    messages = [v.message for v in check_ddp_end_to_end([both], "impl")]
    assert messages == [
        "rank 0: expected the compiled DDP gradient of w to equal the control's (the unsharded model's, averaged "
        "over the ranks with plain all_reduce), max abs difference 1.0; eager DDP gives the same as the compiled "
        "step (DDP's own reduction, compiled or not)",
        "rank 0: expected the compiled DDP parameter after the step of w to equal the control's (the unsharded "
        "model's, averaged over the ranks with plain all_reduce), max abs difference 1.0; eager DDP gives the same "
        "as the compiled step (DDP's own reduction, compiled or not)",
    ]
    assert check_ddp_end_to_end([_rank(eager={"grads": wrong, "params": wrong})], "impl") == []


def test_checker_catches_reason_without_ddp_optimizer():
    bad = _rank(reasons=["DDPOptimizer intentional graph-break", "graph break in user code"])
    (violation,) = check_ddp_end_to_end([bad], "impl")
    assert "name DDPOptimizer" in violation.message


def test_checker_catches_unsplit_graph_and_dead_rank():
    unsplit = _rank(compiled_subgraphs=1, reasons=["x"], plans={"impl": {"error": None, "buckets": [1]}})
    dead = {"rank": 1, "error": "timed out after 120s and was killed"}
    messages = [v.message for v in check_ddp_end_to_end([unsplit, dead], "impl")]
    assert any("expected several buckets" in m for m in messages)
    assert any(m.startswith("rank 1:") and "timed out" in m for m in messages)


def test_checker_catches_a_failing_or_wrong_step_through_aot_autograd():
    grads = {"w": torch.ones(3)}
    assert check_ddp_end_to_end([_rank(aot={"grads": grads, "params": grads})], "impl") == []
    (failed,) = check_ddp_end_to_end([_rank(aot={"error": "Traceback ...\nIndexError: list index out of range"})], "impl")
    assert "through AOTAutograd" in failed.message and failed.message.endswith("IndexError: list index out of range")
    wrong = {"w": torch.tensor([1.0, 2.0, 1.0])}
    (differs,) = check_ddp_end_to_end([_rank(aot={"grads": wrong, "params": grads})], "impl")
    assert differs.invariant == "SPL-16" and "gradient (through AOTAutograd) of w" in differs.message


def test_checker_catches_a_failing_or_wrong_step_with_the_loss_in_forward():
    """The second model's step through AOTAutograd (its loss and a BatchNorm
    in forward) is judged like the other, against its own control (its own eager DDP step a second opinion)."""
    grads, own = {"w": torch.ones(3)}, {"w": torch.full((3,), 2.0)}
    assert check_ddp_end_to_end([_rank(aot_loss={"grads": own, "params": own, "control": {"grads": own, "params": own},
                                                 "eager": {"grads": own, "params": own}})], "impl") == []
    error = "Traceback ...\nTypeError: iteration over a 0-d tensor"
    (failed,) = check_ddp_end_to_end([_rank(aot_loss={"error": error})], "impl")
    assert failed.invariant == "SPL-16" and "its loss and a BatchNorm in forward" in failed.message
    assert failed.message.endswith("TypeError: iteration over a 0-d tensor")
    # compared with its own control, not the first model's
    (differs,) = check_ddp_end_to_end([_rank(aot_loss={"grads": grads, "params": own,
                                                       "control": {"grads": own, "params": own},
                                                       "eager": {"grads": own, "params": own}})], "impl")
    assert "gradient (through AOTAutograd, of a model with its loss and a BatchNorm in forward) of w" in differs.message


def test_checker_catches_ranks_disagreeing():
    other = _rank(1, compiled={"grads": {"w": torch.zeros(3)}, "params": {"w": torch.ones(3)}},
                  eager={"grads": {"w": torch.zeros(3)}, "params": {"w": torch.ones(3)}},
                  control={"grads": {"w": torch.zeros(3)}, "params": {"w": torch.ones(3)}})
    (violation,) = check_ddp_end_to_end([_rank(0), other], "impl")
    assert "equal on every rank" in violation.message


# --- FS2-9 ---------------------------------------------------------------------------

from pytest_fsdpcheck.checks.distributed import check_fsdp2_end_to_end  # noqa: E402
from pytest_fsdpcheck.runs.fsdp2_model import build_model, end_to_end_model, oracle  # noqa: E402


@pytest.mark.e2e
def test_fs2_9_catches_walks_that_shard_wrongly(run_suite, monkeypatch):
    # aot_eager: the planted walks differ before any kernel is generated
    monkeypatch.setenv("FSDPCHECK_COMPILE_BACKEND", "aot_eager")
    control = PLANTED + "ReferenceControl"
    # FS2-15 takes its steps in the same worlds, after FS2-9's: no ranks more
    result, report = run_suite(control, *FS29_PLANTED, *FS215_PLANTED,
                               k="test_fully_shard_end_to_end or test_fully_shard_on_a_tp_mesh")
    demand_failures(result, report, FS29_PLANTED, control=None)
    demand_failures(result, report, FS215_PLANTED, control=None)
    # the reference's walk passes, or meets fully_shard's runtime bug as torch's own walk does
    assert report["matrix"][control]["FS2-9"]["outcome"] == fs2_9_on_this_torch(), report["matrix"][control]
    assert report["matrix"][control]["FS2-15"]["outcome"] == fs2_15_on_this_torch(), report["matrix"][control]
    # the walk that takes DTensors for sharded ones is right where only fully_shard makes DTensors
    tp_walk = next(iter(FS215_PLANTED))
    assert report["matrix"][tp_walk]["FS2-9"]["outcome"] == fs2_9_on_this_torch(), report["matrix"][tp_walk]
    assert ("FS2-15: ranks 0, 1, fp32 (no policy), mesh 1x2 (dp x tp): [blocks.0.norm.weight, blocks.0.proj.weight, "
            "blocks.0.proj.bias, blocks.1.norm.weight, blocks.1.proj.weight, blocks.1.proj.bias, out.weight] were "
            "sharded over dp by no fully_shard call: each is a DTensor on the (tp) mesh") in result.stdout.str()
    out = result.stdout.str()
    spec, calls = end_to_end_model(0)  # the ci profile's model
    want = oracle(build_model(spec, 0), calls)
    first = want["calls"][0]
    call = f"fully_shard call 1 ({', '.join(first['roots'])})"
    leaf = first["modules"][0]  # post-order: a leaf comes first
    for line in (
        # the dropped leaf's parameter is left unsharded, its gradient never averaged
        f"FS2-9: rank 0, eager: {call}: expected managed modules {first['modules']}, the implementation gave {first['modules'][1:]}",
        f"FS2-9: rank 0, eager: gradient of {leaf}.w0: expected the unsharded gradient of the global batch",
        f"FS2-9: rank 1, compiled: {call}: expected fully_shard to shard {first['params']}, it sharded [",
    ):
        assert line in out, line
    averaged = [f"FS2-9: rank 0, compiled: gradient of {p}: expected this rank's unsharded gradient (ignored: not reduced)" for p in want["ignored"]]
    assert any(line in out for line in averaged), averaged


def _fs2_rank(rank=0, **step_changes):
    grads = {"m0.w0": torch.ones(2), "m1.w0": torch.full((2,), 2.0)}
    step = {
        "calls": [{"impl_modules": ["m1", "m0"], "impl_params": ["m1.w0", "m0.w0"], "sharded": ["m1.w0", "m0.w0"]}],
        "fully_shard_calls": 1, "flagged": ["m0", "m1"], "dtensors": ["m0.w0", "m1.w0"], "grads": grads, "graphs": 2,
    }
    step.update(step_changes)
    return {
        "rank": rank, "error": None,
        "oracle": {"calls": [{"roots": ["m0"], "modules": ["m1", "m0"], "params": ["m1.w0", "m0.w0"]}], "flagged": ["m0", "m1"], "ignored": ["m1.w0"]},
        # m1.w0 is ignored: its gradient is this rank's, not the global one
        "reference": {"global": {"m0.w0": torch.ones(2), "m1.w0": torch.zeros(2)}, "local": {"m0.w0": torch.zeros(2), "m1.w0": torch.full((2,), 2.0)}},
        "impls": {"impl": {"error": None, "not_provided": False, "eager": dict(step), "compiled": dict(step)}},
    }


def test_fs2_9_checker_accepts_consistent_ranks():
    assert check_fsdp2_end_to_end([_fs2_rank(0), _fs2_rank(1)], "impl") == []


def test_fs2_9_checker_catches_each_part():
    flags = check_fsdp2_end_to_end([_fs2_rank(flagged=["m0"])], "impl")
    assert flags and all(v.invariant == "FS2-9" for v in flags) and "Dynamo flags on exactly ['m0', 'm1']" in flags[0].message
    averaged = _fs2_rank(grads={"m0.w0": torch.ones(2), "m1.w0": torch.zeros(2)})
    assert any("gradient of m1.w0: expected this rank's unsharded gradient" in v.message for v in check_fsdp2_end_to_end([averaged], "impl"))
    eager_only = _fs2_rank(graphs=0)
    assert any("compiled no graph" in v.message for v in check_fsdp2_end_to_end([eager_only], "impl"))
    not_asked = _fs2_rank(fully_shard_calls=0, calls=[])
    assert any("asked 0 time(s)" in v.message for v in check_fsdp2_end_to_end([not_asked], "impl"))
    dead = {"rank": 1, "error": "Traceback ...\nRuntimeError: gloo timeout"}
    (violation,) = check_fsdp2_end_to_end([_fs2_rank(0), dead], "impl")
    assert violation.message == "rank 1: expected a training step, but the rank failed: RuntimeError: gloo timeout"


def _fs2_mixed_rank(rank=0, step=None, walk=None):
    """A rank that also took the mixed-precision step (``bf16``), judged
    against its own control: ``m0.w0``'s gradient there is 1.5, not the
    fp32 control's 1."""
    record = _fs2_rank(rank)
    record["modes"] = ["eager", "compiled", "bf16"]
    record["reference"]["bf16"] = {"global": {"m0.w0": torch.full((2,), 1.5), "m1.w0": torch.zeros(2)},
                                   "local": record["reference"]["local"]}
    right = dict(record["impls"]["impl"]["eager"], grads={"m0.w0": torch.full((2,), 1.5), "m1.w0": torch.full((2,), 2.0)})
    record["impls"]["impl"]["bf16"] = right if step is None else step
    if walk is not None:
        record["torch_walk"] = {"bf16": walk}
    return record


def test_fs2_9_mixed_step_is_judged_against_its_own_control_and_fails_as_its_own_step():
    """The mixed-precision step is compared with the control at its
    precision (the fp32 control's gradients there fail), and a failure of
    that step is one finding per rank naming the step and what torch's own
    walk did in the same run, beside the fp32 steps, which are judged
    whatever it did."""
    assert check_fsdp2_end_to_end([_fs2_mixed_rank(0), _fs2_mixed_rank(1)], "impl") == []
    fp32_answer = _fs2_mixed_rank(0, step=_fs2_rank(0)["impls"]["impl"]["eager"])
    (wrong,) = check_fsdp2_end_to_end([fp32_answer], "impl")
    assert wrong.message.startswith("rank 0, bf16: gradient of m0.w0: expected the unsharded gradient of the global batch")
    failed = {"error": "Traceback ...\nRuntimeError: attempting to assign a gradient"}
    same = check_fsdp2_end_to_end([_fs2_mixed_rank(r, step=failed, walk=failed) for r in (0, 1)], "impl")
    assert [v.message for v in same] == [
        f"rank {r}, bf16: the step with fully_shard([a, b]) in bf16 (reduced in fp32) after a first forward with that "
        "group frozen failed: RuntimeError: attempting to assign a gradient, as torch's own walk does in the same run"
        for r in (0, 1)]
    (alone,) = check_fsdp2_end_to_end([_fs2_mixed_rank(0, step=failed, walk={"grads": {}})], "impl")
    assert alone.message.endswith("failed: RuntimeError: attempting to assign a gradient, where torch's own walk in "
                                  "the same run takes the step")
    other = {"error": "Traceback ...\nValueError: no"}
    (otherwise,) = check_fsdp2_end_to_end([_fs2_mixed_rank(0, step=failed, walk=other)], "impl")
    assert otherwise.message.endswith(", where torch's own walk in the same run fails otherwise: ValueError: no")
    eager_wrong = _fs2_mixed_rank(0, step=failed, walk=failed)
    eager_wrong["impls"]["impl"]["eager"]["grads"] = {"m0.w0": torch.zeros(2), "m1.w0": torch.full((2,), 2.0)}
    messages = [v.message for v in check_fsdp2_end_to_end([eager_wrong], "impl")]
    assert any(m.startswith("rank 0, eager: every sharded gradient is 0 times") for m in messages), messages
    assert any(m.startswith("rank 0, bf16: the step with") for m in messages), messages


@pytest.mark.e2e
def test_world_size_option_reaches_the_checks(run_suite):
    # One rank cannot check FS2-9: not provided, with the reason and the option to change it.
    result, report = run_suite("reference", k="test_fully_shard_end_to_end", extra=("--fsdpcheck-world-size", "1", "-rs"))
    assert report["matrix"]["reference"]["FS2-9"]["outcome"] == "not provided", report["matrix"]["reference"]
    result.stdout.fnmatch_lines(["*not provided: FS2-9 needs world size >= 2, the runner gives 1 (--fsdpcheck-world-size)*"])


def _summed(rank, factor=2.0, ignored=torch.full((2,), 2.0), group="gloo", torch_factor=None, modes=("eager", "compiled")):
    """Rank records whose sharded gradient is ``factor`` times too big in
    ``modes``; torch's own walk (the control step) ``torch_factor`` times
    (default: the same)."""
    record = _fs2_rank(rank)
    wrong = {"m0.w0": torch.ones(2) * factor, "m1.w0": ignored}
    for mode in modes:
        record["impls"]["impl"][mode] = dict(record["impls"]["impl"][mode], grads=wrong)
    control = factor if torch_factor is None else torch_factor
    record["torch_walk"] = {mode: {"grads": {"m0.w0": torch.ones(2) * control, "m1.w0": torch.full((2,), 2.0)}}
                            for mode in modes}
    record["process_group"] = group
    return record


def _gloo_bug_on(impl):
    import dataclasses

    from pytest_fsdpcheck.impls.torch_bugs import TORCH_BUGS

    bug = next(b for b in TORCH_BUGS if b.id == "fs2-gloo-grads-summed")
    impl.known_bugs = (dataclasses.replace(bug, affects=""),)
    return impl


def test_fs2_9_gloo_grads_summed_is_explained_only_as_itself():
    """fs2-gloo-grads-summed: every sharded gradient world_size times too big
    on gloo, as torch's own walk has it in the same run, on every rank in
    both modes, is that known bug; any other gradient error next to it, a
    different factor, or another backend is a new failure."""
    from pytest_fsdpcheck.checks import ConformanceFailure
    from pytest_fsdpcheck.impls.reference import ReferenceImplementation
    from pytest_fsdpcheck.known import judge

    impl = _gloo_bug_on(ReferenceImplementation())
    judge.configure(enabled=True)
    judge.reset()

    summed = check_fsdp2_end_to_end([_summed(0), _summed(1)], "impl")
    assert {v.message.split(": ", 1)[1] for v in summed} == {
        "every sharded gradient is 2 times the unsharded gradient of the global batch, as torch's own walk gives "
        "in the same run (fully_shard summed over the 2 ranks instead of averaged, on gloo)"
    }
    assert len(summed) == 4  # each rank, each mode
    judge.conform(impl, summed)
    assert judge.explained()["fs2-gloo-grads-summed"]["examples"] == 1

    also_ignored_wrong = [_summed(0, ignored=torch.zeros(2)), _summed(1)]
    three_times = [_summed(0, factor=3.0), _summed(1, factor=3.0)]
    on_nccl = [_summed(0, group="nccl"), _summed(1, group="nccl")]
    for records in (also_ignored_wrong, three_times, on_nccl):
        violations = check_fsdp2_end_to_end(records, "impl")
        with pytest.raises(ConformanceFailure) as failure:
            judge.conform(impl, violations)
        assert "FS2-9: rank 0" in str(failure.value)
    judge.reset()


def test_fs2_9_gloo_grads_summed_is_not_a_partial_or_an_implementations_doubling():
    """Counterexamples the old signature explained: a summation in compiled
    mode only (eager right), one on a single rank only, and at world size 2
    a doubling torch's own walk does not share (a gradient hook firing
    twice): each fails, naming its factor, mode and rank."""
    from pytest_fsdpcheck.checks import ConformanceFailure
    from pytest_fsdpcheck.impls.reference import ReferenceImplementation
    from pytest_fsdpcheck.known import judge

    impl = _gloo_bug_on(ReferenceImplementation())
    judge.configure(enabled=True)
    judge.reset()
    compiled_only = [_summed(0, modes=("compiled",)), _summed(1, modes=("compiled",))]
    one_rank = [_summed(0), _fs2_rank(1)]
    for records in (compiled_only, one_rank):
        violations = check_fsdp2_end_to_end(records, "impl")
        assert violations and all("summed over the 2 ranks" in v.message for v in violations)
        with pytest.raises(ConformanceFailure):
            judge.conform(impl, violations)
    doubled = check_fsdp2_end_to_end([_summed(0, torch_factor=1.0), _summed(1, torch_factor=1.0)], "impl")
    assert {v.message for v in doubled} == {
        f"rank {r}, {m}: every sharded gradient is 2 times the unsharded gradient of the global batch, where "
        "torch's own walk in the same run gives the expected gradients" for r in (0, 1) for m in ("eager", "compiled")
    }
    with pytest.raises(ConformanceFailure):
        judge.conform(impl, doubled)
    assert "fs2-gloo-grads-summed" not in judge.explained()
    judge.reset()


def test_fs2_9_comparisons_torch_cannot_make_are_named_not_skipped():
    """A comparison torch's internals cannot feed (probed before any
    implementation runs, or a record torch never produced) is reported with
    its reason; once these were skipped with no mark at all."""
    from pytest_fsdpcheck.checks.distributed import fsdp2_unchecked

    assert fsdp2_unchecked([_fs2_rank(0), _fs2_rank(1)], "impl") == []
    probed = _fs2_rank(0)
    probed["unchecked"] = {"sharded parameters": "torch 9.9's fully_shard keeps no readable parameter group"}
    assert fsdp2_unchecked([probed, _fs2_rank(1)], "impl") == [
        "FS2-9 (sharded parameters): torch 9.9's fully_shard keeps no readable parameter group"]
    silent = _fs2_rank(1, calls=[{"impl_modules": ["m1", "m0"], "impl_params": None, "sharded": ["m1.w0", "m0.w0"]}])
    (reason,) = fsdp2_unchecked([_fs2_rank(0), silent], "impl")
    assert reason.startswith("FS2-9 (managed parameters): torch's fully_shard never asked _get_managed_states")
    undrivable = _fs2_rank(0)
    undrivable["unchecked"] = {"FS2-9": "torch 9.9 has no _get_managed_modules"}
    assert check_fsdp2_end_to_end([undrivable], "impl") == []
    assert fsdp2_unchecked([undrivable], "impl") == ["torch 9.9 has no _get_managed_modules"]


def test_fs2_9_probe_finds_this_torchs_internals():
    """On the installed torch (2.13 in CI) every comparison can be made."""
    import torch.distributed as dist

    from pytest_fsdpcheck.runs.fsdp2_run import probe_internals

    dist.init_process_group("gloo", rank=0, world_size=1, store=dist.HashStore())
    try:
        assert probe_internals(torch.device("cpu")) == {}
    finally:
        dist.destroy_process_group()


def test_checker_judges_the_float_scaled_blocks_against_their_own_control():
    """The third model through AOTAutograd (residual blocks scaled by float
    attributes, a graph break between them) is judged like the others: a
    failed step names it and its error, a wrong gradient is compared with
    its own control."""
    own = {"w": torch.full((3,), 2.0)}
    blocks = {"grads": own, "params": own, "control": {"grads": own, "params": own}, "eager": {"grads": own, "params": own}}
    assert check_ddp_end_to_end([_rank(aot_blocks=blocks)], "impl") == []
    error = "Traceback ...\nBackendCompilerFailed: backend='compile_fn' raised: <- AttributeError: 'float' object has no attribute 'meta'"
    (failed,) = check_ddp_end_to_end([_rank(aot_blocks={"error": error})], "impl")
    assert "residual blocks scaled by float attributes" in failed.message
    assert failed.message.endswith("AttributeError: 'float' object has no attribute 'meta'")
    (differs,) = check_ddp_end_to_end([_rank(aot_blocks={**blocks, "grads": {"w": torch.ones(3)}})], "impl")
    assert "gradient (through AOTAutograd, of residual blocks" in differs.message


def test_the_float_output_bug_explains_that_failure_on_every_rank_and_nothing_beside_it():
    """``spl-float-partition-output`` is the blocks' step failing on a
    float's missing ``meta``, as every rank reports it, alone: another
    error of that step, another model's step failing, a wrong gradient or
    a bucket count beside it is not the bug."""
    from pytest_fsdpcheck.impls.torch_bug_signatures import float_partition_output

    error = "Traceback ...\nBackendCompilerFailed: backend='compile_fn' raised: <- AttributeError: 'float' object has no attribute 'meta'"
    (failed,) = check_ddp_end_to_end([_rank(0, aot_blocks={"error": error}), _rank(1, aot_blocks={"error": error})], "impl")
    assert failed.message.startswith("ranks 0, 1: ") and float_partition_output([failed])
    other = error.replace("'float' object has no attribute 'meta'", "'SymFloat' object has no attribute 'node'")
    (wrong_error,) = check_ddp_end_to_end([_rank(aot_blocks={"error": other})], "impl")
    assert not float_partition_output([wrong_error])
    (other_model,) = check_ddp_end_to_end([_rank(aot_loss={"error": error})], "impl")
    assert not float_partition_output([other_model])
    beside = check_ddp_end_to_end([_rank(aot_blocks={"error": error}, compiled_subgraphs=3)], "impl")
    assert len(beside) == 2 and not float_partition_output(beside)
