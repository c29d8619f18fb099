"""FS2-9's world for a user's plan: starting its ranks and gathering their
records (:func:`run_plan_ranks`). Spawned CPU ranks on gloo each build the
case themselves (:data:`BUILD_SEED`) and run
:func:`~pytest_fsdpcheck.runs.plan_run.plan_task`, within a limit made of
``--fsdpcheck-timeout`` and the unsharded step's cost (:func:`rank_limit`),
each saving the phase it enters (:class:`_Progress`) so that a rank killed
at the limit says where it was; under ``python -m
pytest_fsdpcheck.distributed`` this process runs its own rank of
torchrun's world instead (:func:`_run_in_torchrun_world`). What one rank
runs is :mod:`~pytest_fsdpcheck.runs.plan_run`'s.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from pathlib import Path

import torch

from .launch import all_gather_objects, free_port, launched_by_torchrun, spawn_ranks
from .plan_run import _error, plan_task

BUILD_SEED = 0


@dataclass(frozen=True)
class PlanJob:
    world_size: int
    port: int
    out_dir: str
    build: object  # a picklable zero-argument callable returning the case
    groups: tuple | None = None  # PlanGroups; None: every parameter reduced, no casts


#: the world's own calls each given --fsdpcheck-timeout: starting (spawn,
#: import, the process group, the case built), the eager step and the
#: compiled step (compiling included)
PLAN_CALLS = 3
#: the steps a rank runs, counted in unsharded steps: the control on every
#: rank's batch, eager and compiled, and the plan's two steps, with room
STEP_COST_FACTOR = 50


def rank_limit(timeout_s: float, step_s: float) -> float | None:
    """Seconds FS2-9's ranks may take: :data:`PLAN_CALLS` times the
    per-call limit (``--fsdpcheck-timeout``), plus :data:`STEP_COST_FACTOR`
    times the measured cost ``step_s`` of one unsharded step, so a large
    model gets the time its steps need; ``None`` (no limit) where the
    per-call limit is 0."""
    if not timeout_s:
        return None
    return PLAN_CALLS * timeout_s + STEP_COST_FACTOR * step_s


def run_plan_ranks(build, world_size: int = 2, timeout: float | None = 180.0, groups=None,
                   call_limit: float | None = None) -> list[dict]:
    """Start ``world_size`` CPU ranks (gloo), each building its case with
    ``build()`` (picklable: :func:`pytest_fsdpcheck.cases.inputs.case_builder`),
    wait at most ``timeout`` seconds (``None``: no limit; see
    :func:`rank_limit`), return each rank's record (``error`` set for a rank
    that failed or died; one killed at the limit has ``timed_out`` and its
    last ``progress``: the phase it was in, since when, and what the
    control took; ``call_limit_s``: ``call_limit``, the per-call limit
    the limit was made of). ``groups``
    (:class:`~pytest_fsdpcheck.runs.plan_run.PlanGroup`, from
    :func:`pytest_fsdpcheck.cases.inputs.control_groups`) is the plan's
    precision and reduction; ``None`` reduces every parameter with no casts."""
    import time

    groups = None if groups is None else tuple(groups)
    if launched_by_torchrun():
        return _run_in_torchrun_world(build, world_size, groups)
    records = spawn_ranks(_rank_main, lambda out_dir: PlanJob(world_size, free_port(), out_dir, build, groups),
                          world_size, float("inf") if timeout is None else timeout, "fsdpcheck-plan-", device="cpu")
    stopped = time.time()
    for record in records:
        if record.get("timed_out"):
            record["limit_s"] = timeout
            record["call_limit_s"] = call_limit
            record["killed_at"] = stopped
    return records


class _Progress:
    """A rank's phases as it enters them, saved where the parent finds them
    when it kills the rank at the limit: the phase, the wall-clock time it
    began and what the phases before it measured (``control_s``: one
    unsharded eager step; ``compiled_control_s``: one unsharded compiled
    step, compiling included)."""

    def __init__(self, out_dir: str | None, rank: int):
        self.path = None if out_dir is None else Path(out_dir) / f"progress{rank}.pt"
        self.facts: dict = {}

    def __call__(self, phase: str, **facts) -> None:
        import time

        self.facts.update(facts, phase=phase, phase_at=time.time())
        if self.path is not None:
            partial = self.path.with_suffix(".tmp")
            torch.save(dict(self.facts), partial)
            os.replace(partial, self.path)


def rank_collective_timeout() -> float:
    """Seconds a spawned rank's gloo collective waits for its peers before
    it raises (``FSDPCHECK_COLLECTIVE_TIMEOUT``, default 60): a rank whose
    peers never reach a collective (per-rank data skipping a group's
    all-gather) fails there and says so, before the ranks' time limit."""
    return float(os.environ.get("FSDPCHECK_COLLECTIVE_TIMEOUT", "60"))


