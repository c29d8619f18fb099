"""A misbehaving implementation fails its own checks with a clear reason and
does not damage the rest of the run."""

import pytest

# Process state and first imports are the subject here: inner runs start a
# new interpreter, never a fork of one that imported torch (tests/preloaded.py).
pytestmark = [pytest.mark.unit, pytest.mark.fresh_interpreter]

K = "test_states_with_modules"


@pytest.mark.plugin
def test_raising_implementation_shows_its_own_frames(run_suite):
    result, report = run_suite("tests.planted.misbehaving:Raises", k=K)
    out = result.stdout.str()
    assert report["matrix"]["tests.planted.misbehaving:Raises"]["TRV-1"]["outcome"] == "fail"
    assert "KeyError: 'no owner recorded for Module'" in out
    assert "_lookup_owner" in out  # the implementation's frame is shown
    # ... and the suite's machinery is not
    assert "hypothesis/core.py" not in out
    assert "pytest_fsdpcheck/plugin/__init__.py" not in out


@pytest.mark.plugin
def test_hanging_implementation_is_stopped(run_suite):
    result, report = run_suite(
        "tests.planted.misbehaving:Hangs", "tests.planted.misbehaving:HangsAttaching", "reference", k=K,
        extra=["--fsdpcheck-timeout", "0.5"]
    )
    out = result.stdout.str()
    assert "tests.planted.misbehaving:Hangs: traversal.states_with_modules did not return within 0.5 s" in out
    # also a call among those made while a tree is built, which share one containment
    assert "tests.planted.misbehaving:HangsAttaching: traversal.attach_state did not return within 0.5 s" in out
    for hangs in ("Hangs", "HangsAttaching"):
        assert report["matrix"][f"tests.planted.misbehaving:{hangs}"]["TRV-1"]["outcome"] == "fail"
    assert report["matrix"]["reference"]["TRV-1"]["outcome"] == "pass"
    # The hang is paid once, not once per shrink attempt.
    assert result.duration < 120


@pytest.mark.plugin
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


@pytest.mark.plugin
def test_implementation_without_areas_is_a_usage_error(run_in_process, pytester):
    # a usage error at start-up: in this process (tests/conftest.py)
    report = pytester.path / "report.json"
    result = run_in_process("--fsdpcheck", "-rf", "--fsdpcheck-report", str(report),
                            "--fsdpcheck-impl", "tests.planted.misbehaving:ProvidesNothing")
    assert result.ret == 4
    assert "provides none of the areas" in result.stderr.str()
    assert not report.exists()


# --- leaks, exits, threads, processes, environment, import path, directory, seeds

#: planted (tests/planted/misbehaving.py) -> what its failure must name.
#: One process (-p no:xdist) runs them all in this order, then the reference:
#: each must fail on its own, and every test must start where the run did.
MISBEHAVING = {
    "LeaksTracerPatch": "left process-wide state changed: fx.Tracer (call_module)",
    "LeaksLoggerLevel": "left process-wide state changed: loggers (torch.distributed)",
    "LeaksProcessGroup": "left process-wide state changed: process_group (False -> True)",
    # the plugin pins torch to one thread for the session; only a change made
    # by an implementation is a leak
    "LeaksThreadCount": "left process-wide state changed: num_threads (1 -> 2)",
    "ExitsProcess": "tests.planted.misbehaving:ExitsProcess: traversal.states_with_modules tried to exit the process with status 0",
    "CallsSysExit": "tests.planted.misbehaving:CallsSysExit: traversal.states_with_modules tried to exit the process with status 0",
    # the thread waits forever and is not a daemon: the run ending at all
    # shows it no longer holds the interpreter's exit
    "LeavesThread": "threads left running (planted-prefetcher)",
    "LeavesChildProcess": "child processes left running (pid ",
    "SetsEnvironment": "environ (FSDPCHECK_PLANTED)",
    "ExtendsImportPath": "sys.path (added '/planted/nowhere')",
    "ChangesDirectory": "cwd (",
    # Hypothesis seeds and restores ``random`` around each example, so only
    # the call itself can see this one
    "ReseedsRandom": "traversal.states_with_modules left process-wide state changed: random (reseeded)",
    "ReseedsTorch": "traversal.states_with_modules left process-wide state changed: torch random seed (",
}

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


