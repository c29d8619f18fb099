"""The distributed checks' world: where the ranks run (one GPU each, else
gloo on CPU, or a one-line stop when CUDA was forced) and what a failed
world or a failing control is (an environment error naming the world,
never a FAIL in the implementation's column).

The GPU cases are simulated: the decision functions are pure, and the
session's check is fed a monkeypatched ``torch.cuda``.
"""

import threading

import pytest
import torch

from pytest_fsdpcheck.checks import Violation
from pytest_fsdpcheck.checks.distributed import (
    check_ddp_end_to_end,
    check_fsdp2_end_to_end,
    ddp_environment,
    describe_world,
    fsdp2_environment,
)
from pytest_fsdpcheck.report.verdict import EXIT_ENVIRONMENT
from pytest_fsdpcheck.runs.world import Choice, Place, choose_device, exchange_places, shared_gpus
from tests.demands import demand_failures
from tests.helpers import failure_sections, spl16_on_this_torch

from .test_planted_distributed import _fs2_rank, _rank

pytestmark = pytest.mark.unit

# --- where the ranks run ---------------------------------------------------------------


def _places(*spec):
    """``(host, gpus, visible, local_rank)`` per rank."""
    return [Place(r, host, gpus, visible, local) for r, (host, gpus, visible, local) in enumerate(spec)]


def test_two_torchrun_agents_on_a_one_gpu_host_share_it():
    # issue 27's runner: --nnodes 2 --nproc-per-node 1 on one machine with one GPU
    why = shared_gpus(_places(("runner", 1, None, 0), ("runner", 1, None, 0)))
    assert why == "2 ranks on host runner share 1 visible GPU (CUDA_VISIBLE_DEVICES=unset)"
    assert choose_device(None, True, why) == Choice("cpu", note=f"gloo on CPU: {why}")
    stop = choose_device("cuda", True, why).stop
    assert stop.startswith(f"--fsdpcheck-device cuda, but {why}: NCCL needs a GPU of its own for each rank")
    assert "\n" not in stop


def test_ranks_with_a_gpu_each_use_cuda():
    one_host = _places(("a", 2, None, 0), ("a", 2, None, 1))
    two_hosts = _places(("a", 1, None, 0), ("b", 1, None, 0))
    # two agents on one host, each given its own GPU by CUDA_VISIBLE_DEVICES
    split_by_env = _places(("a", 1, "0", 0), ("a", 1, "1", 0))
    for places in (one_host, two_hosts, split_by_env):
        assert shared_gpus(places) is None, places
        assert choose_device(None, True, None) == Choice("cuda")


def test_ranks_that_would_pick_the_same_or_a_missing_gpu_share():
    # two agents on a 2-GPU host, one rank each: both LOCAL_RANK 0, both cuda:0
    same = shared_gpus(_places(("a", 2, None, 0), ("a", 2, None, 0)))
    assert same == "ranks 0 and 1 on host a would both use cuda:0 (LOCAL_RANK 0; 2 visible GPUs (CUDA_VISIBLE_DEVICES=unset))"
    beyond = shared_gpus(_places(("a", 2, "0,1", 0), ("a", 2, "0,1", 3)))
    assert beyond.startswith("rank 1 on host a would use cuda:3, the host has 2 visible GPUs (CUDA_VISIBLE_DEVICES=0,1)")


def test_cpu_is_cpu_and_cuda_without_a_gpu_stops():
    assert choose_device("cpu", True, "anything") == Choice("cpu")
    assert choose_device(None, False, None) == Choice("cpu")
    assert choose_device("cuda", False, None).stop == "--fsdpcheck-device cuda but torch sees no CUDA device"
    assert Choice("cuda").backend == "nccl" and Choice("cpu").backend == "gloo"


def test_every_rank_gets_rank_zeros_choice_through_the_store():
    import torch.distributed as dist

    store = dist.HashStore()
    places = _places(("h", 1, None, 0), ("h", 1, None, 0))
    got = {}

    def rank(place):
        got[place.rank] = exchange_places(store, place, 2, lambda ps: choose_device(None, True, shared_gpus(ps)), 30)

    threads = [threading.Thread(target=rank, args=(p,)) for p in places]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert got[0] == got[1] == Choice("cpu", note="gloo on CPU: 2 ranks on host h share 1 visible GPU (CUDA_VISIBLE_DEVICES=unset)")


def test_forced_cuda_with_more_spawned_ranks_than_gpus_stops_before_any_rank(monkeypatch):
    from pytest_fsdpcheck.plugin import session

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    with pytest.raises(pytest.UsageError) as stopped:
        session._devices("cuda", 2)
    (line,) = str(stopped.value).splitlines()
    assert line.startswith("fsdpcheck: --fsdpcheck-device cuda, but 2 ranks on host ") and "share 1 visible GPU" in line
    assert session._devices("cuda", 1) == ["cuda"]
    assert session._devices("cuda", None) == ["cuda"]  # the default world is every visible GPU
    # auto: the CUDA items skip what one GPU cannot hold; the CPU items run it on gloo
    assert session._devices("auto", 4) == ["cpu", "cuda"]


# --- a failed world or control is the environment's, not the implementation's ---------

WORLD = {"backend": "gloo", "device": "cpu", "world_size": 2, "host": "box", "gpus": 0, "visible": None, "torch": "2.13.0"}
NAMED = "environment (gloo on cpu, world size 2, torch 2.13.0; host box: 0 visible GPU(s), CUDA_VISIBLE_DEVICES=unset): "


def _in_world(record, **changes):
    return {**record, "world": WORLD, **changes}


def test_the_world_is_named_per_host():
    other = dict(WORLD, host="node2", gpus=8, visible="0,1")
    assert describe_world([{"world": WORLD}, {"world": other}]) == (
        "gloo on cpu, world size 2, torch 2.13.0; host box: 0 visible GPU(s), CUDA_VISIBLE_DEVICES=unset; "
        "host node2: 8 visible GPU(s), CUDA_VISIBLE_DEVICES='0,1'")
    assert describe_world([{"rank": 0, "error": "died without a result"}]) == "no rank recorded its world"


