"""Reference exec-order recorder (seed ``004``, DESIGN.md "Exec order").

While the context is open, the tracer's ``call_module`` and ``create_proxy``
are wrapped on the instance; the wrappers record into an ``ExecInfo``:

- every ``call_module`` appends the module to the forward order, adds
  ``(module, all its named parameters)`` to the calling module's usage list
  (when it has parameters) and starts a fresh list for the module, so a module
  called repeatedly keeps only its last call's list;
- every ``call_function``/``call_method`` proxy whose inputs include a
  parameter's ``get_attr`` proxy records those parameters (root FQNs) as a
  direct use of the current module; a leaf ``call_module`` proxy records all
  of the leaf's parameters as its own use;
- a parameter enters ``param_forward_order`` at its first use only.

Inputs are scanned through nested lists/tuples/dicts and keyword arguments:
a parameter handed to an op by keyword or inside a list is used all the same.
Exiting, normally or by an exception, puts the instance's ``__dict__`` back
exactly as it was (the class methods show through again).
"""

from __future__ import annotations

from contextlib import contextmanager

from ..contract import ExecInfo

_PATCHED = ("call_module", "create_proxy")
_MISSING = object()


def _proxies_in(args, kwargs, proxy_type, keyword=True, nested=True):
    """Proxies among ``args`` and ``kwargs`` values, nested containers
    flattened left to right, iteratively. ``keyword``/``nested`` off model
    torch's recorder, which looks only at top-level positional arguments."""
    if not nested:
        return [a for a in (*(args or ()), *(kwargs.values() if keyword and kwargs else ())) if isinstance(a, proxy_type)]
    kwargs = kwargs if keyword else None
    found = []
    pending = [kwargs, args] if kwargs else [args]
    while pending:
        item = pending.pop()
        if isinstance(item, proxy_type):
            found.append(item)
        elif isinstance(item, (list, tuple)):
            pending.extend(reversed(item))
        elif isinstance(item, dict):
            pending.extend(reversed(list(item.values())))
        elif isinstance(item, slice):
            pending.extend((item.step, item.stop, item.start))
    return found


class ReferenceExecOrder:
    def __init__(
        self, scan_keyword_args=True, scan_nested_args=True, restore="instance_dict", param_nodes="get_attr"
    ):
        """The switches model known torch bugs (``pytest_fsdpcheck.known``):
        not looking at keyword or nested arguments for parameter uses,
        ``restore="assign_bound"``, restoring by assigning the bound methods
        read before patching (they stay in the instance's ``__dict__``), and
        ``param_nodes="any_target"``, taking any input node whose target string
        is a parameter's FQN for that parameter (a ``call_method`` node ``t``
        for a root parameter named ``t``)."""
        if restore not in ("instance_dict", "assign_bound"):
            raise ValueError(f"restore must be 'instance_dict' or 'assign_bound', got {restore!r}")
        if param_nodes not in ("get_attr", "any_target"):
            raise ValueError(f"param_nodes must be 'get_attr' or 'any_target', got {param_nodes!r}")
        self._keyword, self._nested, self._restore = scan_keyword_args, scan_nested_args, restore
        self._any_target = param_nodes == "any_target"

    @contextmanager
    def patch_tracer(self, tracer, root):
        from torch import fx

        info = ExecInfo(module_forward_order=[root], module_to_param_usage_infos={root: []})
        usage = info.module_to_param_usage_infos
        order = info.param_forward_order
        visited = info.visited_params
        fqn_to_param = dict(root.named_parameters())
        current = [root]  # stack of modules whose forward is being traced
        saved = {name: tracer.__dict__.get(name, _MISSING) for name in _PATCHED}
        call_module = tracer.call_module
        create_proxy = tracer.create_proxy

        def first_use(params):
            for _, param in params:
                if param not in visited:
                    visited.add(param)
                    order.append(param)

        def recording_call_module(module, forward, args, kwargs):
            info.module_forward_order.append(module)
            named = list(module.named_parameters())
            if named:
                usage[current[-1]].append((module, named))
            usage[module] = []
            current.append(module)
            try:
                return call_module(module, forward, args, kwargs)
            finally:
                current.pop()

        def recording_create_proxy(kind, target, args, kwargs, *rest, **options):
            proxy = create_proxy(kind, target, args, kwargs, *rest, **options)
            module = current[-1]
            if kind in ("call_function", "call_method"):
                named = [
                    (p.node.target, fqn_to_param[p.node.target])
                    for p in _proxies_in(args, kwargs, fx.Proxy, self._keyword, self._nested)
                    if (self._any_target or p.node.op == "get_attr")
                    and isinstance(p.node.target, str)
                    and p.node.target in fqn_to_param
                ]
                if named:
                    usage[module].append((module, named))
                    first_use(named)
            elif kind == "call_module":
                named = list(module.named_parameters())
                if named:
                    usage[module].append((module, named))
                    first_use(named)
            return proxy

        tracer.call_module = recording_call_module
        tracer.create_proxy = recording_create_proxy
        try:
            yield info
        finally:
            for name, value in saved.items():
                if self._restore == "assign_bound":
                    setattr(tracer, name, {"call_module": call_module, "create_proxy": create_proxy}[name])
                elif value is _MISSING:
                    tracer.__dict__.pop(name, None)
                else:
                    tracer.__dict__[name] = value