@pytest.fixture(scope="session")
def misbehaving_run(tmp_path_factory):
    """The one run of every misbehaving implementation, made by whichever
    xdist worker gets here first and read by the others (pytest-xdist's
    recipe for a session fixture that runs once)."""
    import fcntl
    import json

    shared = tmp_path_factory.getbasetemp().parent
    done = shared / "misbehaving-run.json"
    with open(shared / "misbehaving-run.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not done.exists():
            done.write_text(json.dumps(_run_misbehaving(tmp_path_factory.mktemp("misbehaving"))))
    return json.loads(done.read_text())


def _run_misbehaving(where):
    import json
    import os
    import pathlib
    import subprocess
    import sys

    (where / "fsdpcheck_observer.py").write_text(OBSERVER % str(where / "seen.jsonl"))
    args = [sys.executable, "-m", "pytest", "--fsdpcheck", "-p", "no:randomly", "-p", "no:xdist", "-p", "no:cacheprovider",
            "-p", "fsdpcheck_observer", "-rf", "-k", K, "--fsdpcheck-report", str(where / "report.json")]
    for planted in MISBEHAVING:
        args += ["--fsdpcheck-impl", f"tests.planted.misbehaving:{planted}"]
    args += ["--fsdpcheck-impl", "reference"]
    root = pathlib.Path(__file__).resolve().parents[1]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(where), str(root), os.environ.get("PYTHONPATH")])))
    env.pop("FSDPCHECK_IMPL", None)
    proc = subprocess.run(args, cwd=where, env=env, capture_output=True, text=True, timeout=600)
    report = where / "report.json"
    seen = where / "seen.jsonl"
    return {
        "ret": proc.returncode,
        "lines": proc.stdout.splitlines(),
        "report": json.loads(report.read_text()) if report.exists() else None,
        "seen": [json.loads(line) for line in seen.read_text().splitlines()] if seen.exists() else [],
    }


@pytest.mark.process
@pytest.mark.parametrize("planted", list(MISBEHAVING))
def test_misbehaving_implementation_fails_alone_and_the_state_is_restored(misbehaving_run, planted):
    from tests.helpers import failure_sections

    run = misbehaving_run
    text = "\n".join(run["lines"])
    assert run["report"] is not None, text[-3000:]
    impl = f"tests.planted.misbehaving:{planted}"
    assert run["report"]["matrix"][impl]["TRV-1"]["outcome"] == "fail", text[-3000:]
    assert run["report"]["matrix"]["reference"]["TRV-1"]["outcome"] == "pass", text[-3000:]
    assert run["ret"] == 1 and "short test summary" in text, text[-3000:]
    own = [body for name, body in failure_sections(run["lines"]).items() if f"[{impl}" in name]
    assert any(MISBEHAVING[planted] in body for body in own), f"{planted}: {MISBEHAVING[planted]!r} not in its failure:\n" + "\n".join(own)[-3000:]
    # the test after this one starts where the run did
    order = [seen["test"] for seen in run["seen"]]
    mine = max(i for i, test in enumerate(order) if f"[{impl}" in test)
    assert mine + 1 < len(order), order
    assert {**run["seen"][mine + 1], "test": None} == {**run["seen"][0], "test": None}, (order[mine + 1], run["seen"])


@pytest.mark.process
def test_child_process_left_running_is_stopped(misbehaving_run):
    import os
    import re

    text = "\n".join(misbehaving_run["lines"])
    pid = int(re.search(r"child processes left running \(pid (\d+) ", text).group(1))
    if os.path.exists(f"/proc/{pid}"):
        with open(f"/proc/{pid}/stat") as f:
            assert f.read().rpartition(")")[2].split()[:1] in (["Z"], ["X"])


