"""The run's session: implementations loaded and guarded, devices, seed,
fuzz plan and declared divergences, built once from :class:`Settings` and
kept in the pytest config's stash (workers build their own)."""

from __future__ import annotations

import random
import time
from dataclasses import dataclass, field

import pytest

from ..core.run_state import RunState
from ..report.matrix import Matrix
from .options import Settings


@dataclass
class Session:
    impls: dict  # spec -> implementation object
    devices: list[str]
    seed: int | None
    #: what the options asked for, held here once: the session reads them, never copies them
    settings: Settings
    divergences: list = field(default_factory=list)
    divergence_files: list[str] = field(default_factory=list)
    #: entries whose `until` torch release is installed: they mask nothing and are findings
    expired_entries: list = field(default_factory=list)
    baseline_written: str | None = None  # the summary's line on it, once the run is over
    matrix: Matrix = field(default_factory=Matrix)
    matched_entries: set = field(default_factory=set)
    torch_version: str = ""
    #: (implementation, invariant) pairs with a test deselected (-k, node ids):
    #: no stale, unexpected-pass or not-reproduced verdict is drawn for them
    deselected: set = field(default_factory=set)
    #: interrupted or stopped early (-x): nothing is judged stale or fixed
    incomplete: bool = False
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
    #: the exit status pytest drew before the suite's (verdicts.finish draws whose fault from it)
    pytest_status: int | None = None
    #: users' model factories (--fsdpcheck-model, entry points), each checked loadable at start
    models: tuple = ()
    #: the xdist controller's session: implementations, devices and torch's
    #: version stand in for what the workers load, until they tell (:meth:`learn`)
    deferred: bool = False
    #: the controller: why a worker could not start its session (WorkerLoadError)
    worker_load_error: str | None = None
    #: the controller: why torch.compile cannot run, as a worker found it ("" = it runs; None = not told yet)
    compile_reason: str | None = None
    #: the modules this process imported so far (isolation.ImportHistory, made
    #: by the first suite test): a module met again is no first import
    import_history: object = None
    #: what the judge, the profiles, the tallies and the stop file keep while
    #: the run goes on: current (run_state.current) from configure to unconfigure
    run: RunState = field(default_factory=RunState)

    # The options the rest of the plugin and the report read, by the names
    # they read them by; their one home is ``settings``.
    profile = property(lambda self: self.settings.profile)
    strict = property(lambda self: self.settings.strict)
    known_bugs = property(lambda self: self.settings.known_bugs)
    report_path = property(lambda self: self.settings.report)
    html_path = property(lambda self: self.settings.html)
    junit_path = property(lambda self: self.settings.junit)
    write_baseline = property(lambda self: self.settings.write_baseline)
    #: --fsdpcheck-world-size; None: the device's default (see world_size_for)
    world_size = property(lambda self: self.settings.world_size)
    #: --fsdpcheck-timeout (one implementation call's limit; FS2-9's ranks scale it)
    timeout_s = property(lambda self: self.settings.timeout_s)
    #: --fsdpcheck-plan-examples: FS2-9 configurations drawn per factory
    plan_examples = property(lambda self: self.settings.plan_examples)

    def loaded(self) -> dict:
        """What a worker loaded, for its controller (plain data: execnet)."""
        from ..contract import provided_areas
        from ..core.bugs import known_bugs_of
        from ..impls.torch_bugs import TORCH_BUGS

        impls = {}
        for spec, impl in self.impls.items():
            bugs = known_bugs_of(impl)
            catalogued = all(any(bug is entry for entry in TORCH_BUGS) for bug in bugs)
            impls[spec] = {"areas": provided_areas(impl), "bugs": [b.id for b in bugs] if catalogued else None}
        from ..core.torch_support import compile_unsupported

        # str(): torch's version is a str subclass execnet cannot send
        return {"torch": str(self.torch_version), "devices": [str(d) for d in self.devices], "impls": impls,
                "compile": compile_unsupported() or ""}

    def cannot_compile(self) -> bool:
        """Whether torch.compile cannot run with this torch and Python. The
        xdist controller, which never imports torch, has it from its
        workers (:meth:`learn`); any other session asks torch."""
        if self.deferred:
            return bool(self.compile_reason)
        from ..core.torch_support import compile_unsupported

        return compile_unsupported() is not None

    def learn(self, loaded: dict | None) -> None:
        """The controller: fill in what a worker loaded (:meth:`loaded`)."""
        if not self.deferred or not loaded:
            return
        self.torch_version = loaded["torch"]
        self.compile_reason = loaded.get("compile")
        if not self.devices:
            self.devices = list(loaded["devices"])
        for spec, seen in loaded["impls"].items():
            impl = self.impls.get(spec)
            if isinstance(impl, DeferredImplementation):
                impl.learn(seen)

    def awaiting_workers(self) -> bool:
        """The controller, before any worker told what it loaded."""
        return any(isinstance(i, DeferredImplementation) and not i.known for i in self.impls.values())


