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

import contextlib
import hashlib
import os
import time
from dataclasses import dataclass

from ..core.budget import BUDGET_SKIP, SHARD_ID, read_start  # noqa: F401 (BUDGET_SKIP: the plugin's users read it here)


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

    from ..core import profiles
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
    machine: int = 0  # 0-based
    machines: int = 1
    workers: int = 1  # shards per property on this machine
    budget_s: float | None = None
    #: time.time() when the budget is spent: set by the first test (:meth:`Slicer.start`)
    deadline: float | None = None
    #: under xdist, the file where the first worker to start a test writes when
    #: (:func:`shared_start`): every worker's clock starts then
    clock_path: str | None = None

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




#: A property item's first round (its ``ci`` example count) on one free
#: core: the mean over the suite's properties, serial, quiet 2-core VM,
#: torch 2.13 CPU (2026-11-25: 24.9 s for 39 items, one shrinking a failure).
FIRST_ROUND_S = 0.5


def available_cpus() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def _load_average() -> float:
    """Runnable processes over the last minute: on a shared machine other
    jobs take cores from the budget too."""
    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):
        return 0.0


def shared_start(path: str, now: float) -> float:
    """When the run's first test started: ``now``, written to ``path``, if
    this process is the first to ask, else what the first one wrote. xdist
    starts giving a worker tests as soon as it has collected, whatever the
    others are doing: under -n N on fewer cores the last worker may start
    a minute after the first, and one clock keeps the run's end where the
    first test plus the budget puts it."""
    temporary = f"{path}.{os.getpid()}"
    with open(temporary, "w") as out:
        out.write(repr(now))
    try:
        os.link(temporary, path)  # atomic: exactly one process publishes its time
        return now
    except FileExistsError:
        return read_start(path) or now
    finally:
        os.unlink(temporary)




