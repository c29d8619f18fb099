"""Keeping one suite test's process-wide effects out of the next one's verdict.

* :func:`global_state` / :func:`restore` snapshot the process-wide state an
  implementation could leak (FX tracer patches, Dynamo config, logger
  levels, process groups, global module hooks, environment, import path,
  working directory, threads and child processes left running) so a leak
  is reported and undone before the next test.
* :class:`FirstImports` keeps what a third-party library's import-time code
  does out of the verdict: that code is the library's, run once per process
  by whichever test imports it first. A re-import, or an import of the
  implementation's own code, is never such a first import.
* :data:`VERDICT_STATE` is put back before the next test whoever changed it.

The calls' own guard (time limits, exits, random generators) is
:mod:`.guard`; tracebacks trimmed to the implementation's frames,
:mod:`.tracebacks`.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time

from .guard import OwnCode, _generator_objects


def global_state() -> dict:
    """What a well-behaved implementation leaves as it found it."""
    import torch
    import torch.fx

    state = {
        "fx.Tracer": {k: v for k, v in vars(torch.fx.Tracer).items() if not k.startswith("__")},
        "loggers": _logger_levels(),
    }
    modules = torch.nn.modules.module
    for hooks in ("_global_forward_hooks", "_global_forward_pre_hooks", "_global_backward_hooks", "_global_module_registration_hooks", "_global_parameter_registration_hooks"):
        if hasattr(modules, hooks):
            state["nn." + hooks] = dict(getattr(modules, hooks))
    state.update(_verdict_state())
    dist = torch.distributed
    state["process_group"] = dist.is_available() and dist.is_initialized()
    state.update(_process_state())
    return state


#: Process state that decides other tests' verdicts (a raised recursion limit
#: passes a recursive walk of a deep tree, Dynamo turned off leaves nothing
#: compiled to check, a default dtype or grad mode changes every model built
#: after it): put back before the next test whoever changed it, so no test's
#: verdict depends on which tests ran before it in its process (serial, or on
#: an xdist worker). Charged to the implementation unless a third-party
#: library's first import changed it (see :class:`FirstImports`).
VERDICT_STATE = ("recursion_limit", "dynamo.config", "inductor.config", "default_dtype", "grad_enabled",
                 "deterministic", "num_threads", "num_interop_threads")


def _verdict_state() -> dict:
    """The :data:`VERDICT_STATE` there is: torch's parts once torch is imported
    (a first import may be torch's own), the configs once Dynamo is."""

    state = {"recursion_limit": sys.getrecursionlimit()}
    torch = sys.modules.get("torch")
    if torch is None or not hasattr(torch, "get_num_interop_threads"):  # torch itself being imported
        return state
    state.update({
        "grad_enabled": torch.is_grad_enabled(),
        "default_dtype": torch.get_default_dtype(),
        # the plugin pins this to 1 for the session; an implementation changing it is a leak
        "num_threads": torch.get_num_threads(),
        "num_interop_threads": torch.get_num_interop_threads(),
        "deterministic": _deterministic(),
    })
    state.update(_configs())
    return state


def restore_verdict_state(before: dict, now: dict | None = None) -> None:
    """Puts back each :data:`VERDICT_STATE` entry that differs from ``before``,
    whoever changed it (a library's first import included); ``now``: the
    state as just read, if it was."""

    import torch

    now = _verdict_state() if now is None else now
    if now.get("recursion_limit") != before["recursion_limit"]:
        sys.setrecursionlimit(before["recursion_limit"])
    flags = [key for key in ("grad_enabled", "default_dtype", "num_threads", "num_interop_threads", "deterministic")
             if key in before and now.get(key) != before[key]]
    if "grad_enabled" in flags:
        torch.set_grad_enabled(before["grad_enabled"])
    if "default_dtype" in flags:
        torch.set_default_dtype(before["default_dtype"])
    if "num_threads" in flags:
        torch.set_num_threads(before["num_threads"])
    if "num_interop_threads" in flags:
        # torch takes it only before its first inter-op work: then the leak
        # stays reported, and cannot be undone
        with contextlib.suppress(RuntimeError):
            torch.set_num_interop_threads(before["num_interop_threads"])
    if "deterministic" in flags:
        _set_deterministic(before["deterministic"])
    if flags:
        # read again: an entry may follow torch's flags just put back
        # (Inductor's ``deterministic``), and set, it would no longer follow them
        now = _configs()
    for key, config in (("dynamo.config", _dynamo_config()), ("inductor.config", _inductor_config())):
        if config is not None and key in before and key in now and now[key] != before[key]:
            # only what changed: setting a deprecated entry warns, even to its value
            _load_config(config, {k: v for k, v in before[key].items() if now[key].get(k, _UNSET) != v})


def _logger_levels() -> dict:
    import logging

    return {name: logger.level for name, logger in logging.root.manager.loggerDict.items()
            if isinstance(logger, logging.Logger) and name.split(".")[0] in ("torch", "pytest_fsdpcheck")}


def _process_state() -> dict:
    """The interpreter's and the process's own state, beyond torch's."""

    helper_pids, helper_threads = _process_helpers()
    state = {
        # pytest names the running test there, phase by phase
        "environ": {k: v for k, v in os.environ.items() if k != "PYTEST_CURRENT_TEST" and not _torchs_bookkeeping(k, v)},
        "cwd": _cwd(),
        "sys.path": list(sys.path),
        "sys.meta_path": list(sys.meta_path),
        "sys.path_hooks": list(sys.path_hooks),
        # what a module installs in those as it is first imported is not a leak
        "modules": set(sys.modules),
        "recursion_limit": sys.getrecursionlimit(),
        # Non-daemon threads only: those hold the run open at its end. A
        # daemon declares itself fit to be dropped, and libraries' process-
        # wide helpers started on first use are daemons (tqdm's monitor,
        # started by the torch implementation's first Hugging Face model).
        "threads": {t for t in threading.enumerate() if t.is_alive() and not t.daemon} - helper_threads,
        "children": _children(helper_pids),
    }
    return state


#: Inductor's data-pointer variable as this process inherited it (a process
#: fact, fixed when the plugin is first imported, before any test)
_INHERITED_DATA_PTR = os.environ.get("_TORCHINDUCTOR_PYOBJECT_TENSOR_DATA_PTR")


def _torchs_bookkeeping(name: str, value: str) -> bool:
    """Environment variables torch sets for itself, to the same value
    whichever test makes it: Inductor's cache folder's default (torch 2.6+,
    at its first use) and the address its compiled modules read as they
    load (torch 2.10+, at each load); CUDA's module loading mode, where the
    installed torch's CUDA initialisation sets it. Any other value is a
    change."""

    try:
        if name == "TORCHINDUCTOR_CACHE_DIR":
            default = getattr(sys.modules.get("torch._inductor.runtime.cache_dir_utils"), "default_cache_dir", None)
            return default is not None and os.path.abspath(default()) == os.path.abspath(value)
        if name == "_TORCHINDUCTOR_PYOBJECT_TENSOR_DATA_PTR":
            # The address Inductor writes before each compiled module loads,
            # or the one this process inherited from its parent at start (a
            # suite run started by a test whose process had compiled: read as
            # a leak once the first compile here rewrote it). Any other value
            # is a change.
            guards = getattr(getattr(sys.modules.get("torch._C"), "_dynamo", None), "guards", None)
            return value in (str(getattr(guards, "_torchinductor_pyobject_tensor_data_ptr", None)), _INHERITED_DATA_PTR)
        if name == "CUDA_MODULE_LOADING":
            # a CUDA build's torch.cuda._lazy_init sets it to LAZY before
            # it looks for a GPU, so without one at every try: torch 2.0's
            # FSDP state constructor asks for the current device (read in
            # 2.0.1 and 2.1.2; a CPU build's _lazy_init has no such line)
            lazy_init = getattr(sys.modules.get("torch.cuda"), "_lazy_init", None)
            return value == "LAZY" and name in getattr(getattr(lazy_init, "__code__", None), "co_consts", ())
    except Exception:  # noqa: BLE001 - a torch without them has nothing to excuse
        return False
    return False


def _cwd():
    try:
        return os.getcwd()
    except OSError:  # removed under our feet
        return None


def _children(helper_pids: set) -> dict:
    """Live child processes but the process's own helpers: pid -> how to stop it.

    Linux lists each thread's children in /proc (one small read per
    thread); elsewhere only multiprocessing's children are known."""
    import multiprocessing

    # active_children() also reaps the ones that ended
    found = {p.pid: p for p in multiprocessing.active_children() if p.pid not in helper_pids}
    try:
        tasks = os.listdir("/proc/self/task")
    except OSError:
        return found
    for task in tasks:
        try:
            with open(f"/proc/self/task/{task}/children") as f:
                pids = f.read().split()
        except OSError:
            continue
        for pid in map(int, pids):
            if pid not in found and pid not in helper_pids and _running(pid):
                found[pid] = None
    return found


def _process_helpers() -> tuple[set, set]:
    """(pids, threads) a process keeps for its whole life, started on first
    need by whatever code needed it first, so never a test's leak: Python's
    resource tracker and fork server (the suite's distributed runs start the
    tracker), and Inductor's compile worker pools (torch 2.3 starts one as
    its Inductor is first imported, which the suite's own Dynamo capture
    does)."""

    tracker = sys.modules.get("multiprocessing.resource_tracker")
    forkserver = sys.modules.get("multiprocessing.forkserver")
    pids = {getattr(getattr(tracker, "_resource_tracker", None), "_pid", None),
            getattr(getattr(forkserver, "_forkserver", None), "_forkserver_pid", None)}
    threads = set()
    # Inductor's compile thread pool (AsyncCompile.pool, one per process,
    # cached): started by the first compile that builds a C++ kernel with
    # compile_threads > 1, its non-daemon workers kept for the process's
    # life. Known by the object itself, never by its threads' names: any
    # other ThreadPoolExecutor left running is still a leak.
    compile_pool = getattr(getattr(sys.modules.get("torch._inductor.async_compile"), "AsyncCompile", None), "pool", None)
    if compile_pool is not None and getattr(compile_pool, "cache_info", None) and compile_pool.cache_info().currsize:
        with contextlib.suppress(Exception):  # reads the cached pool; never makes one
            threads.update(getattr(compile_pool(), "_threads", None) or ())
    for name in ("torch._inductor.codecache", "torch._inductor.async_compile"):
        for pool in list(getattr(sys.modules.get(name), "_pool_set", None) or ()):
            pids.update(getattr(pool, "_processes", None) or ())
            pids.add(getattr(getattr(pool, "process", None), "pid", None))
            threads.update(v for v in vars(pool).values() if isinstance(v, threading.Thread))
    pids.discard(None)
    return pids, threads


def _command(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            words = f.read().split(b"\0")
    except OSError:
        return "?"
    text = " ".join(w.decode(errors="replace") for w in words if w)
    return repr(text if len(text) <= 80 else text[:77] + "...")


def _running(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            # state is the field after "(comm)", and comm may hold spaces
            return f.read().rpartition(")")[2].split()[0] not in ("Z", "X")
    except (OSError, IndexError):
        return False


def _dynamo_config():

    # Only compare Dynamo's config if something already imported Dynamo:
    # importing it here would cost seconds on every test.
    if "torch._dynamo" not in sys.modules:
        return None
    return sys.modules["torch._dynamo"].config


def _inductor_config():

    # Dynamo imports it; not imported here for the same reason
    return sys.modules.get("torch._inductor.config")


def _configs() -> dict:
    """Copies of Dynamo's and Inductor's config, where already imported."""
    found = {}
    for key, config in (("dynamo.config", _dynamo_config()), ("inductor.config", _inductor_config())):
        if config is not None:
            found[key] = _config_copy(config)
    return found


def _deterministic() -> dict:
    import torch

    flags = {"algorithms": torch.are_deterministic_algorithms_enabled(),
             "cudnn.deterministic": torch.backends.cudnn.deterministic,
             "cudnn.benchmark": torch.backends.cudnn.benchmark}
    warn_only = getattr(torch, "is_deterministic_algorithms_warn_only_enabled", None)
    if warn_only is not None:
        flags["warn_only"] = warn_only()
    return flags


def _set_deterministic(flags: dict) -> None:
    import torch

    if "warn_only" in flags:
        torch.use_deterministic_algorithms(flags["algorithms"], warn_only=flags["warn_only"])
    else:
        torch.use_deterministic_algorithms(flags["algorithms"])
    torch.backends.cudnn.deterministic = flags["cudnn.deterministic"]
    torch.backends.cudnn.benchmark = flags["cudnn.benchmark"]


def _config_copy(config) -> dict:
    # torch >= 2.2 copies its config with get_config_copy; 2.1's deep-copies
    # a dict holding a module and raises, and 2.0 has no such method: copy
    # the plain dict entry by entry, keeping what cannot be copied as it is.
    try:
        return config.get_config_copy()
    except Exception:  # noqa: BLE001 - AttributeError (2.0) or TypeError (2.1)
        pass
    import copy

    def copied(value):
        try:
            return copy.deepcopy(value)
        except Exception:  # noqa: BLE001
            return value

    return {key: copied(value) for key, value in dict(getattr(config, "_config", {})).items()}


def _load_config(config, saved: dict) -> None:
    # Entry by entry, which is what load_config does with a dict from 2.2
    # on: 2.0's and 2.1's load_config only unpickle save_config's bytes
    # (a dict raises TypeError there), and a value _config_copy kept
    # uncopied may not pickle at all. A key this config does not hold
    # (a snapshot of another release's) is left out, as load_config does.
    held = getattr(config, "_config", None)
    for key, value in saved.items():
        if held is None or key in held:
            setattr(config, key, value)


def _imported_during(hook, before: dict, after: dict) -> bool:
    module = getattr(hook, "__module__", None) or type(hook).__module__
    return module in after.get("modules", ()) and module not in before.get("modules", ())


def _started(before: dict, after: dict):
    """Threads and child processes the test left running."""
    threads = after.get("threads", set()) - before.get("threads", set())
    if threads:
        # one that is on its way out gets a moment to end
        deadline = time.monotonic() + 0.2
        for thread in threads:
            thread.join(max(0.0, deadline - time.monotonic()))
    threads = sorted(t.name for t in threads if t.is_alive())
    children = sorted(pid for pid in after.get("children", {}) if pid not in before.get("children", {}) and _running(pid))
    return threads, children


def leaks(before: dict, after: dict, imported: FirstImports | None = None,
          compiles: InductorCompiles | None = None) -> list[str]:
    """What changed between two :func:`global_state` snapshots, less what
    modules first imported in between did as they were imported, and what
    Inductor's compiles in between left as they compiled."""
    found = []
    threads, children = _started(before, after)
    if threads:
        found.append(f"threads left running ({', '.join(threads)})")
    if children:
        found.append(f"child processes left running ({', '.join(f'pid {pid} {_command(pid)}' for pid in children)})")
    for key in before.keys() | after.keys():
        b, a = before.get(key), after.get(key)
        if key in ("threads", "children", "modules"):
            continue
        if key in ("sys.meta_path", "sys.path_hooks"):
            a = [x for x in a if x in b or not _imported_during(x, before, after)]
        if imported is not None:
            a, b = imported.excused(key, a, b)
        if compiles is not None:
            a, b = compiles.excused(key, a, b)
        if key in ("dynamo.config", "inductor.config") and (b is None or a is None):
            continue  # Dynamo was first imported during the test
        if key == "loggers":
            a = {k: a.get(k) for k in b}  # loggers created on first import are not leaks
        if key == "fx.Tracer":
            a = {k: _unwrap_dynamo_disable(v, b.get(k)) for k, v in a.items()}
        if a != b:
            if isinstance(a, dict) and isinstance(b, dict):
                changed = sorted(k for k in a.keys() | b.keys() if a.get(k) is not b.get(k) and a.get(k) != b.get(k))
                found.append(f"{key} ({', '.join(map(str, changed[:5]))}{', ...' if len(changed) > 5 else ''})")
            elif isinstance(a, list) and isinstance(b, list):
                added = [repr(x) for x in a if x not in b]
                removed = [repr(x) for x in b if x not in a]
                what = [f"added {', '.join(added)}"] * bool(added) + [f"removed {', '.join(removed)}"] * bool(removed)
                found.append(f"{key} ({'; '.join(what) or 'reordered'})")
            else:
                found.append(f"{key} ({b!r} -> {a!r})")
    return sorted(found)


def _unwrap_dynamo_disable(now, before):
    # torch's first compile wraps Tracer methods in its own dynamo-disable
    # shim, once per process; that is torch's doing, not the implementation's.
    # (2.13 points straight at the original; 2.3 through a functools wrapper.)
    if not getattr(now, "_torchdynamo_disable", False):
        return now
    inner = getattr(now, "_torchdynamo_orig_callable", None)
    for _ in range(3):
        if inner is before:
            return before
        inner = getattr(inner, "__wrapped__", None)
    return now


def restore(before: dict, imported: FirstImports | None = None) -> None:
    """Back to ``before``, but for what first imports did to the rest of the
    process (the modules stay imported and may rely on it); the
    :data:`VERDICT_STATE` goes back whoever changed it."""
    import logging

    import torch
    import torch.fx

    tracer_attrs = before["fx.Tracer"]
    for k in [k for k in vars(torch.fx.Tracer) if not k.startswith("__") and k not in tracer_attrs]:
        delattr(torch.fx.Tracer, k)
    for k, v in tracer_attrs.items():
        if vars(torch.fx.Tracer).get(k) is not v:
            setattr(torch.fx.Tracer, k, v)
    imported = imported or FirstImports()
    for name, level in before["loggers"].items():
        if name not in imported.kept("loggers", _logger_levels()):
            logging.getLogger(name).setLevel(level)
    restore_verdict_state(before)
    modules = torch.nn.modules.module
    for key, value in before.items():
        if key.startswith("nn._global"):
            hooks = getattr(modules, key[3:])
            hooks.clear()
            hooks.update(value)
    dist = torch.distributed
    if not before["process_group"] and dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()
    _restore_process(before, imported)


def _restore_process(before: dict, imported: FirstImports) -> None:

    after = _process_state()
    _stop_threads_and_children(before, after)
    kept = imported.kept("environ", os.environ)
    environ = before["environ"]
    for key in [k for k, v in os.environ.items()
                if k not in environ and k not in kept and k != "PYTEST_CURRENT_TEST" and not _torchs_bookkeeping(k, v)]:
        del os.environ[key]
    for key, value in environ.items():
        if os.environ.get(key) != value and key not in kept:
            os.environ[key] = value
    if before["cwd"] is not None and after["cwd"] != before["cwd"]:
        os.chdir(before["cwd"])
    sys.path[:] = before["sys.path"] + [x for x in after["sys.path"] if x in imported.kept("sys.path", after["sys.path"]) and x not in before["sys.path"]]
    for name in ("meta_path", "path_hooks"):
        hooks = getattr(sys, name)
        hooks[:] = [x for x in hooks if x in before["sys." + name] or _imported_during(x, before, after)]
        for i, hook in enumerate(before["sys." + name]):  # put back what was removed, where it was
            if hook not in hooks:
                hooks.insert(i, hook)
    if after["sys.path"] != before["sys.path"] or after["sys.path_hooks"] != before["sys.path_hooks"]:
        sys.path_importer_cache.clear()
    sys.setrecursionlimit(before["recursion_limit"])


def _stop_threads_and_children(before: dict, after: dict) -> None:

    threads, children = _started(before, after)
    for thread in after["threads"]:
        if thread.name in threads:
            _let_exit_without(thread)
    for pid in children:
        process = after["children"][pid]
        if process is not None:  # multiprocessing's: it knows how, and reaps
            process.terminate()
            process.join(1)
            if process.is_alive():
                process.kill()
                process.join(1)
            continue
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + 1
        while _running(pid) and time.monotonic() < deadline:
            time.sleep(0.01)
        with contextlib.suppress(OSError):
            if _running(pid):
                os.kill(pid, signal.SIGKILL)
            # reap it; its Popen, if any, reads a child it cannot wait for as ended
            os.waitpid(pid, 0)


def _let_exit_without(thread) -> None:
    """A thread cannot be stopped from outside; a non-daemon one left running
    would hold the run open at its end forever. Take it off the list the
    interpreter joins at exit (CPython 3.8-3.12 keep that list in Python;
    3.13 keeps it in C, where a leaked thread still holds the exit)."""
    locks = getattr(threading, "_shutdown_locks", None)
    lock = getattr(thread, "_tstate_lock", None)
    if locks is None or lock is None:
        return
    with threading._shutdown_locks_lock:
        locks.discard(lock)
    thread._daemonic = True


# --- what modules do as they are first imported --------------------------------

_UNSET = object()


class ImportHistory:
    """The modules this process has imported so far, by name and by file: one
    met again is being re-imported (popped from ``sys.modules`` and imported,
    or its file loaded under another name), and its import-time code runs
    because the importer asked for it again, not once per process. Kept in
    the session: a module popped after one test and imported in a later one
    is still met again."""

    def __init__(self):
        self.names: set[str] = set()
        self.files: set[str] = set()

    def note_present(self) -> None:
        """What is imported now (names only: files are read when needed)."""

        self.names.update(sys.modules)

    def note_files_present(self) -> None:

        self.files.update(f for f in (getattr(m, "__file__", None) for m in list(sys.modules.values())) if isinstance(f, str))


def _origin(spec) -> str | None:
    """The file a module spec loads, where it has one."""
    return spec.origin if getattr(spec, "has_location", False) else None


def _name_and_file(spec) -> set[str]:
    return {spec.name, _origin(spec)} - {None}


class FirstImports:
    """Watches the third-party libraries first imported while a test runs.

    A library's import-time code runs once per process, in whichever test
    happens to import it first (a lazy import inside torch, a library that
    library pulls in), so what it does to process-wide state depends on
    what is installed and on test order, never on the implementation: rich
    draws from ``random`` as it is imported, setuptools extends
    ``sys.path``, other libraries set environment variables, logger levels,
    Dynamo's config or the recursion limit. Its draws from the global
    generators are undone as the import ends, so the generators' stream
    does not depend on what is installed either (Hypothesis, for the same
    reason, keeps them out of its examples). Its other changes are not a
    leak while they hold the value the import left; the rest of the process
    keeps them (the module relies on them), but for the
    :data:`VERDICT_STATE`, put back before the next test all the same.

    Only a first import excuses: a module imported before in this process
    (``history``: re-imported after ``sys.modules.pop``, or its file loaded
    under another name), or one of the implementation's own (``own``: its
    package, its areas' modules, their folders) runs code the implementation
    chose to run, whose changes are its own. So does anything imported
    inside such an import, as one of its steps: an excused import nested in
    one that is not is read on its own; one that is not nested in an
    excused one voids that one's excuse.

    Watching replaces the import system's loading step (CPython's
    ``importlib._bootstrap._load_unlocked``, through which every first import
    goes) for the duration only; the state is read around the outermost
    excused import alone, so a library pulling in a thousand modules costs
    two reads. Without that step, nothing is excused."""

    def __init__(self, history: ImportHistory | None = None, own: OwnCode | None = None):
        #: state key -> {entry: the value an import left (_UNSET: removed)}
        self.changed: dict[str, dict] = {}
        self.history = history if history is not None else ImportHistory()
        self.own = own if own is not None else OwnCode()
        self._bootstrap = self._real = None
        self._reading = False  # inside an excused import whose changes are being read
        self._voided = False  # ... that imported something not excused
        self._present_at_start: dict = {}  # ... the modules imported when it began
        self._present_files: set[str] | None = None  # ... their files, once read
        self._loaded_within: set[str] = set()  # ... the names and files it has loaded so far
        self._files_read = False

    def __enter__(self):

        self.history.note_present()
        bootstrap = sys.modules.get("importlib._bootstrap")
        real = getattr(bootstrap, "_load_unlocked", None)
        if real is not None:
            self._bootstrap, self._real = bootstrap, real
            bootstrap._load_unlocked = self._loading
        return self

    def __exit__(self, *exc):
        if self._bootstrap is not None:
            self._bootstrap._load_unlocked = self._real
            self._bootstrap = None
        return False

    def _first_import(self, spec) -> bool:
        """Whether loading ``spec`` is a third-party library's first import."""
        origin = _origin(spec)
        if spec.name in self.history.names or self.own.holds(spec.name, origin):
            return False
        if origin is not None:
            if not self._files_read:  # once per test that imports anything
                self.history.note_files_present()
                self._files_read = True
            if origin in self.history.files:
                return False
        return True

    def _reloaded_by_the_import(self, spec) -> bool:
        """Whether a module met before is loaded again by the excused import's
        own code: one imported when that import began (so nothing but the
        import itself can have removed it), or one it loaded already (its
        file under another name). setuptools does both on its first import:
        it clears ``distutils`` from ``sys.modules`` and imports its own
        under that name. One removed before the import began (an
        implementation popping it so a library runs it again) still voids."""
        origin = _origin(spec)
        if self.own.holds(spec.name, origin):
            return False
        if spec.name in self._present_at_start or spec.name in self._loaded_within:
            return True
        return origin is not None and (origin in self._loaded_within or origin in self._files_at_start())

    def _files_at_start(self) -> set[str]:
        # read only when a file met before is loaded again, as the excused import's step
        if self._present_files is None:
            files = (getattr(m, "__file__", None) for m in self._present_at_start.values())
            self._present_files = {f for f in files if isinstance(f, str)}
        return self._present_files

    def _loading(self, spec):
        first = self._first_import(spec)
        if self._reading:
            self._voided = self._voided or not (first or self._reloaded_by_the_import(spec))
            self._loaded_within.update(_name_and_file(spec))
            return self._loaded(spec)
        if not first:
            return self._loaded(spec)
        drawn = [(put, get()) for get, put in _generator_objects()]
        before = _import_visible()
        self._present_at_start, self._loaded_within = dict(sys.modules), _name_and_file(spec)
        self._present_files = None
        self._reading, self._voided = True, False
        try:
            return self._loaded(spec)
        finally:
            self._reading = False
            self._present_at_start, self._loaded_within, self._present_files = {}, set(), None
            if not self._voided:
                for put, state in drawn:
                    put(state)
                after = _import_visible()
                for key in after.keys() & before.keys():
                    self._note(key, before[key], after[key])

    def _loaded(self, spec):
        module = self._real(spec)
        # Once loaded, met again is a re-import. A load that raised is not
        # (torch tries an optional module again and again, as each of its
        # modules that could use it is first imported).
        self.history.names.add(spec.name)
        if getattr(spec, "has_location", False) and spec.origin:
            self.history.files.add(spec.origin)
        return module

    def _note(self, key, before, after) -> None:
        changed = self.changed.setdefault(key, {})
        if isinstance(after, dict) and isinstance(before, dict):
            for k in before.keys() | after.keys():
                if before.get(k, _UNSET) != after.get(k, _UNSET):
                    changed[k] = after.get(k, _UNSET)
        elif isinstance(after, list) and isinstance(before, list):
            changed.update((x, True) for x in after if x not in before)
        elif before != after:
            changed[None] = after

    def kept(self, key, now) -> set:
        """The entries of ``key`` that hold, in ``now``, what an import left."""
        changed = self.changed.get(key, {})
        if isinstance(now, list):
            return {x for x in now if x in changed}
        if not hasattr(now, "items"):
            return {None} if changed.get(None, _UNSET) == now else set()
        return {k for k, v in changed.items() if now.get(k, _UNSET) == v}

    def excused(self, key, after, before):
        """``after`` and ``before`` as a leak check should compare them."""
        kept = self.kept(key, after) if after is not None else set()
        if not kept:
            return after, before
        if isinstance(after, list):
            return [x for x in after if x in before or x not in kept], before
        if not isinstance(after, dict):
            return before, before
        return ({k: v for k, v in after.items() if k not in kept},
                {k: v for k, v in before.items() if k not in kept})


class InductorCompiles:
    """Watches the recursion limit while a test runs, for what Inductor's
    compiles do to it.

    Inductor raises the limit as it generates code for a graph
    (``compile_fx``: ``sys.setrecursionlimit(max(limit, 2000))``), in
    whichever test compiles first, or misses its cache: torch's own
    bookkeeping, whatever the test order, never an implementation's leak.
    The limit the last such call left is excused while it holds, and only
    if the limit that call raised was the test's own or one an earlier
    compile left (an implementation raising it first, then compiling, is
    charged). Any other caller's change is charged as before; so is one
    made by a route this cannot see (a reference to the function taken
    before the test, C code). The limit is still put back before the next
    test with the rest of :data:`VERDICT_STATE`.

    Watching replaces ``sys.setrecursionlimit`` for the test; Inductor's
    call is known by its file (torch's ``_inductor/compile_fx.py``) and its
    value."""

    def __init__(self):
        self.left = None  # the limit Inductor's last compile set, while nothing but it changed the limit
        self._clean: set[int] = set()
        self._real = None
        self._inductor_file = None

    def __enter__(self):

        torch = sys.modules.get("torch")
        folder = os.path.dirname(getattr(torch, "__file__", None) or "")
        if folder:
            self._inductor_file = os.path.realpath(os.path.join(folder, "_inductor", "compile_fx.py"))
        self._clean = {sys.getrecursionlimit()}
        self._real = sys.setrecursionlimit
        sys.setrecursionlimit = self._setting
        return self

    def __exit__(self, *exc):

        if self._real is not None and sys.setrecursionlimit == self._setting:
            sys.setrecursionlimit = self._real
        self._real = None
        return False

    def _setting(self, limit):

        now = sys.getrecursionlimit()
        caller = sys._getframe(1).f_code.co_filename
        self._real(limit)
        if limit == now:
            return
        if (self._inductor_file is not None and os.path.realpath(caller) == self._inductor_file
                and now in self._clean and limit == max(now, 2000)):
            self.left = limit
            self._clean.add(limit)
        else:
            self.left = None

    def excused(self, key, after, before):
        """``after`` and ``before`` as a leak check should compare them."""
        if key == "recursion_limit" and self.left is not None and after == self.left:
            return before, before
        return after, before


def _import_visible() -> dict:
    """What a module's import-time code may change that a leak check reads
    and restore puts back, at a cost fit for every outermost first import."""

    state = {"environ": dict(os.environ), "sys.path": list(sys.path), "loggers": _logger_levels()}
    state.update(_verdict_state())
    return state


