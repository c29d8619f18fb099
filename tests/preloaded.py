"""Inner pytest runs in a fresh process that starts with torch imported.

Most of the project's inner runs are a whole pytest session against a
planted implementation, and a fresh interpreter spends most of such a run
importing torch and Dynamo (about 5 s of a median 7 s here). A *zygote* -- one
process per test worker that imports them once and never runs an operator --
forks a child per run: the child is still a process of its own (its own
modules, globals, signal handlers, file descriptors; a crash or a hang is its
own; what it imports, patches or leaks dies with it), it only skips the
import. It is the pattern of Android's zygote and of multiprocessing's
``forkserver`` with ``set_forkserver_preload``; this one hands the child a
command line, a folder and an environment instead of a pickled function, so
the child runs ``python -m pytest ARGS`` as a subprocess would.

Scripts (reproducers) run the same way, from a zygote of their own that ran
``import torch`` alone, the first line of every one of them
(:class:`ScriptRunner`).

What stays on a real subprocess: runs that judge a fresh interpreter itself
(what the idle plugin imports, a first compile's bookkeeping), runs whose
environment must be read while torch imports, and runs of another Python or
another installation (venvs, wheels).

Forking is safe only from a process whose thread pools never started: the
zygote imports and waits, and a child's OpenMP starts in the child.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import time

#: what every inner suite run imports before its first test: torch's, not the
#: plugin's own (its import-time checks still see a first import), nor any
#: pytest plugin's (pytest marks their modules for assertion rewriting as it
#: starts, and pytest-xdist keeps the sys.path it was imported with for its
#: workers)
PRELOAD = ("torch", "torch._dynamo", "torch.fx", "torch.distributed", "torch.distributed.fsdp",
           "torch.nn.parallel")

_ZYGOTE = r"""
import json, os, signal, sys
base_path = [p for p in sys.path[1:]]  # after '' (-c); as a fresh interpreter has it without PYTHONPATH
for name in sys.argv[1:]:
    __import__(name)
plugins = {"xdist", "hypothesis", "_pytest"}
assert not plugins & {m.partition(".")[0] for m in sys.modules}, "the preload imported a pytest plugin"
# What the preload made lives as long as the process: gc.freeze (made for
# servers that fork) keeps the collector from rescanning it in every child.
# Each full collection in a child (pytest's two at exit, Hypothesis' first
# draw, the suite's automatic ones after each test) cost about 0.3 s over
# the ~1M objects torch and Dynamo leave; the child's own objects are
# collected as in any process.
import gc
gc.collect()
gc.freeze()
out = os.fdopen(os.dup(1), "w")
os.dup2(os.open(os.devnull, os.O_WRONLY), 1)
print(json.dumps({"ready": os.getpid()}), file=out, flush=True)
for line in sys.stdin:
    request = json.loads(line)
    pid = os.fork()
    if pid == 0:
        os.setpgid(0, 0)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        try:
            sys.stdin.close()
            out.close()
            os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
            os.chdir(request["cwd"])
            os.environ.clear()
            os.environ.update(request["env"])
            python_path = [p for p in request["env"].get("PYTHONPATH", "").split(os.pathsep) if p]
            script = request.get("script")
            # sys.path[0]: the script's folder for `python SCRIPT`, the working directory for `python -m pytest`
            first = os.path.dirname(os.path.abspath(script)) if script else request["cwd"]
            sys.path[:] = [first, *python_path, *base_path]
            for fd, path in ((1, request["stdout"]), (2, request["stderr"])):
                os.dup2(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644), fd)
            sys.stdin = open(os.devnull)
            if script:
                import runpy
                sys.argv = [script]
                runpy.run_path(script, run_name="__main__")
                code = 0
            else:
                sys.argv = [sys.executable, *request["args"]]
                import pytest
                code = pytest.main(request["args"])
                code = int(code)
        except SystemExit as exc:
            # as the interpreter ends on it: None is 0, a message is printed and is 1
            if exc.code is None or isinstance(exc.code, int):
                code = exc.code or 0
            else:
                print(exc.code, file=sys.stderr)
                code = 1
        except BaseException:
            import traceback
            traceback.print_exc()
            code = 1
        try:
            import atexit
            atexit._run_exitfuncs()
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)
    print(json.dumps({"pid": pid}), file=out, flush=True)
    _, status = os.waitpid(pid, 0)
    print(json.dumps({"rc": os.waitstatus_to_exitcode(status)}), file=out, flush=True)
