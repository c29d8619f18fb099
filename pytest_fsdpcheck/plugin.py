"""The pytest plugin: ``pytest --fsdpcheck`` runs the conformance suite.

Without ``--fsdpcheck`` (or ``fsdpcheck = true`` in the ini file) every hook
here returns at once: no torch import, no file written, nothing collected.
"""

from __future__ import annotations

import os
import random
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from .catalog import AREAS, area_of
from .report import PROP_IMPL, PROP_INVARIANTS, PROP_NOT_PROVIDED, PROP_VIOLATED, Matrix

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
    add("--fsdpcheck-report", "fsdpcheck_report", "write a JSON report to PATH",
        default=None, metavar="PATH")
    add("--fsdpcheck-strict", "fsdpcheck_strict",
        "fail the run on stale divergence entries and unexpected passes", ini_type="bool",
        action="store_true", default=None)


def _enabled(config) -> bool:
    value = config.getoption("fsdpcheck", None)
    return bool(value if value is not None else config.getini("fsdpcheck"))


def _setting(config, name, default=None):
    value = config.getoption(name, None)
    if value is None:
        value = config.getini(name) or None
    return default if value is None else value


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
        # installed. With no paths given, the suite is all that runs.
        args.append(str(conformance_dir()))


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


SESSION_KEY = pytest.StashKey[Session]()


def get_session(config) -> Session | None:
    return config.stash.get(SESSION_KEY, None)


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "invariant(*ids): the pytest-fsdpcheck invariant IDs a test checks"
    )
    if not _enabled(config):
        return
    config.stash[SESSION_KEY] = _build_session(config)
    from . import profiles

    profiles.activate(config.stash[SESSION_KEY].profile)
    if config.pluginmanager.hasplugin("xdist"):
        config.pluginmanager.register(XdistHooks(), "fsdpcheck-xdist")


def _build_session(config) -> Session:
    from . import divergences as div
    from .impls import BUILTIN, ImplementationError, installed_entry_points, load_implementation

    specs = config.getoption("fsdpcheck_impl") or config.getini("fsdpcheck_impl")
    if not specs and os.environ.get(ENV_IMPL):
        specs = [s.strip() for s in os.environ[ENV_IMPL].split(",") if s.strip()]
    if not specs:
        specs = ["torch", *sorted(set(installed_entry_points()) - set(BUILTIN))]
    impls = {}
    for spec in dict.fromkeys(specs):
        try:
            impls[spec] = load_implementation(spec)
        except ImplementationError as exc:
            raise pytest.UsageError(f"fsdpcheck: {exc}") from None

    profile = _setting(config, "fsdpcheck_profile", "ci")
    if profile not in PROFILES:
        raise pytest.UsageError(f"fsdpcheck: unknown profile {profile!r}; use one of {', '.join(PROFILES)}")
    devices = _devices(_setting(config, "fsdpcheck_device", "auto"))

    seed = None
    if profile != "ci":
        worker_seed = getattr(config, "workerinput", {}).get("fsdpcheck_seed")
        raw = worker_seed if worker_seed is not None else _setting(config, "fsdpcheck_seed")
        try:
            seed = int(raw) if raw is not None else random.randrange(2**32)
        except ValueError:
            raise pytest.UsageError(f"fsdpcheck: --fsdpcheck-seed must be an integer, got {raw!r}") from None

    import torch

    version = tuple(int(p) for p in torch.__version__.split("+")[0].split(".")[:2])
    entries, files = [], []
    try:
        if "torch" in impls:
            shipped = div.shipped_file_for("torch", version)
            if shipped:
                entries += div.load(shipped, default_implementation="torch")
                files.append(str(shipped))
        user_file = _setting(config, "fsdpcheck_divergences")
        if user_file:
            entries += div.load(user_file)
            files.append(user_file)
    except div.DivergenceFileError as exc:
        raise pytest.UsageError(f"fsdpcheck: {exc}") from None

    return Session(
        impls=impls,
        devices=devices,
        profile=profile,
        seed=seed,
        divergences=entries,
        divergence_files=files,
        strict=bool(_setting(config, "fsdpcheck_strict", False)),
        report_path=_setting(config, "fsdpcheck_report"),
        torch_version=torch.__version__,
    )


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
    return [
        f"fsdpcheck: torch {session.torch_version}; devices: {', '.join(session.devices)}; "
        f"profile: {session.profile}; seed: {seed}",
        "fsdpcheck: divergence files: " + (", ".join(session.divergence_files) or "none"),
        "fsdpcheck: implementations (areas provided):",
        *impl_lines,
    ]


def _invariants_of(item) -> list[str]:
    ids: list[str] = []
    for mark in item.iter_markers("invariant"):
        ids.extend(mark.args)
    return list(dict.fromkeys(ids))


