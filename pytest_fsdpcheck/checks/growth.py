"""Linear-time invariants (TRV-8, EXO-8, FS2-6) as ratios, not wall-clock
budgets: 4x the input may cost at most ``limit`` x the time (linear gives
~4x, a quadratic scan ~16x), each side the best of a few runs, in the CPU
time of the whole process, every thread of it, children excluded
(:func:`process_cpu_time`): an implementation may do its work in threads
it starts and joins, which a clock of the calling thread alone would miss
(a quadratic walk in a joined thread measured 0.0002 s -> 0.0002 s). Not
wall time: on a loaded runner that also counts the turns other processes
took, which fall on the two sides unevenly (a 9 ms run on a 2-core box at
load 8 came out 10.8x for 4x the modules).

Linux samples the process's CPU clock only at scheduler ticks (~4 ms)
while a process CPU timer is armed (``ITIMER_PROF``, ``RLIMIT_CPU``): with
such a clock the reference once measured 0.0000 s -> 0.0120 s, a false
12,000x. So :func:`cpu_budget` arms no timer (a watchdog thread reads the
clock instead), and :func:`timed` repeats a run that is short next to the
clock's step (:func:`clock_step`) until the clock has moved well past it.
Where a wrong implementation is exponential, :func:`check_growth_within`
cuts the large runs once the ratio is already broken, so the check ends."""

from __future__ import annotations

import contextlib
import ctypes
import gc
import os
import signal
import threading
import time

from . import Violation

#: A run this long is measured well enough on its own.
LONG_ENOUGH_S = 1.0
#: a timed run lasts at least this many steps of its clock (repeated if
#: shorter): one step either way is then 1% of it
CLOCK_STEPS_PER_RUN = 100


def process_cpu_time() -> float:
    """CPU seconds used by every thread of this process (not its children)."""
    return time.process_time()


def clock_step(clock, samples: int = 5) -> float:
    """The largest of ``samples`` steps ``clock`` is seen to take: about
    a microsecond for a precise clock, a scheduler tick for a sampled one.
    A clock that stands still for 0.1 s of wall time counts as that coarse."""
    steps = []
    for _ in range(samples):
        start, give_up = clock(), time.monotonic() + 0.1
        now = clock()
        while now == start and time.monotonic() < give_up:
            now = clock()
        steps.append(now - start if now != start else 0.1)
    return max(steps)


def best_time(fn, repeat: int = 3, good_enough: float = 0.0, first: float | None = None,
              budget: float | None = None, clock=process_cpu_time) -> float:
    """Best of ``repeat`` runs timed by :func:`timed`; stops early once a
    run took at most ``good_enough`` seconds, or at least ``LONG_ENOUGH_S``
    (interruptions are a small share of a long run, and another would only
    repeat a superlinear implementation's cost). ``first`` is a run already
    timed that way, counted as the first of them. ``budget``: each run is
    cut after that much CPU time (:class:`OverBudget`). ``clock``: CPU time
    for the checks; benchmarks that report seconds pass
    ``time.perf_counter``."""
    runs = [] if first is None else [first]
    at_least = _run_at_least(clock)
    while len(runs) < repeat and not (runs and (min(runs) <= good_enough or runs[-1] >= LONG_ENOUGH_S)):
        # a run repeated up to at_least: the last call alone went past the
        # budget once the whole went past both
        with cpu_budget(budget + at_least) if budget else contextlib.nullcontext():
            runs.append(timed(fn, clock, at_least)[0])
    return min(runs)


def _run_at_least(clock) -> float:
    # never past LONG_ENOUGH_S, what a run needs to be measured well enough
    return min(CLOCK_STEPS_PER_RUN * clock_step(clock), LONG_ENOUGH_S)


