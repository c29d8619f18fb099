"""Planted growth bugs whose superlinear work runs in a helper thread.

Each is a quadratic (or exponential) implementation that the growth checks
(TRV-8, FS2-6, EXO-8) must fail; the call starts a thread for the work and
joins it before returning, as an implementation parallelising its walk or
calling a library that does would. A clock that counts only the calling
thread sees the join's wait, next to nothing, on both sides of the ratio.
"""

from __future__ import annotations

import threading
from contextlib import contextmanager

from pytest_fsdpcheck.contract import Implementation
from pytest_fsdpcheck.reference.exec_order import ReferenceExecOrder
from pytest_fsdpcheck.reference.fsdp2 import ReferenceFsdp2, unique_children

from .fsdp2 import _IgnoreRuleNoMemo
from .traversal import _ListVisited


def in_joined_thread(fn, *args):
    """``fn(*args)`` run in a thread started here and joined before
    returning; its result returned, its exception raised here."""
    outcome = {}

    def work():
        try:
            outcome["result"] = fn(*args)
        except BaseException as error:  # handed to the caller, as a pool's future does
            outcome["error"] = error

    thread = threading.Thread(target=work, name="planted-helper")
    thread.start()
    thread.join()
    if "error" in outcome:
        raise outcome["error"]
    return outcome["result"]


class _ThreadedListVisited(_ListVisited):
    # TRV-8: ListVisited's walk (visited modules in a list), run in a helper thread.
    def states_with_modules(self, root):
        return in_joined_thread(super().states_with_modules, root)


class _Fsdp2ListVisited(ReferenceFsdp2):
    # FS2-6: the visited modules' ids kept in a list: every "seen?" is a
    # linear scan, quadratic in a wide tree's width.
    def managed_modules(self, roots, ignored_params):
        roots, visited, out = self._roots(roots), [], []
        for root in roots:
            if id(root) in visited or not self._composable(root):
                continue
            visited.append(id(root))
            stack = [(root, iter(unique_children(root)))]
            while stack:
                module, kids = stack[-1]
                for child in kids:
                    if id(child) not in visited and self._composable(child) and child not in self._own_group:
                        visited.append(id(child))
                        stack.append((child, iter(unique_children(child))))
                        break
                else:
                    stack.pop()
                    out.append(module)
        if ignored_params is None:
            return out
        ignored, memo = {id(p) for p in ignored_params}, {}
        return [m for m in out if not self._ignorable(m, ignored, memo)]


class _ThreadedFsdp2ListVisited(_Fsdp2ListVisited):
    def managed_modules(self, roots, ignored_params):
        return in_joined_thread(super().managed_modules, roots, ignored_params)


class _ThreadedIgnoreRuleNoMemo(_IgnoreRuleNoMemo):
    # FS2-6: IgnoreRuleNoMemo's exponential ignore rule in a helper thread:
    # the budget must cut a runaway that is not the calling thread.
    def managed_modules(self, roots, ignored_params):
        return in_joined_thread(super().managed_modules, roots, ignored_params)


class _ThreadedQuadraticMembership(ReferenceExecOrder):
    """EXO-8: QuadraticMembership's rebuild of the recorded parameters' set
    for every parameter a module call records, done by a helper thread per
    module call."""

    @contextmanager
    def patch_tracer(self, tracer, root):
        with super().patch_tracer(tracer, root) as info:
            create_proxy = tracer.create_proxy

            def rebuild(target):
                for _ in root.get_submodule(target).parameters():
                    set(info.param_forward_order)

            def rebuilding(kind, target, args, kwargs, *rest, **options):
                proxy = create_proxy(kind, target, args, kwargs, *rest, **options)
                if kind == "call_module":
                    in_joined_thread(rebuild, target)
                return proxy

            tracer.create_proxy = rebuilding
            yield info


def _impl(area: str, cls):
    class Planted(Implementation):
        name = cls.__name__.lstrip("_")

        def __init__(self):
            setattr(self, area, cls())

    Planted.__name__ = Planted.__qualname__ = Planted.name
    return Planted


ThreadedListVisited = _impl("traversal", _ThreadedListVisited)
ThreadedFsdp2ListVisited = _impl("fsdp2", _ThreadedFsdp2ListVisited)
ThreadedIgnoreRuleNoMemo = _impl("fsdp2", _ThreadedIgnoreRuleNoMemo)
ThreadedQuadraticMembership = _impl("exec_order", _ThreadedQuadraticMembership)
#: the same walks run inline, for the timings beside them
Fsdp2ListVisited = _impl("fsdp2", _Fsdp2ListVisited)
