"""The pytest plugin: ``pytest --fsdpcheck`` runs the conformance suite.

Without ``--fsdpcheck`` (or ``fsdpcheck = true`` in the ini file) every hook
here returns at once: no torch import, no file written, nothing collected.
"""

from __future__ import annotations

import functools
import gc
import os
import random
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from .catalog import AREAS, area_of
from .report import (
    PROP_CALLS,
    PROP_DIGEST,
    PROP_EXAMPLES,
    PROP_IMPL,
    PROP_INVARIANTS,
    PROP_KNOWN,
    PROP_NOT_PROVIDED,
    PROP_RUN,
    PROP_VIOLATED,
    Matrix,
)

PROFILES = ("ci", "dev", "fuzz")
DEVICES = ("auto", "cpu", "cuda")
ENV_IMPL = "FSDPCHECK_IMPL"


def pytest_addoption(parser):
    group = parser.getgroup("fsdpcheck", "pytest-fsdpcheck conformance suite")

    def add(flag, ini, help, ini_type=None, **kwargs):
        group.addoption(flag, dest=ini, help=f"{help} (ini: {ini})", **kwargs)
        parser.addini(ini, help, type=ini_type, default=kwargs.get("default"))

    add("--fsdpcheck", "fsdpcheck", "run the conformance suite", ini_type="bool",
        action="store_true", default=None)
    group.addoption(
        "--fsdpcheck-impl", dest="fsdpcheck_impl", action="append", default=None, metavar="NAME",
        help="implementation to check, repeatable: torch (default), reference, an installed "
        f"entry point, or package.module:attr (env: {ENV_IMPL}; ini: fsdpcheck_impl)",
    )
    parser.addini("fsdpcheck_impl", "implementations to check", type="linelist", default=[])
    add("--fsdpcheck-device", "fsdpcheck_device", "device(s) for numeric checks: cpu, cuda or auto",
        choices=DEVICES, default=None)
    add("--fsdpcheck-profile", "fsdpcheck_profile",
        "ci (deterministic, no example database), dev, or fuzz (long-running)",
        choices=PROFILES, default=None)
    add("--fsdpcheck-seed", "fsdpcheck_seed", "seed for the dev/fuzz profiles (printed in the header)",
        default=None, metavar="N")
    add("--fsdpcheck-divergences", "fsdpcheck_divergences", "declared-divergence file (TOML)",
        default=None, metavar="PATH")
    group.addoption(
        "--fsdpcheck-no-known-bugs", dest="fsdpcheck_no_known_bugs", action="store_true", default=False,
        help="explain no failure by the implementations' known bugs (see every raw finding)",
    )
    add("--fsdpcheck-report", "fsdpcheck_report", "write a JSON report to PATH",
        default=None, metavar="PATH")
    add("--fsdpcheck-timeout", "fsdpcheck_timeout",
        "seconds one implementation call may take before it fails as hung (0: no limit)",
        default=None, metavar="SECONDS")
    add("--fsdpcheck-world-size", "fsdpcheck_world_size",
        "ranks for the distributed checks (SPL-16, FS2-9); default: every visible GPU on CUDA, 2 on CPU",
        default=None, metavar="N")
    add("--fsdpcheck-strict", "fsdpcheck_strict",
        "fail the run on stale divergence entries, unexpected passes and known bugs not reproduced",
        ini_type="bool", action="store_true", default=None)
    add("--fsdpcheck-fuzz-time", "fsdpcheck_fuzz_time",
        "fuzz every property until DURATION (90s, 10m, 1h30m) is spent, each in its share (fuzz profile)",
        default=None, metavar="DURATION")
    add("--fsdpcheck-shard", "fsdpcheck_shard",
        "this machine's part I/M of every property's seed stream (dev/fuzz profiles)",
        default=None, metavar="I/M")
    add("--fsdpcheck-database", "fsdpcheck_database",
        "example database shared by machines: a folder or redis://host:port "
        "(dev/fuzz; default: under the pytest cache folder)",
        default=None, metavar="URL")


_OPTIONS = [
    (f"--{dest.replace('_', '-')}", dest)
    for dest in (
        "fsdpcheck_impl", "fsdpcheck_device", "fsdpcheck_profile", "fsdpcheck_seed", "fsdpcheck_divergences",
        "fsdpcheck_no_known_bugs", "fsdpcheck_report", "fsdpcheck_timeout", "fsdpcheck_strict",
        "fsdpcheck_world_size",
        "fsdpcheck_fuzz_time", "fsdpcheck_shard", "fsdpcheck_database",
    )
]


def _enabled(config) -> bool:
    value = config.getoption("fsdpcheck", None)
    return bool(value if value is not None else config.getini("fsdpcheck"))


def _setting(config, name, default=None):
    value = config.getoption(name, None)
    if value is None:
        value = config.getini(name) or None
    return default if value is None else value