def timed(fn, clock=process_cpu_time, at_least: float | None = None):
    """(seconds, result) of one call of ``fn`` with the cyclic collector off,
    as timeit does (a collection over a big heap adds a superlinear cost of
    its own); calls repeated until ``at_least`` seconds have passed on
    ``clock`` (``CLOCK_STEPS_PER_RUN`` of its steps unless given), the
    seconds then those of one call on average, the result the last one's."""
    if at_least is None:
        at_least = _run_at_least(clock)
    gc.disable()
    try:
        calls, start = 0, clock()
        while True:
            result = fn()
            calls += 1
            elapsed = clock() - start
            if elapsed >= at_least:
                return elapsed / calls, result
    finally:
        gc.enable()


def growth_times(small, large, limit: float, first_large: float | None = None) -> tuple[float, float]:
    """(small's, large's) best times for a growth ratio: the small call is
    timed again after the large one and the best of both counts. A call's
    CPU time rises while the core's other hardware thread is busy (two vCPUs
    are often one core's two threads): a small side timed under contention
    and a large one timed in quiet halve a quadratic's 16x (CI's 2-core
    runner saw a planted quadratic recorder pass EXO-8 that way), and
    contention only ever adds time. The large side stops early once it is
    within half the limit (a linear implementation, measured well enough);
    ``first_large`` is a large run already timed."""
    t_small = best_time(small)
    t_large = best_time(large, good_enough=limit * t_small / 2, first=first_large)
    return min(t_small, best_time(small)), t_large


def check_linear_growth(
    invariant: str, t_small: float, t_large: float, factor: int, limit: float, what: str
) -> list[Violation]:
    ratio = t_large / max(t_small, 1e-6)
    if ratio > limit:
        return [
            Violation(
                invariant,
                f"expected linear growth, but {factor}x the {what} took {ratio:.1f}x the time "
                f"({t_small:.4f}s -> {t_large:.4f}s)",
            )
        ]
    return []


#: the floor of a budget derived from a small run: a scheduling hiccup on a
#: busy machine never reaches it, and reaching it still means the ratio broke
MIN_BUDGET_S = 0.25
#: what the small run of a budgeted growth check may take at most (it is a
#: tree of a few hundred modules: a linear implementation takes milliseconds)
SMALL_BUDGET_S = 10.0


class OverBudget(Exception):
    """A timed run used more CPU time than its budget (see :func:`cpu_budget`)."""


class _BudgetSpent(BaseException):
    """Raised in each thread a budgeted block started, to end it once the
    budget is spent: a BaseException, so an ``except Exception`` in the
    implementation does not keep the thread running."""


#: how long the threads a spent budget ended get, in all, to finish
#: before the block is left
STOP_WAIT_S = 1.0


