"""Distributed checks at the runner's scale: SPL-16 (``torch.compile`` of a
real ``DistributedDataParallel`` module) and FS2-9 (a real ``fully_shard``
step driven by the implementation's walk).

Ranks are real processes in a real process group (gloo on CPU, NCCL on
CUDA): every visible GPU on CUDA, 2 on CPU, or ``--fsdpcheck-world-size``
capped at 3 on CPU or the visible GPUs on CUDA (the option is the simulated
tier's size first: ``options.spawned_ranks``); SPL-16 also runs at world
size 1, FS2-9 also at 3 (eagerly: other padded shards, an empty one). Under
``torchrun -m pytest_fsdpcheck.distributed`` the ranks are torchrun's own and
every rank sees every rank's results. One run per world size, device and
check serves every implementation and every test of the session that reads
it (``fsdpcheck_run.world_results``; under xdist the first worker to ask
runs it): each rank runs every implementation, so the processes (the slow
part) start once.

Each rank first runs the world's self-test (plain collectives on known
tensors, the ranks' agreement on their inputs, the control's all-reduce of
real gradients: :mod:`pytest_fsdpcheck.runs.selftest`), then a control
that runs no code under test (the unsharded model, its gradients averaged
with plain ``all_reduce``: nothing of DDP, DDPOptimizer or ``fully_shard``)
beside the implementations. Only a world that could not join or failed its
self-test makes the test an environment error naming the world (backend,
device, world size, hosts, visible GPUs) and the self-test's reason; any
other failure, one torch's own walk or eager DDP shares included, is a FAIL.
"""

import pytest

from pytest_fsdpcheck.checks import ConformanceFailure
from pytest_fsdpcheck.checks.distributed import (
    AGREEMENT,
    AGREEMENT_TASK,
    agreement_not_provided,
    check_ddp_end_to_end,
    check_fsdp2_end_to_end,
    check_ranks_agree,
    ddp_environment,
    fsdp2_environment,
    fsdp2_unchecked,
)
from pytest_fsdpcheck.checks.fsdp2_tp import check_fsdp2_tp, fsdp2_tp_unchecked
from pytest_fsdpcheck.checks.repro import snippet
from pytest_fsdpcheck.core.not_provided import NotProvided
from pytest_fsdpcheck.core.torch_support import require_compile
from pytest_fsdpcheck.known.judge import conform

#: every test here spawns ranks (or is one of torchrun's)
pytestmark = pytest.mark.fsdpcheck_cost("processes")

RANK_TIMEOUT_S = 180.0


def _seed(run) -> int:
    """FS2-9's model: seed 0 under the ci profile, the session's seed under dev/fuzz."""
    return 0 if run.seed is None else run.seed


def _results(run, world_size: int, device: str, task: str) -> list[dict]:
    from pytest_fsdpcheck.runs.ddp_run import run_ranks

    key = (world_size, device, run.impl_specs, task, _seed(run))
    # the session's: another session's ranks ran other code (its seed, its faults)
    return run.world_results(key, lambda: run_ranks(world_size, device, run.impl_specs, timeout=RANK_TIMEOUT_S,
                                                    task=task, seed=_seed(run)))


def _world_size(run, device: str, scale: str) -> int:
    import torch

    from pytest_fsdpcheck.runs.launch import launched_by_torchrun

    if not torch.distributed.is_available():
        raise NotProvided("this torch build has no torch.distributed")
    runner = run.world_size(device)
    if scale == "one":
        if launched_by_torchrun() and runner != 1:
            pytest.skip(f"under torchrun the world is torchrun's ({runner} ranks): see the runner-scale test")
        world_size = 1
    else:
        if runner == 1 and not launched_by_torchrun():
            pytest.skip("the runner's world size is 1: the world-size-1 test covers it")
        world_size = runner
    if device == "cuda" and not launched_by_torchrun() and torch.cuda.device_count() < world_size:
        pytest.skip(f"world size {world_size} on CUDA needs {world_size} GPUs, found {torch.cuda.device_count()}")
    return world_size


#: FS2-9's two small worlds: 3 ranks shard the model's dims otherwise than 2
#: (the last shard padded, the gate's empty); each spawns its ranks
SMALL_WORLDS = (2, 3)


def _second_world(world_size: int, device: str) -> int | None:
    """The other of FS2-9's small worlds where the runner's is one of them
    (the ranks spawned here; under torchrun the world is torchrun's own), on
    CPU or where every rank has a GPU; None elsewhere."""
    import torch

    from pytest_fsdpcheck.runs.launch import launched_by_torchrun

    if launched_by_torchrun() or world_size not in SMALL_WORLDS:
        return None
    other = next(n for n in SMALL_WORLDS if n != world_size)
    if device == "cuda" and torch.cuda.device_count() < other:
        return None
    return other


