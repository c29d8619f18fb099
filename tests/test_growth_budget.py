"""The growth checks end: a run that would not return (an exponential
implementation on a large input, also one in a helper thread its call
joins) is cut by a CPU-time budget, also inside the per-call wall-clock
limit the suite puts around an implementation's calls, its helper threads
ended, and nothing of the budget is left behind. The time measured is the
whole process's, every thread's, on a clock no budget makes coarse."""

import signal
import subprocess
import sys
import threading
import time

import pytest

from pytest_fsdpcheck.checks import growth
from pytest_fsdpcheck.plugin.guard import time_limit

pytestmark = [pytest.mark.unit, pytest.mark.skipif(not hasattr(signal, "setitimer"), reason="no interval timers here")]


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


def test_a_small_run_timed_slow_once_does_not_hide_a_superlinear_large_one():
    """The small run's first timing came out slow (its core's other
    thread was busy): the large run, 16x the small one's true cost, fits the
    budget 10x that timing gives, but the small run timed again after it
    shows the ratio."""
    large_ran = []

    def small():
        return _work(10_000 if large_ran else 40_000)  # four times its cost until the contention ends

    def large():
        large_ran.append(True)
        return _work(160_000)

    (violation,) = growth.check_growth_within("FS2-6", small, large, 4, 10, "depth of chains")
    assert violation.invariant == "FS2-6" and "took" in violation.message, violation.message


def test_check_growth_within_passes_linear_runs():
    assert growth.check_growth_within("FS2-6", lambda: sum(range(20_000)), lambda: sum(range(80_000)), 4, 10, "items") == []


def _work(n=200_000):
    total = 0
    for i in range(n):
        total += i
    return total


def _spin_a_minute():
    """A runaway for a helper thread: one the budget fails to end makes the
    test fail (still running at its asserts), not hang."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        pass


def _in_thread(fn):
    def call():
        thread = threading.Thread(target=fn)
        thread.start()
        thread.join()
    return call


def test_the_clock_counts_a_helper_thread_the_call_joins():
    """The same work inline and in a thread the call starts and joins costs
    about the same time (a clock of the calling thread alone read the
    threaded run as the join's wait, about 1% of it)."""
    inline, threaded = growth.best_time(_work), growth.best_time(_in_thread(_work))
    assert 0.5 * inline < threaded < 2 * inline + 0.01, (inline, threaded)


def test_a_budget_ends_a_runaway_in_a_helper_thread(monkeypatch):
    """A call joining a thread that never ends: the budget ends the thread
    and the call, quietly (no unhandled-exception report), and leaves no
    thread, handler or hook behind."""
    reported = []
    monkeypatch.setattr(threading, "excepthook", reported.append)
    handler, hook, start = signal.getsignal(signal.SIGPROF), threading.excepthook, time.monotonic()
    threads_before = set(threading.enumerate())
    with pytest.raises(growth.OverBudget), growth.cpu_budget(0.05):
        _in_thread(_spin_a_minute)()
    assert time.monotonic() - start < 10.0
    # the threads the call started are gone (others the process keeps, such as
    # Inductor's compile pool from an earlier test in this worker, may remain)
    assert set(threading.enumerate()) <= threads_before, threading.enumerate()
    assert signal.getsignal(signal.SIGPROF) is handler and threading.excepthook is hook
    assert not reported, [r.exc_type for r in reported]


def test_a_helper_thread_catching_exceptions_is_ended_too():
    def stubborn():
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                _spin_a_minute()
            except Exception:  # noqa: BLE001 - what an implementation may do
                pass

    start = time.monotonic()
    threads_before = set(threading.enumerate())
    with pytest.raises(growth.OverBudget), growth.cpu_budget(0.05):
        _in_thread(stubborn)()
    assert time.monotonic() - start < 10.0
    # the threads the call started are gone (others the process keeps, such as
    # Inductor's compile pool from an earlier test in this worker, may remain)
    assert set(threading.enumerate()) <= threads_before, threading.enumerate()


def test_the_budget_leaves_the_process_clock_precise():
    """A process CPU timer (ITIMER_PROF, RLIMIT_CPU) makes Linux sample the
    process's CPU clock at scheduler ticks (~4 ms): the budget arms none."""
    import resource

    if resource.getrlimit(resource.RLIMIT_CPU)[0] != resource.RLIM_INFINITY:
        pytest.skip("RLIMIT_CPU is set: the process clock is coarse here whatever the budget does")
    with growth.cpu_budget(10.0):
        assert signal.getitimer(signal.ITIMER_PROF) == (0.0, 0.0)
        assert growth.clock_step(growth.process_cpu_time) < 1e-3


@pytest.mark.process
def test_a_coarse_process_clock_still_times_a_short_run():
    """Under RLIMIT_CPU Linux samples the process clock at ticks (measured:
    4 ms steps, a single 0.5 ms run read as 0.0): a short run is repeated
    until the clock has moved well past its step, so it reads what the
    thread's own clock (precise either way) reads."""
    script = (
        "import resource, time\n"
        "resource.setrlimit(resource.RLIMIT_CPU, (10**6, 10**6))\n"
        "from pytest_fsdpcheck.checks import growth\n"
        "def work():\n"
        "    total = 0\n"
        "    for i in range(20_000):\n"
        "        total += i\n"
        "print(growth.best_time(work, clock=time.thread_time), growth.best_time(work))\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=True)
    thread_clock, measured = map(float, out.stdout.split())
    assert 0.5 * thread_clock < measured < 2 * thread_clock, (thread_clock, measured)