def _rank_main(rank: int, job: PlanJob) -> None:
    import torch.distributed as dist

    result: dict = {"rank": rank, "error": None}
    initialized = False
    torch.set_num_threads(1)
    progress = _Progress(job.out_dir, rank)
    progress("world")
    try:
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
        from datetime import timedelta

        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{job.port}", rank=rank,
                                world_size=job.world_size, timeout=timedelta(seconds=rank_collective_timeout()))
        initialized = True
        # the same seed on every rank, for a factory that does not seed itself
        torch.manual_seed(BUILD_SEED)
        case = job.build()
        result.update(plan_task(case, rank, job.world_size, job.groups, progress))
    except BaseException as exc:  # noqa: BLE001 - reported to the parent, never raised across ranks
        result["error"] = _error(exc)
    finally:
        if initialized:
            with contextlib.suppress(Exception):
                dist.destroy_process_group()
        torch.save(result, Path(job.out_dir) / f"rank{rank}.pt")


def _run_in_torchrun_world(build, world_size: int, groups) -> list[dict]:
    """Under ``python -m pytest_fsdpcheck.distributed``: this process is one
    of torchrun's ranks, so it runs its own rank of the plan (the ranks'
    records as :func:`run_plan_ranks` gives them, every rank getting every
    rank's, so all reach the same verdict). The plan runs on CPU as the
    spawned ranks' does, on a gloo group of torchrun's ranks: the world's
    own where it is gloo, else one made beside NCCL. No rank is killed at
    :func:`rank_limit`: a hung world ends at the collectives' own time-out
    (``FSDPCHECK_COLLECTIVE_TIMEOUT``)."""
    import torch.distributed as dist

    rank = dist.get_rank()
    result: dict = {"rank": rank, "error": None}
    try:
        if dist.get_world_size() != world_size:
            raise RuntimeError(f"asked for world size {world_size}, torchrun started {dist.get_world_size()}")
        group = None if dist.get_backend() == "gloo" else dist.new_group(backend="gloo")
        torch.manual_seed(BUILD_SEED)
        try:
            case, failed = build(), None
        except Exception as exc:  # noqa: BLE001 - every rank must hear of it before any collective
            case, failed = None, _error(exc)
        # A rank whose build failed would leave the others waiting in the
        # first broadcast until the collectives' time-out: they agree first.
        failures = [(r, f) for r, f in enumerate(all_gather_objects(failed)) if f is not None]
        if failures:
            r, first = failures[0]
            raise RuntimeError(f"rank {r} could not build the case: {first.splitlines()[0]}")
        result.update(plan_task(case, rank, world_size, groups, group=group))
    except BaseException as exc:  # noqa: BLE001 - reported with every rank's records
        result["error"] = _error(exc)
    try:
        return all_gather_objects(result)
    except Exception as exc:  # noqa: BLE001 - the world broke after the step: this rank's record says so
        return [{**result, "error": _error(exc)}]
