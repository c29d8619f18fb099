"""Fuzzing at scale: time budgets, seed streams per shard, the shared
example database.

A property's examples come from a *stream*: stream ``j`` of ``t`` (``t`` =
machines x workers per machine) is seeded from the run's seed, ``j`` and
``t`` alone, so ``--fsdpcheck-seed S --fsdpcheck-shard j+1/t`` replays it on
one process. Under a time budget a stream is a sequence of rounds, each a
Hypothesis run of the property's ``ci`` example count with its own seed;
the budget only decides how many rounds run, never what they contain.
"""

from __future__ import annotations

import hashlib
import os
import re
import time
from dataclasses import dataclass


class FuzzOptionError(ValueError):
    """A bad option value; its text is the one-line usage error."""


def open_database(url: str, is_default: bool = False):
    """The Hypothesis example database named by ``url``: ``redis://...`` or
    a folder (created on first save, so checked now that it can ever be);
    ``is_default``: the folder under the pytest cache, which no option named."""
    if url.startswith(("redis://", "rediss://", "unix://")):
        try:
            import redis
            from hypothesis.extra.redis import RedisExampleDatabase
        except ImportError:
            raise FuzzOptionError(
                f"--fsdpcheck-database {url!r} needs the redis client: pip install 'pytest-fsdpcheck[redis]'"
            ) from None
        try:
            client = redis.Redis.from_url(url, socket_connect_timeout=5)
            client.ping()
        except Exception as exc:  # noqa: BLE001 - any connection failure is one line for the user
            raise FuzzOptionError(f"--fsdpcheck-database {url!r}: cannot reach the Redis server ({exc})") from None
        return RedisExampleDatabase(client, key_prefix=b"fsdpcheck:")
    if "://" in url:
        raise FuzzOptionError(f"--fsdpcheck-database must be a folder or a redis:// URL, got {url!r}")
    from hypothesis.database import DirectoryBasedExampleDatabase

    if os.path.exists(url) and not os.path.isdir(url):
        raise FuzzOptionError(f"--fsdpcheck-database {url!r} is a file; give a folder or a redis:// URL")
    from .options import unwritable_folder

    why = unwritable_folder(url)
    if why is not None:
        what = f"the default example database {url!r}" if is_default else f"--fsdpcheck-database {url!r}"
        raise FuzzOptionError(f"{what} can never be written: {why}"
                              + ("; give one with --fsdpcheck-database" if is_default else ""))
    return DirectoryBasedExampleDatabase(url)