def pytest_generate_tests(metafunc):
    if "fsdpcheck_impl" not in metafunc.fixturenames:
        return
    session = get_session(metafunc.config)
    if session is None:
        skip = pytest.mark.skip(reason="pytest-fsdpcheck suite: run with --fsdpcheck")
        metafunc.parametrize("fsdpcheck_impl", [pytest.param(None, marks=skip)], ids=["disabled"])
        return
    areas = {area_of(i) for i in _invariants_of(metafunc.definition)}
    params = []
    for spec, impl in session.impls.items():
        missing = [a for a in sorted(areas) if getattr(impl, a, None) is None]
        marks = [pytest.mark.skip(reason=f"not provided: {spec} has no {', '.join(missing)} area")] if missing else []
        params.append(pytest.param(impl, marks=marks, id=spec))
    metafunc.parametrize("fsdpcheck_impl", params)
    if "fsdpcheck_device" in metafunc.fixturenames:
        metafunc.parametrize("fsdpcheck_device", session.devices)


def pytest_collection_modifyitems(session, config, items):
    state = get_session(config)
    if state is None:
        return
    import hypothesis

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
        for entry in state.divergences:
            if entry.applies_to(impl_id) and (entry.matches_test(item.nodeid) or entry.match in invariants):
                state.matched_entries.add(entry)
        fn = getattr(item, "obj", None)
        if state.seed is not None and getattr(fn, "is_hypothesis_test", False):
            hypothesis.seed(state.seed)(fn)


def _impl_id(state: Session, callspec) -> str | None:
    if callspec is None or "fsdpcheck_impl" not in callspec.params:
        return None
    impl = callspec.params["fsdpcheck_impl"]
    return next((spec for spec, obj in state.impls.items() if obj is impl), None)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    report = yield
    state = get_session(item.config)
    if state is None or call.when != "call":
        return report
    from .checks import ConformanceFailure

    props = dict(item.user_properties)
    impl_id = props.get(PROP_IMPL)
    invariants = props.get(PROP_INVARIANTS)
    if impl_id is None or not invariants:
        return report
    violated = None
    if report.failed and call.excinfo is not None and isinstance(call.excinfo.value, ConformanceFailure):
        violated = call.excinfo.value.invariants
        report.user_properties = [*report.user_properties, (PROP_VIOLATED, violated)]
    if not report.failed:
        return report
    declared = [e for e in state.divergences if e.applies_to(impl_id)]
    by_test = [e for e in declared if e.matches_test(item.nodeid)]
    by_id = {e.match: e for e in declared if e.is_invariant}
    reason = None
    if by_test:
        reason = by_test[0].reason
    elif violated and all(v in by_id for v in violated):
        reason = "; ".join(f"{v}: {by_id[v].reason}" for v in violated)
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
        # Under xdist, collection (where entries are matched) runs on the
        # workers only; the controller sees the reports.
        props = dict(getattr(report, "user_properties", ()))
        impl_id, invariants = props.get(PROP_IMPL), props.get(PROP_INVARIANTS)
        if impl_id is None or not invariants:
            return
        for entry in self.state.divergences:
            if entry.applies_to(impl_id) and (entry.matches_test(report.nodeid) or entry.match in invariants):
                self.state.matched_entries.add(entry)


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    state = get_session(config)
    if state is None or hasattr(config, "workerinput"):
        return
    stale, unexpected = _divergence_findings(config, state)
    tr = terminalreporter
    tr.section("fsdpcheck conformance matrix")
    for line in state.matrix.render():
        tr.write_line(line)
    for entry in stale:
        tr.write_line(f"stale divergence ({entry.source}): {entry.match} [{entry.implementation}] matched no test")
    for inv, impl in unexpected:
        tr.write_line(f"unexpected pass: {inv} is declared divergent for {impl} but all its checks passed")
    if state.report_path:
        from .report import write_json

        write_json(
            state.report_path,
            {
                "torch": state.torch_version,
                "implementations": list(state.impls),
                "devices": state.devices,
                "profile": state.profile,
                "seed": state.seed,
                "divergence_files": state.divergence_files,
            },
            state.matrix,
            {
                "stale_divergences": [{"match": e.match, "implementation": e.implementation} for e in stale],
                "unexpected_passes": [{"invariant": i, "implementation": m} for i, m in unexpected],
            },
        )
        tr.write_line(f"fsdpcheck: JSON report written to {state.report_path}")


def _divergence_findings(config, state: Session):
    cached = getattr(state, "_findings", None)
    if cached is None:
        stale = [e for e in state.divergences if e not in state.matched_entries]
        declared: dict[str, set[str]] = {}
        for e in state.divergences:
            if e.is_invariant and e in state.matched_entries:
                for impl in state.impls if e.implementation == "*" else [e.implementation]:
                    declared.setdefault(impl, set()).add(e.match)
        unexpected = state.matrix.mark_unexpected_passes(declared)
        cached = state._findings = (stale, unexpected)
    return cached


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session, exitstatus):
    state = get_session(session.config)
    if state is None or hasattr(session.config, "workerinput"):
        return
    stale, unexpected = _divergence_findings(session.config, state)
    if state.strict and (stale or unexpected) and session.exitstatus == 0:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
    if not any(state.matrix.cells) and session.testscollected and not _areas_provided(state):
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def _areas_provided(state: Session) -> bool:
    return any(getattr(impl, area, None) is not None for impl in state.impls.values() for area in AREAS)
