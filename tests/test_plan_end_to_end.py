"""FS2-9 on a user's plan: the plan's real ``fully_shard`` calls at world
size 2 (CPU ranks, gloo), one step eagerly and one compiled, against the
unsharded model's gradients."""

import pytest
import torch

from pytest_fsdpcheck.checks import Violation
from pytest_fsdpcheck.checks.plan_distributed import check_plan_end_to_end

pytestmark = [pytest.mark.unit, pytest.mark.skipif(not torch.distributed.is_available(), reason="no torch.distributed")]


@pytest.fixture
def fast_compile(monkeypatch):
    # the spawned ranks inherit it: Dynamo and AOTAutograd without inductor's
    # C++ builds, which would take most of a minute per rank on a small CPU
    monkeypatch.setenv("FSDPCHECK_COMPILE_BACKEND", "aot_eager")


def _run(spec):
    from pytest_fsdpcheck.cases.checks import case_builder
    from pytest_fsdpcheck.cases.exposure import case_of
    from pytest_fsdpcheck.runs.plan_run import run_plan_ranks

    return run_plan_ranks(case_builder(case_of(spec)), world_size=2, timeout=240)


@pytest.mark.e2e
def test_good_plan_matches_unsharded_eager_and_compiled(fast_compile):
    records = _run("tests.planted.plans:good")
    assert [r["error"] for r in records] == [None, None]
    for record in records:
        assert record["world_size"] == 2
        assert record["batches"] == "own"  # each rank its own batch (issue 28 item 5)
        assert record["compiled"]["graphs"] >= 1  # the compiled step compiled a graph
        names = set(record["reference"])
        assert "embed.weight" in names and "layers.1.mlp.2.weight" in names
        for mode in ("eager", "compiled"):
            assert record[mode]["error"] is None
            assert set(record[mode]["grads"]) == names
    assert check_plan_end_to_end(records) == []


@pytest.mark.e2e
def test_a_lora_stack_in_production_passes_fs2_9_in_torchs_column(fast_compile):
    """Issue 56's second framework as it trains (tests/planted/loratune.py):
    RMSNorm, rotary, GQA, SwiGLU, tied embeddings, LoRA over frozen Linears,
    each layer compiled by the model itself and checkpointed, bf16
    parameters reduced in fp32, its own next-token loss, a lock deepcopy
    refuses. Sound: no FS2-9 violation, eager (through its own compiled
    layers: Inductor's kernels) or compiled. The lock is issue 56 finding 4:
    every copy the ranks make is the factory's fresh model with the case's
    values (tests/test_plans.py has the checks' own copies)."""
    from pytest_fsdpcheck.cases.checks import control_groups
    from pytest_fsdpcheck.cases.exposure import case_of

    case = case_of("tests.planted.loratune:lora_locked")
    records = _run_as_planned("tests.planted.loratune:lora_locked")
    assert [r["error"] for r in records] == [None, None], records[0]["error"]
    assert all(record["eager"]["own_compiled"] for record in records)
    assert {g.param_dtype for g in control_groups(case)} == {torch.bfloat16}
    assert check_plan_end_to_end(records) == []


def _two_gloo_ranks(rank_main, folder, monkeypatch) -> list:
    """``rank_main(rank, port, folder)`` in two spawned processes on a
    localhost rendezvous; what each saved as ``folder/rank{rank}.pt``."""
    import torch.multiprocessing as mp

    from pytest_fsdpcheck.runs.ddp_run import free_port

    monkeypatch.setenv("GLOO_SOCKET_IFNAME", "lo")
    mp.spawn(rank_main, args=(free_port(), str(folder)), nprocs=2)
    return [torch.load(folder / f"rank{rank}.pt", weights_only=False) for rank in range(2)]


def _plan_on_both_groups(rank, port, out):
    """A spawned rank: the good plan's record on the default gloo group and
    on a gloo group of its own (as torchrun's NCCL worlds give it)."""
    import torch.distributed as dist
    from torch.distributed import device_mesh

    from pytest_fsdpcheck.runs.plan_run import BUILD_SEED, plan_task
    from tests.planted.plans import good

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    records = {}
    torch.manual_seed(BUILD_SEED)
    records["default"] = plan_task(good(), rank, 2, None)
    own = dist.new_group(backend="gloo")

    def nccl_like(collective):
        # as an NCCL default group takes no CPU tensor: only the group given may be used
        def call(*args, group=None, **kwargs):
            if group is None:
                raise RuntimeError(f"{collective.__name__} on the default group")
            return collective(*args, group=group, **kwargs)
        return call

    dist.broadcast, dist.all_reduce = nccl_like(dist.broadcast), nccl_like(dist.all_reduce)
    device_mesh.init_device_mesh = lambda *args, **kwargs: (_ for _ in ()).throw(RuntimeError("a mesh of the default group"))
    torch.manual_seed(BUILD_SEED)
    records["own"] = plan_task(good(), rank, 2, None, group=own)
    torch.save(records, f"{out}/rank{rank}.pt")
    dist.destroy_process_group()


@pytest.mark.e2e
def test_a_plan_on_a_gloo_group_of_its_own_is_the_default_groups(tmp_path, monkeypatch, fast_compile):
    """Under torchrun on GPUs the world is NCCL's, so a users' plan runs on
    a gloo group made beside it (runs/plan_run.py): every collective and
    the mesh take that group, and the records equal the default group's."""
    for rank, records in enumerate(_two_gloo_ranks(_plan_on_both_groups, tmp_path, monkeypatch)):
        for mode in ("eager", "compiled"):
            default, own = records["default"][mode], records["own"][mode]
            assert default["error"] is None and own["error"] is None, (default["error"], own["error"])
            assert default["grads"].keys() == own["grads"].keys()
            assert all(torch.equal(default["grads"][k], own["grads"][k]) for k in default["grads"]), (rank, mode)


class _FailsOnRankOne:
    """A case builder that raises on rank 1 only (picklable)."""

    def __call__(self):
        import torch.distributed as dist

        from tests.planted.plans import good

        if dist.get_rank() == 1:
            raise RuntimeError("planted: rank 1 cannot build the model")
        return good()


def _torchrun_world_rank(rank, port, out):
    """A spawned rank running what one torchrun rank runs for a users' plan."""
    from datetime import timedelta

    import torch.distributed as dist

    from pytest_fsdpcheck.runs.plan_run import _run_in_torchrun_world

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2,
                            timeout=timedelta(seconds=60))
    torch.save(_run_in_torchrun_world(_FailsOnRankOne(), 2, None), f"{out}/rank{rank}.pt")
    dist.destroy_process_group()


