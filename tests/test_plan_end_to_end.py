"""FS2-9 on a user's plan: the plan's real ``fully_shard`` calls at world
size 2 (CPU ranks, gloo), one step eagerly and one compiled, against the
unsharded model's gradients. The checker's tolerances, time limits and
per-rank verdicts on hand-made records are tests/test_plan_checker.py's; a
rank's pieces (its batch, the control, the compiled step) are
tests/test_plan_rank_step.py's."""

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


#: a guard against a hang, not a speed limit: on two loaded cores the LoRA
#: stack's two ranks (each compiling its own layers with Inductor) took over
#: 240 s (2026-12-07, load 10)
RANKS_TIMEOUT_S = 600


def _run(spec):
    from pytest_fsdpcheck.cases.exposure import case_of
    from pytest_fsdpcheck.cases.inputs import case_builder
    from pytest_fsdpcheck.runs.plan_world import run_plan_ranks

    return run_plan_ranks(case_builder(case_of(spec)), world_size=2, timeout=RANKS_TIMEOUT_S)


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
    from pytest_fsdpcheck.cases.exposure import case_of
    from pytest_fsdpcheck.cases.inputs import control_groups

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

    from pytest_fsdpcheck.runs.launch import free_port

    monkeypatch.setenv("GLOO_SOCKET_IFNAME", "lo")
    mp.spawn(rank_main, args=(free_port(), str(folder)), nprocs=2)
    return [torch.load(folder / f"rank{rank}.pt", weights_only=False) for rank in range(2)]


def _plan_on_both_groups(rank, port, out):
    """A spawned rank: the good plan's record on the default gloo group and
    on a gloo group of its own (as torchrun's NCCL worlds give it)."""
    import torch.distributed as dist
    from torch.distributed import device_mesh

    from pytest_fsdpcheck.runs.plan_run import plan_task
    from pytest_fsdpcheck.runs.plan_world import BUILD_SEED
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
    a gloo group made beside it (runs/plan_world.py): every collective and
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

    from pytest_fsdpcheck.runs.plan_world import _run_in_torchrun_world

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
    from pytest_fsdpcheck.cases.probe import _torch_impl

    monkeypatch.setattr(torch, "__version__", "2.6.0+cu124")
    monkeypatch.setattr("pytest_fsdpcheck.runs.plan_world.run_plan_ranks", lambda *a, **k: pytest.fail("a rank started"))
    with pytest.raises(pytest.skip.Exception, match="fully_shard's runtime runs on CPU from torch 2.7"):
        checks.check_plan_end_to_end(case_of("tests.planted.plans:good"), _torch_impl(), world_size=2)


# --- issue 28: the plan's own precision, and randomness in the step ------------------


def _run_as_planned(spec):
    """The ranks with the plan's groups (its recorded calls' policies), as the check runs them."""
    from pytest_fsdpcheck.cases.exposure import case_of
    from pytest_fsdpcheck.cases.inputs import case_builder, control_groups
    from pytest_fsdpcheck.runs.plan_world import run_plan_ranks

    case = case_of(spec)
    return run_plan_ranks(case_builder(case), world_size=2, timeout=RANKS_TIMEOUT_S, groups=control_groups(case))


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
    from pytest_fsdpcheck.cases.probe import _torch_impl

    checks.check_plan_end_to_end(case_of(f"tests.planted.plans:{spec}"), _torch_impl(), world_size=2)


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
    from pytest_fsdpcheck.cases.probe import _torch_impl

    case = case_of(f"tests.planted.plans:{spec}")
    assert case.model.training
    checks.check_plan_end_to_end(case, _torch_impl(), world_size=2)


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
    from pytest_fsdpcheck.cases.probe import _torch_impl

    checks.check_plan_end_to_end(case_of("tests.planted.plans:ignored"), _torch_impl(), world_size=2)


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


# beside its end-to-end twin above, and here because DESIGN.md's table of
# excuses names it in this module (tests/test_excuses.py checks the name)
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


# --- issue 38: frameworks' stacks (checkpointing, fp32 routers) and time limits -------


@pytest.mark.e2e
@pytest.mark.parametrize("spec", ["checkpointed_bf16", "fp32_router"])
def test_frameworks_bf16_stacks_pass_fs2_9_for_torch(fast_compile, spec):
    """Items 2 and 3: activation checkpointing under a bf16 policy, and an
    fp32 router downstream of bf16 blocks (its gradient computed through
    bf16: the ``upstream`` dtype), pass FS2-9 for torch."""
    from pytest_fsdpcheck.cases import checks
    from pytest_fsdpcheck.cases.exposure import case_of
    from pytest_fsdpcheck.cases.probe import _torch_impl

    checks.check_plan_end_to_end(case_of(f"tests.planted.plans:{spec}"), _torch_impl(), world_size=2)


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


# --- issue 57, family 4: each rank its own data, reaching different parameters ------


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
    from pytest_fsdpcheck.impls.torch_bug_signatures import unused_params_graphs_differ

    assert unused_params_graphs_differ(violations), violations  # modelled: fs2-unused-params-graphs-differ


