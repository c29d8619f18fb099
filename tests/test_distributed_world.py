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

from pytest_fsdpcheck.checks.distributed import (
    check_ddp_end_to_end,
    check_fsdp2_end_to_end,
    ddp_environment,
    describe_world,
    fsdp2_environment,
)
from pytest_fsdpcheck.runs.world import Choice, Place, choose_device, exchange_places, shared_gpus

from .test_planted_distributed import _fs2_rank, _rank

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
    from pytest_fsdpcheck import session

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


def test_spl16_a_control_with_wrong_gradients_is_the_worlds_and_a_healthy_one_leaves_the_fail():
    right = {"w": torch.ones(3)}
    summed = _in_world(_rank(0, unsharded={"w": torch.full((3,), 0.5)}))
    why = ddp_environment([summed], "impl")
    assert why.startswith(NAMED + "rank 0: the control, eager DDP, fails the same check: its gradient of w is not "
                                  "the unsharded model's on the global batch (max abs difference 0.5)")
    healthy_but_wrong_plan = _in_world(_rank(0, unsharded=right, plans={"impl": {"error": None, "buckets": [3]}}))
    assert check_ddp_end_to_end([healthy_but_wrong_plan], "impl")
    assert ddp_environment([healthy_but_wrong_plan], "impl") is None


def _fs2_wrong(rank, impl_grads, control_grads, walk_right=True):
    record = _in_world(_fs2_rank(rank))
    for mode in ("eager", "compiled"):
        step = dict(record["impls"]["impl"][mode], grads=impl_grads)
        if not walk_right:
            step["flagged"] = ["m0"]
        record["impls"]["impl"][mode] = step
    record["torch_walk"] = {mode: {"grads": control_grads} for mode in ("eager", "compiled")}
    return record


def test_fs2_9_a_control_wrong_the_same_way_is_the_worlds():
    wrong = {"m0.w0": torch.full((2,), 3.0), "m1.w0": torch.full((2,), 2.0)}
    right = _fs2_rank(0)["impls"]["impl"]["eager"]["grads"]
    both = [_fs2_wrong(0, wrong, dict(wrong)), _fs2_wrong(1, wrong, dict(wrong))]
    assert check_fsdp2_end_to_end(both, "impl")
    why = fsdp2_environment(both, "impl")
    assert why.startswith(NAMED + "the control, torch's own walk, fails the same check with the same gradients in "
                                  "this world (rank 0, eager: gradient of m0.w0: expected the unsharded gradient")
    # the implementation alone is wrong: a FAIL
    assert fsdp2_environment([_fs2_wrong(0, wrong, dict(right)), _fs2_wrong(1, wrong, dict(right))], "impl") is None
    # wrong another way than the control: a FAIL
    other = {"m0.w0": torch.full((2,), 5.0), "m1.w0": torch.full((2,), 2.0)}
    assert fsdp2_environment([_fs2_wrong(0, other, dict(wrong)), _fs2_wrong(1, other, dict(wrong))], "impl") is None
    # the gradients are shared, but the walk is the implementation's own mistake: a FAIL
    assert fsdp2_environment([_fs2_wrong(0, wrong, dict(wrong), walk_right=False)], "impl") is None


def test_fs2_9_a_rank_failing_in_the_control_step_is_the_worlds():
    ok = _in_world(_fs2_rank(0))
    probe = _in_world({"rank": 1, "error": "Traceback ...\nRuntimeError: Connection closed by peer", "phase": "control"})
    assert fsdp2_environment([ok, probe], "impl") == (
        NAMED + "rank 1 failed while the control step, before any implementation ran: RuntimeError: Connection "
        "closed by peer; not a verdict on impl")
    impl_phase = _in_world({"rank": 1, "error": "Traceback ...\nRuntimeError: gloo timeout", "phase": "impls"})
    assert fsdp2_environment([ok, impl_phase], "impl") is None


def test_an_environment_error_is_its_own_cell_below_fail():
    from types import SimpleNamespace

    from pytest_fsdpcheck.report import PROP_ENVIRONMENT, PROP_IMPL, PROP_INVARIANTS, Matrix

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
    assert result.ret == 1


def test_a_control_wrong_the_same_way_is_an_environment_error_while_a_healthy_world_still_fails(run_suite, monkeypatch):
    import pathlib

    # every DDP all-reduce sums: at world size 2 eager DDP (the control) is as wrong as the
    # compiled run; at world size 1 a sum is the mean and the world is healthy
    monkeypatch.setenv("PYTHONPATH", str(pathlib.Path(__file__).parent / "planted" / "world"))
    monkeypatch.setenv("FSDPCHECK_PLANTED_WORLD", "summing-ddp")
    impls = ["reference", PLANTED_WRONG]
    result, report = run_suite(*impls, k="test_compiled_ddp")
    tests = {nodeid.rsplit("[", 1)[1].rstrip("]"): test for nodeid, test in report["tests"].items()}
    # the planted splitter's wrong plan, in the summing world: not judged, the world is named
    runner = tests[f"{PLANTED_WRONG}-cpu-runner"]
    assert runner["outcome"] == "failed", runner
    assert runner["environment"].startswith("environment (gloo on cpu, world size 2, torch "), runner
    assert "the control, eager DDP, fails the same check: its gradient of" in runner["environment"], runner
    # the same wrong plan in the healthy world of one rank: a FAIL with its invariant
    one = tests[f"{PLANTED_WRONG}-cpu-one"]
    assert one["outcome"] == "failed" and "environment" not in one, one
    result.stdout.fnmatch_lines(["*SPL-16: rank 0: expected one compiled subgraph per planned bucket*"])
    assert report["matrix"][PLANTED_WRONG]["SPL-16"]["outcome"] == "fail"
    # compiled DDP still equals eager DDP there, as SPL-16 states: the reference passes, a
    # failing control is only asked about once there is a failure to explain
    assert tests["reference-cpu-runner"]["outcome"] == tests["reference-cpu-one"]["outcome"] == "passed"


def test_fs2_9_a_runtime_that_sums_for_every_walk_is_an_environment_error_while_a_wrong_walk_fails(run_suite, monkeypatch):
    import pathlib

    monkeypatch.setenv("PYTHONPATH", str(pathlib.Path(__file__).parent / "planted" / "world"))
    monkeypatch.setenv("FSDPCHECK_PLANTED_WORLD", "summing-fsdp2")
    monkeypatch.setenv("FSDPCHECK_COMPILE_BACKEND", "aot_eager")  # the world is under test, not inductor
    wrong_walk = "tests.planted.distributed:DropsFirstLeaf"
    impls = ["reference", wrong_walk]
    result, report = run_suite(*impls, k="test_fully_shard_end_to_end")
    outcomes = {impl: report["matrix"][impl]["FS2-9"]["outcome"] for impl in impls}
    assert outcomes == {"reference": "error", wrong_walk: "fail"}, outcomes
    (test,) = [t for nodeid, t in report["tests"].items() if "[reference" in nodeid]
    assert test["environment"].startswith("environment (gloo on cpu, world size 2, torch "), test
    assert "the control, torch's own walk, fails the same check with the same gradients" in test["environment"]
    result.stdout.fnmatch_lines(["*FS2-9: rank 0, eager: fully_shard call 1 (*): expected managed modules*"])
