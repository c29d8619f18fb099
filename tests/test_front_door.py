"""The front door: every bad input, odd combination and fault a user can hand
``pytest --fsdpcheck`` ends in one clear line (usage error, exit 4), a failing
check that says why, or a warning, never a traceback wall, a hang or damage
to the rest of the run, and nothing is left behind.

Each case runs pytest in an empty folder holding only the case's files: in
this process (``run_here``: pytester's in-process run, milliseconds) where
the inner run ends at a usage error or at start-up, before the suite is
collected; in a subprocess (``run``) where it collects or runs suite tests
(until the plugin's run state is the session's) or must be a fresh
interpreter (a crashing worker).
"""

from __future__ import annotations

import importlib.util
import json
import os
import pathlib
import shlex

import pytest

pytestmark = pytest.mark.plugin

REPO = pathlib.Path(__file__).resolve().parents[1]
USAGE = pytest.ExitCode.USAGE_ERROR

# --- files the cases put in their folder ---------------------------------------

IMPLS = {
    "syntax_error.py": "def broken(:\n",
    "raises_at_import.py": "raise RuntimeError('cannot start without a cluster')\n",
    "exits_at_import.py": "import sys\nsys.exit(3)\n",
    "argparse_at_import.py": "import argparse\nargparse.ArgumentParser().parse_args(['--no-such-flag'])\n",
    "no_area.py": "class Nothing:\n    pass\n",
    "init_raises.py": "class Impl:\n    def __init__(self):\n        raise ValueError('needs a config file')\n",
    "init_exits.py": "import sys\nclass Impl:\n    def __init__(self):\n        sys.exit(1)\n",
    "area_property.py": (
        "class Impl:\n    @property\n    def traversal(self):\n        raise KeyError('traversal is computed lazily')\n"
    ),
    "area_class.py": (
        "from pytest_fsdpcheck.reference.traversal import ReferenceTraversal\n"
        "class Impl:\n    traversal = ReferenceTraversal\n"
    ),
    "area_incomplete.py": "class T:\n    def handles(self, root):\n        return []\nclass Impl:\n    traversal = T()\n",
    "returns_none.py": (
        "from pytest_fsdpcheck.reference.traversal import ReferenceTraversal\n"
        "class T(ReferenceTraversal):\n    def handles(self, root):\n        return None\n"
        "class Impl:\n    traversal = T()\n"
    ),
    "hangs.py": (
        "import time\nfrom pytest_fsdpcheck.reference.traversal import ReferenceTraversal\n"
        "class T(ReferenceTraversal):\n    def handles(self, root):\n        time.sleep(3600)\n"
        "class Impl:\n    traversal = T()\n"
    ),
    "raises.py": (
        "from pytest_fsdpcheck.reference.traversal import ReferenceTraversal\n"
        "class T(ReferenceTraversal):\n    def handles(self, root):\n        raise ZeroDivisionError('planted')\n"
        "class Impl:\n    traversal = T()\n"
    ),
    "exits_in_call.py": (
        "import sys\nfrom pytest_fsdpcheck.reference.traversal import ReferenceTraversal\n"
        "class T(ReferenceTraversal):\n    def handles(self, root):\n        sys.exit(0)\n"
        "class Impl:\n    traversal = T()\n"
    ),
    "leaks_dynamo.py": (
        "import torch._dynamo\nfrom pytest_fsdpcheck.reference.traversal import ReferenceTraversal\n"
        "class T(ReferenceTraversal):\n    def handles(self, root):\n"
        "        torch._dynamo.config.cache_size_limit += 1\n        return super().handles(root)\n"
        "class Impl:\n    traversal = T()\n"
    ),
    # a crash no Python code can intercept (a calling os._exit fails its call)
    "crashes.py": (
        "import os, signal\nfrom pytest_fsdpcheck.reference.traversal import ReferenceTraversal\n"
        "class T(ReferenceTraversal):\n    def handles(self, root):\n        os.kill(os.getpid(), signal.SIGKILL)\n"
        "class Impl:\n    traversal = T()\n"
    ),
}