def test_spl16_a_rank_that_could_not_join_is_the_worlds():
    joined = _in_world(_rank(0))
    refused = _in_world({"rank": 1, "error": "Traceback ...\nRuntimeError: Unable to find address for: bogus0",
                         "phase": "world"})
    assert check_ddp_end_to_end([joined, refused], "impl")  # what a FAIL would have said
    assert ddp_environment([joined, refused], "impl") == (
        NAMED + "rank 1 failed while joining the process group: RuntimeError: Unable to find address for: bogus0; "
        "not a verdict on impl")
    # a failure after the control ran (the compiled step) stays the check's
    compiled = _in_world({"rank": 1, "error": "Traceback ...\nBackendCompilerFailed: x", "phase": "compiled"})
    assert ddp_environment([joined, compiled], "impl") is None
    # a rank that died without a record: nothing says it was the world
    assert ddp_environment([joined, {"rank": 1, "error": "timed out after 180s and was killed"}], "impl") is None


SELF_TEST_FAILED = ("Traceback ...\npytest_fsdpcheck.runs.selftest.WorldSelfTestFailed: rank 1: all_reduce (sum) of "
                    "known values: 64 of 64 values wrong, first at 0: 12 for 11")


def test_spl16_only_a_failed_self_test_is_the_worlds_a_wrong_control_or_eager_ddp_is_not():
    """The world is to blame only where it failed its own self-test (or could
    not join): eager DDP, or the control, wrong alike with the compiled run
    is a FAIL now, as is a wrong plan beside them."""
    wrong = {"w": torch.full((3,), 0.5)}
    self_failed = _in_world({"rank": 1, "error": SELF_TEST_FAILED, "phase": "selftest"})
    assert ddp_environment([_in_world(_rank(0)), self_failed], "impl") == (
        NAMED + "rank 1 failed while the world's self-test, before any implementation ran: "
        "pytest_fsdpcheck.runs.selftest.WorldSelfTestFailed: rank 1: all_reduce (sum) of known values: 64 of 64 "
        "values wrong, first at 0: 12 for 11; not a verdict on impl")
    # DDP's reduction sums (eager and compiled alike), and the plan is wrong: the world passed its self-test
    ddp_wrong = _in_world(_rank(0, unsharded=wrong, eager={"grads": wrong, "params": wrong},
                                compiled={"grads": dict(wrong), "params": dict(wrong)},
                                plans={"impl": {"error": None, "buckets": [3]}}))
    assert check_ddp_end_to_end([ddp_wrong], "impl")
    assert ddp_environment([ddp_wrong], "impl") is None
    # a failure in the control's phase (no implementation ran yet) is the check's too
    control_failed = _in_world({"rank": 1, "error": "Traceback ...\nRuntimeError: x", "phase": "eager"})
    assert ddp_environment([_in_world(_rank(0)), control_failed], "impl") is None


def _fs2_wrong(rank, impl_grads, control_grads, walk_right=True):
    record = _in_world(_fs2_rank(rank))
    for mode in ("eager", "compiled"):
        step = dict(record["impls"]["impl"][mode], grads=impl_grads)
        if not walk_right:
            step["flagged"] = ["m0"]
        record["impls"]["impl"][mode] = step
    record["torch_walk"] = {mode: {"grads": control_grads} for mode in ("eager", "compiled")}
    return record


def test_fs2_9_torchs_own_walk_wrong_the_same_way_is_a_fail_not_the_worlds():
    """torch's own walk giving the implementation's wrong gradients is
    torch's fully_shard runtime (every walk drives it): a FAIL whose message
    says torch's own walk gives the same, never an environment error."""
    wrong = {"m0.w0": torch.full((2,), 3.0), "m1.w0": torch.full((2,), 2.0)}
    right = _fs2_rank(0)["impls"]["impl"]["eager"]["grads"]
    both = [_fs2_wrong(0, wrong, dict(wrong)), _fs2_wrong(1, wrong, dict(wrong))]
    assert {v.message for v in check_fsdp2_end_to_end(both, "impl")} == {
        f"rank {r}, {m}: every sharded gradient is 3 times the unsharded gradient of the global batch, as torch's "
        "own walk gives in the same run" for r in (0, 1) for m in ("eager", "compiled")}
    assert fsdp2_environment(both, "impl") is None
    for control in (right, wrong):
        assert fsdp2_environment([_fs2_wrong(0, wrong, dict(control)), _fs2_wrong(1, wrong, dict(control))], "impl") is None


def test_fs2_9_only_a_rank_failing_the_self_test_or_joining_is_the_worlds():
    ok = _in_world(_fs2_rank(0))
    self_failed = _in_world({"rank": 1, "error": SELF_TEST_FAILED, "phase": "selftest"})
    assert fsdp2_environment([ok, self_failed], "impl").startswith(
        NAMED + "rank 1 failed while the world's self-test, before any implementation ran: "
        "pytest_fsdpcheck.runs.selftest.WorldSelfTestFailed: rank 1: all_reduce (sum) of known values")
    # before the self-test, or after it: the check's (the probe runs torch's fully_shard)
    for phase in ("setup", "probe", "impls", "exchange", "control"):
        failed = _in_world({"rank": 1, "error": "Traceback ...\nRuntimeError: Connection closed by peer", "phase": phase})
        assert fsdp2_environment([ok, failed], "impl") is None, phase


# --- the self-test itself, in a world of one rank ------------------------------------


@pytest.fixture
def world_of_one():
    import torch.distributed as dist

    dist.init_process_group("gloo", rank=0, world_size=1, store=dist.HashStore())
    yield
    dist.destroy_process_group()


