"""The suite's options: one table of flags and ini names, and the frozen
:class:`Settings` read from them.

Every value is parsed and validated here, before the first test runs; a bad
one is a one-line ``pytest.UsageError`` (exit 4). Nothing here imports torch:
what needs the installed torch (a CUDA device, implementations) is checked
when the session is built from these settings.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

import pytest

from ..core.ranks import SPAWNED_RANKS_CAP, spawned_ranks, spawned_ranks_note  # noqa: F401 (the options' users import them here)

PROFILES = ("ci", "dev", "fuzz")
DEVICES = ("auto", "cpu", "cuda")
ENV_IMPL = "FSDPCHECK_IMPL"
MAX_TIMEOUT_S = 24 * 3600
MAX_WORLD_SIZE = 4096
DEFAULT_TIMEOUT_S = 60.0
#: FS2-9 configurations drawn per factory: each spawns a world and compiles
#: the model twice, so one model's checks stay within minutes on 2 cores
DEFAULT_PLAN_EXAMPLES = 1
MAX_PLAN_EXAMPLES = 1000


@dataclass(frozen=True)
class Option:
    flag: str
    help: str
    #: pytest's ini type ("bool", "linelist") or None for a string; None: no ini key
    ini_type: str | None = "string"
    kwargs: tuple = ()
    #: its value is a file the run writes (under torchrun, rank 0 alone writes it)
    writes: bool = False

    @property
    def dest(self) -> str:
        return self.flag[2:].replace("-", "_")


OPTIONS = (
    Option("--fsdpcheck", "run the conformance suite", "bool", (("action", "store_true"),)),
    Option("--fsdpcheck-impl",
           "implementation to check, repeatable: torch (default), reference, an installed "
           f"entry point, or package.module:attr (env: {ENV_IMPL})",
           "linelist", (("action", "append"), ("metavar", "NAME"))),
    Option("--fsdpcheck-model",
           "your model factory, repeatable: package.module:factory or an installed entry point "
           "(group pytest_fsdpcheck.models; default: every installed one); each model runs through "
           "every area that applies, its FSDP2 plan's fully_shard calls recorded and judged",
           "linelist", (("action", "append"), ("metavar", "FACTORY"))),
    Option("--fsdpcheck-device", "device(s) for numeric checks: cpu, cuda or auto",
           kwargs=(("choices", DEVICES),)),
    Option("--fsdpcheck-profile", "ci (deterministic, no example database), dev, or fuzz (long-running)",
           kwargs=(("choices", PROFILES),)),
    Option("--fsdpcheck-seed", "seed for the dev/fuzz profiles (printed in the header)",
           kwargs=(("metavar", "N"),)),
    Option("--fsdpcheck-divergences", "declared-divergence file (TOML)", kwargs=(("metavar", "PATH"),)),
    Option("--fsdpcheck-baseline",
           "baseline file (TOML, divergence entries): its failures are expected; a new FAIL, an entry "
           "that no longer fails, or one whose `until` torch release is installed fails the run",
           kwargs=(("metavar", "PATH"),)),
    Option("--fsdpcheck-write-baseline",
           "write this run's FAIL cells (one entry per test, invariant and failing example) to PATH as a baseline file",
           kwargs=(("metavar", "PATH"),), writes=True),
    Option("--fsdpcheck-no-known-bugs",
           "explain no failure by the implementations' known bugs (see every raw finding)",
           None, (("action", "store_true"),)),
    Option("--fsdpcheck-report", "write a JSON report to PATH", kwargs=(("metavar", "PATH"),), writes=True),
    Option("--fsdpcheck-html",
           "write the report as one self-contained HTML page to PATH (with pytest-html, --html=PATH "
           "carries the same sections)",
           kwargs=(("metavar", "PATH"),), writes=True),
    Option("--fsdpcheck-junit",
           "write JUnit XML to PATH with one testcase per invariant and implementation (FAIL a failure "
           "with its reproducer, known and n/p skipped with the bug or reason)",
           kwargs=(("metavar", "PATH"),), writes=True),
    Option("--fsdpcheck-timeout",
           "seconds one implementation call may take before it fails as hung (0: no limit)",
           kwargs=(("metavar", "SECONDS"),)),
    Option("--fsdpcheck-plan-examples",
           f"FS2-9 configurations drawn per model factory (default {DEFAULT_PLAN_EXAMPLES}; each spawns a world, "
           "so a failing one is reported as drawn, not shrunk)",
           kwargs=(("metavar", "N"),)),
    Option("--fsdpcheck-world-size",
           "the world size users' plans are checked at in the simulated tier (FS2-10, in one process; default 8); "
           "also the real ranks of SPL-16 and FS2-9, at most 3 on CPU or the visible GPUs on CUDA "
           "(default: every visible GPU on CUDA, 2 and 3 on CPU)",
           kwargs=(("metavar", "N"),)),
    Option("--fsdpcheck-strict",
           "fail the run on stale divergence entries, unexpected passes, known bugs not reproduced "
           "and checks not provided that this torch provides",
           "bool", (("action", "store_true"),)),
    Option("--fsdpcheck-fuzz-time",
           "fuzz every property until DURATION (90s, 10m, 1h30m) is spent, each in its share (fuzz profile)",
           kwargs=(("metavar", "DURATION"),)),
    Option("--fsdpcheck-shard", "this machine's part I/M of every property's seed stream (dev/fuzz profiles)",
           kwargs=(("metavar", "I/M"),)),
    Option("--fsdpcheck-database",
           "example database shared by machines: a folder or redis://host:port "
           "(dev/fuzz; default: under the pytest cache folder)",
           kwargs=(("metavar", "URL"),)),
)


def add_options(parser) -> None:
    group = parser.getgroup("fsdpcheck", "pytest-fsdpcheck conformance suite")
    for option in OPTIONS:
        kwargs = dict(option.kwargs)
        help_text = option.help if option.ini_type is None else f"{option.help} (ini: {option.dest})"
        default = False if option.ini_type is None else None
        group.addoption(option.flag, dest=option.dest, help=help_text, default=default, **kwargs)
        if option.ini_type is not None:
            ini_type = None if option.ini_type == "string" else option.ini_type
            parser.addini(option.dest, option.help, type=ini_type, default=[] if ini_type == "linelist" else None)


def enabled(config) -> bool:
    value = config.getoption("fsdpcheck", None)
    return bool(value if value is not None else config.getini("fsdpcheck"))


def warn(config, message: str) -> None:
    # Once, from the controller: workers would repeat it.
    if not hasattr(config, "workerinput"):
        config.issue_config_time_warning(pytest.PytestConfigWarning(f"fsdpcheck: {message}"), stacklevel=2)


def warn_if_given_while_disabled(config) -> None:
    given = [o.flag for o in OPTIONS[1:] if config.getoption(o.dest, None) not in (None, False, [])]
    if given:
        warn(config, f"{', '.join(given)} has no effect without --fsdpcheck")


#: the options whose value is a file the run writes
WRITTEN_BY = tuple(option.flag for option in OPTIONS if option.writes)


@dataclass(frozen=True)
class Settings:
    """Every option's value, parsed and validated; each default is what a
    run given no option gets (``read_settings``)."""

    impl_specs: tuple[str, ...] = ()  # empty: the default (torch and installed entry points)
    model_specs: tuple[str, ...] = ()  # empty: every installed model entry point
    device: str = "auto"
    profile: str = "ci"
    seed: int | None = None  # as given; the session draws one for dev/fuzz when None
    divergences: str | None = None
    known_bugs: bool = True
    report: str | None = None
    html: str | None = None
    junit: str | None = None
    timeout_s: float = DEFAULT_TIMEOUT_S
    plan_examples: int = DEFAULT_PLAN_EXAMPLES
    world_size: int | None = None
    strict: bool = False
    fuzz_time_s: float | None = None
    shard: tuple[int, int] = (0, 1)  # (machine, machines), 0-based machine
    database: str | None = None  # a URL or an absolute folder
    baseline: str | None = None  # a divergence file whose findings fail the run
    write_baseline: str | None = None  # where to write this run's FAIL cells


def read_settings(config) -> Settings:
    specs = config.getoption("fsdpcheck_impl") or config.getini("fsdpcheck_impl")
    if not specs and os.environ.get(ENV_IMPL):
        specs = [s.strip() for s in os.environ[ENV_IMPL].split(",") if s.strip()]
    timeout = _timeout(_value(config, "fsdpcheck_timeout", DEFAULT_TIMEOUT_S))
    report = _writable_report(_path(config, "fsdpcheck_report"))
    html = _writable_report(_path(config, "fsdpcheck_html"), "--fsdpcheck-html")
    junit = _writable_report(_path(config, "fsdpcheck_junit"), "--fsdpcheck-junit")

    fuzz_time = _value(config, "fsdpcheck_fuzz_time")
    profile = _value(config, "fsdpcheck_profile", "ci" if fuzz_time is None else "fuzz")
    if profile not in PROFILES:
        raise _usage(f"unknown profile {profile!r}; use one of {', '.join(PROFILES)}")
    if fuzz_time is not None and profile != "fuzz":
        raise _usage(f"--fsdpcheck-fuzz-time runs the fuzz profile; it cannot run under --fsdpcheck-profile {profile}")
    device = _value(config, "fsdpcheck_device", "auto")
    if device not in DEVICES:
        raise _usage(f"unknown device {device!r}; use one of {', '.join(DEVICES)}")
    world_size = _world_size(_value(config, "fsdpcheck_world_size"))
    seed = _seed(_value(config, "fsdpcheck_seed"))
    shard = _value(config, "fsdpcheck_shard")
    budget = None if fuzz_time is None else _duration(fuzz_time)
    machine_of = (0, 1) if shard is None else _shard(shard)
    database = _value(config, "fsdpcheck_database")
    if database is not None and "://" not in database:
        database = _path(config, "fsdpcheck_database")
    if profile == "ci":
        if seed is not None:
            warn(config, "--fsdpcheck-seed has no effect under the ci profile (derandomized); "
                 "use --fsdpcheck-profile dev or fuzz")
        for flag, value in (("--fsdpcheck-shard", shard), ("--fsdpcheck-database", database)):
            if value is not None:
                warn(config, f"{flag} has no effect under the ci profile (derandomized, no example database); "
                     "use --fsdpcheck-profile dev or fuzz")
    return Settings(
        impl_specs=tuple(dict.fromkeys(specs)),
        model_specs=tuple(dict.fromkeys(config.getoption("fsdpcheck_model") or config.getini("fsdpcheck_model"))),
        device=device,
        profile=profile,
        seed=seed,
        divergences=_path(config, "fsdpcheck_divergences"),
        known_bugs=not config.getoption("fsdpcheck_no_known_bugs"),
        report=report,
        html=html,
        junit=junit,
        timeout_s=timeout,
        plan_examples=_plan_examples(_value(config, "fsdpcheck_plan_examples", DEFAULT_PLAN_EXAMPLES)),
        world_size=world_size,
        strict=bool(_value(config, "fsdpcheck_strict", False)),
        fuzz_time_s=budget,
        shard=machine_of,
        database=database,
        baseline=_path(config, "fsdpcheck_baseline"),
        write_baseline=_writable_report(_path(config, "fsdpcheck_write_baseline"), "--fsdpcheck-write-baseline"),
    )


def _usage(message: str) -> pytest.UsageError:
    return pytest.UsageError(f"fsdpcheck: {message}")


def _value(config, name, default=None):
    value = config.getoption(name, None)
    if value is None:
        value = config.getini(name) or None
    return default if value is None else value


def _path(config, name: str) -> str | None:
    """A path option; from the ini file it is relative to that file's folder."""
    value = config.getoption(name, None)
    if value is not None:
        return value
    value = config.getini(name) or None
    if value is not None and config.inipath is not None and not os.path.isabs(value):
        value = str(config.inipath.parent / value)
    return value