def _reproducer(impl, spec, world_size, device, task, check, seed=0, area=None, home="distributed"):
    """The torch-only script for one world's check (a function of
    ``pytest_fsdpcheck.checks.<home>``); ``area`` for the ranks' agreement
    (``check_ranks_agree``), which is asked per area."""
    area_arg = f", {area!r}" if area is not None else ""
    return snippet(
        impl,
        [
            'if __name__ == "__main__":  # spawned ranks re-import this file',
            f"    results = run_ranks({world_size}, {device!r}, [{spec!r}], task={task!r}{f', seed={seed}' if seed else ''})",
        ],
        [f"    violations = {check}(results, {spec!r}{area_arg})", "    assert not violations, violations"],
        imports=[
            "from pytest_fsdpcheck.runs.ddp_run import run_ranks",
            f"from pytest_fsdpcheck.checks.{home} import {check}",
        ],
    )


def _judge(run, impl, violations, example, environment) -> None:
    """``conform``, except that a failure in a world that failed its own
    self-test (``environment()`` says why, or None) is an environment error:
    known bugs are still asked first."""
    try:
        conform(impl, violations, example)
    except ConformanceFailure:
        why = environment()
        if why is None:
            raise
        raise run.environment_error(why) from None


@pytest.mark.fsdpcheck_cost(seconds=6.0)
@pytest.mark.invariant("SPL-16")
@pytest.mark.parametrize("scale", ["one", "runner"])
def test_compiled_ddp_matches_plan_and_eager(fsdpcheck_impl, fsdpcheck_device, scale, fsdpcheck_run):
    world_size = _world_size(fsdpcheck_run, fsdpcheck_device, scale)
    require_compile()
    spec = fsdpcheck_run.spec_of(fsdpcheck_impl)
    results = _results(fsdpcheck_run, world_size, fsdpcheck_device, "ddp")
    # The ranks ran in other processes: the outcome is judged as it is, not replayed.
    _judge(
        fsdpcheck_run,
        fsdpcheck_impl,
        check_ddp_end_to_end(results, spec),
        _reproducer(fsdpcheck_impl, spec, world_size, fsdpcheck_device, "ddp", "check_ddp_end_to_end"),
        lambda: ddp_environment(results, spec),
    )


def _fsdp2_world(run, device: str, invariant: str = "FS2-9") -> int:
    """FS2-9's world size, or a skip saying why this torch or runner has none."""
    runner = run.world_size(device)
    if runner < 2:
        raise NotProvided(f"{invariant} needs world size >= 2, the runner gives {runner} (--fsdpcheck-world-size)")
    world_size = _world_size(run, device, "runner")
    require_compile()
    from pytest_fsdpcheck.impls.torch_fsdp2 import fsdp2_available

    if not fsdp2_available():
        import torch

        raise NotProvided(f"torch {torch.__version__} has no FSDP2 (fully_shard)")
    from pytest_fsdpcheck.impls.torch_fsdp2 import TorchFsdp2

    if not TorchFsdp2().takes_ignored_params:
        import torch

        # the FS2-9 model always holds ignored parameters (they take the other gradient path)
        raise NotProvided(f"torch {torch.__version__}'s fully_shard takes no ignored_params (2.7+)")
    return world_size


@pytest.mark.fsdpcheck_cost(seconds=12.0)
@pytest.mark.invariant("FS2-9")
def test_fully_shard_end_to_end(fsdpcheck_impl, fsdpcheck_device, fsdpcheck_run):
    world_size = _fsdp2_world(fsdpcheck_run, fsdpcheck_device)
    spec = fsdpcheck_run.spec_of(fsdpcheck_impl)
    results = _results(fsdpcheck_run, world_size, fsdpcheck_device, "fsdp2")
    violations = check_fsdp2_end_to_end(results, spec)
    worlds = [(results, world_size, "fsdp2")]
    second = _second_world(world_size, fsdpcheck_device)
    if second is not None:
        # the other small world (3 ranks beside 2): other padded shards, an empty one; eager only (its cost)
        extra = _results(fsdpcheck_run, second, fsdpcheck_device, "fsdp2-eager")
        worlds.append((extra, second, "fsdp2-eager"))
        violations += check_fsdp2_end_to_end(extra, spec, where=f"world size {second}, ")
    failed = next((w for w in worlds if check_fsdp2_end_to_end(w[0], spec)), worlds[0])
    _judge(
        fsdpcheck_run,
        fsdpcheck_impl,
        violations,
        _reproducer(fsdpcheck_impl, spec, failed[1], fsdpcheck_device, failed[2], "check_fsdp2_end_to_end",
                    _seed(fsdpcheck_run)),
        lambda: next(filter(None, (fsdp2_environment(w[0], spec) for w in worlds)), None),
    )
    unchecked = fsdp2_unchecked(results, spec)  # what this torch could not compare: n/p, with why
    if unchecked:
        raise NotProvided("; ".join(unchecked))