DIV = "[[divergence]]\nmatch = 'TRV-1'\nreason = 'x'\n"
DIVERGENCE_FILES = {
    "missing-reason": "[[divergence]]\nmatch = 'TRV-1'\n",
    "not-toml": "this is = = not toml",
    "unknown-invariant": "[[divergence]]\nmatch = 'TRV-99'\nreason = 'x'\n",
    "unknown-key": DIV + "severity = 'high'\n",
    "top-level-key": "title = 'mine'\n" + DIV,
    "not-an-array": "divergence = 'TRV-1'\n",
    "entry-not-table": "divergence = ['TRV-1']\n",
    "impl-not-string": DIV + "implementation = 3\n",
    "bad-torch-range": DIV + "torch = 'two point four'\n",
    "empty-match": "[[divergence]]\nmatch = ''\nreason = 'x'\n",
}

# --- usage errors: (id, args, files, ini, text of the one ERROR line) ---------

USAGE_CASES = [
    ("impl-unknown", ["--fsdpcheck-impl", "no-such-impl"], {}, None, "unknown implementation 'no-such-impl'"),
    ("impl-empty-name", ["--fsdpcheck-impl", ""], {}, None, "unknown implementation ''"),
    ("impl-syntax-error", ["--fsdpcheck-impl", "syntax_error:Impl"], {}, None, "cannot import 'syntax_error'"),
    ("impl-raises-at-import", ["--fsdpcheck-impl", "raises_at_import:Impl"], {}, None, "RuntimeError: cannot start without a cluster"),
    ("impl-exits-at-import", ["--fsdpcheck-impl", "exits_at_import:Impl"], {}, None, "SystemExit: 3"),
    ("impl-argparse-at-import", ["--fsdpcheck-impl", "argparse_at_import:Impl"], {}, None, "cannot import 'argparse_at_import': SystemExit"),
    ("impl-sys-exit", ["--fsdpcheck-impl", "sys:exit"], {}, None, "not an implementation"),
    ("impl-os-abort", ["--fsdpcheck-impl", "os:abort"], {}, None, "not an implementation"),
    ("impl-function", ["--fsdpcheck-impl", "os:getcwd"], {}, None, "nothing else is called"),
    ("impl-missing-attr", ["--fsdpcheck-impl", "no_area:Missing"], {}, None, "has no attribute 'Missing'"),
    ("impl-missing-nested-attr", ["--fsdpcheck-impl", "no_area:Nothing.inner"], {}, None, "has no attribute 'Nothing.inner'"),
    ("impl-no-module", ["--fsdpcheck-impl", "no_such_module:Impl"], {}, None, "cannot import 'no_such_module'"),
    ("impl-no-area", ["--fsdpcheck-impl", "no_area:Nothing"], {}, None, "provides none of the areas"),
    ("impl-init-raises", ["--fsdpcheck-impl", "init_raises:Impl"], {}, None, "ValueError: needs a config file"),
    ("impl-init-exits", ["--fsdpcheck-impl", "init_exits:Impl"], {}, None, "constructing it raised SystemExit"),
    ("impl-area-property-raises", ["--fsdpcheck-impl", "area_property:Impl"], {}, None, "reading its areas raised KeyError"),
    ("impl-area-is-a-class", ["--fsdpcheck-impl", "area_class:Impl"], {}, None, "is the class ReferenceTraversal, not an instance"),
    ("impl-area-incomplete", ["--fsdpcheck-impl", "area_incomplete:Impl"], {}, None, "traversal area lacks"),
    ("impl-second-one-bad", ["--fsdpcheck-impl", "reference", "--fsdpcheck-impl", "nope"], {}, None, "unknown implementation 'nope'"),
    ("ini-impl-unknown", [], {}, "fsdpcheck_impl = no-such-impl", "unknown implementation 'no-such-impl'"),
    ("profile-bogus", ["--fsdpcheck-profile=bogus"], {}, None, "invalid choice: 'bogus'"),
    ("device-tpu", ["--fsdpcheck-device=tpu"], {}, None, "invalid choice: 'tpu'"),
    # --fsdpcheck-device=cuda without a GPU is the machine's, exit 10 (an environment ERROR):
    # tests/test_plugin.py::test_cuda_without_cuda_is_an_environment_error
    ("ini-profile-bogus", [], {}, "fsdpcheck_profile = bogus", "unknown profile 'bogus'"),
    ("ini-device-tpu", [], {}, "fsdpcheck_device = tpu", "unknown device 'tpu'"),
    ("timeout-negative", ["--fsdpcheck-timeout=-1"], {}, None, "--fsdpcheck-timeout must be a number of seconds"),
    ("timeout-nan", ["--fsdpcheck-timeout=nan"], {}, None, "got 'nan'"),
    ("timeout-inf", ["--fsdpcheck-timeout=inf"], {}, None, "got 'inf'"),
    ("timeout-huge", ["--fsdpcheck-timeout=1e12"], {}, None, "got '1e12'"),
    ("timeout-word", ["--fsdpcheck-timeout=soon"], {}, None, "got 'soon'"),
    ("ini-timeout-negative", [], {}, "fsdpcheck_timeout = -5", "got '-5'"),
    ("plan-examples-zero", ["--fsdpcheck-plan-examples=0"], {}, None,
     "--fsdpcheck-plan-examples must be a whole number from 1 to 1000, got '0'"),
    ("ini-plan-examples-word", [], {}, "fsdpcheck_plan_examples = many", "got 'many'"),
    ("world-size-zero", ["--fsdpcheck-world-size=0"], {}, None, "--fsdpcheck-world-size must be a whole number of ranks from 1 to 4096, got '0'"),
    ("world-size-word", ["--fsdpcheck-world-size=all"], {}, None, "ranks from 1 to 4096, got 'all'"),
    ("world-size-fraction", ["--fsdpcheck-world-size=1.5"], {}, None, "ranks from 1 to 4096, got '1.5'"),
    ("world-size-huge", ["--fsdpcheck-world-size=100000"], {}, None, "ranks from 1 to 4096, got '100000'"),
    ("ini-world-size-negative", [], {}, "fsdpcheck_world_size = -2", "ranks from 1 to 4096, got '-2'"),
    ("seed-word-ci", ["--fsdpcheck-seed=abc"], {}, None, "must be an integer, got 'abc'"),
    ("seed-word-dev", ["--fsdpcheck-profile=dev", "--fsdpcheck-seed=abc"], {}, None, "must be an integer, got 'abc'"),
    ("seed-negative", ["--fsdpcheck-profile=dev", "--fsdpcheck-seed=-5"], {}, None, "must be in 0 .. 2**32-1"),
    ("seed-too-large", ["--fsdpcheck-profile=fuzz", f"--fsdpcheck-seed={2**40}"], {}, None, "must be in 0 .. 2**32-1"),
    ("ini-seed-word", [], {}, "fsdpcheck_seed = abc\nfsdpcheck_profile = dev", "must be an integer, got 'abc'"),
    ("report-under-a-file", ["--fsdpcheck-report", "r.json/dir/r.json"], {"r.json": "{}"}, None, "is a file, not a folder"),
    ("report-is-a-folder", ["--fsdpcheck-report", "."], {}, None, "is a directory"),
    ("ini-report-under-a-file", [], {"nowhere": "x"}, "fsdpcheck_report = nowhere/r.json", "is a file, not a folder"),
    ("divergences-missing-file", ["--fsdpcheck-divergences", "missing.toml"], {}, None, "cannot read"),
    ("divergences-a-folder", ["--fsdpcheck-divergences", "."], {}, None, "cannot read"),
    ("divergences-not-utf8", ["--fsdpcheck-divergences", "div.toml"], {"div.toml": b"match = '\xff\xfe'\n"}, None, "not UTF-8"),
    *[
        (f"divergences-{name}", ["--fsdpcheck-divergences", "div.toml"], {"div.toml": text}, None, "divergence file")
        for name, text in DIVERGENCE_FILES.items()
    ],
    ("ini-divergences-missing", [], {}, "fsdpcheck_divergences = missing.toml", "cannot read"),
    ("fuzz-time-word", ["--fsdpcheck-fuzz-time=soon"], {}, None, "must be a duration such as 90s, 10m or 1h30m, got 'soon'"),
    ("fuzz-time-unit", ["--fsdpcheck-fuzz-time=10d"], {}, None, "must be a duration such as 90s, 10m or 1h30m, got '10d'"),
    ("fuzz-time-negative", ["--fsdpcheck-fuzz-time=-5m"], {}, None, "got '-5m'"),
    ("fuzz-time-zero", ["--fsdpcheck-fuzz-time=0s"], {}, None, "must be more than 0 and at most 7 days, got '0s'"),
    ("fuzz-time-huge", ["--fsdpcheck-fuzz-time=9999h"], {}, None, "at most 7 days, got '9999h'"),
    ("fuzz-time-under-ci", ["--fsdpcheck-profile=ci", "--fsdpcheck-fuzz-time=10s"], {}, None, "cannot run under --fsdpcheck-profile ci"),
    ("fuzz-time-under-dev", ["--fsdpcheck-profile=dev", "--fsdpcheck-fuzz-time=10s"], {}, None, "cannot run under --fsdpcheck-profile dev"),
    ("ini-fuzz-time-word", [], {}, "fsdpcheck_fuzz_time = forever", "got 'forever'"),
    ("shard-word", ["--fsdpcheck-profile=fuzz", "--fsdpcheck-shard=two"], {}, None, "must be I/M with 1 <= I <= M, e.g. 2/4, got 'two'"),
    ("shard-zero", ["--fsdpcheck-profile=fuzz", "--fsdpcheck-shard=0/2"], {}, None, "got '0/2'"),
    ("shard-past-the-end", ["--fsdpcheck-profile=dev", "--fsdpcheck-shard=3/2"], {}, None, "got '3/2'"),
    ("shard-no-total", ["--fsdpcheck-profile=dev", "--fsdpcheck-shard=3"], {}, None, "got '3'"),
    ("ini-shard-word", [], {}, "fsdpcheck_shard = half\nfsdpcheck_profile = dev", "got 'half'"),
    ("database-unknown-scheme", ["--fsdpcheck-profile=dev", "--fsdpcheck-database=ftp://host/db"], {}, None, "must be a folder or a redis:// URL, got 'ftp://host/db'"),
    ("database-a-file", ["--fsdpcheck-profile=dev", "--fsdpcheck-database=db.txt"], {"db.txt": "x"}, None, "'db.txt' is a file"),
    ("database-redis-unreachable", ["--fsdpcheck-profile=fuzz", "--fsdpcheck-database=redis://127.0.0.1:1"], {}, None, "cannot reach the Redis server"),
    ("database-redis-no-client", ["--fsdpcheck-profile=fuzz", "--fsdpcheck-database=redis://127.0.0.1:1"], {}, None,
     "needs the redis client: pip install 'pytest-fsdpcheck[redis]'"),
    ("ini-database-a-file", [], {"db.txt": "x"}, "fsdpcheck_database = db.txt\nfsdpcheck_profile = dev", "db.txt' is a file"),
    # a folder that can never be created: Hypothesis would swallow every failed save and the run end green
    ("database-under-a-file", ["--fsdpcheck-profile=dev", "--fsdpcheck-database=blocker/db"], {"blocker": "x"}, None,
     "--fsdpcheck-database 'blocker/db' can never be written: "),
    ("database-deep-under-a-file", ["--fsdpcheck-fuzz-time=1m", "--fsdpcheck-database=blocker/a/b/c"], {"blocker": "x"}, None,
     "blocker' is a file, not a folder"),
    ("ini-database-under-a-file", [], {"blocker": "x"}, "fsdpcheck_database = blocker/db\nfsdpcheck_profile = fuzz",
     "blocker' is a file, not a folder"),
    ("default-database-under-a-file", ["--fsdpcheck-profile=dev"], {".pytest_cache": "x"}, None,
     "the default example database"),
    ("report-under-a-file", ["--fsdpcheck-report", "blocker/r.json"], {"blocker": "x"}, None,
     "blocker' is a file, not a folder"),
]


