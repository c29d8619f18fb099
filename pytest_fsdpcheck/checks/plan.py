"""The plan's own mistakes (PLN): rules about a whole sequence of
``fully_shard`` calls on one model, judged on the groups the spec's walk
(:mod:`.fsdp2`) gives each call, never on what an implementation did, so a
torch that silently accepts a bad plan cannot hide it.

A call is ``(roots, ignored)``: the modules given to ``fully_shard`` and its
``ignored_params`` (``None`` for the default). Everything is iterative.
"""

from __future__ import annotations

from dataclasses import dataclass

from . import Violation, short
from .fsdp2 import _own, effective_roots, expected_managed, expected_states


@dataclass
class _Spec:
    """What the FS2 oracle reads of a generated tree, for a real model."""

    tree: object
    roots: tuple
    groups: frozenset

    @property
    def size(self):
        return self.tree.size


@dataclass
class _Tree:
    children: tuple
    replicate: frozenset

    @property
    def size(self):
        return len(self.children)


class OracleInput:
    """A real model as the FS2 oracle sees a generated one: modules indexed
    parents before children (a topological order, so a module shared by two
    parents comes after both), children in registration order."""

    def __init__(self, model, replicate=(), roots=(), groups=(), ignored=None):
        self.model = model
        self.modules = topological_modules(model)
        self.index = {id(m): i for i, m in enumerate(self.modules)}
        children = tuple(tuple(self.index[id(c)] for c in m._modules.values() if c is not None) for m in self.modules)
        self._tree = _Tree(children, frozenset(self.index[id(m)] for m in replicate if id(m) in self.index))
        self.ignored = None if ignored is None else set(ignored)
        self.at(roots, groups)
        self.names = {}
        for name, m in model.named_modules():
            self.names.setdefault(id(m), name or "<root>")
        for name, p in model.named_parameters():
            self.names.setdefault(id(p), name)
        for name, b in model.named_buffers():
            self.names.setdefault(id(b), name)

    def at(self, roots, groups, ignored="keep"):
        """The same model for another call: its roots and earlier groups."""
        self.spec = _Spec(self._tree, tuple(self.index[id(r)] for r in roots), frozenset(self.index[id(g)] for g in groups))
        if ignored != "keep":
            self.ignored = None if ignored is None else set(ignored)
        return self

    @property
    def roots(self):
        return tuple(self.modules[i] for i in self.spec.roots)

    def label(self, obj) -> str:
        return self.names.get(id(obj), f"<{type(obj).__name__} not in the model>")

    def labels(self, objs) -> list[str]:
        return [self.label(o) for o in objs]


def topological_modules(model) -> list:
    """Every module reachable from ``model``, each once, parents first
    (reverse post-order of an iterative DFS in registration order)."""
    post, seen = [], {id(model)}
    stack = [(model, iter([c for c in model._modules.values() if c is not None]))]
    while stack:
        module, kids = stack[-1]
        for child in kids:
            if id(child) not in seen:
                seen.add(id(child))
                stack.append((child, iter([c for c in child._modules.values() if c is not None])))
                break
        else:
            stack.pop()
            post.append(module)
    post.reverse()
    return post


def descendants(modules) -> set[int]:
    below, stack = set(), [c for m in modules for c in m._modules.values() if c is not None]
    while stack:
        m = stack.pop()
        if id(m) not in below:
            below.add(id(m))
            stack.extend(c for c in m._modules.values() if c is not None)
    return below


def effective_modules(oracle: OracleInput) -> list:
    """The roots that take a group of their own at the call ``oracle`` is
    placed at (the spec's effective roots), as modules."""
    return [oracle.modules[i] for i in effective_roots(oracle.spec)]


