"""HypoFuzz (``hypothesis fuzz -- --fsdpcheck ...``) collects every property
of the suite, under any profile, and fuzzes it with the plugin's options in
force. HypoFuzz is AGPL: only these tests use it, in subprocesses, and they
skip where it is not installed."""

from __future__ import annotations

import json
import os
import pathlib
import re
import subprocess
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parents[1]
#: where .ci/run and tox install HypoFuzz with the Hypothesis it works with
#: (pip --target), beside the project's own newer Hypothesis; unset: this
#: environment's HypoFuzz, if any
SITE = os.environ.get("FSDPCHECK_TESTS_HYPOFUZZ_SITE", "")
CLI = os.path.join(SITE, "bin", "hypothesis") if SITE else os.path.join(os.path.dirname(sys.executable), "hypothesis")


def _python_path(*more) -> str:
    return os.pathsep.join(filter(None, [SITE, *more, os.environ.get("PYTHONPATH", "")]))


pytestmark = [pytest.mark.process, pytest.mark.skipif(
    not os.path.exists(CLI)
    or subprocess.run([sys.executable, "-c", "import hypofuzz"], capture_output=True,
                      env={**os.environ, "PYTHONPATH": _python_path()}).returncode != 0,
    reason="HypoFuzz is not installed (pip install hypofuzz)",
)]

#: what a HypoFuzz worker raises when the hub, done, closes the manager it
#: polls: its normal end, printed as a traceback
HUB_CLOSED = ("EOFError", "BrokenPipeError", "ConnectionResetError", "ConnectionRefusedError")


#: the last line of a traceback: the exception's (dotted) name, then its message
EXCEPTION_LINE = re.compile(r"^([A-Za-z_][\w.]*)(?::|$)")
#: a traceback's frame line, naming its file
FRAME_LINE = re.compile(r'^\s*File "([^"]+)", line \d+')
#: where a worker's call to the hub's manager raises once the hub has shut
#: it down (its socket file gone: FileNotFoundError in the connection's
#: connect, after the thread-local connection is found missing)
MANAGER_FILES = ("multiprocessing/managers.py", "multiprocessing/connection.py")


def _worker_deaths(output: str) -> list[str]:
    """The exceptions HypoFuzz's workers died of, other than the hub's end:
    an exception of HUB_CLOSED's types, or any raised inside the manager
    connection itself (its innermost frame in multiprocessing's managers or
    connection: the manager the hub closed). The hub's own lines may land
    inside a worker's traceback: both write to one stream."""
    deaths, in_traceback, innermost, code = [], False, "", ""
    for line in output.splitlines():
        if line.startswith("Traceback (most recent call last):"):
            in_traceback, innermost, code = True, "", ""
        elif in_traceback and (frame := FRAME_LINE.match(line)):
            innermost, code = frame[1], ""
        elif in_traceback and line.startswith("    ") and innermost and not code:
            code = line.strip()
        elif in_traceback and (match := EXCEPTION_LINE.match(line)):
            in_traceback = False
            hub_closed = (match[1].rpartition(".")[2] in HUB_CLOSED or innermost.endswith(MANAGER_FILES)
                          or _state_released(line, innermost, code))
            if not hub_closed:
                deaths.append(line)
    return deaths


def _state_released(exception: str, innermost: str, code: str) -> bool:
    """A worker writing its state into the hub's shared dict as the hub's
    manager shuts down: the dict the hub made for it reads back None (its
    referent released first), which nothing else ever stores there."""
    return (exception == "TypeError: 'NoneType' object does not support item assignment"
            and innermost.endswith("hypofuzz.py") and code.startswith("worker_state["))


COLLECT = """
import json, sys
from hypofuzz.collection import collect_tests
found = collect_tests(sys.argv[1:])
print("RESULT" + json.dumps({"targets": [t.nodeid for t in found.fuzz_targets],
                             "refused": {k: v["status_reason"] for k, v in found.not_collected.items()}}))
"""


