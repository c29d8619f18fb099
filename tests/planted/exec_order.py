"""Planted exec-order bugs, one per EXO invariant. Each is a complete
implementation (the reference with one behaviour broken), loadable as
``tests.planted.exec_order:<Name>``."""

from __future__ import annotations

from contextlib import contextmanager

from pytest_fsdpcheck.contract import Implementation
from pytest_fsdpcheck.reference.exec_order import ReferenceExecOrder


class _Planted(Implementation):
    area_class = None

    def __init__(self):
        self.exec_order = self.area_class()


class _NoRestoreOnError(ReferenceExecOrder):
    """EXO-1: restores the tracer only when the block exits normally."""

    @contextmanager
    def patch_tracer(self, tracer, root):
        recording = ReferenceExecOrder.patch_tracer(self, tracer, root)
        info = recording.__enter__()
        patched = {name: tracer.__dict__[name] for name in ("call_module", "create_proxy")}
        try:
            yield info
        except BaseException:
            recording.__exit__(None, None, None)
            tracer.__dict__.update(patched)  # as if the restore were not in a finally clause
            raise
        recording.__exit__(None, None, None)


class NoRestoreOnError(_Planted):
    area_class = _NoRestoreOnError


def _wrap_recorder(patch_tracer_fn, adjust):
    """A ``patch_tracer`` that lets the reference record, then ``adjust``s
    the recording when the block exits."""

    @contextmanager
    def patch_tracer(self, tracer, root):
        with patch_tracer_fn(self, tracer, root) as info:
            yield info
        adjust(info, root)

    return patch_tracer


class _SkipsParamFree(ReferenceExecOrder):
    """EXO-2: leaves parameter-free modules out of the forward order."""

    def patch_tracer(self, tracer, root):
        def drop(info, root):
            info.module_forward_order[:] = [
                m
                for i, m in enumerate(info.module_forward_order)
                if i == 0 or any(True for _ in m.parameters())
            ]

        return _wrap_recorder(ReferenceExecOrder.patch_tracer, drop)(self, tracer, root)


class SkipsParamFree(_Planted):
    area_class = _SkipsParamFree


class _ReversedParamOrder(ReferenceExecOrder):
    """EXO-3: records parameters in last-use order instead of first use."""

    def patch_tracer(self, tracer, root):
        def last_use(info, root):
            seen, out = set(), []
            for p in reversed(info.param_forward_order):
                if p not in seen:
                    seen.add(p)
                    out.append(p)
            info.param_forward_order[:] = out

        return _wrap_recorder(ReferenceExecOrder.patch_tracer, last_use)(self, tracer, root)


class ReversedParamOrder(_Planted):
    area_class = _ReversedParamOrder


class _AccumulatesCalls(ReferenceExecOrder):
    """EXO-4: a module called repeatedly accumulates the entries of all its
    calls instead of keeping only the last call's list."""

    @contextmanager
    def patch_tracer(self, tracer, root):
        with super().patch_tracer(tracer, root) as info:
            call_module = tracer.call_module
            usage = info.module_to_param_usage_infos

            def accumulate(module, forward, args, kwargs):
                earlier = usage.get(module, [])
                output = call_module(module, forward, args, kwargs)
                usage[module][:0] = earlier
                return output

            tracer.call_module = accumulate
            yield info


class AccumulatesCalls(_Planted):
    area_class = _AccumulatesCalls


class _LeafUsesNotVisited(ReferenceExecOrder):
    """EXO-5: parameters first used by a leaf module's call are ordered but
    never added to the visited set."""

    def patch_tracer(self, tracer, root):
        def forget(info, root):
            leaf_params = set()
            for module, entries in info.module_to_param_usage_infos.items():
                for entry_module, named in entries:
                    if (
                        entry_module is module
                        and len(named) == len(list(module.parameters()))
                        and module is not root
                    ):
                        leaf_params.update(p for _, p in named)
            info.visited_params.difference_update(leaf_params)

        return _wrap_recorder(ReferenceExecOrder.patch_tracer, forget)(self, tracer, root)


class LeafUsesNotVisited(_Planted):
    area_class = _LeafUsesNotVisited