@functools.cache
def conformance_dir() -> Path:
    from importlib.util import find_spec

    spec = find_spec("pytest_fsdpcheck.conformance")
    return Path(next(iter(spec.submodule_search_locations)))


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config, parser, args):
    ns = early_config.known_args_namespace
    enabled = ns.fsdpcheck if ns.fsdpcheck is not None else early_config.getini("fsdpcheck")
    if enabled and not getattr(ns, "help", False):
        # The suite ships inside the package: collect it from wherever it is
        # installed. With no paths given, the suite is all that runs; a test
        # id as the summary prints it (test_traversal.py::test_root_states[torch])
        # runs just that test.
        suite = conformance_dir()
        picked = False
        for i, arg in enumerate(args):
            path, sep, rest = arg.partition("::")
            name = os.path.basename(path)
            if path.endswith(".py") and not os.path.exists(path) and (suite / name).is_file():
                args[i] = str(suite / name) + sep + rest
                picked = True
            elif os.path.exists(path) and _inside(path, suite):
                picked = True
        if not picked:
            args.append(str(suite))


def _inside(path, folder: Path) -> bool:
    try:
        Path(path).resolve().relative_to(folder.resolve())
    except ValueError:
        return False
    return True


def _is_suite_test(node) -> bool:
    """Only the shipped suite's tests are the plugin's to parametrize."""
    return _inside(node.path, conformance_dir())


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
    slicer: object = None  # each property item's share of a time budget


SESSION_KEY = pytest.StashKey[Session]()


def get_session(config) -> Session | None:
    return config.stash.get(SESSION_KEY, None)


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "invariant(*ids): the pytest-fsdpcheck invariant IDs a test checks"
    )
    if not _enabled(config):
        given = [flag for flag, dest in _OPTIONS if config.getoption(dest, None) not in (None, False, [])]
        if given:
            _warn(config, f"{', '.join(given)} has no effect without --fsdpcheck")
        return
    config.stash[SESSION_KEY] = _build_session(config)
    _single_thread(config)
    from . import profiles

    session = config.stash[SESSION_KEY]
    profiles.activate(session.profile)
    _fuzz_settings(config, session)
    if config.pluginmanager.hasplugin("xdist"):
        config.pluginmanager.register(XdistHooks(), "fsdpcheck-xdist")


_THREADS_KEY = pytest.StashKey[int]()


def _single_thread(config) -> None:
    # Every tensor the suite makes has a few dozen elements: intra-op threads
    # only add hand-offs, and on a loaded 2-core CI runner (or under -n 2)
    # they made the numeric checks 6x slower. Set before the first test's
    # global-state snapshot and restored at unconfigure, so no test sees a change.
    import torch

    config.stash[_THREADS_KEY] = torch.get_num_threads()
    torch.set_num_threads(1)
    if _xdist_controller(config):
        # It runs no test, and its start-up delays every worker's.
        return
    # Dynamo's config is compared before and after every test; imported here,
    # an implementation that is the first to import Dynamo and changes its
    # config is still caught (most runs import it anyway, for SPL and ANN-7).
    try:
        import torch._dynamo  # noqa: F401
    except Exception:  # noqa: BLE001 - a torch without a usable Dynamo: nothing to compare
        pass


def _xdist_controller(config) -> bool:
    return (
        not hasattr(config, "workerinput")
        and bool(config.getoption("numprocesses", None))
        and config.getoption("dist", "no") != "no"
    )


def pytest_unconfigure(config):
    threads = config.stash.get(_THREADS_KEY, None)
    if threads is not None:
        import torch

        torch.set_num_threads(threads)


def _build_session(config) -> Session:
    from .impls import BUILTIN, ImplementationError, installed_entry_points, load_implementation
    from .isolation import Guarded
    from .known import divergences as div

    specs = config.getoption("fsdpcheck_impl") or config.getini("fsdpcheck_impl")
    if not specs and os.environ.get(ENV_IMPL):
        specs = [s.strip() for s in os.environ[ENV_IMPL].split(",") if s.strip()]
    if not specs:
        specs = ["torch", *sorted(set(installed_entry_points()) - set(BUILTIN))]
    timeout = _timeout(_setting(config, "fsdpcheck_timeout", "60"))
    report_path = _writable(config, "fsdpcheck_report")
    impls = {}
    for spec in dict.fromkeys(specs):
        try:
            impls[spec] = Guarded(load_implementation(spec), spec, timeout)
        except ImplementationError as exc:
            raise pytest.UsageError(f"fsdpcheck: {exc}") from None

    fuzz_time = _setting(config, "fsdpcheck_fuzz_time")
    profile = _setting(config, "fsdpcheck_profile", "ci" if fuzz_time is None else "fuzz")
    if profile not in PROFILES:
        raise pytest.UsageError(f"fsdpcheck: unknown profile {profile!r}; use one of {', '.join(PROFILES)}")
    if fuzz_time is not None and profile != "fuzz":
        raise pytest.UsageError(
            f"fsdpcheck: --fsdpcheck-fuzz-time runs the fuzz profile; it cannot run under --fsdpcheck-profile {profile}"
        )
    devices = _devices(_setting(config, "fsdpcheck_device", "auto"))

    world_size = _world_size(_setting(config, "fsdpcheck_world_size"))
    seed = None
    raw = _setting(config, "fsdpcheck_seed")
    if raw is not None:
        try:
            seed = int(raw)
        except ValueError:
            raise pytest.UsageError(f"fsdpcheck: --fsdpcheck-seed must be an integer, got {raw!r}") from None
        if not 0 <= seed < 2**32:
            raise pytest.UsageError(f"fsdpcheck: --fsdpcheck-seed must be in 0 .. 2**32-1, got {raw!r}")
    if profile == "ci":
        if seed is not None:
            _warn(config, "--fsdpcheck-seed has no effect under the ci profile (derandomized); use --fsdpcheck-profile dev or fuzz")
        seed = None
    else:
        worker_seed = getattr(config, "workerinput", {}).get("fsdpcheck_seed")
        seed = worker_seed if worker_seed is not None else seed if seed is not None else random.randrange(2**32)
    plan = _plan(config, profile, seed, fuzz_time)

    import torch

    from .known import judge

    entries, files = [], []
    user_file = _path_setting(config, "fsdpcheck_divergences")
    if user_file:
        try:
            entries = div.for_torch(div.load(user_file), torch.__version__)
        except div.DivergenceFileError as exc:
            raise pytest.UsageError(f"fsdpcheck: {exc}") from None
        files.append(user_file)
    known_bugs = not config.getoption("fsdpcheck_no_known_bugs")
    judge.configure(enabled=known_bugs)

    return Session(
        impls=impls,
        devices=devices,
        profile=profile,
        seed=seed,
        divergences=entries,
        divergence_files=files,
        strict=bool(_setting(config, "fsdpcheck_strict", False)),
        report_path=report_path,
        torch_version=torch.__version__,
        known_bugs=known_bugs,
        world_size=world_size,
        plan=plan,
        started=time.time(),
    )