def _timeout(raw) -> float:
    try:
        value = float(raw)
    except (TypeError, ValueError):
        value = float("nan")
    if not 0 <= value <= MAX_TIMEOUT_S:  # also rejects nan
        raise _usage(f"--fsdpcheck-timeout must be a number of seconds from 0 (no limit) to {MAX_TIMEOUT_S}, got {raw!r}")
    return value


def _plan_examples(raw) -> int:
    try:
        value = int(str(raw).strip())
    except ValueError:
        value = 0
    if not 1 <= value <= MAX_PLAN_EXAMPLES:
        raise _usage(f"--fsdpcheck-plan-examples must be a whole number from 1 to {MAX_PLAN_EXAMPLES}, got {raw!r}")
    return value


def _world_size(raw) -> int | None:
    if raw is None:
        return None
    try:
        value = int(str(raw).strip())
    except ValueError:
        value = 0
    if not 1 <= value <= MAX_WORLD_SIZE:
        raise _usage(f"--fsdpcheck-world-size must be a whole number of ranks from 1 to {MAX_WORLD_SIZE}, got {raw!r}")
    return value


def _seed(raw) -> int | None:
    if raw is None:
        return None
    try:
        seed = int(raw)
    except ValueError:
        raise _usage(f"--fsdpcheck-seed must be an integer, got {raw!r}") from None
    if not 0 <= seed < 2**32:
        raise _usage(f"--fsdpcheck-seed must be in 0 .. 2**32-1, got {raw!r}")
    return seed


