"""A misbehaving implementation fails its own checks with a clear reason and
does not damage the rest of the run."""

K = "test_states_with_modules"


def test_raising_implementation_shows_its_own_frames(run_suite):
    result, report = run_suite("tests.planted.misbehaving:Raises", k=K)
    out = result.stdout.str()
    assert report["matrix"]["tests.planted.misbehaving:Raises"]["TRV-1"]["outcome"] == "fail"
    assert "KeyError: 'no owner recorded for Module'" in out
    assert "_lookup_owner" in out  # the implementation's frame is shown
    # ... and the suite's machinery is not
    assert "hypothesis/core.py" not in out
    assert "pytest_fsdpcheck/plugin.py" not in out


def test_hanging_implementation_is_stopped(run_suite):
    result, report = run_suite(
        "tests.planted.misbehaving:Hangs", "reference", k=K, extra=["--fsdpcheck-timeout", "0.5"]
    )
    out = result.stdout.str()
    assert "tests.planted.misbehaving:Hangs: traversal.states_with_modules did not return within 0.5 s" in out
    assert report["matrix"]["tests.planted.misbehaving:Hangs"]["TRV-1"]["outcome"] == "fail"
    assert report["matrix"]["reference"]["TRV-1"]["outcome"] == "pass"
    # The hang is paid once, not once per shrink attempt.
    assert result.duration < 120


def _check_leak(run_suite, impl, what):
    # -p no:xdist keeps both implementations in one process, in order: the
    # leaking one first, the reference after it must be unaffected.
    result, report = run_suite(impl, "reference", k=K, extra=["-p", "no:xdist"])
    out = result.stdout.str()
    assert "left process-wide state changed" in out and what in out
    assert report["matrix"][impl]["TRV-1"]["outcome"] == "fail"
    assert report["matrix"]["reference"]["TRV-1"]["outcome"] == "pass"


def test_tracer_patch_is_reported_and_undone(run_suite):
    _check_leak(run_suite, "tests.planted.misbehaving:LeaksTracerPatch", "fx.Tracer (call_module)")


def test_logger_level_is_reported_and_undone(run_suite):
    _check_leak(run_suite, "tests.planted.misbehaving:LeaksLoggerLevel", "loggers (torch.distributed)")


def test_process_group_is_reported_and_destroyed(run_suite):
    _check_leak(run_suite, "tests.planted.misbehaving:LeaksProcessGroup", "process_group (False -> True)")


def test_thread_count_is_reported_and_undone(run_suite):
    # The plugin pins torch to one thread for the session; only a change made
    # by an implementation is a leak.
    _check_leak(run_suite, "tests.planted.misbehaving:LeaksThreadCount", "num_threads (1 -> 2)")


def test_thread_count_is_the_users_outside_the_suites_tests(pytester):
    pytester.makeconftest(
        "import torch\n"
        "def pytest_sessionstart(session):\n"
        "    print('THREADS-DURING', torch.get_num_threads())\n"
    )
    pytester.makepyfile(
        "import subprocess, sys, torch\n"
        "def test_outer():\n"
        "    torch.set_num_threads(3)\n"
        "    import pytest\n"
        "    pytest.main(['--fsdpcheck', '--fsdpcheck-impl', 'reference', '-k', 'test_states_with_modules', '-p', 'no:xdist', '-q'])\n"
        "    assert torch.get_num_threads() == 3\n"
    )
    result = pytester.runpytest_subprocess("-p", "no:xdist", "-s")
    result.assert_outcomes(passed=1)
    # the suite pins one thread around its own tests only: the session, and
    # the user's code around it, keep the user's count
    assert "THREADS-DURING 3" in result.stdout.str()


def test_implementation_without_areas_is_a_usage_error(run_suite):
    result, report = run_suite("tests.planted.misbehaving:ProvidesNothing")
    assert result.ret == 4
    assert "provides none of the areas" in result.stderr.str()
    assert report is None


# --- exiting, threads, processes, environment, import path, directory, seeds ----

