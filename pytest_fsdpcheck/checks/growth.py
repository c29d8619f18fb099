"""Linear-time invariants (TRV-8, EXO-8) as ratios, not wall-clock budgets:
4x the input may cost at most ``limit`` x the time (linear gives ~4x, a
quadratic scan ~16x), each side the best of a few runs."""

from __future__ import annotations

import gc
import time

from . import Violation

#: A run this long is measured well enough on its own.
LONG_ENOUGH_S = 1.0


def best_time(fn, repeat: int = 3, good_enough: float = 0.0, first: float | None = None) -> float:
    """Best of ``repeat`` runs timed by :func:`timed`; stops early once a
    run took at most ``good_enough`` seconds, or at least ``LONG_ENOUGH_S``
    (interruptions are a small share of a long run, and another would only
    repeat a superlinear implementation's cost). ``first`` is a run already
    timed that way, counted as the first of them."""
    runs = [] if first is None else [first]
    while len(runs) < repeat and not (runs and (min(runs) <= good_enough or runs[-1] >= LONG_ENOUGH_S)):
        runs.append(timed(fn)[0])
    return min(runs)


def timed(fn):
    """(seconds, result) of one call of ``fn`` with the cyclic collector off,
    as timeit does (a collection over a big heap adds a superlinear cost of
    its own)."""
    gc.disable()
    try:
        start = time.perf_counter()
        result = fn()
        return time.perf_counter() - start, result
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