def _plan(config, profile: str, seed, fuzz_time):
    from . import fuzz

    shard = _setting(config, "fsdpcheck_shard")
    try:
        budget = None if fuzz_time is None else fuzz.parse_duration(fuzz_time)
        machine, machines = (0, 1) if shard is None else fuzz.parse_shard(shard)
    except fuzz.FuzzOptionError as exc:
        raise pytest.UsageError(f"fsdpcheck: {exc}") from None
    if profile == "ci":
        for flag, dest in (("--fsdpcheck-shard", "fsdpcheck_shard"), ("--fsdpcheck-database", "fsdpcheck_database")):
            if _setting(config, dest) is not None:
                _warn(config, f"{flag} has no effect under the ci profile (derandomized, no example database); "
                      "use --fsdpcheck-profile dev or fuzz")
        return None
    worker = getattr(config, "workerinput", {})
    deadline = worker.get("fsdpcheck_deadline") or (None if budget is None else time.time() + budget)
    # the controller counts the workers it will start (for the header and report)
    workers = worker.get("workercount") or (config.getoption("numprocesses") if _xdist_controller(config) else 1)
    return fuzz.Plan(seed, profile, machine, machines, workers, budget, deadline)


def _under_hypofuzz(config) -> bool:
    # HypoFuzz collects through pytest.main(plugins=[its collector]); the
    # package never imports it (AGPL), it only recognises its collector.
    return any(type(p).__module__.partition(".")[0] == "hypofuzz" for p in config.pluginmanager.get_plugins())


def _fuzz_settings(config, session: Session) -> None:
    """The example database and engine settings of the suite's properties."""
    from hypothesis import settings

    from . import fuzz, profiles

    session.under_hypofuzz = _under_hypofuzz(config)
    url = _setting(config, "fsdpcheck_database")
    if session.under_hypofuzz:
        # HypoFuzz fuzzes only tests whose database is Hypothesis' default
        # one and that are not derandomized, whatever the profile.
        if url is not None:
            _warn(config, "--fsdpcheck-database is not used under HypoFuzz: it keeps examples in "
                  "Hypothesis' default database (set one in a Hypothesis settings profile)")
        if settings().database is None:
            # HypoFuzz's workers die on a missing database and it then reports
            # "a failing input for every test": refuse here, with the cause.
            profile = getattr(settings, "get_current_profile_name", lambda: None)()
            cause = (" (Hypothesis loads its 'ci' profile, which keeps none, where a CI variable is set)"
                     if profile == "ci" else f" (profile {profile!r})" if profile else "")
            raise pytest.UsageError(
                f"fsdpcheck: HypoFuzz needs an example database and Hypothesis' default settings have none"
                f"{cause}: unset CI, or load a settings profile that keeps a database")
        profiles.override(derandomize=False, database=settings().database)
        session.database = repr(settings().database)
        return
    if session.plan is None:
        return
    if url is None:
        url = _cache_folder(config)
    elif "://" not in url:
        url = _path_setting(config, "fsdpcheck_database")
    try:
        profiles.override(database=fuzz.open_database(url))
    except fuzz.FuzzOptionError as exc:
        raise pytest.UsageError(f"fsdpcheck: {exc}") from None
    session.database = url
    if session.plan.budget_s is not None:
        profiles.budgeted()


def _cache_folder(config) -> str:
    try:
        cache_dir = config.getini("cache_dir")
    except ValueError:  # -p no:cacheprovider: its ini key is unknown, the folder is still the usual one
        cache_dir = ".pytest_cache"
    return str(config.rootpath / cache_dir / "fsdpcheck" / "examples")