#: ``hypothesis fuzz`` as its command runs it, with the hub's check for
#: "every test has a failing input" (hypofuzz.hypofuzz.FuzzWorkerHub.start:
#: ``time.sleep(60)``, then exit where no worker has a test left) made every
#: second instead of every 60 s once every worker has reported: the test
#: otherwise waited most of a minute after its worker had saved the failure.
#: Before its first report a worker has no test listed either (it is still
#: collecting), so the hub waits for that, as long as it would have anyway.
FUZZ = """
import sys, time, types
import hypofuzz.hypofuzz as hub

hubs = []
_init = hub.FuzzWorkerHub.__init__

def _recording_init(self, *args, **kwargs):
    _init(self, *args, **kwargs)
    hubs.append(self)

def _sleep(seconds):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        time.sleep(min(1, max(0, deadline - time.monotonic())))
        states = [state for h in hubs for state in h.shared_states]
        if states and all(state["worker_state"]["current_lifetime"] > 0 for state in states):
            return

hub.FuzzWorkerHub.__init__ = _recording_init
hub.time = types.SimpleNamespace(**{**vars(time), "sleep": _sleep})
from hypothesis.extra.cli import main
sys.argv[0] = "hypothesis"
main()
"""


def _env(tmp_path):
    env = {**os.environ, "PYTHONPATH": _python_path(str(REPO))}
    env.pop("FSDPCHECK_IMPL", None)
    # Where CI is set Hypothesis loads its database-less 'ci' profile, which
    # HypoFuzz cannot run under (see the test of that case below).
    env.pop("CI", None)
    env["FSDPCHECK_REPLAY_LOG"] = str(tmp_path / "calls.log")
    return env


def _suite_properties(tmp_path, args) -> set[str]:
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-m", "hypothesis", "-p", "no:randomly", *args],
        cwd=tmp_path, env=_env(tmp_path), capture_output=True, text=True, timeout=300,
    )
    return {line for line in out.stdout.splitlines() if "::" in line}


@pytest.mark.parametrize("profile", [[], ["--fsdpcheck-profile", "dev"], ["--fsdpcheck-profile", "fuzz"]],
                         ids=["ci", "dev", "fuzz"])
def test_hypofuzz_collects_every_property(tmp_path, profile):
    args = ["--fsdpcheck", "--fsdpcheck-impl", "reference", "-p", "no:randomly", *profile]
    out = subprocess.run([sys.executable, "-c", COLLECT, *args], cwd=tmp_path, env=_env(tmp_path),
                         capture_output=True, text=True, timeout=300)
    line = next((x for x in out.stdout.splitlines() if x.startswith("RESULT")), None)
    assert line is not None, out.stdout[-3000:] + out.stderr[-3000:]
    found = json.loads(line[len("RESULT"):])
    expected = _suite_properties(tmp_path, args)
    assert len(expected) > 20, expected
    assert found["refused"] == {}
    assert set(found["targets"]) == expected


def test_hypofuzz_fuzzes_a_property_with_the_plugin_options(tmp_path):
    """The implementation named by --fsdpcheck-impl is the one fuzzed, and a
    bug in it is found: HypoFuzz stops once every test has a failing input."""
    out = subprocess.run(
        [sys.executable, "-c", FUZZ, "fuzz", "-n", "1", "--no-dashboard", "--",
         "--fsdpcheck", "--fsdpcheck-impl", "tests.planted.replay:LosesAState", "--fsdpcheck-no-known-bugs",
         "-p", "no:randomly", "-k", "test_states_with_modules"],
        cwd=tmp_path, env=_env(tmp_path), capture_output=True, text=True, timeout=300,
    )
    output = out.stdout + out.stderr
    assert "fuzz 1 test" in output and "skipped" not in output, output[-3000:]
    assert "Found a failing input for every test" in output, output[-3000:]
    # HypoFuzz prints that line too when its worker died: only a worker that
    # lived to shrink and save the failure found it (HypoFuzz 25.11.1 under
    # Hypothesis >= 6.157.1 dies there, reading ConjectureResult.slice_comments)
    assert not _worker_deaths(output), (
        f"a HypoFuzz worker died: {_worker_deaths(output)} (HypoFuzz with a Hypothesis it does not "
        "work with? docs/scale.md#fuzzing)\n" + output[-3000:])
    assert (tmp_path / "calls.log").read_text().count("\n") > 1