@pytest.mark.e2e
def test_a_rank_that_cannot_build_the_case_is_every_ranks_record_not_a_hang(tmp_path, monkeypatch, fast_compile):
    """Under torchrun the other ranks are the pytest sessions themselves and
    live on: without agreeing on the build first, rank 0 would wait in its
    first broadcast until the collectives' time-out. Every rank's record
    names rank 1's failure instead."""
    for records in _two_gloo_ranks(_torchrun_world_rank, tmp_path, monkeypatch):
        assert [r["rank"] for r in records] == [0, 1]
        for record in records:
            assert "rank 1 could not build the case: RuntimeError: planted: rank 1 cannot build the model" in (
                record["error"] or ""), record["error"]


@pytest.mark.e2e
def test_rank_dependent_plan_fails_naming_the_parameter(fast_compile):
    violations = check_plan_end_to_end(_run("tests.planted.plans:rank_scaled"))
    assert violations and {v.invariant for v in violations} == {"FS2-9"}
    for mode in ("eager", "compiled"):
        # every gradient upstream of the rescaled shard is wrong: one line for the step, each named under it
        assert any(f", {mode}: " in v.message and "the gradient of layers.1.mlp.2.weight differs" in str(v)
                   for v in violations), violations


def _ranks_modes(violations) -> set:
    """``(rank, mode)`` each message names: ``rank 0, eager: ...``, or the
    ranks' alike findings merged, ``ranks 0, 1, eager: ...``."""
    import re

    found = set()
    for v in violations:
        named = re.match(r"ranks? ([\d, ]+?), (eager|compiled): ", v.message)
        assert named, v.message
        found |= {(f"rank {r.strip()}", named.group(2)) for r in named.group(1).split(",")}
    return found


def _grad_records(have, want, **step):
    return [{"rank": 0, "error": None, "reference": {"w": want},
             "eager": {"error": None, "grads": {"w": have}}, "compiled": {"error": None, "grads": {"w": have}, **step}}]


def test_checker_judges_records():
    one = torch.ones(2, 2)
    assert check_plan_end_to_end(_grad_records(one.clone(), one)) == []
    wrong = check_plan_end_to_end(_grad_records(2 * one, one))
    assert [v.message.split(":")[0] for v in wrong] == ["rank 0, eager", "rank 0, compiled"]
    assert all("gradient of w differs" in v.message for v in wrong)
    assert "shape" in check_plan_end_to_end(_grad_records(torch.ones(4), one))[0].message
    assert "is None" in check_plan_end_to_end(_grad_records(None, one))[0].message
    failed = check_plan_end_to_end(_grad_records(one, one, error="RuntimeError: boom\nTraceback ..."))
    assert failed == [Violation("FS2-9", "rank 0, compiled: the plan's step failed: RuntimeError: boom")]
    died = check_plan_end_to_end([{"rank": 1, "error": "died without a result"}])
    assert died == [Violation("FS2-9", "rank 1 failed: died without a result")]


def test_what_the_ranks_report_alike_is_one_line():
    """Issue 38 item 6/11: a plan's step failing, or a gradient wrong the same
    way, on every rank is one line naming the ranks, not one per rank; what
    differs between ranks stays per rank."""
    one = torch.ones(2, 2)
    both = [{**_grad_records(2 * one, one)[0], "rank": r} for r in (0, 1)]
    wrong = check_plan_end_to_end(both)
    assert [v.message.split(":")[0] for v in wrong] == ["ranks 0, 1, eager", "ranks 0, 1, compiled"], wrong
    failed = [{**_grad_records(one, one, error="RuntimeError: boom\nTraceback ...")[0], "rank": r} for r in (0, 1)]
    assert [v.message for v in check_plan_end_to_end(failed)] == [
        "ranks 0, 1, compiled: the plan's step failed: RuntimeError: boom"]
    apart = [{**_grad_records(k * one, one)[0], "rank": r} for r, k in ((0, 2), (1, 3))]
    assert [v.message.split(":")[0] for v in check_plan_end_to_end(apart)] == [
        "rank 0, eager", "rank 0, compiled", "rank 1, eager", "rank 1, compiled"]


def test_before_fsdp2_runs_on_cpu_the_check_is_np_with_its_reason(monkeypatch):
    """FSDP2 steps on CPU ranks only from 2.7 (2.3-2.6 need CUDA streams):
    n/p from the release, decided before any rank starts."""
    from pytest_fsdpcheck.cases import checks
    from pytest_fsdpcheck.cases.exposure import case_of

    monkeypatch.setattr(torch, "__version__", "2.6.0+cu124")
    monkeypatch.setattr("pytest_fsdpcheck.runs.plan_run.run_plan_ranks", lambda *a, **k: pytest.fail("a rank started"))
    with pytest.raises(pytest.skip.Exception, match="fully_shard's runtime runs on CPU from torch 2.7"):
        checks.check_plan_end_to_end(case_of("tests.planted.plans:good"), checks._torch_impl(), world_size=2)


# --- issue 28: the plan's own precision, and randomness in the step ------------------


def _run_as_planned(spec):
    """The ranks with the plan's groups (its recorded calls' policies), as the check runs them."""
    from pytest_fsdpcheck.cases.checks import case_builder, control_groups
    from pytest_fsdpcheck.cases.exposure import case_of
    from pytest_fsdpcheck.runs.plan_run import run_plan_ranks

    case = case_of(spec)
    return run_plan_ranks(case_builder(case), world_size=2, timeout=240, groups=control_groups(case))


@pytest.mark.e2e
@pytest.mark.parametrize("spec", ["accumulating", "accumulating_bf16"])
def test_the_frameworks_own_step_passes_fs2_9(fast_compile, spec):
    """ModelCase.micro_batches and .optimizer (issue 56: the framework's own
    training step): two micro-batches with gradient sync off for the first,
    then AdamW on the sharded parameters. Sound: the gradients are the
    unsharded model's accumulated ones (at bf16, accumulated in the fp32
    reduce dtype as FSDP2 keeps them) and the parameters after the step are
    the plain optimizer's on the same gradients."""
    records = _run_as_planned(f"tests.planted.plans:{spec}")
    assert [r["error"] for r in records] == [None, None], records[0]["error"]
    for record in records:
        for mode in ("eager", "compiled"):
            stepped = record[mode]["optimizer"]
            assert set(stepped["after"]) == set(stepped["expected"]) == set(record["reference"])
    assert check_plan_end_to_end(records) == []


def test_micro_batches_split_every_batched_input_and_refuse_an_uneven_batch():
    from pytest_fsdpcheck.runs.plan_run import micro_batches

    tokens, mask, scale = torch.arange(8).reshape(4, 2), torch.ones(4, 2, dtype=torch.bool), torch.tensor([2.0, 3.0])
    chunks = micro_batches(((tokens, scale), {"mask": mask, "eps": 0.5}), 2)
    assert [c[0][0].tolist() for c in chunks] == [[[0, 1], [2, 3]], [[4, 5], [6, 7]]]
    # a tensor of another first dimension (2 != 4) and a plain value go whole to each micro-batch
    assert all(c[0][1] is scale and c[1]["eps"] == 0.5 and c[1]["mask"].shape == (2, 2) for c in chunks)
    assert micro_batches(((tokens,), {}), 1) == [((tokens,), {})]
    with pytest.raises(ValueError, match="micro_batches=3 does not divide the batch size 4"):
        micro_batches(((tokens,), {}), 3)