def _warn(config, message: str) -> None:
    # Once, from the controller: workers would repeat it.
    if not hasattr(config, "workerinput"):
        config.issue_config_time_warning(pytest.PytestConfigWarning(f"fsdpcheck: {message}"), stacklevel=2)


MAX_TIMEOUT_S = 24 * 3600


def _timeout(raw) -> float:
    try:
        value = float(raw)
    except (TypeError, ValueError):
        value = float("nan")
    if not 0 <= value <= MAX_TIMEOUT_S:  # also rejects nan
        raise pytest.UsageError(
            f"fsdpcheck: --fsdpcheck-timeout must be a number of seconds from 0 (no limit) to {MAX_TIMEOUT_S}, got {raw!r}"
        )
    return value


MAX_WORLD_SIZE = 4096


def _world_size(raw) -> int | None:
    if raw is None:
        return None
    try:
        value = int(str(raw).strip())
    except ValueError:
        value = 0
    if not 1 <= value <= MAX_WORLD_SIZE:
        raise pytest.UsageError(
            f"fsdpcheck: --fsdpcheck-world-size must be a whole number of ranks from 1 to {MAX_WORLD_SIZE}, got {raw!r}"
        )
    return value


def world_size_for(config, device: str) -> int:
    """Ranks for the distributed checks on ``device``: torchrun's world when
    launched by ``python -m pytest_fsdpcheck.distributed``, else
    --fsdpcheck-world-size, else every visible GPU (CUDA) or 2 (CPU)."""
    from .checks.ddp_run import launched_by_torchrun

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


def _path_setting(config, name: str) -> str | None:
    """A path option; from the ini file it is relative to that file's folder."""
    value = config.getoption(name, None)
    if value is not None:
        return value
    value = config.getini(name) or None
    if value is not None and config.inipath is not None and not os.path.isabs(value):
        value = str(config.inipath.parent / value)
    return value


def _writable(config, name: str) -> str | None:
    path = _path_setting(config, name)
    if path is None:
        return None
    folder = os.path.dirname(os.path.abspath(path)) or "."
    if os.path.isdir(path):
        raise pytest.UsageError(f"fsdpcheck: --fsdpcheck-report {path!r} is a directory; give a file name")
    if not os.path.isdir(folder):
        raise pytest.UsageError(f"fsdpcheck: --fsdpcheck-report {path!r}: folder {folder!r} does not exist")
    if not os.access(folder, os.W_OK):
        raise pytest.UsageError(f"fsdpcheck: --fsdpcheck-report {path!r}: folder {folder!r} is not writable")
    return path


def _devices(choice: str) -> list[str]:
    if choice not in DEVICES:
        raise pytest.UsageError(f"fsdpcheck: unknown device {choice!r}; use one of {', '.join(DEVICES)}")
    import torch

    has_cuda = torch.cuda.is_available()
    if choice == "cuda" and not has_cuda:
        raise pytest.UsageError("fsdpcheck: --fsdpcheck-device=cuda but torch sees no CUDA device")
    if choice == "auto":
        return ["cpu", "cuda"] if has_cuda else ["cpu"]
    return [choice]


class XdistHooks:
    """Registered only when pytest-xdist is present."""

    @pytest.hookimpl(optionalhook=True)
    def pytest_configure_node(self, node):
        session = get_session(node.config)
        if session is not None and session.seed is not None:
            node.workerinput["fsdpcheck_seed"] = session.seed
        if session is not None and session.plan is not None and session.plan.deadline is not None:
            node.workerinput["fsdpcheck_deadline"] = session.plan.deadline

    @pytest.hookimpl(optionalhook=True)
    def pytest_handlecrashitem(self, crashitem, report, sched):
        # A worker died inside a test: its report carries no properties, so
        # the matrix would show nothing. Charge the crash to the test's cells.
        session = get_session(sched.config)
        tagged = _tags_from_nodeid(session, crashitem) if session is not None else None
        if tagged is not None:
            impl, invariants = tagged
            report.user_properties = [*report.user_properties, (PROP_INVARIANTS, invariants), (PROP_IMPL, impl)]

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node, error):
        # Only workers collect; they report which divergence entries matched
        # and which tests -k or node ids deselected.
        session = get_session(node.config)
        if session is not None:
            output = getattr(node, "workeroutput", {})
            for index in output.get("fsdpcheck_matched", ()):
                session.matched_entries.add(session.divergences[index])
            session.deselected.update(tuple(pair) for pair in output.get("fsdpcheck_deselected", ()))


def pytest_report_header(config):
    session = get_session(config)
    if session is None:
        return None
    from .contract import provided_areas

    impl_lines = [
        f"  {spec}: {', '.join(provided_areas(obj)) or 'no areas'}" for spec, obj in session.impls.items()
    ]
    seed = (
        "derandomized (ci profile)"
        if session.seed is None
        else f"{session.seed} (replay with --fsdpcheck-seed={session.seed})"
    )
    from .known import active_bugs

    known = [
        f"  {spec}: {', '.join(b.id for b in active_bugs(obj, session.torch_version))}"
        for spec, obj in session.impls.items()
        if active_bugs(obj, session.torch_version)
    ]
    return [
        f"fsdpcheck: torch {session.torch_version}; devices: {', '.join(session.devices)}; "
        f"profile: {session.profile}; seed: {seed}",
        *_plan_header(session),
        "fsdpcheck: divergence files: " + (", ".join(session.divergence_files) or "none"),
        *(
            ["fsdpcheck: known bugs modelled (python -m pytest_fsdpcheck.known):", *known]
            if known and session.known_bugs
            else ["fsdpcheck: known bugs: " + ("none for these implementations" if session.known_bugs else "off")]
        ),
        "fsdpcheck: implementations (areas provided):",
        *impl_lines,
    ]


