"""Keeping a misbehaving implementation's calls from hurting the run.

* :class:`Guarded` wraps an implementation's areas so every call runs under a
  time limit (SIGALRM, main thread only): a Python-level hang becomes a
  failing check with a clear message instead of a stuck CI job.
  The same call cannot end the process (``os._exit``, ``os.abort``,
  ``sys.exit``: the call fails instead) nor leave a global random generator
  reseeded (undone, and the call fails).
* :class:`OwnCode` says which code is the implementation's own (what its
  imports do is its doing, never a third-party library's first import).
* :func:`generators` / :func:`generator_leaks` snapshot and restore the
  global random generators around the test's own body, where only the suite
  and the implementation run.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time

from ..contract import check_return
from ..core.catalog import AREAS


class ImplementationTimeout(Exception):
    """An implementation call exceeded the per-call time limit."""


class LeakedGlobalState(AssertionError):
    """An implementation left process-wide state changed after a check."""


def _timeout_message(what: str, seconds: float) -> str:
    return f"{what} did not return within {seconds:g} s (per-call limit; --fsdpcheck-timeout to change)"


def _alarm_usable(seconds: float) -> bool:
    return bool(seconds and seconds > 0 and hasattr(signal, "setitimer")
                and threading.current_thread() is threading.main_thread())


@contextlib.contextmanager
def _alarm(handler, seconds: float):
    """SIGALRM goes to ``handler`` in ``seconds``, for the block; an outer
    timer (pytest-timeout's) is put back after it."""
    previous = signal.signal(signal.SIGALRM, handler)
    remaining = 0.0
    try:  # armed inside: a limit that rings at once still puts the handler back
        remaining, _ = signal.setitimer(signal.ITIMER_REAL, seconds)
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        if remaining:  # an outer limit (e.g. pytest-timeout) was running: give it back
            signal.setitimer(signal.ITIMER_REAL, remaining)


@contextlib.contextmanager
def time_limit(seconds: float, what: str):
    if not _alarm_usable(seconds):
        yield
        return

    def on_alarm(signum, frame):
        raise ImplementationTimeout(_timeout_message(what, seconds))

    with _alarm(on_alarm, seconds):
        yield


class ImplementationExit(Exception):
    """An implementation tried to end the process during a call."""


def _seeds():
    """The global random generators' fingerprints that cost next to nothing
    to read: torch's seed changes only when it is reseeded (drawing numbers
    leaves it), unlike the state itself."""
    import torch

    cuda = torch.cuda.is_initialized() and torch.cuda.initial_seed()
    return torch.initial_seed(), cuda


class _Contained:
    """One implementation call: time-limited, unable to end the process, and
    unable to leave a global random generator reseeded.

    ``random`` and ``numpy.random`` are reseeded through their module
    functions, intercepted for the call (reading their state costs 20-80 us,
    too much for every call); torch's generators are compared by seed, and
    the CPU one's state kept to put back."""

    __slots__ = ("what", "timeout", "exits", "saved", "patched", "seeds", "torch_state", "limit", "pid")

    def __init__(self, what: str, timeout: float):
        self.what, self.timeout = what, timeout

    def __enter__(self):
        import random
        import sys

        import torch

        # The process making the call: a child the implementation forks
        # inherits the interception and must still be able to exit
        # (multiprocessing's fork start method ends every child with
        # os._exit). Not the pid at import: HypoFuzz and xdist run calls in
        # processes forked after the import.
        self.pid = os.getpid()
        self.exits: list[str] = []
        self.saved: dict = {}  # generator name -> (state before its first reseed, how to put it back)
        self.patched = [(os, "_exit", os._exit), (os, "abort", os.abort)]
        rngs = [("random", random, "getstate", "setstate", "seed")]
        numpy = sys.modules.get("numpy.random")
        if numpy is not None:
            rngs.append(("numpy.random", numpy, "get_state", "set_state", "seed"))
        for name, module, get, put, seed in rngs:
            for attr in (put, seed):
                self.patched.append((module, attr, getattr(module, attr)))
                setattr(module, attr, self._reseeding(name, getattr(module, get), getattr(module, put), getattr(module, attr)))
        os._exit = self._exiting(self.patched[0][2])
        os.abort = self._exiting(self.patched[1][2])
        self.seeds = _seeds()
        self.torch_state = torch.get_rng_state()
        self.limit = time_limit(self.timeout, self.what)
        try:
            self.limit.__enter__()
        except BaseException:  # a limit so small it rang while being set
            for owner, attr, real in self.patched:
                setattr(owner, attr, real)
            raise
        return self

    def _exiting(self, real):
        def stop(*args):
            if os.getpid() != self.pid:
                return real(*args)
            self.exits.append(f"{self.what} tried to exit the process " + (f"with status {args[0]}" if args else "(os.abort)"))
            raise ImplementationExit(self.exits[-1])

        return stop

    def _reseeding(self, name, getstate, setstate, real):
        def reseed(*args, **kwargs):
            # The state before the first reseed: one that saves the state and
            # puts it back when done has left nothing changed.
            if name not in self.saved:
                self.saved[name] = (getstate(), getstate, setstate)
            return real(*args, **kwargs)

        return reseed

    def __exit__(self, kind, exc, tb):
        import torch

        try:
            self.limit.__exit__(kind, exc, tb)
        finally:
            for owner, attr, real in self.patched:
                setattr(owner, attr, real)
        if os.getpid() != self.pid:
            # A child the implementation forked came back into the suite: it
            # must end here, not go on to run the rest of the session again.
            code = exc.code if isinstance(exc, SystemExit) else int(kind is not None)
            os._exit(code if isinstance(code, int) else 1)
        leaked = []
        for name, (state, getstate, setstate) in self.saved.items():
            if not _same_state(getstate(), state):
                setstate(state)
                leaked.append(f"{name} (reseeded)")
        seeds = _seeds()
        if seeds != self.seeds:
            torch.set_rng_state(self.torch_state)
            if seeds[0] != self.seeds[0]:
                leaked.append(f"torch random seed ({self.seeds[0]} -> {seeds[0]})")
            if seeds[1] != self.seeds[1] and self.seeds[1] is not False:
                torch.cuda.manual_seed_all(self.seeds[1])
                leaked.append(f"torch.cuda random seed ({self.seeds[1]} -> {seeds[1]})")
        if isinstance(exc, SystemExit):
            raise ImplementationExit(f"{self.what} tried to exit the process with status {exc.code}") from None
        if self.exits and not isinstance(exc, ImplementationExit):
            raise ImplementationExit(self.exits[0] + " (and went on after it was stopped)")
        if leaked and kind is None:
            raise LeakedGlobalState(f"{self.what} left process-wide state changed: {'; '.join(leaked)} (restored)")
        return False


def _same_state(a, b) -> bool:
    # numpy's legacy state holds an array, which == compares elementwise
    if isinstance(a, tuple) and isinstance(b, tuple) and len(a) == len(b):
        return all(_same_state(x, y) for x, y in zip(a, b, strict=True))
    if hasattr(a, "tobytes") and hasattr(b, "tobytes"):
        return a.shape == b.shape and a.tobytes() == b.tobytes()
    return a == b


#: the soonest :class:`_Span`'s watchdog timer is set for (seconds)
WATCHDOG_PERIOD_S = 1e-3


class _Span:
    """A run of cheap calls the suite makes in a row (a tree's ``new_state``
    and ``attach_state``: two per module, 200,000 on a 100,000-module tree)
    under one containment. Entering and leaving :class:`_Contained` costs
    about 20 us a call, most of a large tree's build; here its patches and
    its generator checks hold for the whole run (what it reports names the
    run), and each call keeps its own time limit through a watchdog timer
    armed once: a call only notes when it started, and the alarm fails the
    call running when it rings if that call has taken the limit, else sets
    itself for when the running (or next) call could.

    The timer is never set sooner than :data:`WATCHDOG_PERIOD_S`: a limit
    below the time the handler itself takes (``--fsdpcheck-timeout 1e-7``)
    would otherwise ring again inside the handler, without end (a
    RecursionError, not a verdict). A call that returns after taking the
    limit before the timer rang fails as it returns, so every limit is
    still the call's limit."""

    def __init__(self, guard: Guarded, what: str, timeout: float):
        self.guard, self.what, self.timeout = guard, what, timeout
        self.call_what: str | None = None
        self.started: float | None = None

    def __enter__(self):
        self.contained = _Contained(self.what, 0)  # no limit on the run: each call has its own
        self.contained.__enter__()
        self.alarm = _alarm(self._on_alarm, max(self.timeout, WATCHDOG_PERIOD_S)) if _alarm_usable(self.timeout) else contextlib.nullcontext()
        self.alarm.__enter__()
        self.guard.span = self
        return self

    def call(self, what: str, function, args, kwargs):
        self.call_what, self.started = what, time.monotonic()
        try:
            result = function(*args, **kwargs)
            if self.timeout and time.monotonic() - self.started >= self.timeout:
                raise ImplementationTimeout(_timeout_message(what, self.timeout))
            return result
        finally:
            self.started = None

    def _on_alarm(self, signum, frame):
        started = self.started
        if started is None:  # between calls: the suite's own code is running
            signal.setitimer(signal.ITIMER_REAL, max(self.timeout, WATCHDOG_PERIOD_S))
            return
        taken = time.monotonic() - started
        if taken >= self.timeout:
            raise ImplementationTimeout(_timeout_message(self.call_what, self.timeout))
        signal.setitimer(signal.ITIMER_REAL, max(self.timeout - taken, WATCHDOG_PERIOD_S))

    def __exit__(self, kind, exc, tb):
        self.guard.span = None
        self.alarm.__exit__(None, None, None)
        return self.contained.__exit__(kind, exc, tb)


class _GuardedArea:
    def __init__(self, area, name: str, impl_name: str, timeout: float, guard: Guarded):
        self._area, self._name, self._impl, self._timeout = area, name, impl_name, timeout
        self._guard = guard

    def _fsdpcheck_span(self, what: str):
        """The calls made inside, to any of the implementation's areas, as
        one :class:`_Span` (see :func:`pytest_fsdpcheck.generators.trees.attach_states`)."""
        if self._guard.span is not None:  # already inside one: it contains these calls too
            return contextlib.nullcontext()
        return _Span(self._guard, f"{self._impl}: {self._name} ({what})", self._timeout)

    def __getattr__(self, attr):
        value = getattr(self._area, attr)
        if not callable(value):
            return value
        what = f"{self._impl}: {self._name}.{attr}"

        def call(*args, **kwargs):
            guard = self._guard
            guard.calls += 1
            if guard.hung:
                # Hypothesis re-runs a failing example while shrinking; one
                # hang per test is enough to know, not one per attempt.
                raise ImplementationTimeout(guard.hung + " (an earlier call hung; not called again in this test)")
            try:
                if guard.span is not None:
                    result = guard.span.call(what, value, args, kwargs)
                else:
                    with _Contained(what, self._timeout):
                        result = value(*args, **kwargs)
            except ImplementationTimeout as exc:
                guard.hung = str(exc)
                raise
            check_return(self._name, attr, result)
            if isinstance(result, contextlib.AbstractContextManager):
                return _GuardedContext(result, what, self._timeout)
            return result

        return call


class _GuardedContext:
    """Time-limits entering and leaving an implementation's context manager."""

    def __init__(self, cm, what, timeout):
        self._cm, self._what, self._timeout = cm, what, timeout

    def __enter__(self):
        with _Contained(self._what + " (enter)", self._timeout):
            return self._cm.__enter__()

    def __exit__(self, *exc):
        with _Contained(self._what + " (exit)", self._timeout):
            return self._cm.__exit__(*exc)


class Guarded:
    """An implementation seen through per-call time limits."""

    def __init__(self, impl, impl_name: str, timeout: float):
        self._fsdpcheck_inner = impl
        self._fsdpcheck_spec = impl_name
        self.calls = 0  # implementation calls in the current test: a determinism fingerprint
        self.hung: str | None = None  # set once a call timed out in the current test
        self.span: _Span | None = None  # the run of calls being contained as one, if any
        #: what importing is the implementation's own doing (see FirstImports)
        self._fsdpcheck_own = OwnCode.of(impl, impl_name)
        for area in AREAS:
            obj = getattr(impl, area, None)
            setattr(self, area, None if obj is None else _GuardedArea(obj, area, impl_name, timeout, self))

    def start_test(self) -> None:
        self.calls = 0
        self.hung = None

    def __getattr__(self, attr):
        return getattr(self._fsdpcheck_inner, attr)


# --- global state ------------------------------------------------------------------


class OwnCode:
    """An implementation's own code: the top-level packages of the module it
    is named by and of its areas' classes, and their folders. Importing any
    of it is never a library's first import."""

    def __init__(self, packages=(), folders=()):
        self.packages = frozenset(packages)
        self.folders = tuple(folders)

    @classmethod
    def of(cls, impl, spec: str | None = None) -> OwnCode:
        import sys

        from ..core.catalog import AREAS

        modules = {type(impl).__module__}
        if isinstance(impl, type):
            modules.add(impl.__module__)
        for area in AREAS:
            obj = getattr(impl, area, None)
            if obj is not None:
                modules.add(type(obj).__module__)
        if spec is not None:
            with contextlib.suppress(Exception):
                from ..impls import resolve_target

                modules.add(resolve_target(spec).partition(":")[0])
        packages = {m.partition(".")[0] for m in modules if m and m.partition(".")[0] not in sys.stdlib_module_names}
        folders = []
        for name in packages:
            module = sys.modules.get(name)
            paths = list(getattr(module, "__path__", None) or ()) or [getattr(module, "__file__", None)]
            folders.extend(os.path.realpath(p) for p in paths if isinstance(p, str))
        return cls(packages, folders)

    def holds(self, name: str, origin: str | None) -> bool:
        if name.partition(".")[0] in self.packages:
            return True
        if origin is None:
            return False
        where = os.path.realpath(origin)
        return any(where == folder or where.startswith(folder + os.sep) for folder in self.folders)



# --- the global random generators around the test's body ------------------------

def _generator_objects() -> list:
    """(read, write) of every global random generator already imported, the
    objects themselves: the module functions may be the call guard's
    interceptions, which must not take an import's undo for a reseed."""
    import random
    import sys

    found = [(random._inst.getstate, random._inst.setstate)]
    mtrand = sys.modules.get("numpy.random.mtrand")
    legacy = getattr(mtrand, "_rand", None)
    if legacy is not None:
        found.append((legacy.get_state, legacy.set_state))
    torch = sys.modules.get("torch")
    if torch is not None and hasattr(torch, "get_rng_state"):
        found.append((torch.get_rng_state, torch.set_rng_state))
    return found


# --- the global generators around a test's body ------------------------------


def generators() -> dict:
    """The global random generators' states, for :func:`generator_leaks`.

    Taken around the test function itself: around the whole call phase,
    other plugins reseed them on purpose (pytest-randomly, at every phase);
    inside the body only the suite and the implementation run, and
    Hypothesis seeds and restores them around each example."""
    import random
    import sys

    state = {"random": random.getstate()}
    numpy = sys.modules.get("numpy.random")
    if numpy is not None:
        state["numpy.random"] = numpy.get_state()
    return state


def generator_leaks(before: dict) -> list[str]:
    """The generators the body left drawn from or reseeded, put back."""
    import random
    import sys

    found = []
    if random.getstate() != before["random"]:
        random.setstate(before["random"])
        found.append("random (global state reseeded or drawn from)")
    numpy = sys.modules.get("numpy.random")
    if numpy is not None and "numpy.random" in before and not _same_state(numpy.get_state(), before["numpy.random"]):
        numpy.set_state(before["numpy.random"])
        found.append("numpy.random (global state reseeded or drawn from)")
    return found