def test_torchs_compile_worker_pool_is_not_a_leak(monkeypatch):
    """Torch 2.3 starts Inductor's compile worker pool when Inductor is first
    imported (the suite's own Dynamo capture does that): a pool torch keeps for
    the process's life, not a leak of whichever test came first. Another child
    process started alongside it still is one."""
    import multiprocessing
    import sys
    import types
    from concurrent.futures import ProcessPoolExecutor

    from pytest_fsdpcheck.plugin import isolation

    before = isolation._process_state()
    pool = ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("fork"))
    other = multiprocessing.get_context("fork").Process(target=__import__("time").sleep, args=(30,))
    try:
        pool.submit(int).result()
        other.start()
        # the module as it is, with this pool in its process-pool set: its
        # AsyncCompile (the thread pool an earlier compile in this worker may
        # have started) stays what it is
        real = sys.modules.get("torch._inductor.async_compile")
        monkeypatch.setitem(sys.modules, "torch._inductor.async_compile",
                            types.SimpleNamespace(_pool_set={pool}, AsyncCompile=getattr(real, "AsyncCompile", None)))
        threads, children = isolation._started(before, isolation._process_state())
        assert children == [other.pid]
        assert threads == []
    finally:
        other.kill()
        other.join()
        pool.shutdown()


def _compiled_step(width: int):
    """A tiny model compiled with the default backend (Inductor) and run
    forward and backward: a C++ kernel for the ReLU, so a cache miss
    generates code (raising the recursion limit) and builds it in Inductor's
    compile thread pool."""
    import torch

    model = torch.nn.Sequential(torch.nn.Linear(width, width), torch.nn.ReLU(), torch.nn.Linear(width, width))
    torch.compile(model)(torch.randn(2, width)).sum().backward()


@pytest.fixture
def first_compile(monkeypatch, tmp_path):
    """Each compile a first one: no cache to hit (an empty cache folder, no
    FX graph cache), two compile
    threads (the pool Inductor starts on machines with two cores or more),
    the recursion limit Python starts with. Put back after."""
    import sys

    # setuptools extends sys.path as it is first imported, and a compile may
    # import it (in one CI order it did, its first import read as a leak);
    # imported here, so these tests see Inductor's own bookkeeping alone
    import setuptools  # noqa: F401
    import torch._dynamo
    import torch._inductor.config as inductor_config

    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path))
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(1000)
    with inductor_config.patch(fx_graph_cache=False, compile_threads=2):
        yield
    torch._dynamo.reset()
    sys.setrecursionlimit(limit)


def _watched(body):
    """Leaks of ``body`` as a suite test's call reads them."""
    from pytest_fsdpcheck.plugin import isolation

    with isolation.FirstImports() as imported:
        before = isolation.global_state()
        with isolation.InductorCompiles() as compiles:
            body()
    found = isolation.leaks(before, isolation.global_state(), imported, compiles)
    isolation.restore_verdict_state(before)
    return found


@pytest.mark.process
def test_an_inductor_compile_in_a_test_is_torchs_bookkeeping_whatever_the_order(first_compile):
    """Issue 38 finding 4: the first Inductor compile inside a test raises
    the recursion limit (1000 -> 2000) and starts Inductor's compile thread
    pool (ThreadPoolExecutor-N_0...), which read as the implementation's
    leak, in whichever test compiled first. Both are the compile's own, in
    the first compiling test and every later one."""
    import sys
    import threading

    from pytest_fsdpcheck.plugin import isolation

    assert _watched(lambda: _compiled_step(4)) == []
    assert sys.getrecursionlimit() == 1000  # still put back for the next test
    kept = isolation._process_helpers()[1]
    assert kept and kept <= set(threading.enumerate())  # the pool was there to excuse
    assert _watched(lambda: _compiled_step(6)) == []


