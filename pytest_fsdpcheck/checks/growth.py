"""Linear-time invariants (TRV-8, EXO-8) as ratios, not wall-clock budgets:
4x the input may cost at most ``limit`` x the time (linear gives ~4x, a
quadratic scan ~16x), each side the best of a few runs."""

from __future__ import annotations

import gc
import time

from . import Violation


def best_time(fn, repeat: int = 3, good_enough: float = 0.0) -> float:
    """Best of ``repeat`` runs with the cyclic collector off, as timeit does
    (a collection over a big heap adds a superlinear cost of its own); stops
    early once a run took at most ``good_enough`` seconds."""
    best = float("inf")
    for _ in range(repeat):
        gc.disable()
        try:
            start = time.perf_counter()
            fn()
            best = min(best, time.perf_counter() - start)
        finally:
            gc.enable()
        if best <= good_enough:
            break
    return best


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