def test_the_frameworks_step_mistakes_are_the_users_one_line():
    """An uneven micro-batch split, or an optimizer that fails on the plain
    model, is the user's case error naming the factory, before any rank
    runs (never a cell in torch's column)."""
    from pytest_fsdpcheck.cases.checks import case_problem
    from pytest_fsdpcheck.cases.exposure import case_of

    assert case_problem(case_of("tests.planted.plans:micro_batches_uneven")) == (
        "model tests.planted.plans:micro_batches_uneven: micro_batches=3 does not divide the batch size 2 "
        "(the first dimension of the first tensor input)")
    assert case_problem(case_of("tests.planted.plans:optimizer_broken")) == (
        "model tests.planted.plans:optimizer_broken: the case's optimizer on the unsharded model: "
        "ValueError: Invalid learning rate: -1.0")
    assert case_problem(case_of("tests.planted.plans:accumulating")) is None


def test_the_checker_judges_the_optimizer_step_against_the_plain_one():
    """Parameters after the framework's optimizer step on the sharded model
    equal the plain optimizer's on the same gradients within a few ulps of
    the parameter's largest entry; beyond that one FS2-9 line per rank and
    mode naming the worst parameter."""
    grads = {"w": torch.ones(3)}
    expected = {"w": torch.tensor([1.0, 2.0, 4.0])}
    record = {"rank": 0, "world_size": 2, "reference": grads, "precision": {}}

    def step(after):
        return {"error": None, "grads": grads, "optimizer": {"after": {"w": after}, "expected": expected}}

    ulp = torch.finfo(torch.float32).eps * 4.0
    close = torch.tensor([1.0, 2.0, 4.0 + 2 * ulp])
    assert check_plan_end_to_end([{**record, "eager": step(close), "compiled": step(close)}]) == []
    off = torch.tensor([1.0, 2.0, 4.01])
    violations = check_plan_end_to_end([{**record, "eager": step(off), "compiled": step(close)}])
    assert [v.invariant for v in violations] == ["FS2-9"]
    assert str(violations[0]).startswith("FS2-9: rank 0, eager: after the framework's optimizer step on the sharded "
                                         "parameters, w differs from the plain optimizer's"), str(violations[0])


def test_plan_groups_follow_the_recorded_policies():
    from pytest_fsdpcheck.cases.checks import control_groups
    from pytest_fsdpcheck.cases.exposure import case_of

    groups = control_groups(case_of("tests.planted.plans:bf16_last_block"))
    assert [g.roots for g in groups] == [("layers.0",), ("layers.1",), ("",)]
    assert {(g.param_dtype, g.reduce_dtype) for g in groups} == {(torch.bfloat16, torch.float32)}
    assert "layers.1.mlp.2.weight" in groups[1].params
    assert {"embed.weight", "norm.weight"} <= set(groups[2].params)  # the root's own; lm_head is tied to embed
    assert all(g.param_dtype is None for g in control_groups(case_of("tests.planted.plans:good")))


@pytest.mark.e2e
@pytest.mark.parametrize("spec", ["bf16", "bf16_last_block", "bf16_casts"])
def test_correct_bf16_plan_passes_at_its_own_precision(fast_compile, spec):
    """Issue 28 item 1: bf16 compute with fp32 reduction (torchtitan's
    default), reshard_after_forward=False on the last block: the control
    computes at the same precision, so the comparison is exact up to the
    reduction's order (it FAILed every parameter against an fp32 control).
    ``bf16_casts`` takes fp32 inputs, which the control must cast where the
    policy does (without the casts it fails in LayerNorm's mixed dtypes)."""
    from pytest_fsdpcheck.cases import checks
    from pytest_fsdpcheck.cases.exposure import case_of

    checks.check_plan_end_to_end(case_of(f"tests.planted.plans:{spec}"), checks._torch_impl(), world_size=2)


@pytest.mark.e2e
@pytest.mark.parametrize(("spec", "params", "modes", "words"), [
    # the gradient summed over the ranks, not averaged: 2x
    ("bf16_doubled", "layers.1.", ("eager", "compiled"), "differs from the unsharded model's at the plan's precision"),
    # the reduction never runs: no gradient on the sharded parameters
    ("bf16_dropped", "layers.0.", ("eager", "compiled"), "is None"),
    # the same plan accumulating two micro-batches: the framework's step turns sync off and back
    # on for the last micro-batch, to what the plan left it (off for layers.0), never forced on
    ("bf16_dropped_accumulating", "layers.0.", ("eager", "compiled"), "is None"),
    # fp32 reduction asked for, bf16 done: half a bf16 ulp of the sum, beyond the fp32 reduction's
    # tolerance; a compiled step's allowance for fused bf16 kernels covers it, so eager only
    ("bf16_reduced_in_bf16", "", ("eager",), "(bfloat16 compute, float32 reduction;"),
    # a reduce-scatter that keeps each rank's own chunk: a third off on both ranks, with the
    # ranks' loss weights; with equal contributions (before issue 28) the fp32 one passed
    ("bf16_unreduced", "layers.0.", ("eager", "compiled"), "differs from the unsharded model's at the plan's"),
    ("unreduced", "layers.0.", ("eager", "compiled"), "differs from the unsharded model's (max abs"),
    # issue 28 item 5: a parameter the spec's walk shards but the FSDP2 run left in no group (never
    # reduced); the control followed torch's recorded groups, so it passed
    ("left_out", "layers.0.mlp.0.weight ", ("eager", "compiled"), "differs from the unsharded model's (max abs"),
])
def test_wrong_bf16_plan_fails_fs2_9(fast_compile, spec, params, modes, words):
    violations = check_plan_end_to_end(_run_as_planned(f"tests.planted.plans:{spec}"))
    assert violations and {v.invariant for v in violations} == {"FS2-9"}
    for v in violations:
        assert f"the gradient of {params}" in v.message and words in v.message, v.message
    assert _ranks_modes(violations) == {(f"rank {r}", mode) for r in (0, 1) for mode in modes}


@pytest.mark.e2e
@pytest.mark.parametrize("spec", ["dropout", "dropout_bf16", "batchnorm"])
def test_random_draws_in_the_step_are_the_same_in_both_runs(fast_compile, spec):
    """Issue 28 item 2: nn.Dropout and a random mask in the forward (and
    BatchNorm in train mode, which passed before) pass, in fp32 and bf16:
    both runs seed the generator just before the forward. Dropout FAILed
    ('max abs difference 0.0584') with no hint of the cause."""
    from pytest_fsdpcheck.cases import checks
    from pytest_fsdpcheck.cases.exposure import case_of

    case = case_of(f"tests.planted.plans:{spec}")
    assert case.model.training
    checks.check_plan_end_to_end(case, checks._torch_impl(), world_size=2)