class DeferredImplementation:
    """The xdist controller's stand-in for an implementation its workers
    load. Only what can be told without importing it is checked at start
    (:func:`~.impls.check_importable`); the provided areas and catalogued
    known bugs come from a worker (:meth:`Session.learn`). Anything else
    asked of it, or everything where no worker told (each crashed), loads
    the implementation here after all."""

    def __init__(self, spec: str, timeout_s: float):
        from ..impls import check_importable

        check_importable(spec)
        self._fsdpcheck_spec = spec
        self._timeout_s = timeout_s
        self._seen = None
        self._impl = None

    def learn(self, seen: dict) -> None:
        if self._seen is None:
            self._seen = seen

    @property
    def known(self) -> bool:
        return self._seen is not None or self._impl is not None

    def __getattr__(self, attr):
        from ..contract import AREAS

        seen = self.__dict__.get("_seen")
        if seen is not None and attr in AREAS:
            return PROVIDED_BY_WORKERS if attr in seen["areas"] else None
        if seen is not None and attr == "known_bugs" and seen["bugs"] is not None:
            from ..impls.torch_bugs import TORCH_BUGS

            catalogue = {bug.id: bug for bug in TORCH_BUGS}
            return tuple(catalogue[bug_id] for bug_id in seen["bugs"])
        if attr.startswith("__"):
            raise AttributeError(attr)
        if self.__dict__.get("_impl") is None:
            from ..impls import ImplementationError

            try:
                self._impl = _load(self._fsdpcheck_spec, self._timeout_s)
            except ImplementationError:
                # the workers reported why, as their collection's error
                self._impl = _NOTHING_LOADED
        return getattr(self._impl, attr)


class _NothingLoaded:
    """No area, no known bug: an implementation that failed to load."""


_NOTHING_LOADED = _NothingLoaded()


#: an area a worker loaded (the controller holds no area object)
PROVIDED_BY_WORKERS = "provided (loaded by the xdist workers)"


SESSION_KEY = pytest.StashKey[Session]()


def get_session(config) -> Session | None:
    return config.stash.get(SESSION_KEY, None)


def start(config, settings: Settings) -> Session:
    """Build the session and select the suite's Hypothesis settings."""
    from ..core import run_state

    session = _build(config, settings)
    config.stash[SESSION_KEY] = session
    run_state.enter(session.run)  # left in the plugin's pytest_unconfigure (leave_run)
    if session.deferred and session.plan is None and settings.database is None:
        # the controller of a ci run: no property runs here and no database
        # is opened, so Hypothesis (0.75 s to import) stays out of its start
        return session
    from ..core import profiles
    from . import fuzz

    profiles.activate(session.profile)
    fuzz.configure_database(config, session, settings.database)
    return session


def _build(config, settings: Settings) -> Session:
    from ..impls import BUILTIN, ImplementationError, installed_entry_points
    from ..known import divergences as div

    # The xdist controller runs no test: it neither imports torch nor loads
    # an implementation (a second of CPU or more, spent before any worker
    # starts, on the cores the workers need); its workers do, and tell it.
    deferred = xdist_controller(config)
    specs = settings.impl_specs or ("torch", *sorted(set(installed_entry_points()) - set(BUILTIN)))
    impls = {}
    for spec in specs:
        try:
            impls[spec] = (DeferredImplementation(spec, settings.timeout_s) if deferred
                           else _load(spec, settings.timeout_s))
        except ImplementationError as exc:
            raise pytest.UsageError(f"fsdpcheck: {exc}") from None
    devices = _devices(settings.device, settings.world_size, deferred)
    if settings.profile == "ci":
        seed = None
    else:
        worker_seed = getattr(config, "workerinput", {}).get("fsdpcheck_seed")
        seed = next(s for s in (worker_seed, settings.seed, random.randrange(2**32)) if s is not None)

    torch_version = _installed_torch_version() if deferred else _imported_torch_version()
    entries, files, expired = [], [], []
    for path, baseline in ((settings.divergences, False), (settings.baseline, True)):
        if not path:
            continue
        try:
            loaded = div.load(path, baseline=baseline)
        except div.DivergenceFileError as exc:
            raise pytest.UsageError(f"fsdpcheck: {exc}") from None
        entries += div.for_torch(loaded, torch_version)
        expired += div.expired(loaded, torch_version)
        files.append(path)
    models = _model_specs(settings.model_specs) if deferred else _models(settings.model_specs)
    return Session(
        models=models,
        impls=impls,
        devices=devices,
        seed=seed,
        settings=settings,
        divergences=entries,
        divergence_files=files,
        expired_entries=expired,
        torch_version=torch_version,
        plan=_fuzz_plan(config, settings, seed),
        started=time.time(),
        started_cpu=time.process_time(),
        deferred=deferred,
        run=RunState(known_bugs=settings.known_bugs, profile=settings.profile),
    )


