"""-x/--maxfail under xdist: at the failure that reaches the limit the
controller creates the stop file every worker was given, and a worker that
sees it stops after its current test (a property at its next example),
instead of running the rest of its share first (issue 29 item 4: three
planted implementations took 18-30 s to fail under -n 2, a few seconds
serially)."""

import os
from types import SimpleNamespace

import pytest

from pytest_fsdpcheck.core.run_state import current
from pytest_fsdpcheck.plugin import XdistHooks, fuzz

pytestmark = pytest.mark.unit


def _node(config):
    return SimpleNamespace(config=config, workerinput={})


def _report(failed):
    return SimpleNamespace(failed=failed)


@pytest.mark.plugin
@pytest.mark.parametrize("maxfail", [1, 2])
def test_the_controller_requests_a_stop_at_the_limit(pytester, monkeypatch, maxfail, _builtin_implementations_imported):
    # parseconfig's plugins import numpy in this process, which pytester then forgets (tests/test_order.py)
    hooks = XdistHooks(pytester.parseconfig(f"--maxfail={maxfail}"))
    nodes = [_node(hooks_config) for hooks_config in [pytester.parseconfig()] * 2]
    for node in nodes:
        hooks.pytest_configure_node(node)
    path = nodes[0].workerinput["fsdpcheck_stop"]
    assert {n.workerinput["fsdpcheck_stop"] for n in nodes} == {path}
    monkeypatch.setattr(current(), "stop_path", path)
    hooks.pytest_runtest_logreport(_report(failed=False))
    for _ in range(maxfail - 1):
        hooks.pytest_runtest_logreport(_report(failed=True))
        assert not fuzz.stop_requested()
    hooks.pytest_runtest_logreport(_report(failed=True))
    assert fuzz.stop_requested()
    hooks.pytest_unconfigure(None)
    assert not os.path.exists(os.path.dirname(path))


@pytest.mark.plugin
def test_no_stop_file_without_maxfail(pytester, _builtin_implementations_imported):
    hooks = XdistHooks(pytester.parseconfig())
    node = _node(pytester.parseconfig())
    hooks.pytest_configure_node(node)
    hooks.pytest_runtest_logreport(_report(failed=True))
    assert "fsdpcheck_stop" not in node.workerinput and hooks.stop_path is None


def test_a_property_stops_at_its_next_example(tmp_path, monkeypatch):
    """A property of the suite (instrumented) skips, unshrunk, once the stop
    file exists: the failure elsewhere ends the run, not this search."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    stop = tmp_path / "stop"
    monkeypatch.setattr(current(), "stop_path", str(stop))
    seen = []

    @settings(max_examples=50, database=None)
    @given(st.integers())
    def prop(x):
        seen.append(x)
        if len(seen) == 3:
            fuzz.request_stop(str(stop))

    fuzz.instrument(prop)
    with pytest.raises(pytest.skip.Exception, match="another worker"):
        prop()
    assert len(seen) == 3


def _stop_after(path, seconds):
    import threading

    timer = threading.Timer(seconds, fuzz.request_stop, args=(str(path),))
    timer.start()
    return timer


def test_a_running_test_ends_at_the_stop_as_a_skip(tmp_path, monkeypatch):
    """A fixed case in progress on another worker (a corpus model's capture,
    the distributed ranks: seconds) ends when the stop file appears, as a
    skip saying why; the run does not wait for it. Before, a worker stopped
    only after its current test (PrunesGroupedRoots: the failure printed
    20 s late, behind the other worker's FS2-9 ranks)."""
    import time

    monkeypatch.setattr(current(), "stop_path", str(tmp_path / "stop"))
    timer = _stop_after(tmp_path / "stop", 0.3)
    started = time.monotonic()
    with pytest.raises(pytest.skip.Exception, match="not run to the end"):
        with fuzz.stop_watch():
            while time.monotonic() - started < 30:
                time.sleep(0.01)
    timer.join()
    assert time.monotonic() - started < 5


@pytest.mark.parametrize("outcome", ["passed", "failed"])
def test_a_test_that_ended_keeps_its_outcome(tmp_path, monkeypatch, outcome):
    """The stop arriving after the test returned or raised changes nothing:
    a failure is never turned into a skip, a pass never into anything else."""
    import time

    monkeypatch.setattr(current(), "stop_path", str(tmp_path / "stop"))
    with pytest.raises(AssertionError, match="its own failure") if outcome == "failed" else _no_error():
        with fuzz.stop_watch():
            if outcome == "failed":
                raise AssertionError("its own failure")
    fuzz.request_stop(str(tmp_path / "stop"))
    time.sleep(3 * fuzz.STOP_POLL_S)  # a watcher left behind would interrupt here


def test_no_watch_without_a_stop_file(monkeypatch):
    """Serial runs and workers without -x: nothing is installed."""
    import signal

    monkeypatch.setattr(current(), "stop_path", None)
    before = signal.getsignal(signal.SIGUSR1)
    with fuzz.stop_watch():
        assert signal.getsignal(signal.SIGUSR1) is before


def _no_error():
    import contextlib

    return contextlib.nullcontext()


def test_a_test_after_the_stop_does_not_start(tmp_path, monkeypatch):
    """The stop already requested when a test's setup or call begins: it is
    skipped at once (the setup of a corpus test builds its model: seconds)."""
    monkeypatch.setattr(current(), "stop_path", str(tmp_path / "stop"))
    fuzz.request_stop(str(tmp_path / "stop"))
    ran = []
    with pytest.raises(pytest.skip.Exception, match="not run to the end"):
        with fuzz.stop_watch():
            ran.append(True)
    assert not ran