class _ExtraGetAttr(ReferenceExecOrder):
    """EXO-6: re-reads every directly used parameter through the tracer,
    which leaves an extra ``get_attr`` node in the graph."""

    @contextmanager
    def patch_tracer(self, tracer, root):
        with super().patch_tracer(tracer, root) as info:
            create_proxy = tracer.create_proxy
            names = {name for name, _ in root.named_parameters()}

            def reread(kind, target, args, kwargs, *rest, **options):
                if kind in ("call_function", "call_method"):
                    for arg in args:
                        node = getattr(arg, "node", None)
                        if node is not None and node.op == "get_attr" and node.target in names:
                            create_proxy("get_attr", node.target, (), {})
                return create_proxy(kind, target, args, kwargs, *rest, **options)

            tracer.create_proxy = reread
            yield info


class ExtraGetAttr(_Planted):
    area_class = _ExtraGetAttr


class _BypassesSubclass(ReferenceExecOrder):
    """EXO-7: wraps the base ``fx.Tracer`` methods, bypassing a subclass's
    own ``call_module``/``create_proxy`` overrides."""

    @contextmanager
    def patch_tracer(self, tracer, root):
        from torch import fx

        tracer.call_module = fx.Tracer.call_module.__get__(tracer)
        tracer.create_proxy = fx.Tracer.create_proxy.__get__(tracer)
        try:
            with super().patch_tracer(tracer, root) as info:
                yield info
        finally:
            tracer.__dict__.pop("call_module", None)
            tracer.__dict__.pop("create_proxy", None)


class BypassesSubclass(_Planted):
    area_class = _BypassesSubclass


class _QuadraticMembership(ReferenceExecOrder):
    """EXO-8: the seed's ``param not in set(order)``: the set of recorded
    parameters is rebuilt for every parameter a module call records."""

    @contextmanager
    def patch_tracer(self, tracer, root):
        with super().patch_tracer(tracer, root) as info:
            create_proxy = tracer.create_proxy

            def rebuilding(kind, target, args, kwargs, *rest, **options):
                proxy = create_proxy(kind, target, args, kwargs, *rest, **options)
                if kind == "call_module":
                    for _ in root.get_submodule(target).parameters():
                        set(info.param_forward_order)
                return proxy

            tracer.create_proxy = rebuilding
            yield info


class QuadraticMembership(_Planted):
    area_class = _QuadraticMembership


ALL = {
    "EXO-1": "NoRestoreOnError",
    "EXO-2": "SkipsParamFree",
    "EXO-3": "ReversedParamOrder",
    "EXO-4": "AccumulatesCalls",
    "EXO-5": "LeafUsesNotVisited",
    "EXO-6": "ExtraGetAttr",
    "EXO-7": "BypassesSubclass",
    "EXO-8": "QuadraticMembership",
}


# ---------------------------------------------------------------- real forwards
# Each mishandles one feature of REAL_FORWARD (conformance/test_exec_order.py).


class _BuffersCounted(ReferenceExecOrder):
    """EXO-3: a module call's entry and a leaf's use list the module's
    buffers as if they were parameters (``named_parameters()`` and
    ``named_buffers()`` chained)."""

    def patch_tracer(self, tracer, root):
        def add_buffers(info, root):
            for module, entries in info.module_to_param_usage_infos.items():
                for entry_module, named in entries:
                    if len(named) != len(list(entry_module.parameters())):
                        continue  # a direct use in an op, not a module's call
                    buffers = list(entry_module.named_buffers())
                    named.extend(buffers)
                    if entry_module is module:
                        for _, buf in buffers:
                            if buf not in info.visited_params:
                                info.visited_params.add(buf)
                                info.param_forward_order.append(buf)

        return _wrap_recorder(ReferenceExecOrder.patch_tracer, add_buffers)(self, tracer, root)


class BuffersCounted(_Planted):
    area_class = _BuffersCounted


class _ViewsIgnored(ReferenceExecOrder):
    """EXO-3: a parameter read through ``t()``, ``view()`` or a slice is not
    a use (only "compute" ops are looked at)."""

    @contextmanager
    def patch_tracer(self, tracer, root):
        import operator

        unrecorded = tracer.create_proxy
        with super().patch_tracer(tracer, root) as info:
            recording = tracer.create_proxy

            def skipping(kind, target, args, kwargs, *rest, **options):
                if target in ("t", "view", operator.getitem):
                    return unrecorded(kind, target, args, kwargs, *rest, **options)
                return recording(kind, target, args, kwargs, *rest, **options)

            tracer.create_proxy = skipping
            yield info