def leave_run(config) -> None:
    """The session's state stops being the current one (pytest_unconfigure):
    the session that started this one, if any, has its own back."""
    from ..core import run_state

    session = get_session(config)
    if session is not None and not session.under_hypofuzz:
        run_state.leave(session.run)
    # HypoFuzz collects through a pytest session and runs the collected
    # tests after it ended, in the same process: its state stays current


def _load(spec: str, timeout_s: float):
    from ..impls import load_implementation
    from .guard import Guarded

    return Guarded(load_implementation(spec), spec, timeout_s)


def _imported_torch_version() -> str:
    import torch

    return torch.__version__


def _installed_torch_version() -> str:
    """The version torch's metadata states: ``torch.__version__`` without
    the import (the workers' own, read on import, replaces it at the end)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("torch")
    except PackageNotFoundError:
        return _imported_torch_version()  # a source checkout: import it after all


def _model_specs(specs: tuple[str, ...]) -> tuple[str, ...]:
    from ..cases import installed_models

    return specs or tuple(sorted(installed_models()))


def _models(specs: tuple[str, ...]) -> tuple[str, ...]:
    """The model factories to run, each loaded and built once here so that a
    missing factory, a wrong return type or a module name the model lacks
    stops the run before any test, in one line."""
    from ..cases import CaseError, validate_case_spec

    specs = _model_specs(specs)
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
    return Plan(seed, machine, machines, workers, budget, deadline,
                clock_path=worker.get("fsdpcheck_clock"))


def _devices(choice: str, world_size: int | None = None, deferred: bool = False) -> list[str]:
    if deferred and choice != "cuda":
        # "auto": each worker looks; a forced "cuda" is checked here, once
        return ["cpu"] if choice == "cpu" else []
    import torch

    has_cuda = torch.cuda.is_available()
    if choice == "cuda" and not has_cuda:
        from ..report.verdict import EXIT_ENVIRONMENT

        # the machine's, not the command line's: a GPU runner whose device is
        # gone (or a driver torch cannot use) is retried, not fixed in the job
        pytest.exit("fsdpcheck: --fsdpcheck-device=cuda but torch sees no CUDA device (environment ERROR: "
                    "this machine, not the implementation)", returncode=EXIT_ENVIRONMENT)
    if choice == "cuda" and world_size is not None:
        from .options import spawned_ranks

        gpus = torch.cuda.device_count()
        stop = _spawned_ranks_share_a_gpu(spawned_ranks(world_size, gpus), gpus)
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

    from ..runs.launch import launched_by_torchrun
    from ..runs.world import Place, choose_device, shared_gpus

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
    """Real ranks for the distributed checks on ``device``: torchrun's world
    when launched by ``python -m pytest_fsdpcheck.distributed``, else
    --fsdpcheck-world-size capped by :func:`spawned_ranks`, else every
    visible GPU (CUDA) or 2 (CPU)."""
    from ..runs.launch import launched_by_torchrun
    from .options import spawned_ranks

    if launched_by_torchrun():
        import torch.distributed as dist

        return dist.get_world_size()
    gpus = 0
    if device == "cuda":
        import torch

        gpus = torch.cuda.device_count()
    session = get_session(config)
    if session is not None and session.world_size is not None:
        return spawned_ranks(session.world_size, gpus)
    return gpus if device == "cuda" else 2


def simulated_world_size(config) -> int | None:
    """The world users' plans are checked at in the simulated tier
    (--fsdpcheck-world-size, uncapped); None: the check's default."""
    session = get_session(config)
    return getattr(session, "world_size", None) if session is not None else None