@pytest.mark.process
def test_an_implementations_own_limit_or_thread_beside_a_compile_is_still_a_leak(first_compile):
    """The excuse is the compile's changes alone: a limit raised by other
    code (before the compile, so the compile keeps it, or after it), or a
    thread pool of anyone else's, is a leak."""
    import sys
    from concurrent.futures import ThreadPoolExecutor

    def raising_first():
        sys.setrecursionlimit(1500)
        _compiled_step(8)

    def raising_after():
        _compiled_step(10)
        sys.setrecursionlimit(5000)

    assert _watched(raising_first) == ["recursion_limit (1000 -> 2000)"]
    assert _watched(raising_after) == ["recursion_limit (1000 -> 5000)"]
    pool = ThreadPoolExecutor(1, thread_name_prefix="ThreadPoolExecutor-9")
    try:
        found = _watched(lambda: (_compiled_step(12), pool.submit(int).result()))
        assert found == ["threads left running (ThreadPoolExecutor-9_0)"]
    finally:
        pool.shutdown()


def test_torchs_own_inductor_cache_dir_is_not_a_leak_but_another_value_is(monkeypatch):
    """Torch 2.6+ sets TORCHINDUCTOR_CACHE_DIR to its default on Inductor's
    first use (15 false leaks on 2.6.0 before): that default is torch's own;
    an implementation pointing it elsewhere is a leak, and is undone."""
    import os

    from torch._inductor.runtime.cache_dir_utils import default_cache_dir

    from pytest_fsdpcheck.plugin import isolation

    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR", raising=False)
    before = isolation._process_state()
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = default_cache_dir()
    assert isolation.leaks(before, isolation._process_state()) == []
    isolation._restore_process(before, isolation.FirstImports())
    assert os.environ["TORCHINDUCTOR_CACHE_DIR"] == default_cache_dir()
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = "/elsewhere"
    assert isolation.leaks(before, isolation._process_state()) == ["environ (TORCHINDUCTOR_CACHE_DIR)"]
    isolation._restore_process(before, isolation.FirstImports())
    assert "TORCHINDUCTOR_CACHE_DIR" not in os.environ


# --- what a library does as it is first imported is not the implementation's


@pytest.mark.plugin
def test_import_time_effects_of_a_lazily_imported_library_are_not_a_leak(pytester):
    """A call that first imports a third-party library drawing from the
    global generators, setting an environment variable, extending the import
    path and raising the recursion limit as it loads (rich, Inductor,
    setuptools do) passes; an implementation drawing from ``random`` in its
    own code still fails, naming it. pytest-randomly, where installed, stays
    enabled: its reseeds around every phase are not the implementation's
    either."""
    import json
    import os
    import pathlib

    from tests.planted.misbehaving import LAZY_MODULE

    root = pathlib.Path(__file__).resolve().parents[1]
    # installed as a library is: outside the implementation's package
    site = pytester.mkdir("site")
    (site / f"{LAZY_MODULE}.py").write_text((root / "tests" / "planted" / "lazy_import_effects.py").read_text())
    pytester._monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(root), str(site), os.environ.get("PYTHONPATH", "")]))
    lazy, draws = "tests.planted.misbehaving:ImportsLazily", "tests.planted.misbehaving:DrawsRandom"
    result = pytester.runpytest_subprocess(
        "--fsdpcheck", "-p", "no:xdist", "-rf", "--fsdpcheck-report", "report.json",
        "--fsdpcheck-impl", lazy, "--fsdpcheck-impl", draws,
        "-k", "test_states_with_modules or test_golden_traversal", timeout=600,
    )
    out = result.stdout.str()
    matrix = json.loads((pytester.path / "report.json").read_text())["matrix"]
    assert {inv: cell["outcome"] for inv, cell in matrix[lazy].items()} == dict.fromkeys(matrix[lazy], "pass"), out[-3000:]
    assert "LeakedGlobalState" not in "".join(line for line in out.splitlines() if lazy in line)
    assert matrix[draws]["TRV-3"]["outcome"] == "fail", out[-3000:]
    assert f"{draws} left process-wide state changed: random (global state reseeded or drawn from)" in out, out[-3000:]


