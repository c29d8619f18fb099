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


def test_thread_count_is_restored_after_the_session(pytester):
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
    assert "THREADS-DURING 1" in result.stdout.str()


def test_implementation_without_areas_is_a_usage_error(run_suite):
    result, report = run_suite("tests.planted.misbehaving:ProvidesNothing")
    assert result.ret == 4
    assert "provides none of the areas" in result.stderr.str()
    assert report is None