def test_the_self_test_passes_a_sound_world_and_names_a_broken_collective(world_of_one, monkeypatch):
    import torch.distributed as dist

    from pytest_fsdpcheck.runs.selftest import FSDP2_COLLECTIVES, WorldSelfTestFailed, self_test

    inputs = {"w": torch.arange(6.0)}
    self_test(torch.device("cpu"), FSDP2_COLLECTIVES, inputs, real=lambda: None)
    with pytest.raises(WorldSelfTestFailed, match=r"^rank 0: control: the average is off$"):
        self_test(torch.device("cpu"), FSDP2_COLLECTIVES, inputs, real=lambda: "control: the average is off")
    real_all_reduce = dist.all_reduce

    def off_by_one(tensor, op=dist.ReduceOp.SUM, group=None, async_op=False):
        real_all_reduce(tensor, op=op, group=group)
        if op == dist.ReduceOp.SUM:
            tensor.add_(1)

    monkeypatch.setattr(dist, "all_reduce", off_by_one)
    with pytest.raises(WorldSelfTestFailed, match=r"^rank 0: all_reduce \(sum\) of known values: 64 of 64 values wrong"):
        self_test(torch.device("cpu"), FSDP2_COLLECTIVES, inputs)


def test_the_ddp_task_turns_the_ddp_optimizer_on_for_its_own_compiles_only(world_of_one):
    """Issue 56: SPL-16's task (ddp_run._train_and_record) set Dynamo's
    ``optimize_ddp`` process-wide and left it; under torchrun it runs in the
    test process, whose Dynamo config is compared after every test. Its own
    compiled step still goes through the DDP optimizer."""
    import torch._dynamo

    from pytest_fsdpcheck.runs.ddp_run import _train_and_record

    # config.patch, not monkeypatch: pytest's monkeypatch reads the old value
    # from the module's __dict__ (empty for a torch config), and its undo
    # deletes the entry, hiding optimize_ddp from every later test here
    with torch._dynamo.config.patch(optimize_ddp="no_optimization"):
        record = _train_and_record(0, 1, torch.device("cpu"), ())  # no implementation: the task alone
        assert torch._dynamo.config.optimize_ddp == "no_optimization"
    assert record["graphs_handed"] >= 1 and record["aot"].get("error") is None, record["aot"]


def test_the_self_test_names_ranks_that_disagree_and_real_gradients_averaged_wrongly():
    from pytest_fsdpcheck.runs.selftest import check_against_local, fingerprint

    a = fingerprint({"rank 1's batch": torch.arange(4.0), "w": torch.ones(3)})
    b = fingerprint({"rank 1's batch": torch.arange(4.0).flip(0), "w": torch.ones(3)})
    # the same values in another order differ (position-weighted sum): row 0, the batch
    assert (a != b).any(dim=1).tolist() == [True, False]
    right = {"w": torch.ones(3), "ignored": torch.zeros(3)}
    assert check_against_local(right, {"w": torch.ones(3) + 1e-7, "ignored": torch.ones(3)}, 1e-4, 1e-5,
                               skip={"ignored"}) is None
    assert check_against_local(right, {"w": torch.full((3,), 1.5)}, 1e-4, 1e-5) == (
        "all_reduce of the unsharded model's gradients of w is not the average this rank computes alone from "
        "every rank's batch (max abs difference 0.5; rtol 0.0001, atol 1e-05)")


def test_an_environment_error_is_its_own_cell_below_fail():
    from types import SimpleNamespace

    from pytest_fsdpcheck.report.matrix import Matrix
    from pytest_fsdpcheck.report.verdict import PROP_ENVIRONMENT, PROP_IMPL, PROP_INVARIANTS

    def report(nodeid, failed, environment=None):
        props = [(PROP_INVARIANTS, ["SPL-16"]), (PROP_IMPL, "impl")]
        if environment:
            props.append((PROP_ENVIRONMENT, environment))
        return SimpleNamespace(nodeid=nodeid, when="call", passed=not failed, failed=failed, skipped=False,
                               outcome="failed" if failed else "passed", duration=0.1, user_properties=props,
                               longrepr=None, sections=[])

    matrix = Matrix()
    matrix.record(report("t[one]", True, "environment (gloo on cpu): x"))
    matrix.record(report("t[runner]", False))
    assert matrix.outcome("SPL-16", "impl") == "error" and matrix.cell_text("SPL-16", "impl") == "ERROR"
    assert matrix.per_test["t[one]"]["environment"] == "environment (gloo on cpu): x"
    matrix.record(report("t[other]", True))
    assert matrix.outcome("SPL-16", "impl") == "fail"


# --- planted worlds, end to end --------------------------------------------------------

PLANTED_WRONG = "tests.planted.distributed:ExtraBucket"
FAULTED = "tests.planted.distributed:TorchInFaultedRuntime"


@pytest.mark.e2e
def test_a_backend_that_cannot_start_is_an_environment_error_in_every_column(run_suite, monkeypatch):
    # gloo on an interface that does not exist: no rank can join, whatever the implementation
    monkeypatch.setenv("GLOO_SOCKET_IFNAME", "fsdpcheck-no-such-if0")
    impls = ["reference", PLANTED_WRONG]
    result, report = run_suite(*impls, k="test_compiled_ddp")
    outcomes = {impl: report["matrix"][impl]["SPL-16"]["outcome"] for impl in impls}
    assert outcomes == dict.fromkeys(impls, "error"), outcomes
    out = result.stdout.str()
    assert "EnvironmentFault: environment (gloo on cpu, world size 2, torch " in out, out[-3000:]
    assert "failed while joining the process group" in out
    assert "SPL-16: rank" not in out  # no conformance failure was charged to anyone
    assert result.ret == EXIT_ENVIRONMENT  # the environment's own exit status, not a FAIL's 1


