"""The zygote that inner pytest runs fork from (tests/preloaded.py) gives each
run what a subprocess gives it: its own process, folder, environment,
command line and exit status, a time-out that kills it, a crash that is its
own, nothing carried from one run to the next; and it steps aside for the
runs that must start a new interpreter."""

import os
import sys

import pytest

from tests.preloaded import PRELOAD, Zygote, _differs_at_import, runpytest_preloaded

pytestmark = pytest.mark.process

RUNS = """
import os, sys

import mypkg


def test_sees_its_world():
    assert os.getcwd() == {cwd!r}
    assert os.environ["ZYGOTE_TEST_VALUE"] == "42"
    assert {cwd!r} in sys.path and os.environ["PYTHONPATH"].split(os.pathsep)[0] == {cwd!r}
    assert sys.modules["mypkg"].RUNS_BEFORE == [], "a module imported by an earlier run is still here"
    mypkg.RUNS_BEFORE.append(1)


def test_fails():
    assert False, "the failure's own message"
"""


@pytest.fixture(scope="module")
def zygote():
    zygote = Zygote()
    yield zygote
    zygote.close()


def test_a_run_is_a_subprocess_run_without_the_import(pytester, zygote, monkeypatch):
    pytester.makepyfile(mypkg="RUNS_BEFORE = []\n", test_runs=RUNS.format(cwd=str(pytester.path)))
    monkeypatch.setenv("ZYGOTE_TEST_VALUE", "42")
    for _ in range(2):  # the second run sees nothing the first imported or changed
        result = runpytest_preloaded(pytester, zygote, "-p", "no:randomly", "-p", "no:cacheprovider")
        assert result.ret == pytest.ExitCode.TESTS_FAILED, result.stdout.str()
        result.assert_outcomes(passed=1, failed=1)
        result.stdout.fnmatch_lines(["*the failure's own message*"])
    assert zygote.alive()
    assert "mypkg" not in sys.modules  # nor did this process import it


def test_a_crash_is_the_childs_and_a_hang_is_killed(pytester, zygote):
    pytester.makepyfile(test_crash="import os\n\ndef test_crash():\n    os.abort()\n",
                        test_hang="import time\n\ndef test_hang():\n    time.sleep(600)\n")
    crashed = runpytest_preloaded(pytester, zygote, "-p", "no:randomly", "test_crash.py")
    assert crashed.ret == -6, crashed.ret  # SIGABRT, as a subprocess reports it
    with pytest.raises(pytester.TimeoutExpired, match="10 s passed"):
        runpytest_preloaded(pytester, zygote, "-p", "no:randomly", "test_hang.py", timeout=10)
    assert zygote.alive()
    pytester.makepyfile(test_ok="def test_ok():\n    pass\n")
    assert runpytest_preloaded(pytester, zygote, "-p", "no:randomly", "test_ok.py").ret == 0


def test_the_preload_is_torch_alone(pytester, zygote, monkeypatch):
    """The child has torch and Dynamo; no pytest plugin and nothing of the
    plugin's own was imported before its session (pytest-xdist would hand its
    workers the zygote's sys.path; the plugin's import-time checks would see
    nothing to check)."""
    pytester.makepyfile(test_modules="""
import sys

def test_modules():
    assert {"torch", "torch._dynamo"} <= set(sys.modules)
""")
    probe = pytester.path / "probe.txt"
    pytester.makeconftest(f"""
import sys
open({str(probe)!r}, "w").write(" ".join(sorted(m for m in sys.modules if m.partition(".")[0] in
    ("pytest_fsdpcheck", "xdist", "hypothesis", "_hypothesis_pytestplugin"))))
""")
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")  # what the conftest sees is the preload's
    result = runpytest_preloaded(pytester, zygote)
    assert result.ret == 0, result.stdout.str()
    assert probe.read_text() == "", probe.read_text()
    assert set(PRELOAD) >= {"torch", "torch._dynamo"}