def test_first_imports_undo_draws_and_keep_what_the_module_relies_on(tmp_path, monkeypatch):
    import importlib
    import os
    import random
    import sys

    import torch
    import torch._dynamo

    from pytest_fsdpcheck.plugin import isolation

    (tmp_path / "draws_at_import.py").write_text(
        "import os, random, sys, torch, torch._dynamo\n"
        "import draws_at_import_too\n"
        "ID = random.getrandbits(24)\n"
        "torch.rand(1)\n"
        "os.environ['FSDPCHECK_IMPORTED'] = '1'\n"
        "sys.path.append('/imported/vendor')\n"
        "sys.setrecursionlimit(sys.getrecursionlimit() + 7)\n"
    )
    # an import the first one makes: its changes are read with the outer one's
    (tmp_path / "draws_at_import_too.py").write_text(
        "import random, torch._dynamo\n"
        "random.random()\n"
        "torch._dynamo.config.recompile_limit += 3\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delenv("FSDPCHECK_IMPORTED", raising=False)
    # put back by hand: monkeypatch's undo deletes a torch config entry for good
    recompile_limit = torch._dynamo.config.recompile_limit
    limit = sys.getrecursionlimit()
    before, generators = isolation.global_state(), (random.getstate(), torch.get_rng_state())
    with isolation.FirstImports() as imported:
        importlib.import_module("draws_at_import")
    try:
        assert (random.getstate(), torch.get_rng_state().equal(generators[1])) == (generators[0], True)
        assert isolation.leaks(before, isolation.global_state(), imported) == []
        isolation.restore(before, imported)
        assert os.environ["FSDPCHECK_IMPORTED"] == "1" and "/imported/vendor" in sys.path
        # ... but what decides other tests' verdicts goes back, whoever changed it
        assert sys.getrecursionlimit() == limit
        assert torch._dynamo.config.recompile_limit == before["dynamo.config"]["recompile_limit"]
        sys.setrecursionlimit(limit + 7)
        torch._dynamo.config.recompile_limit += 3
        # the same changes made outside an import are the caller's own
        os.environ["FSDPCHECK_IMPORTED"] = "2"
        sys.path.append("/elsewhere")
        sys.setrecursionlimit(limit + 8)
        torch._dynamo.config.recompile_limit += 1
        assert isolation.leaks(before, isolation.global_state(), imported) == [
            "dynamo.config (recompile_limit)", "environ (FSDPCHECK_IMPORTED)",
            f"recursion_limit ({limit} -> {limit + 8})", "sys.path (added '/elsewhere')"]
    finally:
        sys.setrecursionlimit(limit)
        torch._dynamo.config.recompile_limit = recompile_limit
        sys.modules.pop("draws_at_import_too", None)
        sys.modules.pop("draws_at_import", None)
        while "/imported/vendor" in sys.path:
            sys.path.remove("/imported/vendor")
        while "/elsewhere" in sys.path:
            sys.path.remove("/elsewhere")
    # and the watch ends with its block
    assert importlib._bootstrap._load_unlocked is imported._real


def test_inductors_own_environment_variable_is_not_a_leak_but_another_value_is(monkeypatch):
    """Inductor (torch 2.10+) sets _TORCHINDUCTOR_PYOBJECT_TENSOR_DATA_PTR
    before loading each compiled module, always to one address: torch's
    bookkeeping (the README's torchrun command failed FS2-9 on it)."""
    import os

    import torch

    from pytest_fsdpcheck.plugin import isolation

    guards = torch._C._dynamo.guards
    if not hasattr(guards, "_torchinductor_pyobject_tensor_data_ptr"):
        pytest.skip("this torch's Inductor has no such variable")
    name = "_TORCHINDUCTOR_PYOBJECT_TENSOR_DATA_PTR"
    monkeypatch.delenv(name, raising=False)
    before = isolation._process_state()
    os.environ[name] = str(guards._torchinductor_pyobject_tensor_data_ptr)
    assert isolation.leaks(before, isolation._process_state()) == []
    os.environ[name] = "12345"
    assert isolation.leaks(before, isolation._process_state()) == [f"environ ({name})"]
    isolation._restore_process(before, isolation.FirstImports())
    assert name not in os.environ
    # the address this process inherited from its parent (a suite run started
    # by a test whose process had compiled) is the parent's bookkeeping, not a
    # value a test set: the first compile here rewriting it is no leak
    monkeypatch.setattr(isolation, "_INHERITED_DATA_PTR", "4242")
    os.environ[name] = "4242"
    inherited = isolation._process_state()
    os.environ[name] = str(guards._torchinductor_pyobject_tensor_data_ptr)
    assert isolation.leaks(inherited, isolation._process_state()) == []


# --- only a third-party library's first import excuses -------------------------------


@pytest.fixture
def importable(tmp_path, monkeypatch):
    """Writes modules into a folder on the import path; forgets them after."""
    import sys

    monkeypatch.syspath_prepend(str(tmp_path))
    written = []

    def write(name: str, text: str):
        path = tmp_path.joinpath(*name.split(".")).with_suffix(".py")
        path.parent.mkdir(parents=True, exist_ok=True)
        for parent in list(path.parents)[: name.count(".")]:
            (parent / "__init__.py").touch()
        path.write_text(text)
        written.append(name.partition(".")[0])
        return path

    yield write
    for name in [m for m in sys.modules if m.partition(".")[0] in written]:
        sys.modules.pop(name, None)


#: import-time code counting its runs in an environment variable
COUNTS = "import os\nos.environ['{var}'] = str(int(os.environ.get('{var}', '0')) + 1)\n"


def test_a_reimported_module_is_not_a_first_import(importable, monkeypatch):
    """The first import of a library is excused; the same module popped and
    imported again (in this test or a later one, or its file loaded under
    another name) runs its code because the importer asked again: its own."""
    import importlib
    import sys

    from pytest_fsdpcheck.plugin import isolation

    monkeypatch.delenv("FSDPCHECK_RUNS", raising=False)
    path = importable("counts_runs", COUNTS.format(var="FSDPCHECK_RUNS"))
    history = isolation.ImportHistory()
    before = isolation._process_state()
    with isolation.FirstImports(history) as imported:
        importlib.import_module("counts_runs")
    assert isolation.leaks(before, isolation._process_state(), imported) == []
    with isolation.FirstImports(history) as imported:
        sys.modules.pop("counts_runs")
        importlib.import_module("counts_runs")
    assert isolation.leaks(before, isolation._process_state(), imported) == ["environ (FSDPCHECK_RUNS)"]
    # popped at the end of one test, imported in the next: still met before
    sys.modules.pop("counts_runs")
    with isolation.FirstImports(history) as imported:
        importlib.import_module("counts_runs")
    assert isolation.leaks(before, isolation._process_state(), imported) == ["environ (FSDPCHECK_RUNS)"]
    # the same file under another name: a package's module, then its folder on the path
    monkeypatch.delenv("FSDPCHECK_FILE_RUNS", raising=False)
    path = importable("runs_pkg.counts_file", COUNTS.format(var="FSDPCHECK_FILE_RUNS"))
    importlib.import_module("runs_pkg.counts_file")
    monkeypatch.syspath_prepend(str(path.parent))
    before = isolation._process_state()
    with isolation.FirstImports(history) as imported:
        importlib.import_module("counts_file")
    sys.modules.pop("counts_file", None)
    assert isolation.leaks(before, isolation._process_state(), imported) == ["environ (FSDPCHECK_FILE_RUNS)"]


def test_the_implementations_own_modules_are_not_a_first_import(importable, monkeypatch):
    """A module of the implementation's package, imported for the first time
    in the process, is still its own code; a third-party library it pulls
    in is read on its own and stays excused."""
    import importlib

    from pytest_fsdpcheck.plugin import guard, isolation

    monkeypatch.delenv("FSDPCHECK_OWN", raising=False)
    monkeypatch.delenv("FSDPCHECK_LIBRARY", raising=False)
    importable("third_party_lib", COUNTS.format(var="FSDPCHECK_LIBRARY"))
    importable("own_impl.effects", "import third_party_lib\n" + COUNTS.format(var="FSDPCHECK_OWN"))
    importable("own_impl.area", "class Area:\n    pass\n")
    area = importlib.import_module("own_impl.area").Area

    class Impl:
        traversal = area()

    own = guard.OwnCode.of(Impl())
    assert "own_impl" in own.packages
    before = isolation._process_state()
    with isolation.FirstImports(isolation.ImportHistory(), own) as imported:
        importlib.import_module("own_impl.effects")
    assert isolation.leaks(before, isolation._process_state(), imported) == ["environ (FSDPCHECK_OWN)"]


def test_a_library_importing_a_module_met_before_is_not_excused(importable, monkeypatch):
    """An import excused but for one of its steps, a module imported again:
    the whole import is the importer's."""
    import importlib
    import sys

    from pytest_fsdpcheck.plugin import isolation

    monkeypatch.delenv("FSDPCHECK_RUNS", raising=False)
    importable("counts_runs_again", COUNTS.format(var="FSDPCHECK_RUNS"))
    importable("pulls_it_in", "import counts_runs_again\n")
    importlib.import_module("counts_runs_again")
    before = isolation._process_state()
    with isolation.FirstImports() as imported:
        sys.modules.pop("counts_runs_again")
        importlib.import_module("pulls_it_in")
    assert isolation.leaks(before, isolation._process_state(), imported) == ["environ (FSDPCHECK_RUNS)"]


def test_a_library_reloading_what_was_imported_as_its_import_began_is_still_excused(importable, monkeypatch):
    """setuptools' first import clears ``distutils`` from ``sys.modules`` and
    imports its own under that name, then extends ``sys.path``: CI at
    11eda4f charged FS2-9 with setuptools' vendored folder in a worker that
    held ``distutils`` but not yet setuptools. What the import itself pops
    and loads again (a module, or a file under another name) is one of its
    steps; one popped before the import began still voids the excuse
    (the test above)."""
    import importlib
    import sys

    from pytest_fsdpcheck.plugin import isolation

    monkeypatch.delenv("FSDPCHECK_RUNS", raising=False)
    monkeypatch.delenv("FSDPCHECK_FILE_RUNS", raising=False)
    importable("counts_runs_reloaded", COUNTS.format(var="FSDPCHECK_RUNS"))
    inner = importable("vendoring_pkg.counts_inner", COUNTS.format(var="FSDPCHECK_FILE_RUNS"))
    importable("reloads_at_import", "import importlib, sys\n"
                                    "sys.modules.pop('counts_runs_reloaded')\n"
                                    "importlib.import_module('counts_runs_reloaded')\n"
                                    f"sys.path.append({str(inner.parent)!r})\n"
                                    "import counts_inner\n")
    importlib.import_module("counts_runs_reloaded")
    importlib.import_module("vendoring_pkg.counts_inner")
    before = isolation._process_state()
    try:
        with isolation.FirstImports() as imported:
            importlib.import_module("reloads_at_import")
        assert isolation.leaks(before, isolation._process_state(), imported) == []
    finally:
        sys.modules.pop("counts_inner", None)
        sys.path[:] = [p for p in sys.path if p != str(inner.parent)]


def _change_verdict_state():
    import sys

    import torch
    import torch._dynamo
    import torch._inductor.config

    sys.setrecursionlimit(sys.getrecursionlimit() + 11)
    torch._dynamo.config.disable = not torch._dynamo.config.disable
    torch._inductor.config.max_autotune = not torch._inductor.config.max_autotune
    torch.set_default_dtype(torch.float64)
    torch.set_grad_enabled(False)
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.set_num_threads(torch.get_num_threads() + 1)


#: what _change_verdict_state changes, as a leak names it
VERDICT_LEAKS = ["default_dtype (", "deterministic (algorithms, warn_only)", "dynamo.config (disable)",
                 "grad_enabled (True -> False)", "inductor.config (", "num_threads (", "recursion_limit ("]


def test_verdict_state_is_put_back_whoever_changed_it(importable):
    """The state deciding other tests' verdicts is the same at every test's
    start, so a verdict never hangs on the tests that ran before it (its
    process, serial or an xdist worker): changed by a library's first import
    it is excused, and put back all the same; changed by the caller, it is a
    leak naming each entry, put back too."""
    import importlib
    import sys

    import torch
    import torch._dynamo  # noqa: F401 - imported before, as the suite does: its config is compared
    import torch._inductor.config  # noqa: F401

    from pytest_fsdpcheck.plugin import isolation

    importable("changes_verdict_state", "from tests.test_isolation import _change_verdict_state\n_change_verdict_state()\n")
    torch.set_grad_enabled(True)
    before = isolation.global_state()
    try:
        with isolation.FirstImports() as imported:
            importlib.import_module("changes_verdict_state")
        assert isolation.leaks(before, isolation.global_state(), imported) == []
        isolation.restore_verdict_state(before)
        assert {k: v for k, v in isolation.global_state().items() if k in isolation.VERDICT_STATE} == {
            k: v for k, v in before.items() if k in isolation.VERDICT_STATE}

        # the next test's caller makes the same changes
        _change_verdict_state()
        found = isolation.leaks(before, isolation.global_state(), isolation.FirstImports())
        assert len(found) == len(VERDICT_LEAKS) and all(f.startswith(w) for f, w in zip(found, VERDICT_LEAKS, strict=True)), found
        isolation.restore(before, imported)
        assert isolation.leaks(before, isolation.global_state()) == []
        # put back, not pinned: Inductor's flag still follows torch's
        torch.use_deterministic_algorithms(True, warn_only=True)
        assert getattr(torch._inductor.config, "deterministic", True) is True
    finally:
        isolation.restore_verdict_state(before)
        sys.modules.pop("changes_verdict_state", None)


@pytest.mark.plugin
@pytest.mark.parametrize("order", ["collected", "reversed"])
def test_a_compile_in_a_users_model_test_leaves_its_verdicts_alone(run_suite, pytester, monkeypatch, tmp_path, order):
    """Issue 38 finding 4 as a user met it: a plan that runs its compiled
    blocks (tests.planted.compile_in_plan) compiles with Inductor inside the
    users'-model tests; whichever of them compiled first read
    ``recursion_limit (1000 -> 2000); threads left running
    (ThreadPoolExecutor-1_0, ...)`` and turned PLN-1..4 (or FS2-7) into
    torch's FAIL. Every compile a cache miss (empty cache folder, no FX graph
    cache), in either order: every cell passes."""
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))
    monkeypatch.setenv("TORCHINDUCTOR_FX_GRAPH_CACHE", "0")
    if order == "reversed":
        pytester.makeconftest("def pytest_collection_modifyitems(items):\n    items.reverse()\n")
    # the plan is recorded (and compiles) in the case's probe, where its rules are judged now
    result, report = run_suite("torch", k="test_model_case or test_model_fsdp2_recorded",
                               extra=["--fsdpcheck-model", "tests.planted.compile_in_plan:compiled_and_warmed"])
    out = result.stdout.str()
    assert "left process-wide state changed" not in out, out[-3000:]
    assert report["case_errors"] == {}, report["case_errors"]
    cells = {inv: cell["outcome"] for inv, cell in report["matrix"]["torch"].items()}
    assert {cells.get(inv) for inv in ("FS2-1", "FS2-4", "FS2-7")} == {"pass"}, cells
    assert result.ret == 0, out[-3000:]