def _planted_world(monkeypatch, *faults):
    import pathlib

    monkeypatch.setenv("PYTHONPATH", str(pathlib.Path(__file__).parent / "planted" / "world"))
    monkeypatch.setenv("FSDPCHECK_PLANTED_WORLD", ",".join(faults))
    monkeypatch.setenv("FSDPCHECK_COMPILE_BACKEND", "aot_eager")  # the world is under test, not inductor


def _tests_by_id(report) -> dict:
    return {nodeid.rsplit("[", 1)[1].rstrip("]"): test for nodeid, test in report["tests"].items()}


def _torchs_failure(result, test: str) -> str:
    """The failure section of torch's test ``test`` (e.g. ``torch-cpu-runner``)."""
    sections = failure_sections(result.outlines)
    (text,) = [text for name, text in sections.items() if name.endswith(f"[{test}]")] or [""]
    return text


def _reproduces(failure: str, spec: str, task: str) -> bool:
    """Whether a test's failure section printed the reproducer of ``spec``'s run."""
    return "fsdpcheck reproducer" in failure and f"    results = run_ranks(2, 'cpu', [{spec!r}], task={task!r})" in failure


#: torch itself, in a world whose DDP reduction sums and whose DDPOptimizer
#: compiles one subgraph too many and fails under AOTAutograd (world size 2)
SPL16_FAULTED = {FAULTED: ("SPL-16", "test_compiled_ddp")}


@pytest.mark.e2e
def test_spl16_faults_of_ddp_and_ddpoptimizer_fail_in_torchs_column(run_suite, monkeypatch):
    """A DDP whose all-reduce sums (eager DDP and the compiled run wrong
    alike: once an environment error for every implementation), with a
    DDPOptimizer that compiles a subgraph too many and raises under
    AOTAutograd: the world passes its self-test (plain collectives are fine),
    so each is a FAIL in torch's column, with a reproducer, beside torch's
    known ``spl-float-partition-output`` where it applies (its signature is
    that step's failure alone). At world size 1 the faults are inert and
    torch and the reference pass, or read known where that bug applies."""
    _planted_world(monkeypatch, "summing-ddp", "ddpoptimizer-extra-subgraph", "ddpoptimizer-fails-once")
    impls = ["torch", FAULTED, "reference", PLANTED_WRONG]
    result, report = run_suite(*impls, k="test_compiled_ddp")
    demand_failures(result, report, SPL16_FAULTED, control=None)
    outcomes = {impl: report["matrix"][impl]["SPL-16"]["outcome"] for impl in impls}
    assert outcomes == dict.fromkeys(impls, "fail"), outcomes
    tests = _tests_by_id(report)
    for impl in impls:
        runner = tests[f"{impl}-cpu-runner"]
        assert runner["outcome"] == "failed" and "environment" not in runner, runner
    one = {"pass": "passed", "known": "xfail"}[spl16_on_this_torch()]
    for impl in ("torch", "reference"):
        assert tests[f"{impl}-cpu-one"]["outcome"] == one, tests[f"{impl}-cpu-one"]
    torch_says = _torchs_failure(result, "torch-cpu-runner")
    for line in ("SPL-16: ranks 0, 1: expected one compiled subgraph per planned bucket",
                 "SPL-16: ranks 0, 1: expected a training step of DDP compiled through AOTAutograd (as inductor compiles), "
                 "but it failed",
                 "SPL-16: ranks 0, 1: expected the compiled DDP gradient of ",
                 "eager DDP gives the same as the compiled step (DDP's own reduction, compiled or not)"):
        assert line in torch_says, (line, torch_says[-3000:])
    assert "EnvironmentFault" not in result.stdout.str()
    assert _reproduces(torch_says, "torch", "ddp")


#: torch itself, in a world whose fully_shard runtime or compiled path is faulted
FS29_FAULTED = {FAULTED: ("FS2-9", "test_fully_shard_end_to_end")}


#: torch itself, in a world whose fully_shard never sums a tensor-parallel gradient over tp in bf16
FS215_FAULTED = {FAULTED: ("FS2-15", "test_fully_shard_on_a_tp_mesh")}


@pytest.mark.e2e
def test_fs2_15_a_tp_sum_lost_in_torchs_runtime_fails_beside_its_known_bug(run_suite, monkeypatch):
    """torch's fully_shard keeping each rank's partial gradient of a
    tensor-parallel parameter in the bf16 step, never summing it over tp:
    the bf16 step's gradients are off by far more than rounding the tp sum
    to bf16 gives, which is all that torch's known
    ``fs2-tp-reduce-in-compute-dtype`` (the same step, on 2.7 ... 2.14)
    explains. A FAIL in torch's column and in every walk's (they all drive
    that runtime), in both worlds, with a reproducer; the fp32 step is
    right."""
    _planted_world(monkeypatch, "fsdp2-tp-partials-kept")
    impls = ["torch", FAULTED, "reference"]
    result, report = run_suite(*impls, k="test_fully_shard_on_a_tp_mesh")
    demand_failures(result, report, FS215_FAULTED, control=None)
    outcomes = {impl: report["matrix"][impl]["FS2-15"]["outcome"] for impl in impls}
    assert outcomes == dict.fromkeys(impls, "fail"), outcomes
    assert all("environment" not in test for test in report["tests"].values())
    torch_says = _torchs_failure(result, "torch-cpu")
    # each rank's own partial reduced over dp alone: the ranks' gradients differ, so each is named
    for world in ("rank 0, bf16 (param bf16, reduce fp32), mesh 1x2 (dp x tp)",
                  "rank 1, bf16 (param bf16, reduce fp32), mesh 1x2 (dp x tp)",
                  "world size 3, rank 2, bf16 (param bf16, reduce fp32), mesh 1x3 (dp x tp)"):
        line = f"FS2-15: {world}: the gradients of ["
        assert line in torch_says, (line, torch_says[-3000:])
    assert "beyond what rounding each sum over the tp ranks to bf16 gives" in torch_says, torch_says[-3000:]
    assert "fp32 (no policy)" not in torch_says, torch_says[-3000:]
    assert _reproduces(torch_says, "torch", "fsdp2")