def _plan_header(session: Session) -> list[str]:
    plan = session.plan
    if plan is None:
        return []
    first = plan.stream(0) + 1
    streams = f"stream {first}" if plan.workers == 1 else f"streams {first}-{first + plan.workers - 1}"
    parts = [f"machine {plan.machine + 1}/{plan.machines} x {plan.workers} worker(s): {streams} of {plan.streams}"]
    if plan.budget_s is not None:
        parts.append(f"fuzz time {plan.budget_s:g} s, every property in rounds until its share is spent")
    parts.append(f"example database: {session.database}")
    return ["fsdpcheck: " + "; ".join(parts)]


def _tags_from_nodeid(state: Session, nodeid: str):
    """(implementation, invariant IDs) of a suite test, from its id alone
    (the xdist controller collects nothing)."""
    import importlib

    path, _, name = nodeid.partition("::")
    function, _, params = name.partition("[")
    module = os.path.basename(path)[:-3] if path.endswith(".py") else ""
    try:
        fn = getattr(importlib.import_module(f"pytest_fsdpcheck.conformance.{module}"), function)
    except (ImportError, AttributeError):
        return None
    invariants = [i for mark in getattr(fn, "pytestmark", []) if mark.name == "invariant" for i in mark.args]
    params = params.rstrip("]")
    impl = next((s for s in state.impls if params == s or params.startswith(s + "-")), None)
    return (impl, invariants) if impl and invariants else None


def _invariants_of(item) -> list[str]:
    ids: list[str] = []
    for mark in item.iter_markers("invariant"):
        ids.extend(mark.args)
    return list(dict.fromkeys(ids))


def pytest_generate_tests(metafunc):
    if "fsdpcheck_impl" not in metafunc.fixturenames or not _is_suite_test(metafunc.definition):
        return
    session = get_session(metafunc.config)
    if session is None:
        skip = pytest.mark.skip(reason="pytest-fsdpcheck suite: run with --fsdpcheck")
        metafunc.parametrize("fsdpcheck_impl", [pytest.param(None, marks=skip)], ids=["disabled"])
        return
    areas = {area_of(i) for i in _invariants_of(metafunc.definition)}
    # A splitting check asking for a graph form runs once per form, the form
    # in its id ("torch-module"), so one form's known bug hides nothing in the other.
    forms = "fsdpcheck_graph_form" in metafunc.fixturenames
    params = []
    for spec, impl in session.impls.items():
        missing = [a for a in sorted(areas) if getattr(impl, a, None) is None]
        marks = [pytest.mark.skip(reason=f"not provided: {spec} has no {', '.join(missing)} area")] if missing else []
        if not forms:
            params.append(pytest.param(impl, marks=marks, id=spec))
            continue
        from .contract import GRAPH_FORMS, accepted_forms

        accepted = accepted_forms(impl.splitting) if not missing else GRAPH_FORMS
        for form in GRAPH_FORMS:
            reason = f"not provided: {spec} accepts {' and '.join(accepted)}-form graphs, not {form} form"
            form_marks = marks or ([] if form in accepted else [pytest.mark.skip(reason=reason)])
            params.append(pytest.param(impl, form, marks=form_marks, id=f"{spec}-{form}"))
    metafunc.parametrize(("fsdpcheck_impl", "fsdpcheck_graph_form") if forms else "fsdpcheck_impl", params)
    if "fsdpcheck_device" in metafunc.fixturenames:
        metafunc.parametrize("fsdpcheck_device", session.devices)
    plan = session.plan
    if plan is not None and plan.workers > 1 and getattr(metafunc.function, "is_hypothesis_test", False):
        # one item per worker, each running its own part of the seed stream
        metafunc.fixturenames.append("fsdpcheck_shard")
        shards = range(plan.workers)
        metafunc.parametrize("fsdpcheck_shard", shards, ids=[f"shard{k + 1}of{plan.workers}" for k in shards])


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(session, config, items):
    # tryfirst: before -k/-m deselect anything, so an entry whose test exists
    # but was not selected is not called stale.
    state = get_session(config)
    if state is None:
        return
    from .known import divergences as div

    for item in items:
        invariants = _invariants_of(item)
        callspec = getattr(item, "callspec", None)
        impl_id = _impl_id(state, callspec)
        if not invariants or impl_id is None:
            continue
        item.user_properties.append((PROP_INVARIANTS, invariants))
        item.user_properties.append((PROP_IMPL, impl_id))
        impl = callspec.params["fsdpcheck_impl"]
        if any(getattr(impl, area_of(i), None) is None for i in invariants):
            item.user_properties.append((PROP_NOT_PROVIDED, True))
        state.matched_entries.update(div.matching(state.divergences, impl_id, item.nodeid, invariants))
        item._traceback_filter = functools.partial(_trim_traceback, item)
        fn = getattr(item, "obj", None)
        if getattr(fn, "is_hypothesis_test", False):
            from .fuzz import instrument

            instrument(fn)