@pytest.mark.e2e
def test_ranks_weigh_their_loss_and_the_fp32_control_matches_exactly(fast_compile):
    """With one batch for every rank and no loss weights, a plan whose groups
    never reduce would pass (each rank's own gradient is the mean: the planted
    ``unreduced`` plan did). Each rank takes its own batch and rank 1's loss
    counts twice, and the control's mean of the weighted gradients of every
    rank's batch is exact for a correct plan."""
    from pytest_fsdpcheck.runs.plan_run import rank_weight

    assert [rank_weight(r) for r in range(4)] == [1.0, 2.0, 1.0, 2.0]
    records = _run("tests.planted.plans:good")
    for record in records:
        assert record["weight"] == rank_weight(record["rank"])
        assert torch.equal(record["eager"]["grads"]["layers.0.mlp.0.weight"],
                           record["reference"]["layers.0.mlp.0.weight"])


@pytest.mark.e2e
def test_an_ignored_parameter_keeps_its_ranks_own_gradient(fast_compile):
    """FSDP2 never reduces an ignored parameter: with the ranks' loss weights
    its gradient is each rank's own (twice as large on rank 1), and the control says so."""
    from pytest_fsdpcheck.cases import checks
    from pytest_fsdpcheck.cases.exposure import case_of

    checks.check_plan_end_to_end(case_of("tests.planted.plans:ignored"), checks._torch_impl(), world_size=2)


def _low_records(have, want, precision, mode_grads=None):
    return [{"rank": 0, "error": None, "world_size": 2, "reference": {"w": want}, "precision": {"w": precision},
             "eager": {"error": None, "grads": {"w": have}},
             "compiled": {"error": None, "grads": {"w": mode_grads if mode_grads is not None else have}}}]


def test_checker_tolerance_follows_the_plans_dtypes():
    want = torch.tensor([1.0, 0.5, -0.25])
    bf16_ulp = want.clone()
    bf16_ulp[0] += 2 ** -8  # one bf16 rounding of the largest entry
    plan = ("bfloat16", "float32")
    # eager: fp32 reduction's slack only, the bf16 rounding shows
    eager_only = check_plan_end_to_end(_low_records(bf16_ulp, want, plan, mode_grads=want))
    assert [v.message.split(":")[0] for v in eager_only] == ["rank 0, eager"]
    assert "(bfloat16 compute, float32 reduction; allowed: 2 x eps(float32)" in eager_only[0].message
    # compiled: fused bf16 kernels may round once where eager rounds twice
    assert check_plan_end_to_end(_low_records(want, want, plan, mode_grads=bf16_ulp)) == []
    # a reduction in bf16 asked for: bf16's slack in both modes
    assert check_plan_end_to_end(_low_records(bf16_ulp, want, ("bfloat16", "bfloat16"))) == []
    # doubled is doubled at any precision
    doubled = check_plan_end_to_end(_low_records(2 * want, want, ("bfloat16", "bfloat16")))
    assert len(doubled) == 2 and "4 x eps(bfloat16) for fused kernels" in doubled[1].message
    # a gradient in another dtype than the parameter's
    assert "has dtype bfloat16" in check_plan_end_to_end(_low_records(want.bfloat16(), want, plan))[0].message


def test_a_step_through_the_models_own_compiled_layers_takes_a_compilers_tolerance():
    """Issue 56 finding 1: layers the model compiles itself (``layer.compile()``
    before ``fully_shard``) run Inductor's kernels in the eager step too, and
    were judged at eager's tolerance (2 x eps(float32)): a bf16 rounding was
    a FAIL in torch's column. Such a step takes the compiled allowance; a
    wrong gradient still fails, its first line saying how many differ, the
    worst relative difference and what the step compiled."""
    want = torch.tensor([1.0, 0.5, -0.25])
    bf16_ulp = want.clone()
    bf16_ulp[0] += 2 ** -8
    plan = ("bfloat16", "float32")
    own = _low_records(bf16_ulp, want, plan, mode_grads=want)
    own[0]["eager"]["own_compiled"] = ["layers.0", "layers.1"]
    assert check_plan_end_to_end(own) == []
    plain = check_plan_end_to_end(_low_records(bf16_ulp, want, plan, mode_grads=want))
    assert plain and plain[0].message.endswith("; the step compiled nothing (eager)"), plain
    two = [{**own[0], "reference": {"w": want, "v": want}, "precision": {"w": plan, "v": plan},
            "eager": {"error": None, "own_compiled": ["layers.0"], "grads": {"w": 3 * want, "v": want + 0.5}},
            "compiled": {"error": None, "graphs": 2, "grads": {"w": want, "v": want}}}]
    [wrong] = check_plan_end_to_end(two)
    first = wrong.message.splitlines()[0]
    assert first.startswith("rank 0, eager: 2 of 2 gradients are wrong; worst: the gradient of w differs"), first
    assert ", 2 of its largest entry; the step compiled 1 of the model's own compiled modules (layers.0)" in first
    assert "the gradient of v differs" in wrong.detail and "the gradient of w differs" in wrong.detail
    # per-block torch.compile (the blocks compile themselves): the outer compile owes no graph
    blocks = [{**own[0], "compiled": {"error": None, "graphs": 0, "unsharded_graphs": 1,
                                      "own_compiled": ["layers.0"], "grads": {"w": want}}}]
    assert check_plan_end_to_end(blocks) == []
    del blocks[0]["compiled"]["own_compiled"]
    [eagerly] = check_plan_end_to_end(blocks)
    assert "gave its backend no graph of the sharded model" in eagerly.message


# --- issue 28 item 5: FS2-9 on users' plans can fail for the reasons it claims -------


@pytest.mark.e2e
def test_a_model_that_compiles_nothing_is_the_cases_limit(fast_compile):
    """A forward under ``torch._dynamo.disable`` compiles no graph, sharded
    or not: the compiled mode cannot judge the implementation, so FS2-9 is
    the case's n/p with that reason (it passed, claiming a compiled step),
    never a FAIL in the implementation's column; eager still judged."""
    from pytest_fsdpcheck.checks.plan_distributed import uncompilable_model

    records = _run_as_planned("tests.planted.plans:dynamo_disabled")
    assert check_plan_end_to_end(records) == []
    assert "the model's forward compiles none even unsharded" in uncompilable_model(records)
    assert [r["compiled"]["graphs"] for r in records] == [0, 0]