def _write(folder: pathlib.Path, files: dict) -> None:
    for name, text in {**IMPLS, **files}.items():
        path = folder / name
        path.write_bytes(text) if isinstance(text, bytes) else path.write_text(text)


@pytest.fixture
def run(pytester, monkeypatch, tmp_path_factory):
    """``run(args, files, ini)``: pytest in a subprocess in an empty folder."""
    from tests.helpers import OthersWrites

    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(pytester.path), str(REPO), os.environ.get("PYTHONPATH", "")]))
    monkeypatch.delenv("FSDPCHECK_IMPL", raising=False)
    others = OthersWrites(monkeypatch, tmp_path_factory.mktemp("outside"))

    def go(args, files=(), ini=None, timeout=300):
        _write(pytester.path, dict(files))
        if ini:
            pytester.makeini(f"[pytest]\n{ini}\n")
        before = set(os.listdir(pytester.path))
        result = pytester.runpytest_subprocess("-p", "no:randomly", "-p", "no:cacheprovider", *others.args, *args, timeout=timeout)
        result.folder = pytester.path
        # pytester's own files: the captured streams and the inner run's basetemp
        # (and Hypothesis' own cache of source constants, which it keeps in the
        # working directory whatever the settings)
        ours = {"__pycache__", "stdout", "stderr", "runpytest-current", ".hypothesis"}
        new = set(os.listdir(pytester.path)) - before - ours - others.names()
        result.left_behind = sorted(n for n in new if not n.startswith("runpytest-"))
        result.survivors = _processes_in(pytester.path)
        return result

    return go