@contextlib.contextmanager
def cpu_budget(seconds: float, clock=process_cpu_time):
    """Raise :class:`OverBudget` inside the block once the process has used
    ``seconds`` of CPU time in it, in any of its threads. No CPU timer is
    armed (it would make the clock coarse, see above): a watchdog thread
    reads the clock, as seldom as the time left allows (CPU time grows at
    most as fast as wall time times the CPUs). Once the budget is spent it
    raises an exception in each thread started while the block ran (at its
    next bytecode: a runaway in a helper thread ends too), gives them
    ``STOP_WAIT_S`` to end, then sends the block's own thread ``SIGPROF``,
    whose handler raises :class:`OverBudget` (the signal also wakes that
    thread from a join on a helper that did not end; interrupting a join
    earlier would mark a running thread ended, CPython 3.11's bpo-45274).
    Once the budget is spent the block ends in :class:`OverBudget` whatever
    it does (a helper's end handed to its caller, a call returning a
    result its ended helpers never finished). The per-call
    wall-clock limit around an implementation's calls, on ``SIGALRM``, is a
    timer of its own. Where signals cannot be sent to a thread (not Unix)
    or the block is not in the main thread (where Python runs its signal
    handlers) the block runs unbounded."""
    usable = hasattr(signal, "pthread_kill") and threading.current_thread() is threading.main_thread()
    if not usable:
        yield
        return
    caller, before = threading.get_ident(), set(threading.enumerate())
    spent, leaving = threading.Event(), threading.Event()
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    message = f"used more than {seconds:.2f}s of CPU time"

    def watch(start):
        while not leaving.is_set():
            left = seconds - (clock() - start)
            if left <= 0:
                break
            leaving.wait(max(left / cpus, 0.001))
        else:
            return
        spent.set()
        started = [t for t in threading.enumerate() if t not in before and t is not watchdog]
        for thread in started:
            _raise_in(thread, _BudgetSpent)
        deadline = time.monotonic() + STOP_WAIT_S
        for thread in started:
            thread.join(max(0.0, deadline - time.monotonic()))
        signal.pthread_kill(caller, signal.SIGPROF)

    def on_sigprof(signum, frame):
        # only once the watchdog found the budget spent, and not once the
        # block is over (its run returned first); any other SIGPROF is
        # someone else's, passed on
        if spent.is_set():
            if not leaving.is_set():
                raise OverBudget(message)
        elif callable(previous):
            previous(signum, frame)

    def quiet(args):  # a thread the budget ended is no unhandled error
        if not issubclass(args.exc_type, _BudgetSpent):
            hook(args)

    previous, hook = signal.signal(signal.SIGPROF, on_sigprof), threading.excepthook
    threading.excepthook = quiet
    watchdog = threading.Thread(target=watch, args=(clock(),), name="fsdpcheck-cpu-budget", daemon=True)
    watchdog.start()
    try:
        yield
    except OverBudget:
        raise
    except (Exception, _BudgetSpent) as error:
        if spent.is_set():
            raise OverBudget(message) from error
        raise
    finally:
        try:
            leaving.set()  # from here on SIGPROF raises nothing
        finally:
            watchdog.join()  # it has ended the threads it stopped, or given up on them
            threading.excepthook = hook
            signal.signal(signal.SIGPROF, previous)
    if spent.is_set():  # the run returned once its helpers were ended, or as the budget ran out
        raise OverBudget(message)


def _raise_in(thread: threading.Thread, exception: type[BaseException]) -> None:
    """Raise ``exception`` in ``thread`` at its next bytecode (CPython)."""
    set_async_exc = getattr(getattr(ctypes, "pythonapi", None), "PyThreadState_SetAsyncExc", None)
    if set_async_exc is not None and thread.ident is not None:
        set_async_exc(ctypes.c_ulong(thread.ident), ctypes.py_object(exception))


def check_growth_within(
    invariant: str, small, large, factor: int, limit: float, what: str
) -> list[Violation]:
    """:func:`check_linear_growth` for shapes where a wrong implementation
    is exponential (it would never return on the large input): the large
    runs are cut once they have used ``limit`` times the small one's time
    (``MIN_BUDGET_S`` at least), which already breaks the ratio: both are
    the process's CPU time, every thread's, so the cut is never early
    (each run has the budget to itself, and threads it did not start
    are idle). ``small`` and ``large`` are the calls to time."""
    try:
        t_small = best_time(small, budget=SMALL_BUDGET_S)
    except OverBudget:
        return [Violation(invariant, f"expected linear growth, but the smaller {what} did not return within "
                                     f"{SMALL_BUDGET_S:g}s of CPU time")]
    budget = max(limit * t_small, MIN_BUDGET_S)
    try:
        t_large = best_time(large, budget=budget)
    except OverBudget:
        return [Violation(invariant, f"expected linear growth, but {factor}x the {what} did not return within "
                                     f"{budget:.2f}s of CPU time, more than {limit:g}x the {t_small:.4f}s of the smaller")]
    # A call's CPU time rises while the core's other hardware thread is busy
    # (two vCPUs are often one core's two threads, as on the 2-core machine
    # where a small run timed under -n 2 came out twice its cost and a
    # quadratic ignore rule passed FS2-6). The small run is timed again after
    # the large one and the best of both counts: contention only adds time.
    try:
        t_small = min(t_small, best_time(small, budget=SMALL_BUDGET_S))
    except OverBudget:
        pass
    return check_linear_growth(invariant, t_small, t_large, factor, limit, what)
