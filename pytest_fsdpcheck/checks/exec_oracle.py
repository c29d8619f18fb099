"""Independent oracles for the exec-order checks (EXO-2..5).

They never touch a tracer's recording: the model runs *eagerly* with global
module hooks and a ``TorchFunctionMode``, and the tracer is consulted only
for its leaf rule (``is_leaf_module``), which decides what a trace can see:
inside a leaf module nothing is observed, the leaf's call uses all of its
parameters at once.

What counts as a use: a parameter among an op's inputs, positional or
keyword, also inside lists/tuples/dicts; a leaf module's call uses all of
the leaf's parameters, in ``named_parameters()`` order.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field


@dataclass
class ObservedExec:
    module_forward_order: list = field(default_factory=list)
    #: module -> [(module, [(name, param), ...]), ...] in execution order
    usage: dict = field(default_factory=dict)
    param_first_use: list = field(default_factory=list)


def _tensors_in(args, kwargs):
    found = []
    pending = [kwargs or {}, args]
    while pending:
        item = pending.pop()
        if isinstance(item, (list, tuple)):
            pending.extend(reversed(item))
        elif isinstance(item, dict):
            pending.extend(reversed(list(item.values())))
        else:
            found.append(item)
    return found


def observe_eager(root, inputs, tracer, kwargs=None) -> ObservedExec:
    """Run ``root(*inputs, **kwargs)`` eagerly and observe module calls and
    parameter uses as a trace by ``tracer`` would see them."""
    import torch
    from torch.nn.modules import module as module_mod
    from torch.overrides import TorchFunctionMode

    observed = ObservedExec(module_forward_order=[], usage={root: []})
    fqn_of = {}
    for name, param in root.named_parameters():
        fqn_of.setdefault(id(param), name)
    qualname = {}
    for name, m in root.named_modules(remove_duplicate=False):
        qualname.setdefault(id(m), name)
    seen_ids: set[int] = set()
    stack: list = []  # (module, is_leaf) of the forwards being run
    leaf_depth = [0]

    def use(module, named):
        observed.usage[module].append((module, named))
        for _, param in named:
            if id(param) not in seen_ids:
                seen_ids.add(id(param))
                observed.param_first_use.append(param)

    def pre_hook(module, args):
        if leaf_depth[0]:
            stack.append((module, False))
            return
        if not stack:  # the root's own call
            observed.module_forward_order.append(module)
            stack.append((module, False))
            return
        observed.module_forward_order.append(module)
        named = list(module.named_parameters())
        if named:
            observed.usage[stack[-1][0]].append((module, named))
        observed.usage[module] = []
        is_leaf = bool(tracer.is_leaf_module(module, qualname.get(id(module), "")))
        stack.append((module, is_leaf))
        if is_leaf:
            if named:
                use(module, named)
            leaf_depth[0] += 1

    def post_hook(module, args, output):
        _, was_leaf = stack.pop()
        if was_leaf:
            leaf_depth[0] -= 1

    def op_reads(args, kwargs=None):
        if not leaf_depth[0] and stack:
            named = [(fqn_of[id(t)], t) for t in _tensors_in(args, kwargs) if id(t) in fqn_of]
            if named:
                use(stack[-1][0], named)

    patch_getitem = _getitem_escapes_modes()

    class ParamUses(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            # with the patch in place, indexing is recorded by it alone (modes
            # see some index kinds, and the patched method under its own name)
            if not (patch_getitem and (func is getitem or getattr(func, "__name__", "") == "__getitem__")):
                op_reads(args, kwargs)
            return func(*args, **(kwargs or {}))

    original_getitem = torch.Tensor.__getitem__
    own_getitem = "__getitem__" in vars(torch.Tensor)

    indexing = [0]  # the original re-enters the patch through a mode that sees it

    def getitem(self, index):
        if not indexing[0]:
            op_reads((self, index))
        indexing[0] += 1
        try:
            return original_getitem(self, index)
        finally:
            indexing[0] -= 1

    pre = module_mod.register_module_forward_pre_hook(pre_hook)
    post = module_mod.register_module_forward_hook(post_hook)
    try:
        if patch_getitem:
            torch.Tensor.__getitem__ = getitem
        with torch.no_grad(), ParamUses():
            root(*inputs, **(kwargs or {}))
    finally:
        if patch_getitem:
            if own_getitem:
                torch.Tensor.__getitem__ = original_getitem
            else:
                del torch.Tensor.__getitem__
        pre.remove()
        post.remove()
    return observed


@functools.cache
def _getitem_escapes_modes() -> bool:
    """torch 2.0 and 2.1 index a tensor by an int or a slice on a fast path
    that never consults TorchFunctionMode: ``p[:k]`` would go unseen, so the
    oracle then watches ``Tensor.__getitem__`` itself."""
    import torch
    from torch.overrides import TorchFunctionMode

    seen = []

    class Probe(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            seen.append(getattr(func, "__name__", ""))
            return func(*args, **(kwargs or {}))

    with Probe():
        torch.zeros(2)[:1]
    return "__getitem__" not in seen


def graph_signature(graph) -> list[tuple]:
    """Per node: op, name, target and args/kwargs with nodes named — enough
    to tell two traces apart, independent of object identity."""
    from torch import fx

    def describe(value):
        pending_out = []
        if isinstance(value, fx.Node):
            return ("%", value.name)
        if isinstance(value, (list, tuple)):
            for item in value:
                pending_out.append(describe(item))
            return (type(value).__name__, tuple(pending_out))
        if isinstance(value, dict):
            return ("dict", tuple((k, describe(v)) for k, v in value.items()))
        target_name = getattr(value, "__qualname__", None)
        if callable(value) and target_name:
            return ("fn", getattr(value, "__module__", ""), target_name)
        return ("v", repr(value))

    return [
        (
            node.op,
            node.name,
            describe(node.target) if not isinstance(node.target, str) else node.target,
            describe(node.args),
            describe(node.kwargs),
        )
        for node in graph.nodes
    ]
