"""The run's session: implementations loaded and guarded, devices, seed,
fuzz plan and declared divergences, built once from :class:`Settings` and
kept in the pytest config's stash (workers build their own)."""

from __future__ import annotations

import random
import time
from dataclasses import dataclass, field

import pytest

from .options import Settings
from .report import Matrix


@dataclass
class Session:
    impls: dict  # spec -> implementation object
    devices: list[str]
    profile: str
    seed: int | None
    divergences: list = field(default_factory=list)
    divergence_files: list[str] = field(default_factory=list)
    strict: bool = False
    report_path: str | None = None
    html_path: str | None = None  # --fsdpcheck-html
    matrix: Matrix = field(default_factory=Matrix)
    matched_entries: set = field(default_factory=set)
    torch_version: str = ""
    known_bugs: bool = True
    #: (implementation, invariant) pairs with a test deselected (-k, node ids):
    #: no stale, unexpected-pass or not-reproduced verdict is drawn for them
    deselected: set = field(default_factory=set)
    #: interrupted or stopped early (-x): nothing is judged stale or fixed
    incomplete: bool = False
    #: --fsdpcheck-world-size; None: the device's default (see world_size_for)
    world_size: int | None = None
    #: seed streams, shards and time budget (dev/fuzz profiles)
    plan: object = None
    database: str | None = None  # where failing examples are kept, as the header says it
    #: HypoFuzz is collecting: its engine needs the default database and no derandomize
    under_hypofuzz: bool = False
    started: float = 0.0
    started_cpu: float = 0.0  # time.process_time() at ``started``: collection's wall/CPU ratio is the contention
    slicer: object = None  # each property item's share of a time budget
    #: node ids of the suite tests a time budget left out (skipped)
    budget_skipped: list = field(default_factory=list)
    pytest_session: object = None  # pytest's Session, whose exit status the summary may still set
    #: users' model factories (--fsdpcheck-model, entry points), each checked loadable at start
    models: tuple = ()


SESSION_KEY = pytest.StashKey[Session]()


def get_session(config) -> Session | None:
    return config.stash.get(SESSION_KEY, None)


def start(config, settings: Settings) -> Session:
    """Build the session and select the suite's Hypothesis settings."""
    from . import fuzz, profiles

    session = _build(config, settings)
    config.stash[SESSION_KEY] = session
    profiles.activate(session.profile)
    fuzz.configure_database(config, session, settings.database)
    return session


def _build(config, settings: Settings) -> Session:
    from .impls import BUILTIN, ImplementationError, installed_entry_points, load_implementation
    from .isolation import Guarded
    from .known import divergences as div

    specs = settings.impl_specs or ("torch", *sorted(set(installed_entry_points()) - set(BUILTIN)))
    impls = {}
    for spec in specs:
        try:
            impls[spec] = Guarded(load_implementation(spec), spec, settings.timeout_s)
        except ImplementationError as exc:
            raise pytest.UsageError(f"fsdpcheck: {exc}") from None
    devices = _devices(settings.device, settings.world_size)
    if settings.profile == "ci":
        seed = None
    else:
        worker_seed = getattr(config, "workerinput", {}).get("fsdpcheck_seed")
        seed = next(s for s in (worker_seed, settings.seed, random.randrange(2**32)) if s is not None)

    import torch

    from .known import judge

    entries, files = [], []
    if settings.divergences:
        try:
            entries = div.for_torch(div.load(settings.divergences), torch.__version__)
        except div.DivergenceFileError as exc:
            raise pytest.UsageError(f"fsdpcheck: {exc}") from None
        files.append(settings.divergences)
    judge.configure(enabled=settings.known_bugs)
    models = _models(settings.model_specs)
    return Session(
        models=models,
        impls=impls,
        devices=devices,
        profile=settings.profile,
        seed=seed,
        divergences=entries,
        divergence_files=files,
        strict=settings.strict,
        report_path=settings.report,
        html_path=settings.html,
        torch_version=torch.__version__,
        known_bugs=settings.known_bugs,
        world_size=settings.world_size,
        plan=_fuzz_plan(config, settings, seed),
        started=time.time(),
        started_cpu=time.process_time(),
    )


def _models(specs: tuple[str, ...]) -> tuple[str, ...]:
    """The model factories to run, each loaded and built once here so that a
    missing factory, a wrong return type or a module name the model lacks
    stops the run before any test, in one line."""
    from .cases import CaseError, installed_models, validate_case_spec

    specs = specs or tuple(sorted(installed_models()))
    for spec in specs:
        try:
            problems = validate_case_spec(spec)
        except CaseError as exc:
            raise pytest.UsageError(f"fsdpcheck: {exc}") from None
        if problems:
            raise pytest.UsageError(f"fsdpcheck: {problems[0]}")
    return specs


def _fuzz_plan(config, settings: Settings, seed):
    if settings.profile == "ci":
        return None
    from .fuzz import Plan

    worker = getattr(config, "workerinput", {})
    budget = settings.fuzz_time_s
    # the budget's clock starts with the first test (fuzz.Slicer.start), not here:
    # under -n N the workers' start-up, on fewer cores than N, may outlast a short budget
    deadline = None
    # the controller counts the workers it will start (for the header and report)
    workers = worker.get("workercount") or (config.getoption("numprocesses") if xdist_controller(config) else 1)
    machine, machines = settings.shard
    return Plan(seed, settings.profile, machine, machines, workers, budget, deadline,
                clock_path=worker.get("fsdpcheck_clock"))


def _devices(choice: str, world_size: int | None = None) -> list[str]:
    import torch

    has_cuda = torch.cuda.is_available()
    if choice == "cuda" and not has_cuda:
        raise pytest.UsageError("fsdpcheck: --fsdpcheck-device=cuda but torch sees no CUDA device")
    if choice == "cuda" and world_size is not None:
        stop = _spawned_ranks_share_a_gpu(world_size, torch.cuda.device_count())
        if stop:
            raise pytest.UsageError(f"fsdpcheck: {stop}")
    if choice == "auto":
        return ["cpu", "cuda"] if has_cuda else ["cpu"]
    return [choice]


def _spawned_ranks_share_a_gpu(world_size: int, gpus: int) -> str | None:
    """The one-line reason the distributed checks' ranks, all started on
    this host, cannot each have a GPU under a forced ``cuda``; None if they
    can. Under torchrun the ranks exist already and chose their device
    before this session (``python -m pytest_fsdpcheck.distributed``)."""
    import os
    import socket

    from .runs.ddp_run import launched_by_torchrun
    from .runs.world import Place, choose_device, shared_gpus

    if launched_by_torchrun():
        return None
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    places = [Place(r, socket.gethostname(), gpus, visible, r) for r in range(world_size)]
    return choose_device("cuda", True, shared_gpus(places)).stop


def xdist_controller(config) -> bool:
    return (
        not hasattr(config, "workerinput")
        and bool(config.getoption("numprocesses", None))
        and config.getoption("dist", "no") != "no"
    )


def world_size_for(config, device: str) -> int:
    """Ranks for the distributed checks on ``device``: torchrun's world when
    launched by ``python -m pytest_fsdpcheck.distributed``, else
    --fsdpcheck-world-size, else every visible GPU (CUDA) or 2 (CPU)."""
    from .runs.ddp_run import launched_by_torchrun

    if launched_by_torchrun():
        import torch.distributed as dist

        return dist.get_world_size()
    session = get_session(config)
    if session is not None and session.world_size is not None:
        return session.world_size
    if device == "cuda":
        import torch

        return torch.cuda.device_count()
    return 2