@pytest.mark.parametrize("fault, modes", [
    ("fsdp2-rs-loses-first", ("eager", "compiled")),  # rank 1's reduce-scatter input loses its first element
    ("summing-fsdp2", ("eager", "compiled")),  # fully_shard sums instead of averaging (fs2-gloo-grads-summed's shape)
    ("compiled-outputs-off", ("compiled",)),  # a fault in torch's compiled path only
    # pytorch#176076's shape: the last rank's padded shard never reaches the all-gather after the step
    ("fsdp2-last-shard-stale", ("eager", "compiled")),
    # pytorch#186998's shape: a group frozen at FSDP2's lazy init (the model's frozen first forward) stays frozen
    ("fsdp2-frozen-latched", ("eager", "compiled")),
    # pytorch#183702's shape: a grouped call's guard against a second post-backward registration gone
    ("fsdp2-grouped-reuse", ()),
    # pytorch#186998's silent form: the latch fixed, the bf16 group's gradients reduced in bf16 (fp32 steps right)
    ("fsdp2-bf16-reduced", ()),
])
@pytest.mark.e2e
def test_fs2_9_a_fault_in_torchs_runtime_fails_in_torchs_column(run_suite, monkeypatch, fault, modes):
    """torch's fully_shard runtime (or its compiled path) faulted, the world
    sound: torch's own walk, the old control, gives the same wrong gradients
    (once an environment error in every column); the control now runs
    nothing of fully_shard, so it is a FAIL in torch's column (and in every
    walk's: they all drive that runtime), with a reproducer, in exactly the
    faulted modes."""
    _planted_world(monkeypatch, fault)
    impls = ["torch", FAULTED, "reference"]
    result, report = run_suite(*impls, k="test_fully_shard_end_to_end")
    demand_failures(result, report, FS29_FAULTED, control=None)
    outcomes = {impl: report["matrix"][impl]["FS2-9"]["outcome"] for impl in impls}
    assert outcomes == dict.fromkeys(impls, "fail"), outcomes
    assert all("environment" not in test for test in report["tests"].values())
    torch_says = _torchs_failure(result, "torch-cpu")
    for mode in ("eager", "compiled"):
        for rank in (0, 1):
            shown = f"FS2-9: rank {rank}, {mode}: " in torch_says
            assert shown == (mode in modes), (rank, mode, torch_says[-3000:])
    if fault == "fsdp2-last-shard-stale":
        # right gradients, a stale padded shard: named by its rows and rank, at 2 ranks and at 3
        for line in ("(rank 1's shard) still from before the step: never updated",
                     "FS2-9: world size 3, rank 0, eager: the forward after the optimizer step computes with ",
                     "(rank 2's shard) still from before the step: never updated"):
            assert line in torch_says, (line, torch_says[-3000:])
        assert "gradient of" not in torch_says
    if fault == "fsdp2-frozen-latched":
        # the tied pair's group, frozen at the first forward and unfrozen for the step: its gradients never set
        assert "has no gradient, expected the unsharded gradient of the global batch" in torch_says, torch_says[-3000:]
        assert "FS2-9: world size 3, rank 2, eager: " in torch_says, torch_says[-3000:]
    if fault == "fsdp2-grouped-reuse":
        # the step fails on every rank, as the report did (named once per world, not per rank and mode)
        for line in ("FS2-9: ranks 0, 1: fully_shard driven by torch failed: RuntimeError: ",
                     "FS2-9: world size 3, ranks 0, 1, 2: fully_shard driven by torch failed: RuntimeError: "):
            assert line in torch_says, (line, torch_says[-3000:])
    if fault == "fsdp2-bf16-reduced":
        # the mixed step runs and is wrong: never fs2-frozen-mp-latched, which reads only the step's error
        for rank in (0, 1):
            assert f"FS2-9: rank {rank}, bf16: gradient of " in torch_says, torch_says[-3000:]
        assert "bf16: the step with" not in torch_says, torch_says[-3000:]
        assert "known: fs2-frozen-mp-latched" not in result.stdout.str()
    if fault == "summing-fsdp2":
        assert ("every sharded gradient is 2 times the unsharded gradient of the global batch, as torch's own walk "
                "gives in the same run (fully_shard summed over the 2 ranks instead of averaged, on gloo)") in torch_says
    assert _reproduces(torch_says, "torch", "fsdp2")


@pytest.mark.e2e
def test_fs2_9_mixed_step_passes_where_the_latch_is_fixed_and_its_known_bug_says_not_reproduced(run_suite, monkeypatch):
    """torch 2.14's fix of pytorch#186998 put into the installed release:
    the mixed-precision step (a bf16 group frozen at its first forward)
    runs, and its control at that precision agrees with FSDP2's step in
    every column, after the step too; fs2-frozen-mp-latched, declared for
    this release by torch and the reference, explains nothing and is
    reported as not reproduced (a FAIL of the run under strict)."""
    _planted_world(monkeypatch, "fsdp2-latch-fixed")
    impls = ["torch", "reference"]
    result, report = run_suite(*impls, k="test_fully_shard_end_to_end")
    outcomes = {impl: report["matrix"][impl]["FS2-9"]["outcome"] for impl in impls}
    assert outcomes == dict.fromkeys(impls, "pass"), (outcomes, result.stdout.str()[-3000:])
    unreproduced = {(b["implementation"], b["id"]) for b in report["known_bugs"] if b.get("not_reproduced")}
    assert {("torch", "fs2-frozen-mp-latched"), ("reference", "fs2-frozen-mp-latched")} <= unreproduced, report["known_bugs"]


#: torch itself, in a world whose DDPOptimizer plans by the rank
SPL20_FAULTED = {FAULTED: ("SPL-20", "test_ranks_agree")}


