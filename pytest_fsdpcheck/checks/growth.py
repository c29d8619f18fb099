"""Linear-time invariants (TRV-8, EXO-8, FS2-6) as ratios, not wall-clock
budgets: 4x the input may cost at most ``limit`` x the time (linear gives
~4x, a quadratic scan ~16x), each side the best of a few runs, in the
CPU time of the thread that calls the implementation: on a loaded runner
wall time also counts the turns other processes took, which fall on the
two sides unevenly (a 9 ms run on a 2-core box at load 8 came out 10.8x
for 4x the modules), and the process's CPU clock is only sampled at ticks
while :func:`cpu_budget`'s timer is armed (Linux). Where a wrong
implementation is exponential, :func:`check_growth_within` cuts the large
runs once the ratio is already broken, so the check ends."""

from __future__ import annotations

import contextlib
import gc
import signal
import threading
import time

from . import Violation

#: A run this long is measured well enough on its own.
LONG_ENOUGH_S = 1.0


def best_time(fn, repeat: int = 3, good_enough: float = 0.0, first: float | None = None,
              budget: float | None = None, clock=time.thread_time) -> float:
    """Best of ``repeat`` runs timed by :func:`timed`; stops early once a
    run took at most ``good_enough`` seconds, or at least ``LONG_ENOUGH_S``
    (interruptions are a small share of a long run, and another would only
    repeat a superlinear implementation's cost). ``first`` is a run already
    timed that way, counted as the first of them. ``budget``: each run is
    cut after that much CPU time (:class:`OverBudget`). ``clock``: CPU time
    for the checks; benchmarks that report seconds pass
    ``time.perf_counter``."""
    runs = [] if first is None else [first]
    while len(runs) < repeat and not (runs and (min(runs) <= good_enough or runs[-1] >= LONG_ENOUGH_S)):
        with cpu_budget(budget) if budget else contextlib.nullcontext():
            runs.append(timed(fn, clock)[0])
    return min(runs)


def timed(fn, clock=time.thread_time):
    """(seconds, result) of one call of ``fn`` with the cyclic collector off,
    as timeit does (a collection over a big heap adds a superlinear cost of
    its own)."""
    gc.disable()
    try:
        start = clock()
        result = fn()
        return clock() - start, result
    finally:
        gc.enable()


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


@contextlib.contextmanager
def cpu_budget(seconds: float):
    """Raise :class:`OverBudget` inside the block once the process has used
    ``seconds`` of CPU time in it (``ITIMER_PROF``/``SIGPROF``, a timer of
    its own, so the per-call wall-clock limit around an implementation's
    calls, on ``SIGALRM``, neither cancels nor is cancelled by it). Where
    there is no such timer (not Unix, not the main thread) the block runs
    unbounded."""
    usable = hasattr(signal, "setitimer") and threading.current_thread() is threading.main_thread()
    if not usable:
        yield
        return

    def over(signum, frame):
        raise OverBudget(f"used more than {seconds:.2f}s of CPU time")

    previous = signal.signal(signal.SIGPROF, over)
    signal.setitimer(signal.ITIMER_PROF, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_PROF, 0)
        signal.signal(signal.SIGPROF, previous)


def check_growth_within(
    invariant: str, small, large, factor: int, limit: float, what: str
) -> list[Violation]:
    """:func:`check_linear_growth` for shapes where a wrong implementation
    is exponential (it would never return on the large input): the large
    runs are cut once they have used ``limit`` times the small one's time
    (``MIN_BUDGET_S`` at least), which already breaks the ratio; CPU time
    is at most wall time for this single-threaded work, so the cut is never
    early (each run has the budget to itself). ``small`` and ``large`` are
    the calls to time."""
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
    return check_linear_growth(invariant, t_small, t_large, factor, limit, what)