def test_checker_names_whose_forward_compiled_nothing():
    one = torch.ones(2)
    compiled = _grad_records(one, one, graphs=0, unsharded_graphs=3)
    [v] = check_plan_end_to_end(compiled)
    assert v.message.startswith("rank 0, compiled: torch.compile gave its backend no graph") and "compiles 3 graph(s)" in v.message
    assert check_plan_end_to_end(_grad_records(one, one, graphs=2)) == []
    from pytest_fsdpcheck.checks.plan_distributed import uncompilable_model

    assert uncompilable_model(compiled) is None
    # the sharded model compiles nothing where the unsharded one failed to compile: still the implementation's
    assert len(check_plan_end_to_end(_grad_records(one, one, graphs=0, unsharded_graphs="RuntimeError: x"))) == 1


def test_each_rank_takes_its_own_batch_of_the_same_shapes():
    from pytest_fsdpcheck.runs.plan_run import rank_batches

    tokens = torch.arange(12).reshape(3, 4)
    x = torch.randn(3, 4)
    x[0, 0] = float("-inf")  # an additive mask's -inf stays where it is
    mask = torch.tensor([True, False, True])
    first, second, third = rank_batches((tokens, {"x": x, "mask": mask}, 7), 3)
    assert first[0] is tokens and first[1]["x"] is x
    for other in (second, third):
        varied_tokens, rest, seven = other
        assert not torch.equal(varied_tokens, tokens) and sorted(varied_tokens.flatten().tolist()) == list(range(12))
        assert varied_tokens.shape == tokens.shape and varied_tokens.dtype == tokens.dtype
        assert not torch.equal(rest["x"][1:], x[1:]) and rest["x"][0, 0] == float("-inf")
        assert torch.equal(rest["mask"], mask) and seven == 7
    assert not torch.equal(second[0], third[0])


def test_the_control_averages_every_ranks_batch_and_falls_back_where_the_model_rejects_them():
    from torch import nn

    from pytest_fsdpcheck.runs.plan_run import PlanGroup, _control, _Rejected, rank_batches

    torch.manual_seed(0)
    model = nn.Linear(4, 1, bias=False)
    batches = rank_batches(((torch.randn(3, 4),), {}), 2)  # (positional, keyword)
    reference, _, reach = _control(model, batches, (PlanGroup(("weight",)),), rank=0, world_size=2)
    assert reach == {"params": {}, "modules": {}}
    grads = []
    for weight, ((x,), _) in zip((1.0, 2.0), batches, strict=True):
        model.zero_grad()
        model(x).square().mean().backward()
        grads.append(weight * model.weight.grad.clone())
    assert torch.allclose(reference["weight"], (grads[0] + grads[1]) / 2)

    class SortedOnly(nn.Linear):  # takes sorted ids only, as a packed-sequence offset table
        def forward(self, offsets):
            assert bool((offsets.diff() >= 0).all()), "offsets must be sorted"
            return super().forward(offsets.float())

    with pytest.raises(_Rejected, match="offsets must be sorted"):
        _control(SortedOnly(4, 1), rank_batches(((), {"offsets": torch.arange(4)}), 2), (PlanGroup(("weight",)),),
                 rank=0, world_size=2)


# --- issue 38: frameworks' stacks (checkpointing, fp32 routers) and time limits -------


def test_the_control_runs_a_checkpointed_bf16_step_at_the_plans_precision():
    """Item 2: the control casts the parameters for the whole step (forward,
    the checkpoint's recompute, backward), as FSDP2's all-gather does. It
    swapped bf16 parameters in for the forward only, so torch's recompute
    in the backward saw fp32 ones and raised (a false FS2-9 FAIL for torch)."""
    from pytest_fsdpcheck.cases.checks import control_groups
    from pytest_fsdpcheck.cases.exposure import case_of
    from pytest_fsdpcheck.runs.plan_run import _control, rank_batches

    case = case_of("tests.planted.plans:checkpointed_bf16")
    reference, precision, _ = _control(case.model, rank_batches((tuple(case.example_inputs), {}), 2),
                                    control_groups(case), rank=0, world_size=2)
    assert precision["layers.0.mlp.0.weight"] == ("bfloat16", "float32")
    assert precision["layers.1._checkpoint_wrapped_module.mlp.0.weight"] == ("bfloat16", "float32")
    assert all(g is not None and g.dtype == torch.float32 and torch.isfinite(g).all() for g in reference.values())


@pytest.mark.e2e
@pytest.mark.parametrize("spec", ["checkpointed_bf16", "fp32_router"])
def test_frameworks_bf16_stacks_pass_fs2_9_for_torch(fast_compile, spec):
    """Items 2 and 3: activation checkpointing under a bf16 policy, and an
    fp32 router downstream of bf16 blocks (its gradient computed through
    bf16: the ``upstream`` dtype), pass FS2-9 for torch."""
    from pytest_fsdpcheck.cases import checks
    from pytest_fsdpcheck.cases.exposure import case_of

    checks.check_plan_end_to_end(case_of(f"tests.planted.plans:{spec}"), checks._torch_impl(), world_size=2)


@pytest.mark.e2e
def test_a_doubled_fp32_router_fails_fs2_9_stating_the_tolerance(fast_compile):
    """Item 3's killer: the router's gradients summed over the ranks, not
    averaged, fail in both modes; the message states the tolerance (with
    the step's bf16 upstream, compiled) and the measured difference."""
    records = _run_as_planned("tests.planted.plans:fp32_router_doubled")
    assert all(record["upstream"]["router.weight"] == "bfloat16" for record in records)
    violations = check_plan_end_to_end(records)
    assert violations and {v.invariant for v in violations} == {"FS2-9"}
    assert _ranks_modes(violations) == {(f"rank {r}", m) for r in (0, 1) for m in ("eager", "compiled")}
    for v in violations:
        assert "the gradient of router.weight differs" in v.message and "max abs difference" in v.message, v.message
        assert "tolerance" in v.message, v.message
    compiled = [v.message for v in violations if ", compiled:" in v.message]
    assert all("(computed through bfloat16; allowed: 4 x eps(bfloat16) for fused kernels" in m for m in compiled), compiled


def _routed_records(have, want, upstream="bfloat16", noise=None, mode="compiled"):
    other = "eager" if mode == "compiled" else "compiled"
    return [{"rank": 0, "error": None, "world_size": 2, "reference": {"router": want}, "precision": {},
             "upstream": {"router": upstream}, "noise": {} if noise is None else {"router": noise},
             mode: {"error": None, "grads": {"router": have}}, other: {"error": None, "grads": {"router": want}}}]