@pytest.mark.e2e
def test_spl_20_a_plan_that_depends_on_the_rank_in_torch_fails_in_torchs_column(run_suite, monkeypatch):
    """torch's DDPOptimizer planning otherwise on rank 1 (the world sound,
    the compiled split unchanged): the ranks' plans compared are a FAIL in
    torch's column naming rank 1, never the world's error nor n/p; the
    reference, which plans alike everywhere, passes."""
    _planted_world(monkeypatch, "ddpoptimizer-rank-dependent")
    impls = ["torch", FAULTED, "reference"]
    result, report = run_suite(*impls, k="test_ranks_agree and splitting")
    demand_failures(result, report, SPL20_FAULTED, control="reference")
    assert report["matrix"]["torch"]["SPL-20"]["outcome"] == "fail", report["matrix"]["torch"]
    assert all("environment" not in test for test in report["tests"].values())
    assert ("SPL-20: expected every rank to give the same bucket plan, but rank 1 differs from rank 0 at entry 0"
            in _torchs_failure(result, "torch-cpu-splitting")), result.stdout.str()[-3000:]


@pytest.mark.parametrize("fault, reason, k", [
    # the world's own all_reduce sums off by one (at world size 1 too)
    ("broken-all-reduce", "all_reduce (sum) of known values", "test_compiled_ddp or test_fully_shard_end_to_end"),
    # rank 1 draws other numbers than rank 0 (a world of one rank cannot disagree)
    ("ranks-disagree", "ranks disagree on their inputs: ",
     "(test_compiled_ddp and runner) or test_fully_shard_end_to_end"),
])
@pytest.mark.e2e
def test_a_world_failing_its_self_test_is_an_error_in_every_column(run_suite, monkeypatch, fault, reason, k):
    """The world is broken (its all_reduce, or its ranks' agreement): the
    self-test catches it before any implementation runs, and SPL-16 and
    FS2-9 are an environment error in every column, naming what failed."""
    _planted_world(monkeypatch, fault)
    impls = ["torch", "reference", PLANTED_WRONG]
    result, report = run_suite(*impls, k=k)
    outcomes = {(impl, inv): report["matrix"][impl][inv]["outcome"] for impl in impls for inv in ("SPL-16", "FS2-9")}
    # the planted splitter has no fsdp2 area: its FS2-9 is n/p before any rank starts
    assert outcomes == {**dict.fromkeys(outcomes, "error"), (PLANTED_WRONG, "FS2-9"): "not provided"}, outcomes
    for nodeid, test in report["tests"].items():
        if PLANTED_WRONG in nodeid and "test_fully_shard_end_to_end" in nodeid:
            continue
        assert test["outcome"] == "failed", (nodeid, test)
        assert "failed while the world's self-test, before any implementation ran" in test["environment"], test
        assert "WorldSelfTestFailed: rank " in test["environment"] and reason in test["environment"], test
    assert "SPL-16: rank" not in result.stdout.str() and "FS2-9: rank" not in result.stdout.str()
    assert result.ret == EXIT_ENVIRONMENT, "\n".join(result.outlines[-20:])


def _summed(prefix: str, rank: int, mode: str, world: int) -> Violation:
    return Violation("FS2-9", f"{prefix}rank {rank}, {mode}: every sharded gradient is {world} times the unsharded "
                              "gradient of the global batch, as torch's own walk gives in the same run (fully_shard "
                              f"summed over the {world} ranks instead of averaged, on gloo)")


def _latched(rank: int, walk: str = ", as torch's own walk does in the same run",
             error: str = "RuntimeError: attempting to assign a gradient with dtype 'c10::BFloat16' to a tensor "
                          "with grad_dtype 'Float'. The gradient must match the tensor's grad_dtype") -> Violation:
    return Violation("FS2-9", f"rank {rank}, bf16: the step with fully_shard([a, b]) in bf16 (reduced in fp32) after "
                              f"a first forward with that group frozen failed: {error}{walk}")


def test_fs2_frozen_mp_latched_reads_only_the_mixed_steps_error_on_every_rank():
    """fs2-frozen-mp-latched explains the mixed-precision step failing with
    torch 2.13's gradient-dtype error on every rank, as torch's own walk
    does in the same run, and nothing else: one rank only, an error torch's
    own walk does not share or fails otherwise, another error, the silent
    form (a wrong gradient) or any finding beside it is not that bug."""
    from pytest_fsdpcheck.impls.torch_bug_signatures import mixed_step_latched as explains

    both = [_latched(0), _latched(1)]
    assert explains(both)
    assert not explains(both[1:]) and not explains(both[:1])
    assert not explains([_latched(0), _latched(1, walk=", where torch's own walk in the same run takes the step")])
    assert not explains([_latched(0), _latched(1, walk=", and torch's own walk took no step to compare")])
    other = "RuntimeError: mat1 and mat2 must have the same dtype, but got BFloat16 and Float"
    assert not explains([_latched(0, error=other), _latched(1, error=other)])
    silent = Violation("FS2-9", "rank 0, bf16: gradient of m7.w0: expected the unsharded gradient of the global "
                                "batch, max abs difference 0.0078125")
    assert not explains(both + [silent])
    eager = Violation("FS2-9", "rank 0, eager: gradient of m7.w0: expected the unsharded gradient of the global "
                               "batch, max abs difference 0.5")
    assert not explains(both + [eager])
    assert not explains([Violation("FS2-11", v.message) for v in both])


def _reused(world: int | None, rank: int, mode: str, label: str, missing: bool = False) -> Violation:
    head = f"world size {world}, " if world else ""
    if missing:
        return Violation("FS2-9", f"{head}rank {rank}, {mode}: {label} has no gradient, expected the unsharded "
                                  "gradient of the global batch")
    return Violation("FS2-9", f"{head}rank {rank}, {mode}: gradient of {label}: expected the unsharded gradient of "
                              "the global batch, max abs difference 2.007524013519287")


