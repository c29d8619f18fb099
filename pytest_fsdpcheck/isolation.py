"""Keeping a misbehaving implementation from hurting the rest of the run.

* :class:`Guarded` wraps an implementation's areas so every call runs under a
  time limit (SIGALRM, main thread only): a Python-level hang becomes a
  failing check with a clear message instead of a stuck CI job.
* :func:`global_state` / :func:`restore` snapshot the process-wide state an
  implementation could leak (FX tracer patches, Dynamo config, logger
  levels, process groups, global module hooks) so a leak is reported and
  undone before the next test.
* :func:`implementation_frames` trims a traceback to the implementation's
  own frames.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from pathlib import Path

from .catalog import AREAS
from .contract import check_return


class ImplementationTimeout(Exception):
    """An implementation call exceeded the per-call time limit."""


class LeakedGlobalState(AssertionError):
    """An implementation left process-wide state changed after a check."""


@contextlib.contextmanager
def time_limit(seconds: float, what: str):
    usable = seconds and seconds > 0 and hasattr(signal, "setitimer") and threading.current_thread() is threading.main_thread()
    if not usable:
        yield
        return

    def on_alarm(signum, frame):
        raise ImplementationTimeout(
            f"{what} did not return within {seconds:g} s (per-call limit; --fsdpcheck-timeout to change)"
        )

    previous = signal.signal(signal.SIGALRM, on_alarm)
    remaining, _ = signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        if remaining:  # an outer limit (e.g. pytest-timeout) was running: give it back
            signal.setitimer(signal.ITIMER_REAL, remaining)


class _GuardedArea:
    def __init__(self, area, name: str, impl_name: str, timeout: float, guard: Guarded):
        self._area, self._name, self._impl, self._timeout = area, name, impl_name, timeout
        self._guard = guard

    def __getattr__(self, attr):
        value = getattr(self._area, attr)
        if not callable(value):
            return value
        what = f"{self._impl}: {self._name}.{attr}"

        def call(*args, **kwargs):
            guard = self._guard
            guard.calls += 1
            if guard.hung:
                # Hypothesis re-runs a failing example while shrinking; one
                # hang per test is enough to know, not one per attempt.
                raise ImplementationTimeout(guard.hung + " (an earlier call hung; not called again in this test)")
            try:
                with time_limit(self._timeout, what):
                    result = value(*args, **kwargs)
            except ImplementationTimeout as exc:
                guard.hung = str(exc)
                raise
            check_return(self._name, attr, result)
            if isinstance(result, contextlib.AbstractContextManager):
                return _GuardedContext(result, what, self._timeout)
            return result

        return call


class _GuardedContext:
    """Time-limits entering and leaving an implementation's context manager."""

    def __init__(self, cm, what, timeout):
        self._cm, self._what, self._timeout = cm, what, timeout

    def __enter__(self):
        with time_limit(self._timeout, self._what + " (enter)"):
            return self._cm.__enter__()

    def __exit__(self, *exc):
        with time_limit(self._timeout, self._what + " (exit)"):
            return self._cm.__exit__(*exc)


class Guarded:
    """An implementation seen through per-call time limits."""

    def __init__(self, impl, impl_name: str, timeout: float):
        self._fsdpcheck_inner = impl
        self._fsdpcheck_spec = impl_name
        self.calls = 0  # implementation calls in the current test: a determinism fingerprint
        self.hung: str | None = None  # set once a call timed out in the current test
        for area in AREAS:
            obj = getattr(impl, area, None)
            setattr(self, area, None if obj is None else _GuardedArea(obj, area, impl_name, timeout, self))

    def start_test(self) -> None:
        self.calls = 0
        self.hung = None

    def __getattr__(self, attr):
        return getattr(self._fsdpcheck_inner, attr)


# --- global state ------------------------------------------------------------------