class Slicer:
    """Admission and shares under a time budget, in one process (a worker).

    The clock starts with this process's first test (:meth:`start`): under
    xdist every worker gets its first tests once all of them have collected,
    so the workers' clocks start together and start-up is not counted. Every
    suite test is then admitted only if it fits in what is left: a fixed
    case (one that cannot be cut short: ranks, goldens, compiles) if its
    estimated cost does, a property item if half a round does. The remaining
    property items on all workers share ``workers`` x the time left."""

    def __init__(self, plan: Plan, positions: dict[str, int], fixed_costs: dict[str, float] | None = None,
                 cpus: int | None = None, builds: dict | None = None, rounds: dict[str, float] | None = None,
                 contention: float = 1.0, floors: int = 0):
        self.plan = plan
        self.positions = positions  # nodeid -> index among the budgeted items
        self.fixed_costs = fixed_costs or {}  # nodeid -> estimated seconds on one free core
        self.builds = builds or {}  # nodeid -> (what it builds once per process, seconds)
        self.rounds = rounds or {}  # property nodeid -> estimated seconds of a round on one free core
        self._built: set = set()
        # wall seconds per estimated second: the workers beyond the cores share
        # them; measured as the fixed cases run here (:meth:`fixed_done`)
        cpus = cpus or available_cpus()
        self.load = self._contention = max(1.0, plan.workers / cpus, _load_average() / cpus, contention)
        self._estimated = 0.0
        self._measured = 0.0
        self._first_rounds: list[float] = []
        self._warm = False
        # kept for the first rounds of the properties after the fixed cases
        # (the ``floors`` property items run before them): fixed cases stop short of it
        self.reserve = min(plan.budget_s / 2,
                           (len(positions) - floors) * FIRST_ROUND_S * self.load / max(1, plan.workers))

    def start(self, now: float | None = None) -> float:
        if self.plan.deadline is None:
            now = time.time() if now is None else now
            started = shared_start(self.plan.clock_path, now) if self.plan.clock_path else now
            self.plan.deadline = started + self.plan.budget_s
        return self.plan.deadline

    def admit(self, nodeid: str, now: float | None = None) -> str | None:
        """None if the suite test ``nodeid`` may start now, else why not (a
        skip reason starting with :data:`BUDGET_SKIP`)."""
        now = time.time() if now is None else now
        left = self.start(now) - now
        if nodeid in self.positions:
            # a first round (the median of those run here) fits before the deadline
            rounds = sorted(self._first_rounds)
            # the first property of a process also pays Hypothesis' start: twice the mean
            need = rounds[len(rounds) // 2] if rounds else 2 * FIRST_ROUND_S * self.load
            need = max(need, self.rounds.get(nodeid, 0.0) * self.load)
            what = f"a first round takes about {need:.1f} s here"
        elif nodeid in self.fixed_costs:
            built, build_s = self.builds.get(nodeid, (None, 0.0))
            need = (self.fixed_costs[nodeid] + (build_s if built not in self._built else 0.0)) * self.load
            left -= self.reserve
            what = (f"a fixed case of about {need:.1f} s here, and {self.reserve:.1f} s kept for the "
                    "properties' first rounds")
        else:
            return None
        if left > need:
            if nodeid in self.builds:
                self._built.add(self.builds[nodeid][0])
            return None
        return f"{BUDGET_SKIP} ({self.plan.budget_s:g} s): {what}, {max(0.0, left):.1f} s of it left"

    def fixed_done(self, nodeid: str, seconds: float) -> None:
        estimate = self.fixed_costs.get(nodeid)
        if estimate is None:
            return
        if not self._warm:
            # a process's first test pays its lazy imports: not a measure of the load
            self._warm = True
            return
        self._estimated += estimate
        self._measured += seconds
        if self._estimated >= 2.0:  # enough evidence to correct the guess
            # never below the cores' contention: the estimates are class means,
            # and a run of the class's cheapest tests says nothing of the load
            self.load = max(self._contention, self._measured / self._estimated)

    def first_round_done(self, seconds: float) -> None:
        self._first_rounds.append(seconds)

    def item_deadline(self, nodeid: str, now: float | None = None, last_here: bool = False) -> float:
        """``last_here``: nothing else is left for this worker (pytest's
        ``nextitem`` is None), so the item keeps its core busy to the end."""
        if last_here:
            return self.start(now)
        now = time.time() if now is None else now
        left = max(0.0, self.start(now) - now)
        remaining = max(1, len(self.positions) - self._started_before(nodeid))
        # the properties still to start owe their first rounds (each reaches
        # features the others may not draw): rounds beyond this one's first
        # come only out of what is left after them
        rounds = sorted(self._first_rounds)
        first_round = rounds[len(rounds) // 2] if rounds else FIRST_ROUND_S * self.load
        left = max(0.0, left - (remaining - 1) * first_round / max(1, self.plan.workers))
        return min(self.plan.deadline, now + left * max(1, self.plan.workers) / remaining)

    def _started_before(self, nodeid: str) -> int:
        """Property items started before this one: its position in a serial
        run; under xdist, which hands out consecutive items in chunks (a
        worker may start the last items first), the count on the shared
        clock's folder, where every worker marks each item it starts."""
        if not self.plan.clock_path:
            return self.positions.get(nodeid, 0)
        folder = os.path.dirname(self.plan.clock_path)
        mark = hashlib.blake2b(nodeid.encode(), digest_size=8).hexdigest()
        try:
            with open(os.path.join(folder, f"item-{mark}"), "x"):
                pass
            return sum(name.startswith("item-") for name in os.listdir(folder)) - 1
        except OSError:
            return self.positions.get(nodeid, 0)


# --- -x under xdist -----------------------------------------------------------------

#: Under xdist with ``-x``/``--maxfail``: the file the controller creates when
#: the failures reach the limit (:func:`request_stop`). xdist then only
#: queues a shutdown behind each worker's share, which a worker runs to the
#: end first (a minute of properties, or the shrinking of a failure of its
#: own), so the run would end, and print the failure, long after a serial
#: run. A worker stops after its current test once the file exists, and
#: a property stops at its next example (:func:`instrument`). The file is the
#: running session's (``run_state.RunState.stop_path``, set by the plugin).

STOP_REASON = "fsdpcheck: not run to the end: a failure on another worker stopped the run (-x/--maxfail)"


def request_stop(path: str) -> None:
    with open(path, "a"):
        pass


def stop_requested() -> bool:
    from ..core.run_state import current

    stop_path = current().stop_path
    return stop_path is not None and os.path.exists(stop_path)


#: how often a running test's watcher looks for the stop file
STOP_POLL_S = 0.2


class _Watch:
    armed = False


@contextlib.contextmanager
def stop_watch():
    """Around a suite test's setup and call on an xdist worker given a stop file: once
    the file appears, the test is ended where it stands (the main thread
    is interrupted, as the per-call time limit does) and reported skipped,
    "not run to the end": never a pass, never a failure. A fixed case can
    take seconds (a corpus model's capture, the distributed ranks) that the
    run, already failed elsewhere, would otherwise wait for. A test that
    has returned, or raised, is left as it ended."""
    import signal
    import threading

    from ..core.run_state import current

    usable = (current().stop_path is not None and hasattr(signal, "SIGUSR1")
              and threading.current_thread() is threading.main_thread())
    if not usable:
        yield
        return
    if stop_requested():
        import pytest

        pytest.skip(STOP_REASON)
    import _thread

    watch = _Watch()

    def on_stop(signum, frame):
        if watch.armed:
            watch.armed = False
            import pytest

            pytest.skip(STOP_REASON)

    done = threading.Event()

    def poll():
        while not done.wait(STOP_POLL_S):
            if stop_requested():
                _thread.interrupt_main(signal.SIGUSR1)
                return

    previous = signal.signal(signal.SIGUSR1, on_stop)
    poller = threading.Thread(target=poll, name="fsdpcheck-stop-watch", daemon=True)
    watch.armed = True
    poller.start()
    try:
        yield
    finally:
        # first: an interrupt still pending once the test has ended changes nothing
        watch.armed = False
        done.set()
        poller.join()
        signal.signal(signal.SIGUSR1, previous)


# --- running a property -------------------------------------------------------------

def start_tally():
    """A fresh feature tally for the running test (the session's ``RunState.tally``)."""
    from ..core.features import Tally
    from ..core.run_state import current

    tally = current().tally = Tally()
    return tally


def _tally():
    from ..core.run_state import current

    return current().tally


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

        from ..core.features import Where, observe

        if stop_requested():
            # a skip: Hypothesis re-raises it at once, without shrinking
            import pytest

            pytest.skip(STOP_REASON)
        kinds, present = observe(kwargs.values(), Where(kwargs.get("fsdpcheck_impl"), kwargs.get("fsdpcheck_graph_form")))
        # counted once the test has taken the example: one it rejects
        # (assume) is no coverage, and is counted as such
        try:
            result = inner(*args, **kwargs)
        except UnsatisfiedAssumption:
            tally = _tally()
            if tally is not None:
                tally.reject()
            raise
        except BaseException:
            _count(kinds, present)
            raise
        _count(kinds, present)
        return result

    def _count(kinds, present):
        from hypothesis import event

        tally = _tally()
        if tally is not None:
            tally.add(kinds, present)
        for name in present:
            event(f"fsdpcheck feature: {name}")

    counted._fsdpcheck_counted = True
    test.hypothesis.inner_test = counted




def database_key(item) -> bytes:
    """One key per property and parametrization, the same for every shard,
    worker and machine (pytest's node id holds the shard and, for the
    installed suite, a machine-specific path)."""
    callspec = getattr(item, "callspec", None)
    params = SHARD_ID.sub("", callspec.id).strip("-") if callspec is not None else ""
    return f"{item.path.name}::{item.originalname}[{params}]".encode()


#: The most rounds a property item takes for the features it is the floor
#: of (``features.FLOORS``) beyond its share of the time: a floor feature is
#: drawn by most rounds of its property (``tests/test_feature_reach.py``),
#: and one its implementation rejects must not eat the other properties' turns.
FLOOR_ROUNDS = 4


def floor_of(item) -> frozenset[str]:
    """The features a property item is the floor of: only the first stream's
    items have any, so under -n N one worker's item of each floor property
    runs first, the other shards share the time with the rest."""
    from ..core.features import floor_of as features_floor_of

    params = getattr(getattr(item, "callspec", None), "params", {})
    if params.get("fsdpcheck_shard", 0):
        return frozenset()
    function = getattr(item, "originalname", None) or item.name.partition("[")[0]
    return features_floor_of(item.path.name, function, params.get("fsdpcheck_graph_form"))


def another_round(now: float, round_s: float, item_deadline: float, budget_deadline: float, rounds: int,
                  floor_missing: bool) -> bool:
    """Whether a property item under a time budget starts another round:
    never one planned to end past the budget; then one while a feature it is
    the floor of has no checked example yet (up to :data:`FLOOR_ROUNDS`
    rounds), else only if the round ends nearer the item's deadline than
    stopping now."""
    if now + round_s > budget_deadline:
        return False
    if floor_missing and rounds < FLOOR_ROUNDS:
        return True
    return now + round_s / 2 < item_deadline


def _seed(test, value: int) -> None:
    # What hypothesis.seed() does, less its database=None: a seeded stream
    # still saves its failures and replays the saved ones first.
    test._hypothesis_internal_use_seed = value


def run_property(item, plan: Plan, slicer: Slicer | None) -> None:
    """Run one property item: its shard's stream, once or, under a time
    budget, round after round until its share of the time is spent."""
    from hypothesis import Phase, settings

    from ..core import profiles

    fn = item.obj
    args = {name: item.funcargs[name] for name in item._fixtureinfo.argnames}
    fn.hypothesis.inner_test._hypothesis_internal_add_digest = database_key(item)
    shard = getattr(item, "callspec", None) and item.callspec.params.get("fsdpcheck_shard", 0) or 0
    stream = plan.stream(shard)
    item._fsdpcheck_replay = (
        f"seed {plan.seed}, stream {stream + 1}/{plan.streams}; replay on one process: "
        f"pytest --fsdpcheck --fsdpcheck-profile {profiles.active()} "
        f"{plan.replay_args(shard)}" + (f" --fsdpcheck-fuzz-time {plan.budget_s:g}s" if plan.budget_s else "")
        + " (the example database replays the failing example first)"
    )
    if plan.budget_s is None:
        _seed(fn, stream_seed(plan.seed, stream, plan.streams))
        fn(**args)
        return
    deadline = slicer.item_deadline(item.nodeid, last_here=getattr(item, "_fsdpcheck_last_here", False))
    floor = floor_of(item)
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
            if rounds == 1 and slicer is not None:
                slicer.first_round_done(now - started)
            # the tally counts only examples that went through the checks
            tally = _tally()
            reached = tally.features if tally is not None else {}
            missing = any(not reached.get(name) for name in floor)
            if not another_round(now, (now - started) / rounds, deadline, plan.deadline, rounds, missing):
                break
            if rounds == 1:
                # saved examples were replayed by the first round
                fn._hypothesis_internal_use_settings = settings(
                    first, phases=[p for p in first.phases if p != Phase.reuse]
                )
    finally:
        fn._hypothesis_internal_use_settings = first
        item._fsdpcheck_rounds = rounds