# Loaded into the suite's run with -p: writes what each test finds when it
# starts, so a test can see that the one after a leak found the state as the
# run began.
OBSERVER = """
import json, os, random, sys, threading, hashlib
import pytest

@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    import torch
    seen = {
        "test": item.nodeid,
        "env": os.environ.get("FSDPCHECK_PLANTED"),
        "sys.path": sys.path[-3:],
        "cwd": os.getcwd(),
        "random": hashlib.sha1(repr(random.getstate()).encode()).hexdigest(),
        "torch seed": torch.initial_seed(),
    }
    with open(%r, "a") as f:
        f.write(json.dumps(seen) + "\\n")
"""


def _misbehaves(run_suite, pytester, planted, what):
    import json

    seen = pytester.path / "seen.jsonl"
    pytester.makepyfile(fsdpcheck_observer=OBSERVER % str(seen))
    impl = "tests.planted.misbehaving:" + planted
    result, report = run_suite(impl, "reference", k=K, extra=["-p", "no:xdist", "-p", "fsdpcheck_observer"])
    out = result.stdout.str()
    assert what in out, out[-3000:]
    assert report["matrix"][impl]["TRV-1"]["outcome"] == "fail"
    assert report["matrix"]["reference"]["TRV-1"]["outcome"] == "pass"
    assert result.ret == 1
    assert "short test summary" in out
    first, after = [json.loads(line) for line in seen.read_text().splitlines()]
    assert impl in first["test"] and "reference" in after["test"]
    # the test after the leak starts where the leaking one did
    assert {**after, "test": None} == {**first, "test": None}
    return out


def test_os_exit_fails_the_check_and_the_run_goes_on(run_suite, pytester):
    _misbehaves(run_suite, pytester, "ExitsProcess",
                "tests.planted.misbehaving:ExitsProcess: traversal.states_with_modules tried to exit the process with status 0")


def test_sys_exit_fails_the_check(run_suite, pytester):
    _misbehaves(run_suite, pytester, "CallsSysExit",
                "tests.planted.misbehaving:CallsSysExit: traversal.states_with_modules tried to exit the process with status 0")


def test_thread_left_running_is_named_and_does_not_hold_the_run(run_suite, pytester):
    # The thread waits forever and is not a daemon: the run ending at all
    # (pytester's timeout) shows it no longer holds the interpreter's exit.
    _misbehaves(run_suite, pytester, "LeavesThread", "threads left running (planted-prefetcher)")


def test_child_process_left_running_is_stopped(run_suite, pytester):
    out = _misbehaves(run_suite, pytester, "LeavesChildProcess", "child processes left running (pid ")
    import re

    pid = int(re.search(r"child processes left running \(pid (\d+) ", out).group(1))
    with open(f"/proc/{pid}/stat") if __import__("os").path.exists(f"/proc/{pid}") else open("/dev/null") as f:
        assert f.read().rpartition(")")[2].split()[:1] in ([], ["Z"], ["X"])


def test_environment_variable_is_named_and_removed(run_suite, pytester):
    _misbehaves(run_suite, pytester, "SetsEnvironment", "environ (FSDPCHECK_PLANTED)")


def test_import_path_entry_is_named_and_removed(run_suite, pytester):
    _misbehaves(run_suite, pytester, "ExtendsImportPath", "sys.path (added '/planted/nowhere')")


def test_working_directory_is_named_and_restored(run_suite, pytester):
    _misbehaves(run_suite, pytester, "ChangesDirectory", "cwd (")


def test_reseeded_random_is_named_and_restored(run_suite, pytester):
    # Hypothesis seeds and restores ``random`` around each example, so only
    # the call itself can see this one.
    _misbehaves(run_suite, pytester, "ReseedsRandom",
                "traversal.states_with_modules left process-wide state changed: random (reseeded)")


def test_reseeded_torch_is_named_and_restored(run_suite, pytester):
    _misbehaves(run_suite, pytester, "ReseedsTorch",
                "traversal.states_with_modules left process-wide state changed: torch random seed (")