def global_state() -> dict:
    """What a well-behaved implementation leaves as it found it."""
    import logging

    import torch
    import torch.fx

    state = {
        "fx.Tracer": {k: v for k, v in vars(torch.fx.Tracer).items() if not k.startswith("__")},
        "loggers": {
            name: logger.level
            for name, logger in logging.root.manager.loggerDict.items()
            if isinstance(logger, logging.Logger) and name.split(".")[0] in ("torch", "pytest_fsdpcheck")
        },
        "grad_enabled": torch.is_grad_enabled(),
        "default_dtype": torch.get_default_dtype(),
        # the plugin pins this to 1 for the session; an implementation changing it is a leak
        "num_threads": torch.get_num_threads(),
    }
    modules = torch.nn.modules.module
    for hooks in ("_global_forward_hooks", "_global_forward_pre_hooks", "_global_backward_hooks", "_global_module_registration_hooks", "_global_parameter_registration_hooks"):
        if hasattr(modules, hooks):
            state["nn." + hooks] = dict(getattr(modules, hooks))
    dynamo = _dynamo_config()
    if dynamo is not None:
        state["dynamo.config"] = _config_copy(dynamo)
    dist = torch.distributed
    state["process_group"] = dist.is_available() and dist.is_initialized()
    return state


def _dynamo_config():
    import sys

    # Only compare Dynamo's config if something already imported Dynamo:
    # importing it here would cost seconds on every test.
    if "torch._dynamo" not in sys.modules:
        return None
    return sys.modules["torch._dynamo"].config


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
    if hasattr(config, "load_config"):
        config.load_config(saved)
    else:
        for key, value in saved.items():
            setattr(config, key, value)


def leaks(before: dict, after: dict) -> list[str]:
    found = []
    for key in before.keys() | after.keys():
        b, a = before.get(key), after.get(key)
        if key == "dynamo.config" and (b is None or a is None):
            continue  # Dynamo was first imported during the test
        if key == "loggers":
            a = {k: a.get(k) for k in b}  # loggers created on first import are not leaks
        if key == "fx.Tracer":
            a = {k: _unwrap_dynamo_disable(v, b.get(k)) for k, v in a.items()}
        if a != b:
            if isinstance(a, dict) and isinstance(b, dict):
                changed = sorted(k for k in a.keys() | b.keys() if a.get(k) is not b.get(k) and a.get(k) != b.get(k))
                found.append(f"{key} ({', '.join(map(str, changed[:5]))}{', ...' if len(changed) > 5 else ''})")
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


def restore(before: dict) -> None:
    import logging

    import torch
    import torch.fx

    tracer_attrs = before["fx.Tracer"]
    for k in [k for k in vars(torch.fx.Tracer) if not k.startswith("__") and k not in tracer_attrs]:
        delattr(torch.fx.Tracer, k)
    for k, v in tracer_attrs.items():
        if vars(torch.fx.Tracer).get(k) is not v:
            setattr(torch.fx.Tracer, k, v)
    for name, level in before["loggers"].items():
        logging.getLogger(name).setLevel(level)
    torch.set_grad_enabled(before["grad_enabled"])
    torch.set_default_dtype(before["default_dtype"])
    if "num_threads" in before:
        torch.set_num_threads(before["num_threads"])
    modules = torch.nn.modules.module
    for key, value in before.items():
        if key.startswith("nn._global"):
            hooks = getattr(modules, key[3:])
            hooks.clear()
            hooks.update(value)
    dynamo = _dynamo_config()
    if dynamo is not None and "dynamo.config" in before:
        _load_config(dynamo, before["dynamo.config"])
    dist = torch.distributed
    if not before["process_group"] and dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


# --- tracebacks ------------------------------------------------------------------

_OWN = Path(__file__).resolve().parent
# The suite's machinery; reference/ and impls/ are implementations, so theirs stay.
_MACHINERY = tuple(str(_OWN / p) for p in ("checks", "generators", "known", "isolation.py", "plugin.py", "report.py", "profiles.py", "contract.py"))
_NOISE = ("_pytest", "pluggy", "hypothesis", "_hypothesis_pytestplugin")


def is_machinery(entry) -> bool:
    """Whether a traceback entry is the suite's or the test runner's own frame."""
    path = str(entry.path)
    if path.startswith(_MACHINERY):
        return True
    return any(f"{os.sep}{n}{os.sep}" in path or path.endswith(f"{os.sep}{n}.py") for n in _NOISE)