def configure_database(config, session, url: str | None) -> None:
    """The example database and engine settings of the suite's properties:
    none under ``ci``; under HypoFuzz, Hypothesis' default one; else ``url``
    or a folder under the pytest cache."""
    import pytest
    from hypothesis import settings

    from . import profiles
    from .options import warn

    session.under_hypofuzz = _under_hypofuzz(config)
    if session.under_hypofuzz:
        # HypoFuzz fuzzes only tests whose database is Hypothesis' default
        # one and that are not derandomized, whatever the profile.
        if url is not None:
            warn(config, "--fsdpcheck-database is not used under HypoFuzz: it keeps examples in "
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
    is_default = url is None
    if is_default:
        url = _cache_folder(config)
    try:
        profiles.override(database=open_database(url, is_default))
    except FuzzOptionError as exc:
        raise pytest.UsageError(f"fsdpcheck: {exc}") from None
    session.database = url
    if session.plan.budget_s is not None:
        profiles.budgeted()


def _under_hypofuzz(config) -> bool:
    # HypoFuzz collects through pytest.main(plugins=[its collector]); the
    # package never imports it (AGPL), it only recognises its collector.
    return any(type(p).__module__.partition(".")[0] == "hypofuzz" for p in config.pluginmanager.get_plugins())


def _cache_folder(config) -> str:
    try:
        cache_dir = config.getini("cache_dir")
    except ValueError:  # -p no:cacheprovider: its ini key is unknown, the folder is still the usual one
        cache_dir = ".pytest_cache"
    return str(config.rootpath / cache_dir / "fsdpcheck" / "examples")


def stream_seed(seed: int, stream: int, streams: int, round_: int = 0) -> int:
    """The Hypothesis seed of one round of one stream. Stream 0 of 1, round
    0, is the run's seed itself, so an unsharded run replays as before."""
    if streams == 1 and round_ == 0:
        return seed
    digest = hashlib.blake2b(f"{seed}:{stream}/{streams}:{round_}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") % 2**32


@dataclass
class Plan:
    """What this process runs: its machine's part and its worker's shard."""

    seed: int
    profile: str = "fuzz"
    machine: int = 0  # 0-based
    machines: int = 1
    workers: int = 1  # shards per property on this machine
    budget_s: float | None = None
    deadline: float | None = None  # time.time() when the budget is spent

    @property
    def streams(self) -> int:
        return self.machines * self.workers

    def stream(self, shard: int) -> int:
        return self.machine * self.workers + shard

    def replay_args(self, shard: int) -> str:
        stream = self.stream(shard)
        args = f"--fsdpcheck-seed {self.seed}"
        if self.streams > 1:
            args += f" --fsdpcheck-shard {stream + 1}/{self.streams}"
        return args


class Slicer:
    """Each remaining property item's share of the time left: the items still
    to run on all workers share ``workers`` x the remaining wall time."""

    def __init__(self, plan: Plan, positions: dict[str, int]):
        self.plan = plan
        self.positions = positions  # nodeid -> index among the budgeted items

    def item_deadline(self, nodeid: str, now: float | None = None, last_here: bool = False) -> float:
        """``last_here``: nothing else is left for this worker (pytest's
        ``nextitem`` is None), so the item keeps its core busy to the end."""
        if last_here:
            return self.plan.deadline
        now = time.time() if now is None else now
        left = max(0.0, self.plan.deadline - now)
        remaining = max(1, len(self.positions) - self.positions.get(nodeid, 0))
        return min(self.plan.deadline, now + left * max(1, self.plan.workers) / remaining)


# --- running a property -------------------------------------------------------------

_tally = None  # the running test's features.Tally


def start_tally():
    from .features import Tally

    global _tally
    _tally = Tally()
    return _tally


def instrument(test) -> None:
    """Count the examples of a suite property and their generator features
    (also as Hypothesis events). Wraps ``inner_test``, Hypothesis' hook for
    this, so HypoFuzz's runs are counted too; the wrapper keeps the test's
    source and signature, hence its database key."""
    import functools

    inner = test.hypothesis.inner_test
    if getattr(inner, "_fsdpcheck_counted", False):
        return

    @functools.wraps(inner)
    def counted(*args, **kwargs):
        from hypothesis.errors import UnsatisfiedAssumption

        from .features import observe

        kinds, present = observe(kwargs.values(), kwargs.get("fsdpcheck_impl"))
        # counted once the test has taken the example: one it rejects
        # (assume) is no coverage, and is counted as such
        try:
            result = inner(*args, **kwargs)
        except UnsatisfiedAssumption:
            if _tally is not None:
                _tally.reject()
            raise
        except BaseException:
            _count(kinds, present)
            raise
        _count(kinds, present)
        return result

    def _count(kinds, present):
        from hypothesis import event

        if _tally is not None:
            _tally.add(kinds, present)
        for name in present:
            event(f"fsdpcheck feature: {name}")

    counted._fsdpcheck_counted = True
    test.hypothesis.inner_test = counted


_SHARD_ID = re.compile(r"-?shard\d+of\d+")


def database_key(item) -> bytes:
    """One key per property and parametrization, the same for every shard,
    worker and machine (pytest's node id holds the shard and, for the
    installed suite, a machine-specific path)."""
    callspec = getattr(item, "callspec", None)
    params = _SHARD_ID.sub("", callspec.id).strip("-") if callspec is not None else ""
    return f"{item.path.name}::{item.originalname}[{params}]".encode()


def _seed(test, value: int) -> None:
    # What hypothesis.seed() does, less its database=None: a seeded stream
    # still saves its failures and replays the saved ones first.
    test._hypothesis_internal_use_seed = value


def run_property(item, plan: Plan, slicer: Slicer | None) -> None:
    """Run one property item: its shard's stream, once or, under a time
    budget, round after round until its share of the time is spent."""
    from hypothesis import Phase, settings

    fn = item.obj
    args = {name: item.funcargs[name] for name in item._fixtureinfo.argnames}
    fn.hypothesis.inner_test._hypothesis_internal_add_digest = database_key(item)
    shard = getattr(item, "callspec", None) and item.callspec.params.get("fsdpcheck_shard", 0) or 0
    stream = plan.stream(shard)
    item._fsdpcheck_replay = (
        f"seed {plan.seed}, stream {stream + 1}/{plan.streams}; replay on one process: "
        f"pytest --fsdpcheck --fsdpcheck-profile {plan.profile} "
        f"{plan.replay_args(shard)}" + (f" --fsdpcheck-fuzz-time {plan.budget_s:g}s" if plan.budget_s else "")
        + " (the example database replays the failing example first)"
    )
    if plan.budget_s is None:
        _seed(fn, stream_seed(plan.seed, stream, plan.streams))
        fn(**args)
        return
    deadline = slicer.item_deadline(item.nodeid, last_here=getattr(item, "_fsdpcheck_last_here", False))
    first = getattr(fn, "_hypothesis_internal_use_settings", None) or settings()
    started = time.time()
    rounds = 0
    try:
        while True:
            _seed(fn, stream_seed(plan.seed, stream, plan.streams, rounds))
            item._fsdpcheck_round = rounds
            fn(**args)
            rounds += 1
            now = time.time()
            # another round only if it ends nearer the deadline than stopping now
            if now + (now - started) / rounds / 2 >= deadline:
                break
            if rounds == 1:
                # saved examples were replayed by the first round
                fn._hypothesis_internal_use_settings = settings(
                    first, phases=[p for p in first.phases if p != Phase.reuse]
                )
    finally:
        fn._hypothesis_internal_use_settings = first
        item._fsdpcheck_rounds = rounds