def _group_by_corpus_model(items) -> None:
    """The corpus tests of one model made adjacent, in place, every other item
    left where it is. A worker builds and captures each model it meets once
    (functools.cache), and xdist hands out consecutive items in chunks, so
    grouped, a model is mostly built by one worker instead of by each."""
    slots = [i for i, item in enumerate(items)
             if getattr(item, "path", None) is not None and item.path.name == _CORPUS_MODULE and _is_suite_test(item)
             and "model" in getattr(getattr(item, "callspec", None), "params", {})]
    first_seen: dict[str, int] = {}
    for i in slots:
        first_seen.setdefault(items[i].callspec.params["model"], i)
    grouped = sorted((items[i] for i in slots), key=lambda item: first_seen[item.callspec.params["model"]])
    for i, item in zip(slots, grouped, strict=True):
        items[i] = item


_CORPUS_MODULE = "test_golden.py"


def pytest_collection_finish(session):
    state = get_session(session.config)
    if state is None:
        return
    _group_by_corpus_model(session.items)
    if state.plan is None or state.plan.budget_s is None:
        return
    from .fuzz import Slicer

    def is_budgeted(item):
        props = dict(item.user_properties)
        return getattr(getattr(item, "obj", None), "is_hypothesis_test", False) and PROP_IMPL in props and PROP_NOT_PROVIDED not in props

    def order(item):
        # The fixed cases first: the properties then share whatever time is
        # left. Shard-major: xdist hands out consecutive items in chunks, so
        # a property's shards far apart land on different workers.
        shard = getattr(item, "callspec", None) and item.callspec.params.get("fsdpcheck_shard", 0) or 0
        return (bool(is_budgeted(item)), shard)

    session.items.sort(key=order)
    budgeted = [item.nodeid for item in session.items if is_budgeted(item)]
    state.slicer = Slicer(state.plan, {nodeid: i for i, nodeid in enumerate(budgeted)})


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem):
    state = get_session(pyfuncitem.config)
    if (
        state is None
        or state.plan is None
        or state.under_hypofuzz
        or PROP_IMPL not in dict(pyfuncitem.user_properties)
        or not getattr(pyfuncitem.obj, "is_hypothesis_test", False)
    ):
        return None
    from .fuzz import run_property

    run_property(pyfuncitem, state.plan, state.slicer)
    return True


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_protocol(item, nextitem):
    # Under a time budget a worker's last item runs to the deadline. xdist
    # holds a worker's last item back until it has more or shuts down, so
    # ``nextitem is None`` means nothing else will come to this worker.
    if nextitem is None and _is_suite_test(item):
        item._fsdpcheck_last_here = True


def _impl_id(state: Session, callspec) -> str | None:
    if callspec is None or "fsdpcheck_impl" not in callspec.params:
        return None
    impl = callspec.params["fsdpcheck_impl"]
    return next((spec for spec, obj in state.impls.items() if obj is impl), None)


def _count_examples(statistics: str) -> int:
    # Hypothesis only exposes per-test statistics as text; count every case
    # it ran (passing, failing, invalid) over all phases.
    import re

    return sum(sum(map(int, m)) for m in re.findall(r"(\d+) passing, (\d+) failing, and (\d+) invalid", statistics))