@pytest.fixture
def run_here(pytester, run_in_process):
    """``run_here(args, files, ini)``: what ``run`` does, in this process
    (tests/conftest.py's ``run_in_process``); what other code than the
    plugin writes in the folder is told apart as ``run`` does."""
    from tests.helpers import OthersWritesHere

    def go(args, files=(), ini=None):
        _write(pytester.path, dict(files))
        if ini:
            pytester.makeini(f"[pytest]\n{ini}\n")
        before = set(os.listdir(pytester.path))
        others = OthersWritesHere()
        with others.watch(pytester.path):
            result = run_in_process("-p", "no:cacheprovider", *args)
        result.folder = pytester.path
        ours = {"__pycache__", ".hypothesis"}  # bytecode of the case's modules, Hypothesis' own cache
        result.left_behind = sorted(set(os.listdir(pytester.path)) - before - ours - others.names)
        result.survivors = _processes_in(pytester.path)
        return result

    return go


def test_files_other_tools_write_are_not_the_plugins(run):
    """What other installed tools write as a run starts (pytest-benchmark's
    folder, CUDA's per-user cache) is not left behind by the plugin; the
    report the plugin writes still is (the faulty implementations below)."""
    result = run(["-p", "tests.planted.other_tools", "--fsdpcheck", "--fsdpcheck-impl", "reference",
                  "-k", "test_states_with_modules"])
    assert result.ret == 0, result.stdout.str()[-2000:]
    assert (result.folder / ".benchmarks").is_dir()
    assert (pathlib.Path(os.environ["HOME"]) / ".nv").is_dir() and not (result.folder / ".nv").exists()
    assert result.left_behind == [], result.left_behind