def test_checker_tolerance_follows_the_dtypes_upstream_and_the_models_own_noise():
    """Item 3: an fp32 parameter whose gradient is computed through bf16
    (an MoE router after bf16 blocks) differs compiled from eager by about
    a percent with no FSDP at all. It failed against the fp32 tolerance,
    with no tolerance stated; now the compiled tolerance is the upstream
    dtype's fused-kernel allowance plus twice the unsharded model's own
    compiled-vs-eager difference measured in the control, and stated."""
    want = torch.linspace(-1.0, 1.0, 16)
    off = want * 1.013  # 1.3 % off everywhere, as the router
    noise = (off - want).abs().max().item()
    # the unsharded model's own compiled noise is allowed ...
    assert check_plan_end_to_end(_routed_records(off, want, noise=noise)) == []
    # ... and 4 bf16 ulps of the largest entry cover it from the dtypes alone
    assert check_plan_end_to_end(_routed_records(off, want)) == []
    # never eagerly: the control repeats the eager step op for op
    [eager] = check_plan_end_to_end(_routed_records(off, want, mode="eager"))
    assert eager.message.startswith("rank 0, eager: the gradient of router differs") and "tolerance" in eager.message
    # an fp32 step compiled gets the fp32 tolerance only, stated
    [fp32] = check_plan_end_to_end(_routed_records(off, want, upstream="float32"))
    assert "(max abs difference 0.013, largest entry 1, tolerance 1e-05 + rtol 0.0001 x each entry)" in fp32.message
    # doubled is beyond any noise, and the message states both numbers
    [doubled] = check_plan_end_to_end(_routed_records(2 * want, want, noise=noise))
    assert ("(computed through bfloat16; allowed: 4 x eps(bfloat16) for fused kernels + 2 x 0.013, the unsharded "
            "model's own compiled-vs-eager difference) (max abs difference 1, largest entry 1, tolerance 0.0573")\
        in doubled.message, doubled.message


def _killed(phase, spent, **facts):
    return {"rank": 0, "error": "timed out after 60s and was killed", "timed_out": True, "limit_s": 60.0,
            "killed_at": 1000.0, "progress": {"phase": phase, "phase_at": 1000.0 - spent, **facts}}


def test_a_rank_killed_in_the_plans_step_is_a_hang_and_a_slow_world_is_an_error():
    """Item 5: a rank killed at the limit in the plan's own step, where the
    unsharded control's same step took a small part of that, is a hang in
    torch's runtime (FAIL, named); killed while starting, in the control,
    or in a step no slower than its control allows, the world is too slow
    (ERROR, never FAIL). Every time-out was 'rank 0 failed: timed out', a FAIL."""
    from pytest_fsdpcheck.checks.plan_distributed import world_too_slow

    hung = [_killed("eager", 40.0, control_s=0.05)]
    [v] = check_plan_end_to_end(hung)
    assert v.message.startswith("rank 0, eager: the plan's step did not finish: killed after 40 s in it at the ranks' "
                                "limit of 60 s, where the unsharded model's step took 0.05 s"), v.message
    assert world_too_slow(hung) is None
    compiled = [_killed("compiled", 40.0, control_s=0.05, compiled_control_s=1.0)]
    assert "compiled: the plan's step did not finish" in check_plan_end_to_end(compiled)[0].message
    # no compiled step of the control measured (an fp32 plan): hung past one call's limit
    fp32_compiled = [_killed("compiled", 40.0, control_s=0.05) | {"call_limit_s": 30.0}]
    assert "longer than one call may take (--fsdpcheck-timeout 30 s): hung" in check_plan_end_to_end(fp32_compiled)[0].message
    assert world_too_slow(fp32_compiled) is None
    for slow in ([_killed("control", 30.0)], [_killed("world", 60.0)], [_killed("eager", 40.0, control_s=3.0)],
                 # no compiled step of the control to compare with, within one call's limit
                 [_killed("compiled", 40.0, control_s=0.05) | {"call_limit_s": 60.0}],
                 [{"rank": 1, "error": "timed out after 60s and was killed", "timed_out": True, "limit_s": 60.0,
                   "killed_at": 1000.0}]):
        why = world_too_slow(slow)
        assert why is not None and "the world is too slow to judge the plan; raise --fsdpcheck-timeout" in why, slow
    assert world_too_slow([{"rank": 0, "error": "died without a result", "timed_out": False}]) is None


def test_the_ranks_limit_follows_the_timeout_option_and_the_steps_cost(monkeypatch):
    """Item 5: the ranks' limit comes from --fsdpcheck-timeout, scaled by
    the unsharded step's measured cost (it was 180 s whatever the option);
    a world killed there outside a hung step raises EnvironmentFault."""
    from pytest_fsdpcheck.cases import checks
    from pytest_fsdpcheck.cases.exposure import case_of
    from pytest_fsdpcheck.checks import EnvironmentFault
    from pytest_fsdpcheck.runs.plan_run import PLAN_CALLS, STEP_COST_FACTOR, rank_limit

    assert rank_limit(0, 5.0) is None  # 0: no limit, as the option says
    assert rank_limit(10.0, 0.5) == PLAN_CALLS * 10.0 + STEP_COST_FACTOR * 0.5
    limits = []

    def killed_world(build, world_size, timeout=None, groups=None, call_limit=None):
        limits.append(timeout)
        return [_killed("control", timeout) | {"limit_s": timeout}, _killed("control", timeout) | {"rank": 1}]

    monkeypatch.setattr("pytest_fsdpcheck.runs.plan_run.run_plan_ranks", killed_world)
    monkeypatch.setattr(checks, "_unsharded_step_seconds", lambda case: 0.2)
    with pytest.raises(EnvironmentFault, match=r"^environment \(gloo on cpu, world size 2\): rank 0 was killed at "
                                               r"the ranks' limit of 40 s in phase 'control'"):
        checks.check_plan_end_to_end(case_of("tests.planted.plans:good"), checks._torch_impl(), world_size=2,
                                     timeout_s=10.0)
    assert limits == [PLAN_CALLS * 10.0 + STEP_COST_FACTOR * 0.2]


@pytest.mark.e2e
def test_the_timeout_option_reaches_fs2_9_and_a_slow_world_is_an_error(run_suite, fast_compile):
    """Item 5: --fsdpcheck-timeout sets FS2-9's ranks' limit (it was 180 s
    whatever the option): at 1 s, with ranks that take a minute to build
    the model, no world starts in time, and the cell is torch's ERROR
    naming the environment, never a FAIL. (Ranks forked from a preloaded
    fork server reach the compiled step within such a limit on their own.)"""
    result, report = run_suite("torch", k="test_model_plan_end_to_end",
                               extra=("--fsdpcheck-model", "tests.planted.plans:slow_in_ranks", "--fsdpcheck-timeout", "1"))
    assert report is not None, "\n".join(result.outlines[-30:])
    assert report["matrix"]["torch"]["FS2-9"]["outcome"] == "error", report["matrix"]["torch"]
    assert "the world is too slow to judge the plan; raise --fsdpcheck-timeout" in result.stdout.str()