def _trim_traceback(item, excinfo):
    # Show the conformance test's line and the implementation's frames; the
    # suite's own machinery (checkers, generators, plugin) is noise to a user.
    from .isolation import is_machinery

    default = type(item)._traceback_filter(item, excinfo)
    trimmed = default.filter(lambda entry: not is_machinery(entry))
    return trimmed if len(trimmed) else default


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    state = get_session(item.config)
    if state is None or PROP_IMPL not in dict(item.user_properties):
        return (yield)
    from . import profiles
    from .fuzz import start_tally
    from .isolation import LeakedGlobalState, global_state, leaks, restore
    from .known import judge

    before = global_state()
    impl = item.callspec.params["fsdpcheck_impl"]
    impl.start_test()
    profiles.reset_digest()
    tally = start_tally()
    judge.reset()
    # The cyclic collector rescans torch's and Dynamo's ~1M long-lived
    # objects again and again while a test allocates: a quarter of the
    # suite's time went there, half of a 100,000-module tree test. One
    # collection after the test instead; ci and dev budgets keep the
    # garbage of one test small, fuzz runs long and keeps the collector.
    pause_gc = state.profile != "fuzz" and gc.isenabled()
    if pause_gc:
        gc.disable()
    try:
        return (yield)
    finally:
        if pause_gc:
            gc.enable()
        item.user_properties.append((PROP_CALLS, impl.calls))
        item.user_properties.append((PROP_DIGEST, profiles.digest()))
        if getattr(item.obj, "is_hypothesis_test", False):
            run = {"examples": tally.examples, "area": area_of(dict(item.user_properties)[PROP_INVARIANTS][0]),
                   "worker": getattr(item.config, "workerinput", {}).get("workerid", "main"), **tally.to_json()}
            if hasattr(item, "_fsdpcheck_rounds"):
                run.update(rounds=item._fsdpcheck_rounds, ended=round(time.time(), 3))
            item.user_properties.append((PROP_RUN, run))
        if judge.explained():
            item.user_properties.append((PROP_KNOWN, judge.explained()))
            tagged = dict(item.user_properties)[PROP_INVARIANTS]
            hit = {i for e in judge.explained().values() for i in e["invariants"]} & set(tagged)
            # an explained exception stopped every check of the test
            item.user_properties.append((PROP_VIOLATED, sorted(hit or tagged)))
        found = leaks(before, global_state())
        if found:
            restore(before)
            if sys.exc_info()[0] is None:
                impl = dict(item.user_properties)[PROP_IMPL]
                raise LeakedGlobalState(
                    f"{impl} left process-wide state changed: {'; '.join(found)} (restored for the next tests)"
                )


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    state = get_session(item.config)
    failure = call.excinfo.value if call.excinfo is not None else None
    from .checks import ConformanceFailure

    has_example = isinstance(failure, ConformanceFailure) and failure.example and state is not None
    if has_example:
        failure.example_in_section = True
    report = yield
    if has_example:
        report.sections.append(("fsdpcheck reproducer", failure.example + "\n"))
    if report.failed and call.when == "call" and hasattr(item, "_fsdpcheck_replay"):
        at_round = getattr(item, "_fsdpcheck_round", None)
        report.sections.append(
            ("fsdpcheck replay", item._fsdpcheck_replay + ("" if at_round is None else f"; failed in round {at_round + 1}") + "\n")
        )
    hung = getattr(getattr(item, "callspec", None), "params", {}).get("fsdpcheck_impl")
    if report.failed and getattr(hung, "hung", None):
        # Hypothesis replays a hang as "flaky" (the replay fails fast): say what happened.
        report.longrepr = f"ImplementationTimeout: {hung.hung}"
    if state is None:
        return report
    if call.when == "teardown" and hasattr(item, "hypothesis_statistics"):
        report.user_properties = [*report.user_properties, (PROP_EXAMPLES, _count_examples(item.hypothesis_statistics))]
    if call.when != "call":
        return report

    props = dict(item.user_properties)
    impl_id = props.get(PROP_IMPL)
    invariants = props.get(PROP_INVARIANTS)
    if impl_id is None or not invariants:
        return report
    violated = None
    if report.failed and call.excinfo is not None and isinstance(call.excinfo.value, ConformanceFailure):
        violated = call.excinfo.value.invariants
        report.user_properties = [*report.user_properties, (PROP_VIOLATED, violated)]
    known = props.get(PROP_KNOWN)
    if report.passed and known:
        # Every failing example met was explained: the property is "known", not "pass".
        report.outcome = "skipped"
        report.wasxfail = "known: " + ", ".join(f"{bug} ({e['examples']} examples)" for bug, e in known.items()) + (
            " — python -m pytest_fsdpcheck.known show ID"
        )
        return report
    if not report.failed:
        return report
    from .known.divergences import declared_reason

    reason = declared_reason(state.divergences, impl_id, item.nodeid, violated)
    if reason is not None:
        report.outcome = "skipped"
        report.wasxfail = f"declared divergence: {reason}"
    return report


@pytest.hookimpl(trylast=True)
def pytest_sessionstart(session):
    state = get_session(session.config)
    if state is not None:
        session.config.pluginmanager.register(_MatrixRecorder(state), "fsdpcheck-matrix")


class _MatrixRecorder:
    def __init__(self, state: Session):
        self.state = state
        for spec in state.impls:
            state.matrix.add_impl(spec)

    def pytest_runtest_logreport(self, report):
        self.state.matrix.record(report)


@pytest.hookimpl(trylast=True)
def pytest_deselected(items):
    state = get_session(items[0].config) if items else None
    if state is None:
        return
    for item in items:
        impl_id = _impl_id(state, getattr(item, "callspec", None))
        if impl_id is not None:
            state.deselected.update((impl_id, inv) for inv in _invariants_of(item))


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    state = get_session(config)
    if state is None or hasattr(config, "workerinput"):
        return
    stale, unexpected, unreproduced = _divergence_findings(config, state)
    tr = terminalreporter
    tr.section("fsdpcheck conformance matrix")
    for line in state.matrix.render():
        tr.write_line(line)
    for line in _known_lines(state, unreproduced):
        tr.write_line(line)
    for entry in stale:
        tr.write_line(f"stale divergence ({entry.source}): {entry.match} [{entry.implementation}] matched no test")
    for inv, impl in unexpected:
        tr.write_line(f"unexpected pass: {inv} is declared divergent for {impl} but all its checks passed")
    from .report import exploration, render_exploration

    explored = exploration(state.matrix.per_test, time.time() - state.started)
    if state.profile != "ci" and explored["examples"]:
        tr.section("fsdpcheck exploration")
        for line in render_exploration(explored):
            tr.write_line(line)
    if state.report_path:
        from .report import write_json

        try:
            write_json(
                state.report_path,
                {
                    "torch": state.torch_version,
                    "implementations": list(state.impls),
                    "devices": state.devices,
                    "profile": state.profile,
                    "seed": state.seed,
                    "divergence_files": state.divergence_files,
                    **_plan_json(state),
                },
                state.matrix,
                {
                    "stale_divergences": [{"match": e.match, "implementation": e.implementation} for e in stale],
                    "unexpected_passes": [{"invariant": i, "implementation": m} for i, m in unexpected],
                    "known_bugs": _known_json(state, unreproduced),
                    "exploration": explored,
                },
            )
        except OSError as exc:
            tr.write_line(f"fsdpcheck: ERROR: cannot write the JSON report {state.report_path}: {exc.strerror or exc}", red=True)
        else:
            tr.write_line(f"fsdpcheck: JSON report written to {state.report_path}")