def _processes_in(folder: pathlib.Path) -> list[str]:
    """Processes still running whose command line mentions ``folder``."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmdline = pathlib.Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if str(folder) in cmdline and int(pid) != os.getpid():
            found.append(f"{pid}: {cmdline[:120]}")
    return found


def _no_traceback(result) -> str:
    output = "\n".join(result.outlines + result.errlines)
    assert "Traceback" not in output and "INTERNALERROR" not in output, output
    return output


# The redis client comes with the optional `redis` extra: which of the two
# Redis cases can run depends on whether it is installed.
HAS_REDIS = importlib.util.find_spec("redis") is not None
NEEDS = {
    "database-redis-unreachable": pytest.mark.skipif(
        not HAS_REDIS, reason="the redis client is not installed (pip install 'pytest-fsdpcheck[redis]')"),
    "database-redis-no-client": pytest.mark.skipif(
        HAS_REDIS, reason="the redis client is installed: this case is its absence"),
}


@pytest.mark.parametrize(
    "args, files, ini, says", [pytest.param(*c[1:], id=c[0], marks=NEEDS.get(c[0], ())) for c in USAGE_CASES]
)
def test_bad_input_is_one_line_and_exit_4(run_here, args, files, ini, says):
    result = run_here(["--fsdpcheck", *args], files, ini)
    output = _no_traceback(result)
    assert result.ret == USAGE, output
    errors = [line for line in result.outlines + result.errlines if says in line]
    assert len(errors) == 1, output
    assert errors[0].startswith("ERROR:") or ": error: argument" in errors[0], errors[0]
    assert len([line for line in result.errlines if line.strip()]) <= 4, output
    assert not result.left_behind and not result.survivors, (result.left_behind, result.survivors)


# --- warnings: the option does nothing, the run says so and goes on -----------


@pytest.mark.parametrize(
    "args, says",
    [
        (["--fsdpcheck-impl", "reference"], "--fsdpcheck-impl has no effect without --fsdpcheck"),
        (["--fsdpcheck-strict", "--fsdpcheck-timeout=5"], "--fsdpcheck-timeout, --fsdpcheck-strict has no effect without --fsdpcheck"),
        (["--fsdpcheck-profile=dev"], "--fsdpcheck-profile has no effect without --fsdpcheck"),
        (["--fsdpcheck-fuzz-time=1m", "--fsdpcheck-shard=1/2", "--fsdpcheck-database=db"],
         "--fsdpcheck-fuzz-time, --fsdpcheck-shard, --fsdpcheck-database has no effect without --fsdpcheck"),
    ],
    ids=["impl", "strict-and-timeout", "profile", "fuzz-options"],
)
def test_suite_options_without_the_suite_warn(run_here, args, says):
    result = run_here(args)
    output = _no_traceback(result)
    assert result.ret == pytest.ExitCode.NO_TESTS_COLLECTED, output
    assert says in output, output


def test_seed_under_ci_warns_and_runs(run):
    result = run(["--fsdpcheck", "--fsdpcheck-impl", "reference", "--fsdpcheck-seed=7", "-k", "test_handles"])
    output = _no_traceback(result)
    assert result.ret == 0, output
    assert "--fsdpcheck-seed has no effect under the ci profile" in output


@pytest.mark.parametrize("flag", ["--fsdpcheck-shard=1/2", "--fsdpcheck-database=db"])
def test_fuzz_options_under_ci_warn_and_run(run, flag):
    result = run(["--fsdpcheck", "--fsdpcheck-impl", "reference", flag, "-k", "test_handles"])
    output = _no_traceback(result)
    assert result.ret == 0, output
    assert f"{flag.partition('=')[0]} has no effect under the ci profile" in output
    assert not result.left_behind, result.left_behind


@pytest.mark.unit
def test_writability_is_judged_without_creating_anything(tmp_path):
    from pytest_fsdpcheck.plugin.options import unwritable_folder

    (tmp_path / "blocker").write_text("x")
    (tmp_path / "dangling").symlink_to(tmp_path / "gone")
    assert unwritable_folder(str(tmp_path / "new" / "deeper")) is None
    assert unwritable_folder(str(tmp_path)) is None
    assert unwritable_folder(str(tmp_path / "blocker")) == "it is a file, not a folder"
    assert unwritable_folder(str(tmp_path / "blocker" / "a" / "b")) == f"{str(tmp_path / 'blocker')!r} is a file, not a folder"
    assert unwritable_folder(str(tmp_path / "dangling" / "db")).endswith("dangling' is a broken symbolic link")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["blocker", "dangling"]


def test_a_database_folder_not_there_yet_is_created_by_the_first_failure(run):
    """The start-up check creates nothing: a folder that can be created is
    accepted, and the first failing example is saved into it."""
    result = run(["--fsdpcheck", "--fsdpcheck-impl", "raises:Impl", "--fsdpcheck-profile=dev",
                  "--fsdpcheck-database=new/deeper/db", "-k", "test_handles"])
    output = _no_traceback(result)
    assert result.ret == pytest.ExitCode.TESTS_FAILED, output
    saved = [p for p in (pathlib.Path(result.folder) / "new" / "deeper" / "db").rglob("*") if p.is_file()]
    assert saved, output


# --- faults inside a check: a FAIL cell that says what happened ---------------

FAULTS = [
    ("returns-none", "returns_none:Impl", [], "traversal.handles returned NoneType; the contract expects a list"),
    ("hangs", "hangs:Impl", ["--fsdpcheck-timeout=1"], "did not return within 1 s"),
    ("raises", "raises:Impl", [], "ZeroDivisionError: planted"),
    ("exits-inside-a-call", "exits_in_call:Impl", [], "tried to exit the process with status 0"),
    ("leaks-dynamo-config", "leaks_dynamo:Impl", [], "left process-wide state changed"),
    ("crashes-a-worker", "crashes:Impl", ["-n", "2"], "crashed"),
]


# a worker's crash needs workers: processes of their own; the rest stay
# subprocesses too: a suite test run in this process imports torch modules
# that pytester forgets after the run, and torch's C extension cannot be
# imported again (tried: the next in-process run stops at an INTERNALERROR)
@pytest.mark.parametrize("impl, extra, says", [
    pytest.param(*f[1:], id=f[0], marks=pytest.mark.process if f[0] == "crashes-a-worker" else ()) for f in FAULTS])
def test_a_faulty_implementation_fails_its_check_with_the_reason(run, impl, extra, says):
    result = run(["--fsdpcheck", "--fsdpcheck-impl", impl, "--fsdpcheck-impl", "reference",
                  "-k", "test_handles", "--fsdpcheck-report", "report.json", *extra])
    output = "\n".join(result.outlines + result.errlines)
    assert "INTERNALERROR" not in output, output
    assert result.ret == pytest.ExitCode.TESTS_FAILED, output
    assert says in output, output
    import json

    cells = json.loads((pathlib.Path(result.folder) / "report.json").read_text())["matrix"][impl]
    assert cells["TRV-6"]["outcome"] == "fail", cells
    assert result.left_behind == ["report.json"], result.left_behind
    assert not result.survivors, result.survivors


# --- selection and the user's own tests ---------------------------------------


def test_a_test_id_as_printed_reruns_that_test(run):
    """A suite test's id as the summary prints it; a user's model's test by
    the re-run command the reports print (JUnit, annotations): it names the
    model, or its test is not collected (issue 56, item 4), and the run's
    report gives the model cells of its own, from its tests' records."""
    from pytest_fsdpcheck.report.junit import rerun_command

    model = "tests.planted.plans:good"
    nodeid = "conformance/test_models.py::test_model_fsdp2_walk[reference-tests.planted.plans.good]"
    command = shlex.split(rerun_command(nodeid, "reference", model, world_size=4))
    assert command[:2] == ["pytest", "--fsdpcheck"] and "--fsdpcheck-model" in command, command
    result = run([*command[1:], "test_traversal.py::test_handles[reference]", "--fsdpcheck-report", "report.json"])
    _no_traceback(result)
    result.assert_outcomes(passed=2)
    report = json.loads((pathlib.Path(result.folder) / "report.json").read_text())
    assert report["header"]["world_size"] == 4
    assert list(report["models"]) == [model] and report["models"][model]["reference"]["FS2-1"]["outcome"] == "pass"
    assert "TRV-6" not in report["models"][model]["reference"] and "TRV-6" in report["matrix"]["reference"]
    assert [t["model"] for t in report["tests"].values() if "model" in t] == [model]