def test_hypofuzz_without_a_database_is_refused_with_its_cause(tmp_path):
    """Hypothesis' 'ci' profile (loaded where CI is set) keeps no database; HypoFuzz's
    workers would die on it and report "a failing input for every test"."""
    out = subprocess.run(
        [CLI, "fuzz", "-n", "1", "--no-dashboard", "--",
         "--fsdpcheck", "--fsdpcheck-impl", "tests.planted.replay:LosesAState", "-p", "no:randomly",
         "-k", "test_states_with_modules"],
        cwd=tmp_path, env={**_env(tmp_path), "CI": "true"}, capture_output=True, text=True, timeout=300,
    )
    output = out.stdout + out.stderr
    assert out.returncode != 0, output[-3000:]
    assert "HypoFuzz needs an example database" in output and "'ci' profile" in output, output[-3000:]
    assert "Found a failing input" not in output and "Traceback" not in output, output[-3000:]
    assert not (tmp_path / "calls.log").exists()


@pytest.mark.unit
def test_a_worker_that_died_is_told_from_the_hubs_end():
    """The output of the ends this module meets: the hub's end inside a
    worker's traceback (both write to stderr), or the hub's manager gone
    under a worker's call to it, a worker dead of HypoFuzz under a
    Hypothesis it does not work with, a chained death; a worker's own state
    released under it as the hub's manager shuts down."""
    hub_end = ("Process Process-2:\nTraceback (most recent call last):\nFound a failing input for every test!\n"
               '  File "managers.py", line 399, in _recv\n    raise EOFError\nEOFError\n')
    died = ("Traceback (most recent call last):\n  File \"hypofuzz.py\", line 352, in run_one\n"
            "AttributeError: 'ConjectureResult' object has no attribute 'slice_comments'\n"
            "Found a failing input for every test!\n")
    chained = ("Traceback (most recent call last):\n  File \"a.py\"\nKeyError: 'x'\n\nDuring handling of the above "
               "exception, another exception occurred:\n\nTraceback (most recent call last):\n  File \"b.py\"\n"
               "multiprocessing.managers.RemoteError: boom\n")
    # the hub shut its manager down (its socket file gone) while the worker polled it: seen under load
    manager_gone = (
        "Process Process-2:\nTraceback (most recent call last):\n"
        '  File "/usr/lib/python3.11/multiprocessing/managers.py", line 814, in _callmethod\n'
        "    conn = self._tls.connection\n"
        "AttributeError: 'ForkAwareLocal' object has no attribute 'connection'\n\n"
        "During handling of the above exception, another exception occurred:\n\n"
        "Traceback (most recent call last):\n"
        '  File "/site/hypofuzz/hypofuzz.py", line 610, in start\n'
        '  File "/usr/lib/python3.11/multiprocessing/managers.py", line 805, in _connect\n'
        '  File "/usr/lib/python3.11/multiprocessing/connection.py", line 646, in SocketClient\n'
        "    s.connect(address)\nFileNotFoundError: [Errno 2] No such file or directory\n")
    # the shared state the hub made for the worker released under its write, as the hub ends (seen in CI)
    state_released = (
        "Process Process-2:\nTraceback (most recent call last):\n"
        '  File "/site/hypofuzz/hypofuzz.py", line 693, in start\n'
        '    worker_state["current_lifetime"] = current_lifetime\n'
        "    ~~~~~~~~~~~~^^^^^^^^^^^^^^^^^^^^\n"
        "TypeError: 'NoneType' object does not support item assignment\nFound a failing input for every test!\n")
    # the same error anywhere else is a death
    none_elsewhere = (
        "Traceback (most recent call last):\n"
        '  File "/site/hypofuzz/hypofuzz.py", line 352, in run_one\n'
        "    report[key] = value\n"
        "TypeError: 'NoneType' object does not support item assignment\n")
    assert _worker_deaths(hub_end) == [] and _worker_deaths(manager_gone) == []
    assert _worker_deaths(state_released) == []
    assert _worker_deaths(none_elsewhere) == ["TypeError: 'NoneType' object does not support item assignment"]
    assert _worker_deaths(died) == ["AttributeError: 'ConjectureResult' object has no attribute 'slice_comments'"]
    assert _worker_deaths(chained) == ["KeyError: 'x'", "multiprocessing.managers.RemoteError: boom"]