def _reused_run(off="m7.w0", missing="m8.w0", second=3):
    """What torch 2.11.0 and 2.12.1 gave (pytest --fsdpcheck --fsdpcheck-strict, CPU)."""
    uncast = "RuntimeError: expected m1 and m2 to have the same dtype, but got: float != c10::BFloat16"
    found = [_latched(r, error=uncast) for r in (0, 1)]
    for world, ranks, modes in ((None, 2, ("eager", "compiled")), (second, second, ("eager",))):
        if world is None or second:
            for r in range(ranks):
                for mode in modes:
                    found += [_reused(world, r, mode, off), _reused(world, r, mode, missing, missing=True)]
    return found


def test_fs2_grouped_module_reused_reads_only_the_pairs_two_gradients_and_the_uncast_input():
    """fs2-grouped-module-reused (torch 2.9 ... 2.12) explains exactly what
    2.11.0 and 2.12.1 give: on every rank and mode of both worlds the same
    parameter's gradient off and the same other one's missing, and the bf16
    step's uncast-input error on every rank, as torch's own walk does. A
    third wrong gradient, another parameter on one rank, a rank or mode
    without it, the silent bf16 form, another error or an error torch's own
    walk does not share is not that bug."""
    from pytest_fsdpcheck.impls.torch_bug_signatures import grouped_module_reused as explains

    run = _reused_run()
    assert explains(run) and explains(_reused_run(second=0))  # torchrun: its own world only
    assert not explains(run + [_reused(None, 0, "eager", "m3.w0")])  # a third gradient wrong
    assert not explains([v for v in run if not v.message.startswith("rank 1, compiled")])  # a mode missing
    assert not explains([v for v in run if "bf16" not in v.message or not v.message.startswith("rank 1")])
    swapped = [_reused(None, 1, "eager", "m8.w0"), _reused(None, 1, "eager", "m7.w0", missing=True)]
    assert not explains([v for v in run if not v.message.startswith("rank 1, eager")] + swapped)
    assert not explains([v for v in run if "bf16" not in v.message])  # no uncast input: another bug
    latched = [v for v in run if "bf16" not in v.message] + [_latched(0), _latched(1)]
    assert not explains(latched)  # 2.13's latch, not the uncast input
    walkless = [v for v in run if "bf16" not in v.message] + [
        _latched(r, walk=", where torch's own walk in the same run takes the step",
                 error="RuntimeError: expected m1 and m2 to have the same dtype, but got: float != c10::BFloat16")
        for r in (0, 1)]
    assert not explains(walkless)
    assert not explains([Violation("FS2-11", v.message) for v in run])


def _summed_line(world: int | None, rank: int, mode: str, label: str, factor: int | None = None,
            walk: str = ", as torch's own walk gives in the same run") -> Violation:
    head = f"world size {world}, " if world else ""
    return Violation("FS2-9", f"{head}rank {rank}, {mode}: gradient of {label} is {factor or world or 2} times the "
                              f"unsharded gradient of the global batch{walk}")


def _reused_summed_run(summed=("m0.w0", "m4.w1"), second=3):
    """What torch 2.7.1 and 2.8.0 give: the grouped module's lines, and every other sharded gradient summed
    over the ranks (gloo) on every rank and mode of both worlds."""
    found = _reused_run(second=second)
    for world, ranks, modes in ((None, 2, ("eager", "compiled")), (second, second, ("eager",))):
        for r in range(ranks):
            for mode in modes:
                found += [_summed_line(world, r, mode, label) for label in summed]
    return found


def test_fs2_grouped_module_reused_summed_reads_both_bugs_and_nothing_more():
    """On 2.7 and 2.8 the grouped module's lines stand beside gloo's summed
    gradients: each gradient exactly the world size times the unsharded one,
    as torch's own walk gives, the same gradients on every rank and mode.
    Neither bug's signature alone reads it; a factor other than the world
    size, a summed gradient torch's own walk does not share, one on one
    rank only, or the grouped lines missing, is not these two bugs."""
    from pytest_fsdpcheck.impls.torch_bug_signatures import grouped_module_reused
    from pytest_fsdpcheck.impls.torch_bug_signatures import grouped_module_reused_summed as explains

    run = _reused_summed_run()
    assert explains(run) and not grouped_module_reused(run)
    assert not explains(_reused_run())  # no gradient summed: fs2-grouped-module-reused alone
    assert not explains([v for v in run if "bf16" not in v.message])
    assert not explains(run + [_summed_line(None, 0, "eager", "m3.w0")])  # one more summed on one rank only
    assert not explains([v for v in run if v.message != _summed_line(None, 1, "compiled", "m0.w0").message])
    assert not explains([v if v.message != _summed_line(3, 2, "eager", "m4.w1").message else _summed_line(3, 2, "eager", "m4.w1", 2)
                         for v in run])  # a factor other than the world size
    walkless = ", where torch's own walk in the same run does not"
    assert not explains([v if v.message != _summed_line(None, 0, "eager", "m0.w0").message
                         else _summed_line(None, 0, "eager", "m0.w0", walk=walkless) for v in run])
    assert not explains([v for v in run if "m8.w0" not in v.message])  # the grouped module's missing gradient