def test_selection_of_nothing_makes_no_verdicts(run):
    div = "[[divergence]]\nmatch = 'TRV-7'\nimplementation = 'reference'\nreason = 'x'\n"
    # a subprocess: collecting the suite imports libraries (transformers' C
    # extensions) that an in-process run would leave half-forgotten
    result = run(["--fsdpcheck", "--fsdpcheck-impl", "reference", "--fsdpcheck-strict",
                  "--fsdpcheck-divergences", "div.toml", "-k", "no_such_test"], {"div.toml": div})
    output = _no_traceback(result)
    assert result.ret == pytest.ExitCode.NO_TESTS_COLLECTED, output
    assert "stale divergence" not in output and "unexpected pass" not in output, output


USER_FIXTURE = """
import pytest

@pytest.fixture
def fsdpcheck_impl():
    return "mine"

def test_mine(fsdpcheck_impl):
    assert fsdpcheck_impl == "mine"

def test_my_hypothesis_settings_are_mine(request):
    from hypothesis import settings

    # Hypothesis picks its own profile (it loads "ci" where a CI variable is set):
    # the runs below compare what this test saw with and without the plugin.
    with open(request.config.rootpath / f"settings-{bool(request.config.getoption('fsdpcheck'))}.txt", "w") as seen:
        seen.write(repr(settings.default))
"""