@pytest.mark.fsdpcheck_cost(seconds=1.0)
@pytest.mark.invariant("FS2-15")
def test_fully_shard_on_a_tp_mesh(fsdpcheck_impl, fsdpcheck_device, fsdpcheck_run):
    """FS2-15: in FS2-9's worlds (the same ranks, after FS2-9's steps), the
    implementation's groups applied with ``fully_shard`` over the dp
    dimension of a (dp, tp) mesh, to tensor-parallel parameters (replicated
    over tp, each rank its own rows), take the unsharded model's step: every
    parameter sharded over dp, every gradient summed over tp and averaged
    over dp as the plain model's are, in fp32 and with bf16 parameters
    reduced in fp32."""
    world_size = _fsdp2_world(fsdpcheck_run, fsdpcheck_device, "FS2-15")
    spec = fsdpcheck_run.spec_of(fsdpcheck_impl)
    worlds = [(_results(fsdpcheck_run, world_size, fsdpcheck_device, "fsdp2"), world_size, "fsdp2")]
    second = _second_world(world_size, fsdpcheck_device)
    if second is not None:
        worlds.append((_results(fsdpcheck_run, second, fsdpcheck_device, "fsdp2-eager"), second, "fsdp2-eager"))
    violations = []
    for results, size, _ in worlds:
        violations += check_fsdp2_tp(results, spec, where=f"world size {size}, " if size != world_size else "")
    failed = next((w for w in worlds if check_fsdp2_tp(w[0], spec)), worlds[0])
    _judge(
        fsdpcheck_run,
        fsdpcheck_impl,
        violations,
        _reproducer(fsdpcheck_impl, spec, failed[1], fsdpcheck_device, failed[2], "check_fsdp2_tp",
                    _seed(fsdpcheck_run), home="fsdp2_tp"),
        lambda: next(filter(None, (fsdp2_environment(w[0], spec) for w in worlds)), None),
    )
    unchecked = fsdp2_tp_unchecked(worlds[0][0])
    if unchecked:
        raise NotProvided(f"FS2-15: {unchecked}")


@pytest.mark.parametrize("area", [pytest.param(area, marks=pytest.mark.invariant(inv)) for area, (inv, _) in AGREEMENT.items()])
def test_ranks_agree(fsdpcheck_impl, fsdpcheck_device, area, fsdpcheck_run):
    """SPL-20, FS2-11, EXO-9: the answers the ranks of SPL-16's and FS2-9's
    worlds recorded (each rank's bucket plan and exec order in SPL-16's
    world; each ``fully_shard`` call's managed modules and parameters in
    FS2-9's, both of its small worlds where spawned) are the same on every
    rank. The ranks' records are the ones those checks gathered (one run
    serves all three), so this costs a comparison of small lists; a
    divergence is one line naming the ranks and the first differing entry."""
    invariant = AGREEMENT[area][0]
    if area == "fsdp2":
        world_size = _fsdp2_world(fsdpcheck_run, fsdpcheck_device, invariant)
    else:
        world_size = _world_size(fsdpcheck_run, fsdpcheck_device, "runner")
        require_compile()
    spec = fsdpcheck_run.spec_of(fsdpcheck_impl)
    if getattr(fsdpcheck_impl, area, None) is None:
        raise NotProvided(f"{spec} has no {area} area")
    task = AGREEMENT_TASK[area]
    worlds = [(_results(fsdpcheck_run, world_size, fsdpcheck_device, task), world_size, task)]
    second = _second_world(world_size, fsdpcheck_device) if area == "fsdp2" else None
    if second is not None:
        worlds.append((_results(fsdpcheck_run, second, fsdpcheck_device, "fsdp2-eager"), second, "fsdp2-eager"))
    violations = []
    for results, size, _ in worlds:
        violations += check_ranks_agree(results, spec, area, where=f"world size {size}, " if size != world_size else "")
    failed = next((w for w in worlds if check_ranks_agree(w[0], spec, area)), worlds[0])
    environment = fsdp2_environment if area == "fsdp2" else ddp_environment
    _judge(
        fsdpcheck_run,
        fsdpcheck_impl,
        violations,
        _reproducer(fsdpcheck_impl, spec, failed[1], fsdpcheck_device, failed[2], "check_ranks_agree",
                    _seed(fsdpcheck_run), area=area),
        lambda: next(filter(None, (environment(w[0], spec) for w in worlds)), None),
    )
    if all(agreement_not_provided(w[0], spec, area) for w in worlds):
        raise NotProvided(f"no rank recorded {spec}'s {AGREEMENT[area][1]} (its fully_shard cannot be driven)")
