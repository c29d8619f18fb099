"""The growth checks end: a run that would not return (an exponential
implementation on a large input) is cut by a CPU-time budget, also inside
the per-call wall-clock limit the suite puts around an implementation's
calls, and nothing of the budget is left behind."""

import signal
import time

import pytest

from pytest_fsdpcheck.checks import growth
from pytest_fsdpcheck.isolation import time_limit

pytestmark = pytest.mark.skipif(not hasattr(signal, "setitimer"), reason="no interval timers here")


def _spin():
    while True:
        pass


def test_a_budget_cuts_a_run_that_never_returns():
    handler, start = signal.getsignal(signal.SIGPROF), time.process_time()
    with pytest.raises(growth.OverBudget), growth.cpu_budget(0.05):
        _spin()
    assert time.process_time() - start < 2.0
    assert signal.getitimer(signal.ITIMER_PROF) == (0.0, 0.0)
    assert signal.getsignal(signal.SIGPROF) is handler


def test_the_per_call_limit_inside_does_not_suspend_the_budget():
    with pytest.raises(growth.OverBudget), growth.cpu_budget(0.05), time_limit(60, "an implementation call"):
        _spin()


def test_check_growth_within_fails_an_exponential_run_in_bounded_time():
    start = time.process_time()
    (violation,) = growth.check_growth_within("FS2-6", lambda: sum(range(1000)), _spin, 4, 10, "chains")
    assert violation.invariant == "FS2-6"
    assert "4x the chains did not return within 0.25s of CPU time, more than 10x the" in violation.message
    assert time.process_time() - start < 5.0


def test_check_growth_within_passes_linear_runs():
    assert growth.check_growth_within("FS2-6", lambda: sum(range(20_000)), lambda: sum(range(80_000)), 4, 10, "items") == []