def test_fs2_frozen_mp_latched_is_masked_only_where_the_grouped_reuse_was_seen():
    """Before 2.13 the bf16 step raises fs2-grouped-module-reused's error
    before the backward that shows the latch: strict does not call the
    latch fixed in a run that saw the masking bug, and does in a run where
    neither showed (torch 2.12.1's FS2-9 passing would be news)."""
    import types

    from pytest_fsdpcheck.impls.torch_bugs import FULLY_SHARD_RUNTIME_BUGS
    from pytest_fsdpcheck.plugin.verdicts import _unreproduced

    class Walk:
        known_bugs = FULLY_SHARD_RUNTIME_BUGS

    def unreproduced(examples):
        matrix = types.SimpleNamespace(outcome=lambda inv, spec: "known" if examples else "pass",
                                       known_examples=examples)
        session = types.SimpleNamespace(known_bugs=True, impls={"walk": Walk()}, torch_version="2.12.1",
                                        matrix=matrix, deselected=set(), cannot_compile=lambda: False)
        # FS2-9's bugs: the runtime's bugs of other checks (FS2-12, FS2-14) are called fixed or not on their own
        return {bug.id for _, bug in _unreproduced(session) if "FS2-9" in bug.invariants}

    assert unreproduced({("walk", "fs2-grouped-module-reused"): 1}) == set()
    assert unreproduced({}) == {"fs2-frozen-mp-latched", "fs2-grouped-module-reused"}
    assert "fs2-frozen-mp-latched" in unreproduced({("walk", "fs2-frozen-dtypes-asserted"): 1})


def test_a_walk_meeting_a_runtime_bug_is_told_to_declare_the_runtime_bugs_and_fails():
    """A walk (not torch's) whose FS2-9 is exactly fs2-frozen-mp-latched,
    declaring nothing: a FAIL, whose hint names fully_shard's runtime bugs
    to declare (not all of torch's); declaring them explains it, where the
    installed torch is in the bug's range."""
    import dataclasses

    from pytest_fsdpcheck.checks import ConformanceFailure
    from pytest_fsdpcheck.impls.torch_bugs import FULLY_SHARD_RUNTIME_BUGS
    from pytest_fsdpcheck.known import judge
    from pytest_fsdpcheck.reference import ReferenceImplementation as Specification

    judge.configure(enabled=True)
    judge.reset()
    try:
        with pytest.raises(ConformanceFailure) as failure:
            judge.conform(Specification(), [_latched(0), _latched(1)])
        told = "\n".join(getattr(failure.value, "__notes__", ()))
        assert ("torch's known bug fs2-frozen-mp-latched gives, in fully_shard's runtime" in told
                and "known_bugs = FULLY_SHARD_RUNTIME_BUGS" in told and 'known_bugs = "torch"' not in told), told
        declaring = Specification()
        declaring.known_bugs = tuple(dataclasses.replace(b, affects="") for b in FULLY_SHARD_RUNTIME_BUGS)
        judge.conform(declaring, [_latched(0), _latched(1)])
        assert judge.explained()["fs2-frozen-mp-latched"]["examples"] == 1
    finally:
        judge.reset()


def test_fs2_gloo_grads_summed_reads_the_second_world_exactly():
    """fs2-gloo-grads-summed explains the runner's world (every rank, both
    modes) and FS2-9's second world (``world size 3, ``: every rank, the
    eager step it takes), nothing less and nothing beside it: a rank
    missing, a compiled finding the second world cannot make, or a stale
    shard after the step is not that bug."""
    from pytest_fsdpcheck.impls.torch_bug_signatures import (
        sharded_gradients_summed_on_gloo as explains,
    )

    runner = [_summed("", r, m, 2) for r in (0, 1) for m in ("eager", "compiled")]
    second = [_summed("world size 3, ", r, "eager", 3) for r in (0, 1, 2)]
    assert explains(runner) and explains(runner + second)
    # where the mixed-precision step runs (no latched dtype), its fp32 reduction sums alike, on every rank
    mixed = [_summed("", r, "bf16", 2) for r in (0, 1)]
    assert explains(runner + mixed + second)
    assert not explains(runner + mixed[:1] + second)
    assert not explains(runner + second[:2])  # rank 2 of the second world is right: not the reduction
    assert not explains(runner + second + [_summed("world size 3, ", 0, "compiled", 3)])
    assert not explains(second)  # the runner's world must show it too
    stale = Violation("FS2-9", "world size 3, rank 0, eager: the forward after the optimizer step computes with "
                               "[m0.w0], not the unsharded model's updated values: rows 6:7 (rank 2's shard) still "
                               "from before the step: never updated")
    assert not explains(runner + second + [stale])


def test_a_gradient_summed_over_the_ranks_beside_other_wrong_ones_says_so_and_what_torchs_walk_gives():
    """Where not every sharded gradient is scaled alike (a grouped module's
    gradient missing beside gloo's summing, 2.7 and 2.8), each gradient that
    is exactly the world size times its expected value says so, and whether
    torch's own walk's is the same; any other wrong gradient keeps its
    difference; an ignored one is judged against this rank's own."""
    from pytest_fsdpcheck.checks.distributed import _wrong_gradients

    want = {"a": torch.tensor([1.0, -2.0]), "b": torch.tensor([3.0, 1.0]), "c": torch.tensor([0.5, 0.5]),
            "i": torch.tensor([1.0, 1.0])}
    result = {"oracle": {"ignored": ["i"]}, "reference": {"global": want, "local": {"i": torch.tensor([1.0, 1.0])}}}
    got = {"a": 2 * want["a"], "b": want["b"] + 1, "c": 2 * want["c"], "i": 2 * want["i"]}
    walk = {"a": 2 * want["a"], "b": want["b"], "c": want["c"]}
    lines = _wrong_gradients(result, got, 1e-4, 1e-5, world_size=2, walk_grads=walk)
    assert lines == [
        "gradient of a is 2 times the unsharded gradient of the global batch, as torch's own walk gives in the same run",
        "gradient of b: expected the unsharded gradient of the global batch, max abs difference 1.0",
        "gradient of c is 2 times the unsharded gradient of the global batch, where torch's own walk in the same run "
        "does not",
        "gradient of i: expected this rank's unsharded gradient (ignored: not reduced), max abs difference 1.0"]
    assert _wrong_gradients(result, got, 1e-4, 1e-5, world_size=3, walk_grads=walk)[0].startswith(
        "gradient of a: expected the unsharded gradient of the global batch, max abs difference")