_DURATION = re.compile(r"(\d+(?:\.\d+)?)(h|m|s)")
_UNIT_S = {"h": 3600, "m": 60, "s": 1}
MAX_FUZZ_TIME_S = 7 * 24 * 3600


def _duration(raw: str) -> float:
    """``90``, ``90s``, ``10m``, ``1h30m``, ``0.5h`` -> seconds."""
    text = str(raw).strip().lower()
    if re.fullmatch(r"\d+(\.\d+)?", text):
        seconds = float(text)
    else:
        parts = _DURATION.findall(text)
        if not parts or "".join(n + u for n, u in parts) != text:
            raise _usage(
                f"--fsdpcheck-fuzz-time must be a duration such as 90s, 10m or 1h30m, got {raw!r}"
            )
        seconds = sum(float(n) * _UNIT_S[u] for n, u in parts)
    if not 0 < seconds <= MAX_FUZZ_TIME_S:
        raise _usage(f"--fsdpcheck-fuzz-time must be more than 0 and at most 7 days, got {raw!r}")
    return seconds


def _shard(raw: str) -> tuple[int, int]:
    """``I/M`` (1-based) -> (I - 1, M)."""
    match = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*", str(raw))
    if not match or not 1 <= int(match.group(1)) <= int(match.group(2)) <= 1_000_000:
        raise _usage(f"--fsdpcheck-shard must be I/M with 1 <= I <= M, e.g. 2/4, got {raw!r}")
    return int(match.group(1)) - 1, int(match.group(2))