def _plan_json(state: Session) -> dict:
    plan = state.plan
    if plan is None:
        return {}
    return {"shard": f"{plan.machine + 1}/{plan.machines}", "workers": plan.workers,
            "fuzz_time_s": plan.budget_s, "deadline": plan.deadline, "database": state.database}


def _divergence_findings(config, state: Session):
    """(stale entries, unexpected passes, known bugs not reproduced); all
    empty after an interrupted run or one that stopped early (-x)."""
    cached = getattr(state, "_findings", None)
    if cached is None:
        if state.incomplete:
            cached = state._findings = ([], [], [])
            return cached
        # An entry for an implementation not under test cannot be judged stale.
        stale = [
            e
            for e in state.divergences
            if e not in state.matched_entries and (e.implementation == "*" or e.implementation in state.impls)
        ]
        declared: dict[str, set[str]] = {}
        for e in state.divergences:
            if e.is_invariant and e in state.matched_entries:
                for impl in state.impls if e.implementation == "*" else [e.implementation]:
                    if (impl, e.match) not in state.deselected:
                        declared.setdefault(impl, set()).add(e.match)
        unexpected = state.matrix.mark_unexpected_passes(declared)
        cached = state._findings = (stale, unexpected, _unreproduced(state))
    return cached


def _unreproduced(state: Session) -> list[tuple[str, object]]:
    """Known bugs whose range covers this torch, whose tests all ran, and that
    no example showed."""
    if not state.known_bugs:
        return []
    from .known import active_bugs

    found = []
    for spec, impl in state.impls.items():
        for bug in active_bugs(impl, state.torch_version):
            cells = [(inv, spec) for inv in bug.invariants]
            if any((spec, inv) in state.deselected for inv in bug.invariants):
                continue
            ran = any(state.matrix.outcome(*cell) not in (None, "not provided", "skipped") for cell in cells)
            if ran and not state.matrix.known_examples.get((spec, bug.id)):
                found.append((spec, bug))
    return found


def _known_lines(state: Session, unreproduced) -> list[str]:

    lines = []
    for number, (spec, bug_id) in enumerate(state.matrix.known_order, 1):
        n = state.matrix.known_examples[(spec, bug_id)]
        lines.append(f"[{number}] known bug {bug_id} [{spec}]: explained {n} examples; "
                     f"reproducer: python -m pytest_fsdpcheck.known show {bug_id}")
    for spec, bug in unreproduced:
        lines.append(f"known bug {bug.id} [{spec}]: not reproduced on torch {state.torch_version} "
                     f"(declared for {bug.affects or 'every version'}, seen {bug.seen_range}) — fixed?")
    return lines


def _known_json(state: Session, unreproduced) -> list[dict]:
    from .known import active_bugs

    missing = {(spec, bug.id) for spec, bug in unreproduced}
    return [
        {
            "id": bug.id,
            "implementation": spec,
            "invariants": list(bug.invariants),
            "affects": bug.affects,
            "seen": list(bug.seen),
            "examples": state.matrix.known_examples.get((spec, bug.id), 0),
            "not_reproduced": (spec, bug.id) in missing,
        }
        for spec, impl in state.impls.items()
        for bug in active_bugs(impl, state.torch_version)
    ]


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session, exitstatus):
    state = get_session(session.config)
    if state is None:
        return
    if hasattr(session.config, "workerinput"):
        matched = [i for i, e in enumerate(state.divergences) if e in state.matched_entries]
        session.config.workeroutput["fsdpcheck_matched"] = matched
        session.config.workeroutput["fsdpcheck_deselected"] = sorted(state.deselected)
        return
    # Interrupted, stopped early (-x), or nothing ran: no entry can be judged stale or fixed.
    state.incomplete = (
        exitstatus == pytest.ExitCode.INTERRUPTED
        or bool(session.shouldstop or session.shouldfail)
        or not any(state.matrix.cells)
    )
    stale, unexpected, unreproduced = _divergence_findings(session.config, state)
    if state.strict and (stale or unexpected or unreproduced) and session.exitstatus == 0:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
    if not any(state.matrix.cells) and session.testscollected and not _areas_provided(state):
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def _areas_provided(state: Session) -> bool:
    return any(getattr(impl, area, None) is not None for impl in state.impls.values() for area in AREAS)