def test_a_users_fixture_of_the_same_name_is_left_alone(run):
    plain = run(["test_user.py"], {"test_user.py": USER_FIXTURE})
    plain.assert_outcomes(passed=2)
    both = run(["--fsdpcheck", "--fsdpcheck-impl", "reference", "-k", "mine or test_handles", "test_user.py"],
               {"test_user.py": USER_FIXTURE})
    _no_traceback(both)
    both.assert_outcomes(passed=3)
    assert (plain.folder / "settings-True.txt").read_text() == (plain.folder / "settings-False.txt").read_text()


def test_enabled_in_the_ini_file_the_projects_own_tests_are_still_collected(run):
    # `fsdpcheck = true` in pytest.ini: a plain `pytest -k test_mine` ran the
    # suite alone and deselected everything (exit 5, not a word); the project's
    # tests are collected as without the plugin, the suite beside them
    files = {"test_user.py": USER_FIXTURE}
    ini = "fsdpcheck = true\nfsdpcheck_impl = reference"
    mine = run(["-k", "test_mine"], files, ini)
    _no_traceback(mine)
    mine.assert_outcomes(passed=1)
    both = run(["-k", "test_mine or test_handles"], files, ini)
    _no_traceback(both)
    both.assert_outcomes(passed=2)
    # on the command line, `--fsdpcheck` with no paths is still the suite alone
    alone = run(["--fsdpcheck", "-k", "test_mine or test_handles"], files, ini)
    alone.assert_outcomes(passed=1)


def test_ini_relative_divergence_file_is_read_from_the_ini_folder(run, pytester):
    (pytester.path / "sub").mkdir()
    (pytester.path / "div.toml").write_text("[[divergence]]\nmatch = 'TRV-7'\nimplementation = 'reference'\nreason = 'x'\n")
    pytester.makeini("[pytest]\nfsdpcheck_divergences = div.toml\n")
    os.chdir(pytester.path / "sub")
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--fsdpcheck", "--fsdpcheck-impl", "reference",
                                           "-k", "test_handles", "-c", str(pytester.path / "tox.ini"), timeout=300)
    output = "\n".join(result.outlines)
    assert result.ret == 0, output
    assert f"divergence files: {pytester.path / 'div.toml'}" in output, output