def test_runs_that_need_a_new_interpreter_get_one(monkeypatch):
    """What torch or Python read as they import, set otherwise than in the
    zygote, sends the run to a real subprocess; what is read at each use
    does not."""
    zygote_env = {"PATH": "/bin", "TORCHINDUCTOR_CACHE_DIR": "/a"}
    assert _differs_at_import({"PATH": "/bin", "TORCHINDUCTOR_CACHE_DIR": "/b", "PYTHONPATH": "x"}, zygote_env) == []
    assert _differs_at_import({**zygote_env, "OMP_NUM_THREADS": "1"}, zygote_env) == ["OMP_NUM_THREADS"]
    assert _differs_at_import({**zygote_env, "TORCH_LOGS": "dynamo"}, zygote_env) == ["TORCH_LOGS"]
    assert _differs_at_import({"PATH": "/bin"}, {**zygote_env, "TMPDIR": "/t"}) == ["TMPDIR"]


def test_an_unmarked_test_forks_from_the_zygote(pytester):
    """pytester.runpytest_subprocess goes through the zygote (the child has
    torch before its session starts), unless FSDPCHECK_TESTS_SUBPROCESS=1
    turned it off for this whole run."""
    pytester.makepyfile(test_where="""
import sys

def test_where():
    assert "torch" in sys.modules
""")
    result = pytester.runpytest_subprocess("-p", "no:randomly")
    forked = os.environ.get("FSDPCHECK_TESTS_SUBPROCESS") != "1"
    assert result.ret == (0 if forked else 1), result.stdout.str()


@pytest.mark.fresh_interpreter
def test_a_marked_test_gets_a_new_interpreter(pytester):
    pytester.makepyfile(test_where="""
import sys

def test_where():
    assert "torch" not in sys.modules
""")
    result = pytester.runpytest_subprocess("-p", "no:randomly")
    assert result.ret == 0, result.stdout.str()


SCRIPT = """
import json, os, sys
import torch
print(json.dumps({"modules": sorted(sys.modules), "argv": sys.argv, "path0": sys.path[0], "cwd": os.getcwd(),
                  "value": os.environ.get("ZYGOTE_TEST_VALUE")}))
ending = os.environ.get("ZYGOTE_TEST_ENDING")
if ending == "status":
    sys.exit(3)
elif ending == "message":
    sys.exit("stopped: with a message")
elif ending == "assertion":
    assert False, "SPL-4: planted"
elif ending == "hang":
    import time
    time.sleep(600)
"""


def test_a_script_runs_as_python_script_runs_it(tmp_path, run_script):
    """What the script sees and how it ends, against a real ``python SCRIPT``:
    after its ``import torch`` the same modules (nothing the zygote imported
    beyond it), its argv, sys.path[0], folder and environment; its exit
    status for each way a script ends; a hang is killed at the time-out."""
    import json
    import subprocess

    script = tmp_path / "script.py"
    script.write_text(SCRIPT)
    folder = tmp_path / "elsewhere"
    folder.mkdir()
    for ending, status in ((None, 0), ("status", 3), ("message", 1), ("assertion", 1)):
        env = {**os.environ, "ZYGOTE_TEST_VALUE": "42", **({"ZYGOTE_TEST_ENDING": ending} if ending else {})}
        forked = run_script(script, cwd=folder, env=env, timeout=120)
        fresh = subprocess.run([sys.executable, str(script)], cwd=folder, env=env, capture_output=True, text=True,
                               timeout=120)
        assert (forked.returncode, fresh.returncode) == (status, status), (ending, forked.stderr[-2000:])
        assert json.loads(forked.stdout.splitlines()[0]) == json.loads(fresh.stdout.splitlines()[0])
        last = fresh.stderr.strip().splitlines()[-1] if fresh.stderr.strip() else ""
        assert forked.stderr.strip().splitlines()[-1:] == ([last] if last else []), (forked.stderr, fresh.stderr)
    seen = json.loads(forked.stdout.splitlines()[0])
    assert seen["argv"] == [str(script)] and seen["path0"] == str(tmp_path) and seen["cwd"] == str(folder)
    with pytest.raises(subprocess.TimeoutExpired):
        run_script(script, cwd=folder, env={**os.environ, "ZYGOTE_TEST_ENDING": "hang"}, timeout=3)