def _observed_as_fs2_9_of_torch(body):
    """``body`` run as the plugin runs a suite test of torch's FS2-9 (its
    process-wide state compared before and after: plugin/verdicts.py), in
    this process: as FS2-9's step runs under torchrun."""
    from types import SimpleNamespace

    import torch._dynamo  # noqa: F401 - imported before the snapshot, as the plugin does
    import torch._inductor.config  # noqa: F401

    from pytest_fsdpcheck.plugin import verdicts
    from pytest_fsdpcheck.report.verdict import PROP_IMPL, PROP_INVARIANTS

    class TorchColumn:
        calls = 0

        def start_test(self):
            pass

    item = SimpleNamespace(callspec=SimpleNamespace(params={"fsdpcheck_impl": TorchColumn()}), obj=body, config=None,
                           user_properties=[(PROP_INVARIANTS, ["FS2-9"]), (PROP_IMPL, "torch")])
    with verdicts.observed_call(item, SimpleNamespace(import_history=None, profile="ci")):
        body()


def _compiled_step_with_dropout():
    """FS2-9's compiled step (plan_run._compiled) through Inductor on a
    model that draws: its dropout mask must be eager's from the same seed."""
    from pytest_fsdpcheck.runs import plan_run

    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Dropout(0.5))
    x = torch.randn(3, 4, requires_grad=True)
    graphs = []
    compiled = plan_run._compiled(model, "inductor", graphs)
    torch.manual_seed(5)
    out = compiled(x)
    out.sum().backward()
    torch.manual_seed(5)
    assert len(graphs) == 1 and torch.equal(out, model(x)), "the compiled step did not draw what eager draws"


def test_the_compiled_step_leaves_inductors_config_as_it_found_it_and_a_leak_by_torch_still_fails(monkeypatch):
    """Issue 56: the compiled step asked Inductor to draw as eager does by
    setting ``fallback_random`` process-wide and never put it back; under
    torchrun that step runs in the test process, and FS2-9 FAILed every
    user's model as torch's leak. The setting is the step's own compiles'
    now, and torch leaving that same setting changed
    (tests/planted/torch_faults.py:CompileLeavesFallbackRandom) is still
    FS2-9's LeakedGlobalState in torch's column, not put back by the step."""
    import shutil

    import torch._inductor.config as inductor_config

    from pytest_fsdpcheck.plugin.guard import LeakedGlobalState
    from tests.planted.torch_faults import CompileLeavesFallbackRandom

    if not (shutil.which("c++") or shutil.which("g++")):
        pytest.skip("Inductor compiles CPU kernels with a C++ compiler; none here")
    assert inductor_config.fallback_random is False
    _observed_as_fs2_9_of_torch(_compiled_step_with_dropout)
    assert inductor_config.fallback_random is False

    monkeypatch.setattr(torch, "compile", torch.compile)  # put back after the fault
    CompileLeavesFallbackRandom.plant()
    with pytest.raises(LeakedGlobalState, match=r"^FS2-9: torch left process-wide state changed: "
                                                 r"inductor\.config \(fallback_random\)"):
        _observed_as_fs2_9_of_torch(_compiled_step_with_dropout)
    assert inductor_config.fallback_random is False  # the leak was put back by the isolation check


# --- issue 57, family 4: each rank its own data, reaching different parameters ------