"""


class Zygote:
    """One preloaded process; ``run(args, cwd, env, stdout, stderr, timeout)``
    returns the child's exit status (negative: the signal that ended it);
    with ``script``, the child runs ``python SCRIPT`` instead of
    ``python -m pytest ARGS``."""

    def __init__(self, preload=PRELOAD):
        env = _zygote_env()
        self._process = subprocess.Popen([sys.executable, "-c", _ZYGOTE, *preload], stdin=subprocess.PIPE,
                                         stdout=subprocess.PIPE, text=True, env=env, cwd="/")
        self._read(timeout=300)

    def _read(self, timeout):
        ready, _, _ = select.select([self._process.stdout], [], [], timeout)
        if not ready:
            return None
        line = self._process.stdout.readline()
        if not line:
            raise RuntimeError(f"the preloaded interpreter ended (status {self._process.poll()})")
        return json.loads(line)

    def alive(self) -> bool:
        return self._process.poll() is None

    def run(self, args, cwd, env, stdout, stderr, timeout, script=None):
        request = {"args": [os.fspath(a) for a in args], "cwd": os.fspath(cwd), "env": dict(env),
                   "stdout": os.fspath(stdout), "stderr": os.fspath(stderr)}
        if script is not None:
            request["script"] = os.fspath(script)
        self._process.stdin.write(json.dumps(request) + "\n")
        self._process.stdin.flush()
        pid = self._read(timeout=60)["pid"]
        deadline = time.monotonic() + timeout
        while True:
            message = self._read(timeout=max(0.0, deadline - time.monotonic()))
            if message is not None:
                return message["rc"]
            try:
                os.killpg(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self._read(timeout=60)
            raise TimeoutError(f"{timeout} s passed running pytest {' '.join(request['args'])}")

    def close(self):
        if self.alive():
            self._process.stdin.close()
            self._process.wait(timeout=30)


def runpytest_preloaded(pytester, zygote, *args, timeout: float = 900):
    """``pytester.runpytest_subprocess(*args)``, in a child of ``zygote``:
    the same command line, folder (``pytester.path``), environment (with the
    folder first on PYTHONPATH, HOME in the folder) and RunResult."""
    import pytest
    from _pytest.pytester import make_numbered_dir

    basetemp = make_numbered_dir(root=pytester.path, prefix="runpytest-", mode=0o700)
    args = (f"--basetemp={basetemp}", *args)
    for plugin in pytester.plugins:  # by name, as runpytest_subprocess requires
        args = ("-p", plugin, *args)
    env = os.environ.copy()
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [os.getcwd(), env.get("PYTHONPATH", "")]))
    stdout, stderr = pytester.path / "stdout", pytester.path / "stderr"
    started = time.monotonic()
    try:
        code = zygote.run(args, os.getcwd(), env, stdout, stderr, timeout)
    except TimeoutError as exc:
        raise pytester.TimeoutExpired(str(exc)) from None
    out = stdout.read_text(encoding="utf8", errors="replace").splitlines()
    err = stderr.read_text(encoding="utf8", errors="replace").splitlines()
    for lines, stream in ((out, sys.stdout), (err, sys.stderr)):
        print("\n".join(lines), file=stream)
    try:
        code = pytest.ExitCode(code)
    except ValueError:
        pass
    return pytest.RunResult(code, out, err, time.monotonic() - started)


#: environment variables torch, its libraries or Python read as they start or
#: import: a run that sets one differently from the zygote gets a real process
#: (TMPDIR among them: tempfile keeps the folder it first found, so a child
#: of the zygote sees the zygote's)
_READ_AT_IMPORT = ("TORCH", "PYTORCH", "CUDA", "NCCL", "OMP_", "MKL", "KMP_", "LD_", "PYTHON", "HYPOTHESIS", "TMP",
                   "TEMP")


#: read at each use, not at import: PYTHONPATH (the child builds sys.path
#: from it) and Inductor's cache folder, which torch 2.6+ itself sets in
#: os.environ at its first compile (so every process that compiled has it)
_READ_AT_USE = ("PYTHONPATH", "TORCHINDUCTOR_CACHE_DIR")


def _differs_at_import(env, zygote_env) -> list[str]:
    keys = {k for k in (*env, *zygote_env) if k.startswith(_READ_AT_IMPORT) and k not in _READ_AT_USE}
    return sorted(k for k in keys if env.get(k) != zygote_env.get(k))


#: what a script zygote imports: what every reproducer script does first, and
#: nothing more, so a child is the script's own process from its first line on
#: (a script that used a submodule it never imported fails here as it would
#: alone)
SCRIPT_PRELOAD = ("torch",)


class ScriptRunner:
    """``run(script, cwd, env, timeout)``: ``python SCRIPT`` as
    ``subprocess.run(..., capture_output=True, text=True)`` gives it, forked
    from a process that has run ``import torch`` (the first line of every
    reproducer; about 2.5 s of CPU a script) -- or a real subprocess where
    the environment differs in what torch reads as it imports, or
    FSDPCHECK_TESTS_SUBPROCESS=1."""

    def __init__(self):
        self._zygote: Zygote | None = None

    def run(self, script, cwd, env, timeout: float = 300) -> subprocess.CompletedProcess:
        command = [sys.executable, os.fspath(script)]
        if os.environ.get("FSDPCHECK_TESTS_SUBPROCESS") == "1" or _differs_at_import(env, _zygote_env()):
            return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
        if self._zygote is None or not self._zygote.alive():
            self._zygote = Zygote(SCRIPT_PRELOAD)
        with tempfile.TemporaryDirectory() as streams:
            stdout, stderr = os.path.join(streams, "stdout"), os.path.join(streams, "stderr")
            try:
                code = self._zygote.run((), cwd, env, stdout, stderr, timeout, script=script)
            except TimeoutError:
                raise subprocess.TimeoutExpired(command, timeout) from None
            with open(stdout, encoding="utf8", errors="replace") as out, open(stderr, encoding="utf8", errors="replace") as err:
                return subprocess.CompletedProcess(command, code, out.read(), err.read())

    def close(self):
        if self._zygote is not None:
            self._zygote.close()


def install():
    """Route ``Pytester.runpytest_subprocess`` through one zygote per
    process (started at the first run); returns the undo."""
    from _pytest.pytester import Pytester

    original = Pytester.runpytest_subprocess
    zygotes: list[Zygote] = []

    def runpytest_subprocess(self, *args, timeout=None):
        node = self._request.node
        if node.get_closest_marker("fresh_interpreter") or _differs_at_import(os.environ, _zygote_env()):
            return original(self, *args, timeout=timeout)
        if not zygotes or not zygotes[0].alive():
            zygotes[:] = [Zygote()]
        return runpytest_preloaded(self, zygotes[0], *args, timeout=timeout or 3600)

    def undo():
        Pytester.runpytest_subprocess = original
        for zygote in zygotes:
            zygote.close()

    Pytester.runpytest_subprocess = runpytest_subprocess
    return undo


_STARTING_ENV = dict(os.environ)


def _zygote_env():
    return {k: v for k, v in _STARTING_ENV.items() if k != "PYTHONPATH"}