class ViewsIgnored(_Planted):
    area_class = _ViewsIgnored


class _TiedListedTwice(ReferenceExecOrder):
    """EXO-4: a module call's entry lists a tied parameter once per name
    (``named_parameters(remove_duplicate=False)``)."""

    def patch_tracer(self, tracer, root):
        def relist(info, root):
            for entries in info.module_to_param_usage_infos.values():
                for n, (module, named) in enumerate(entries):
                    entries[n] = (module, [(name, p) for name, p in module.named_parameters(remove_duplicate=False)]
                                  if len(named) == len(list(module.parameters())) else named)

        return _wrap_recorder(ReferenceExecOrder.patch_tracer, relist)(self, tracer, root)


class TiedListedTwice(_Planted):
    area_class = _TiedListedTwice


class _UsageForEveryModule(ReferenceExecOrder):
    """EXO-4: usage infos start out with an entry list for every submodule,
    so a container that is never called (a ModuleList) has one too."""

    def patch_tracer(self, tracer, root):
        def prefill(info, root):
            for module in root.modules():
                info.module_to_param_usage_infos.setdefault(module, [])

        return _wrap_recorder(ReferenceExecOrder.patch_tracer, prefill)(self, tracer, root)


class UsageForEveryModule(_Planted):
    area_class = _UsageForEveryModule


class _BufferProxiesAsParams(ReferenceExecOrder):
    """EXO-3: takes every ``get_attr`` input of an op for a parameter, so a
    buffer read directly is recorded as one. Unseen unless the tracer proxies
    buffer attributes: otherwise a buffer reaches an op as a plain tensor."""

    @contextmanager
    def patch_tracer(self, tracer, root):
        from torch import fx

        buffers = dict(root.named_buffers())
        with super().patch_tracer(tracer, root) as info:
            usage = info.module_to_param_usage_infos
            recording_call_module, recording_create_proxy = tracer.call_module, tracer.create_proxy
            current = [root]

            def call_module(module, forward, args, kwargs):
                current.append(module)
                try:
                    return recording_call_module(module, forward, args, kwargs)
                finally:
                    current.pop()

            def create_proxy(kind, target, args, kwargs, *rest, **options):
                entries = usage.get(current[-1], [])
                before = len(entries)
                proxy = recording_create_proxy(kind, target, args, kwargs, *rest, **options)
                if kind not in ("call_function", "call_method"):
                    return proxy
                inputs = [*args, *kwargs.values()] if kwargs else list(args)
                named = [(a.node.target, buffers[a.node.target]) for a in inputs
                         if isinstance(a, fx.Proxy) and a.node.op == "get_attr" and a.node.target in buffers]
                if named:
                    if len(entries) > before:
                        entries[-1][1].extend(named)
                    else:
                        entries.append((current[-1], named))
                    for _, buf in named:
                        if buf not in info.visited_params:
                            info.visited_params.add(buf)
                            info.param_forward_order.append(buf)
                return proxy

            tracer.call_module, tracer.create_proxy = call_module, create_proxy
            yield info


class BufferProxiesAsParams(_Planted):
    area_class = _BufferProxiesAsParams


class MethodTargetTaken(Implementation):
    """EXO-3: any input node whose target is a parameter's FQN counts as that
    parameter (torch's exo-method-target-taken-as-param, undeclared here)."""

    def __init__(self):
        self.exec_order = ReferenceExecOrder(param_nodes="any_target")


#: planted name -> (invariant, REAL_FORWARD case that must catch it)
REAL_FORWARD_PLANTED = {
    "BuffersCounted": ("EXO-3", "buffers"),
    "ViewsIgnored": ("EXO-3", "views-and-slices"),
    "TiedListedTwice": ("EXO-4", "tied"),
    "UsageForEveryModule": ("EXO-4", "module-list"),
    "MethodTargetTaken": ("EXO-3", "method-named-params"),
}