def _writable_report(path: str | None, flag: str = "--fsdpcheck-report") -> str | None:
    if path is None:
        return None
    folder = os.path.dirname(os.path.abspath(path)) or "."
    if os.path.isdir(path):
        raise _usage(f"{flag} {path!r} is a directory; give a file name")
    if not os.path.isdir(folder):
        # made when the report is written (as --junitxml makes its folder),
        # if the nearest folder that exists lets it be made
        nearest = _nearest_existing(folder)
        if nearest is None or not os.path.isdir(nearest):
            raise _usage(f"{flag} {path!r}: {nearest!r} is a file, not a folder")
        if not os.access(nearest, os.W_OK):
            raise _usage(f"{flag} {path!r}: folder {folder!r} cannot be made: {nearest!r} is not writable")
        return path
    if not os.access(folder, os.W_OK):
        raise _usage(f"{flag} {path!r}: folder {folder!r} is not writable")
    return path


def _nearest_existing(path: str) -> str | None:
    """``path`` made absolute, or its nearest ancestor that exists (a broken
    symbolic link counts: nothing can be created in its place)."""
    probe = os.path.abspath(path)
    while not os.path.lexists(probe):
        parent = os.path.dirname(probe)
        if parent == probe:
            return None
        probe = parent
    return probe


def unwritable_folder(path: str) -> str | None:
    """Why the folder ``path`` (created on first use when missing) could
    never be written, or None. Creates nothing: the checks are on the path
    itself where it exists, else on the nearest ancestor that does. A write
    that fails later is swallowed by whoever writes (Hypothesis' example
    database saves nothing and says nothing), hence this check at start."""
    full = os.path.abspath(path)
    probe = _nearest_existing(full)
    if probe is None:
        return f"no part of {path!r} exists"
    which = "it" if probe == full else repr(probe)
    if os.path.islink(probe) and not os.path.exists(probe):
        return f"{which} is a broken symbolic link"
    if not os.path.isdir(probe):
        return f"{which} is a file, not a folder"
    if not os.access(probe, os.W_OK | os.X_OK):
        return f"{'the folder' if probe == full else f'folder {probe!r}'} is not writable"
    return None