def test_the_control_keeps_per_rank_batches_that_reach_different_parameters():
    """A routed model on per-rank data: the batches are kept (they fell back
    to rank 0's batch on every rank, a plain pass that hid every routed
    bug), the reach names what only some ranks reach, and a parameter's
    reference is the ranks' average with a zero where a rank's batch did
    not reach it (FSDP2's documented reduce-scatter of unused parameters)."""
    from torch import nn

    from pytest_fsdpcheck.runs.plan_run import PlanGroup, _control

    class Routed(nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = nn.Linear(3, 1), nn.Linear(3, 1)

        def forward(self, x):
            return self.a(x) if x.sum() > 0 else self.b(x)

    torch.manual_seed(0)
    model = Routed()
    batches = [((torch.ones(2, 3),), {}), ((-torch.ones(2, 3),), {})]
    names = tuple(n for n, _ in model.named_parameters())
    reference, _, reach = _control(model, batches, (PlanGroup(names),), rank=1, world_size=2)
    assert reach == {"params": {"a.weight": [0], "a.bias": [0], "b.weight": [1], "b.bias": [1]},
                     "modules": {"a": [0], "b": [1]}}
    expected = {}
    for (x,), _ in batches:
        model.zero_grad()
        model(x).square().mean().backward()
        expected.update({n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None})
    # rank 0's term weighs 1, rank 1's 2; the rank that did not reach a parameter adds zero
    assert torch.allclose(reference["a.weight"], expected["a.weight"] * 1.0 / 2)
    assert torch.allclose(reference["b.weight"], expected["b.weight"] * 2.0 / 2)


def _per_rank_records(error=None, unused_reduced=True, roots=("",), have=None, modules=None, **record):
    """Two ranks' records of a routed plan: ``e.w`` reached on rank 0 only, ``z.w`` by none."""
    one = torch.ones(2)
    have = {"e.w": one, "z.w": torch.zeros(2)} if have is None else have
    step = {"error": error, "grads": have,
            "plan_groups": [{"roots": list(roots), "params": ["e.w", "z.w"], "unused_reduced": unused_reduced}]}
    reach = {"params": {"e.w": [0]}, "modules": modules or {}}
    return [{"rank": r, "error": None, "reference": {"e.w": one, "z.w": None}, "world_size": 2, "reach": reach,
             "eager": dict(step), "compiled": dict(step), **record} for r in (0, 1)]


def test_a_plan_that_breaks_fsdp2s_per_rank_step_is_the_users_mistake_naming_what():
    """The plan leaves set_reduce_scatter_unused_params off for a parameter
    only some ranks reach, or makes a group of a module some rank never
    calls (its all-gather is every rank's collective): where the step then
    fails, hangs or mixes gradients, a case error naming the parameter or
    module; where the step passes, nothing."""
    from pytest_fsdpcheck.checks.plan_distributed import reach_mistake

    mixed = _per_rank_records(unused_reduced=False, have={"e.w": torch.full((2,), 3.0), "z.w": None})
    why = reach_mistake(mixed, check_plan_end_to_end(mixed))
    assert why is not None and "reach e.w only on rank 0" in why and "set_reduce_scatter_unused_params off" in why
    crashed = _per_rank_records(error="RuntimeError: Connection closed by peer", unused_reduced=False)
    assert "set_reduce_scatter_unused_params off" in reach_mistake(crashed, check_plan_end_to_end(crashed))
    skipped = _per_rank_records(error="RuntimeError: Timed out waiting 60000ms for recv", roots=("e",),
                              modules={"e": [0]})
    why = reach_mistake(skipped, check_plan_end_to_end(skipped))
    assert why is not None and "call e's forward only on rank 0" in why and "all-gathers" in why
    passed = _per_rank_records(unused_reduced=False, have={"e.w": torch.ones(2), "z.w": None})
    assert check_plan_end_to_end(passed) == [] and reach_mistake(passed, []) is None
    # failing elsewhere (starting): not the step's, so not the plan's per-rank mistake
    elsewhere = _per_rank_records(unused_reduced=False, have={"e.w": torch.ones(2), "z.w": None})
    elsewhere[1] = {"rank": 1, "error": "RuntimeError: the world did not start"}
    assert reach_mistake(elsewhere, check_plan_end_to_end(elsewhere)) is None


def test_with_the_plan_keeping_fsdp2s_per_rank_step_a_failure_is_torchs_naming_the_parameter():
    """The plan reduces unused parameters and every rank calls every group's
    module: a failure, a hang or a wrong gradient is the implementation's
    FS2-9 FAIL, its line naming what only some ranks reach; a parameter no
    rank reached may hold FSDP2's documented zero, and nothing else."""
    from pytest_fsdpcheck.checks.plan_distributed import reach_mistake, world_too_slow

    assert check_plan_end_to_end(_per_rank_records()) == []
    crashed = _per_rank_records(error="RuntimeError: Connection closed by peer")
    violations = check_plan_end_to_end(crashed)
    assert reach_mistake(crashed, violations) is None
    assert violations and all("e.w only on rank 0" in v.message and "as FSDP2 documents" in v.message
                              for v in violations), violations
    ones = _per_rank_records(have={"e.w": torch.ones(2), "z.w": torch.ones(2)})
    [eager, compiled] = check_plan_end_to_end(ones)
    assert "z.w exists, the unsharded model has none" in eager.message
    assert check_plan_end_to_end(_per_rank_records(unused_reduced=False, have={"e.w": torch.ones(2), "z.w": torch.zeros(2)}))
    # a rank killed in its step, no slower than its control, with the ranks' reach uneven: a hang, never ERROR
    killed = [_killed("eager", 10.0, control_s=3.0) | {"reach": {"params": {"e.w": [1]}, "modules": {}}}]
    [hang] = check_plan_end_to_end(killed)
    assert "waiting on a collective the other ranks never reached (hung)" in hang.message and "e.w" in hang.message
    assert world_too_slow(killed) is None


@pytest.mark.e2e
def test_a_routed_model_on_per_rank_data_passes_fs2_9_with_fsdp2s_per_rank_step(fast_compile):
    """Each rank its own batch, reaching different experts (and none
    reaching expert 2); the plan reduces unused parameters as FSDP2
    documents: every gradient is the ranks' average with a zero where a
    rank did not reach it, expert 2's FSDP2's documented zero."""
    records = _run("tests.planted.plans:routed")
    assert [r["error"] for r in records] == [None, None], records[0]["error"]
    assert records[0]["batches"] == "own"
    assert records[0]["reach"]["params"]["experts.0.weight"] == [0]
    assert records[0]["reach"]["params"]["experts.1.weight"] == [1]
    assert check_plan_end_to_end(records) == []


@pytest.mark.e2e
def test_a_group_whose_output_feeds_the_loss_on_some_ranks_only_fails_fs2_9_for_torch(fast_compile, monkeypatch):
    """pytorch#158719, open on 2.13 (found by this check, issue 57): the
    auxiliary head is its own group, called on every rank, its output used
    by rank 0's batch only; the plan reduces unused parameters, as FSDP2
    documents. The ranks' backward graphs differ, their reduce-scatters
    pair up crosswise and the step hangs (gloo times out): torch's FS2-9
    FAIL naming the parameters only rank 0 reaches, never the user's case
    error nor a slow world."""
    from pytest_fsdpcheck.checks.plan_distributed import reach_mistake, world_too_slow

    monkeypatch.setenv("FSDPCHECK_COLLECTIVE_TIMEOUT", "15")  # the spawned ranks' gloo waits this long
    records = _run("tests.planted.plans:aux_head")
    assert records[0]["reach"] == {"params": {"aux.weight": [0], "aux.bias": [0]}, "modules": {}}
    violations = check_plan_end_to_end(records)
    assert reach_mistake(records, violations) is None and world_too_slow(records) is None
    assert violations and all("aux.weight only on rank 0" in v.message and "as FSDP2 documents" in v.message
                              for v in violations), violations
    from pytest_fsdpcheck.impls.torch_bugs import _unused_params_graphs_differ

    assert _unused_params_graphs_differ(violations), violations  # modelled: fs2-unused-params-graphs-differ


def test_fs2_unused_params_graphs_differ_reads_only_a_plan_keeping_fsdp2s_per_rank_step():
    """pytorch#158719's signature: on every rank, the step hung, timed out,
    died or left wrong gradients, where the ranks' batches reach different
    parameters through modules every rank calls and the plan keeps what
    FSDP2 documents. A module some rank does not call (the routed experts'
    shape, which torch handles), another error, one rank only, or another
    invariant is not this bug."""
    from pytest_fsdpcheck.impls.torch_bugs import _unused_params_graphs_differ as explains

    keeps = ("(the ranks' batches reach different parameters aux.weight only on rank 0, aux.bias only on rank 0; "
             "the plan calls every group's module on every rank and reduces unused parameters, as FSDP2 documents "
             "such a step)")
    timed_out = "the plan's step failed: RuntimeError: [gloo/unbound_buffer.cc:78] Timed out waiting 15000ms for " \
                "recv operation to complete"
    run = [Violation("FS2-9", f"rank {r}, eager: {timed_out} {keeps}") for r in (0, 1)]
    assert explains(run)
    wrong = [Violation("FS2-9", f"ranks 0, 1, {m}: 4 of 24 gradients are wrong; worst: the gradient of aux.weight "
                                f"is None, the unsharded model's is not {keeps}") for m in ("eager", "compiled")]
    assert explains(wrong)
    assert explains([Violation("FS2-9", f"rank 0 failed: died without a result {keeps}"), run[1]])
    assert not explains(run[:1])  # one rank only
    routed = keeps.replace("; the plan calls", "; modules' forwards experts.0 only on rank 0; the plan calls")
    assert not explains([Violation("FS2-9", f"rank {r}, eager: {timed_out} {routed}") for r in (0, 1)])
    other = [Violation("FS2-9", f"rank {r}, eager: the plan's step failed: KeyError: 'x' {keeps}") for r in (0, 1)]
    assert not explains(other)
    assert not explains([Violation("FS2-11", v.message) for v in run])
    plain = [Violation("FS2-9", f"rank {r}, eager: {timed_out}") for r in (0, 1)]  # ranks reaching alike
    assert not explains(plain)