def placed(oracle: OracleInput, calls, on_group=None):
    """Each call ``(roots, ignored)`` of a plan, in its order, ``oracle``
    placed at it: every earlier call's effective roots holding a group (as
    torch leaves them). When the next call is asked for, ``on_group(root)``
    is called for each of this call's effective roots. The one place a plan
    is replayed: the checks and the cases' replay (``cases.replay``) go
    through it."""
    earlier: list = []
    for roots, ignored in calls:
        oracle.at(roots, earlier, ignored)
        yield roots, ignored
        effective = effective_modules(oracle)
        if on_group is not None:
            for root in effective:
                on_group(root)
        earlier += effective


def spec_groups(model, calls, replicate=()) -> list[tuple[list, list]]:
    """Per call: the modules and parameters the spec's walk gives it, with
    every earlier call's roots holding a group (as torch leaves them)."""
    oracle = OracleInput(model, replicate)
    out = []
    for _ in placed(oracle, calls):
        managed = expected_managed(oracle)
        params, _, _ = expected_states(oracle, managed)
        out.append(([oracle.modules[i] for i in managed], params))
    return out


def rejected_call(model, calls, replicate=()) -> str | None:
    """The first call the spec rejects outright (FS2-4: a scalar parameter
    it would shard, which cannot be split on dim 0), as ``call N
    fully_shard(...) would shard the 0-dim parameter NAME``; None where every
    call is one FSDP2 accepts. Such a plan cannot run on any implementation."""
    calls = [(tuple(roots), ignored) for roots, ignored in calls]
    oracle = OracleInput(model, replicate)
    for k, (roots, _) in enumerate(placed(oracle, calls)):
        _, _, scalar = expected_states(oracle, expected_managed(oracle))
        if scalar is not None:
            module = oracle.label(oracle.modules[scalar[0]])
            name = scalar[1] if module == "<root>" else f"{module}.{scalar[1]}"
            return f"call {k + 1} {_call_label(oracle, roots)} would shard the 0-dim parameter {name}"
    return None


def _call_label(oracle, roots) -> str:
    return "fully_shard(" + ", ".join(oracle.label(r) for r in roots) + ")"


def check_plan(model, calls, replicate=()) -> list[Violation]:
    """PLN-1..4 for ``calls`` (``[(roots, ignored_params or None), ...]``, in
    the order made) on ``model``; ``replicate``: modules another API owns."""
    calls = [(tuple(roots), ignored) for roots, ignored in calls]
    oracle = OracleInput(model, replicate)
    labels = [_call_label(oracle, roots) for roots, _ in calls]
    groups = spec_groups(model, calls, replicate)
    out: list[Violation] = []

    # PLN-4: inner first, the root last
    below_of = [descendants(roots) for roots, _ in calls]
    late = []
    for j, (roots_j, _) in enumerate(calls):
        for i in range(j):
            inner = [r for r in roots_j if id(r) in below_of[i]]
            if inner:
                late.append(f"{oracle.label(inner[0])} by call {j + 1} after call {i + 1} {labels[i]} on its ancestor")
                break
    if late:
        out.append(Violation("PLN-4", f"groups must be applied inner first; sharded {short(late, 4)}"))
    root_calls = [k for k, (roots, _) in enumerate(calls) if any(r is model for r in roots)]
    if calls and not root_calls:
        out.append(Violation("PLN-4", f"the model's root is never sharded (last call: {labels[-1]})"))
    elif root_calls and root_calls[-1] != len(calls) - 1:
        k = root_calls[-1]
        out.append(Violation("PLN-4", f"the model's root is sharded by call {k + 1} of {len(calls)} ({labels[k]}), "
                                      f"not last; {labels[k + 1]} comes after it"))

    # PLN-2: a module managed by two groups
    group_of: dict[int, int] = {}
    twice = []
    for k, (managed, _params) in enumerate(groups):
        for m in managed:
            if id(m) in group_of:
                twice.append(f"{oracle.label(m)} (call {group_of[id(m)] + 1} {labels[group_of[id(m)]]} and call {k + 1} {labels[k]})")
            else:
                group_of[id(m)] = k
    if twice:
        out.append(Violation("PLN-2", f"modules reachable from two groups, managed twice: {short(twice, 4)}"))

    # PLN-1: a parameter registered by several modules, managed by a group that
    # not all of them are in (two groups, or one group and a module outside
    # it); one that every call reaching it ignores is in no group, a plain
    # tensor wherever it is used
    owners: dict[int, list] = {}
    params_by_id = {}
    for m in oracle.modules:
        for p in _own(m)[0]:
            owners.setdefault(id(p), []).append(m)
            params_by_id[id(p)] = p
    managing: dict[int, set] = {}
    for k, (_managed, params) in enumerate(groups):
        for p in params:
            managing.setdefault(id(p), set()).add(k)
    split = []
    for pid, mods in owners.items():
        by = managing.get(pid, set())
        if len(mods) < 2 or not by:
            continue
        if len(by) > 1 or {group_of.get(id(m)) for m in mods} != by:
            parts = [f"{oracle.label(m)}: {'call ' + str(group_of[id(m)] + 1) if id(m) in group_of else 'no group'}" for m in mods]
            split.append(f"{oracle.label(params_by_id[pid])} ({', '.join(parts)})")
    if split:
        out.append(Violation("PLN-1", f"tied parameters split across groups (shard their modules in one call, "
                                      f"fully_shard([a, b])): {short(split, 4)}"))

    # PLN-3: a trainable parameter in no group and not ignored
    in_group = {id(p) for _, params in groups for p in params}
    ignored_any = {id(p) for _, ign in calls for p in (ign or ())}
    owned_elsewhere = set()
    for r in replicate:
        owned_elsewhere |= {id(p) for p in r.parameters()}
    left = [name for name, p in model.named_parameters()
            if p.requires_grad and id(p) not in in_group and id(p) not in ignored_any and id(p) not in owned_elsewhere]
    if left:
        out.append(Violation("PLN-3", f"trainable parameters in no group and not ignored: {short(left)}"))
    return out


def check_trained(trainable, managed, ignored, owned_elsewhere, before, unreduced=()) -> list[Violation]:
    """PLN-3 and PLN-5 on the model the plan's step trains, as the plan left
    it: ``trainable`` its ``(name, parameter id)`` pairs that require a
    gradient; ``managed``, ``ignored`` and ``owned_elsewhere`` ids of the
    parameters some group holds, some call ignored and another API
    (``replicate``) owns; ``before`` the names the model had before the
    plan (:func:`check_plan` judges those, on the model as it was); and
    ``unreduced`` the names or ``fnmatch`` patterns the case says the
    framework reduces itself.

    PLN-3: a parameter the plan added after its calls (a LoRA adapter, a
    new head) in no group is trained but never sharded nor reduced.
    PLN-5: FSDP2 never reduces an ignored parameter, so a trainable one
    drifts apart on each rank unless the framework reduces it."""
    import fnmatch

    out: list[Violation] = []
    added = [name for name, pid in trainable
             if name not in before and pid not in managed and pid not in ignored and pid not in owned_elsewhere]
    if added:
        out.append(Violation("PLN-3", f"trainable parameters added after the plan's fully_shard calls are in no "
                                      f"group, so never sharded nor reduced: {short(added)} (add them before the "
                                      "fully_shard calls whose modules hold them)"))
    drifting = [name for name, pid in trainable if pid in ignored and pid not in managed
                and not any(fnmatch.fnmatchcase(name, pattern) for pattern in unreduced)]
    if drifting:
        out.append(Violation("PLN-5", f"trainable parameters in ignored_params, which FSDP2 never reduces, so each "
                                      f"rank trains its own copy: {short(drifting)} (freeze them, put them in a "
                                      "group, or name them in the case's unreduced=(...) if the framework "
                                      "reduces them itself)"))
    return out
