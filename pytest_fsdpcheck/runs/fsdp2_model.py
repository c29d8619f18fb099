"""FS2-9's model, and where its parts sit: the model spec and its
``fully_shard`` calls drawn from a seed (:func:`end_to_end_model`), the
computing modules built in its shape (:class:`Block`, :func:`build_model`),
the oracle's expectation for it (:func:`oracle`, from
:mod:`pytest_fsdpcheck.checks.fsdp2`), and the index and label queries the
control and the step under test share (a copy's modules by the base's
indices, each parameter's oracle label, the grouped call's modules).

Nothing here starts a process group or calls ``fully_shard``: what a rank
does with the model is :mod:`pytest_fsdpcheck.runs.fsdp2_run`'s.
"""

from __future__ import annotations

import random

import torch
from torch import nn

from ..checks.fsdp2 import expected_managed, expected_states
from ..generators.fsdp2 import BuiltFsdp2, Fsdp2Spec, ignored_parameters
from ..generators.trees import BuiltTree, TreeSpec

#: the square weights' widths drawn (by the seed): odd and no multiple of
#: 3, so neither world FS2-9 runs (2 and 3 ranks) divides them and the
#: last rank's shard is padded (7 rows: 4 + 3 on two ranks, 3 + 3 + 1 on three)
WIDTHS = (5, 7)
#: the root's gate: fewer rows than three ranks, so the third holds none
GATE_ROWS = 2


def model_width(seed: int = 0) -> int:
    """The width of :func:`build_model`'s square weights for ``seed``."""
    return WIDTHS[random.Random(f"width-{seed}").randrange(len(WIDTHS))]


def end_to_end_model(seed: int = 0) -> tuple[Fsdp2Spec, tuple[tuple[int, ...], ...]]:
    """A model spec and its ``fully_shard`` calls (inner groups first), drawn
    from ``seed``. Every draw holds: a nested group (its own call, with
    one to three children below it, some with buffers); a two-module group
    ``[a, b]`` where ``b`` ties ``a``'s weight; a module with one of two
    weights ignored, above a module whose only weight is ignored and which
    has no buffer (the ignore rule drops it); a module whose only weight is
    ignored but which holds a buffer (managed, with no parameter), sharing
    a child with the root (one module under two parents in the root's
    group); and the root's group last. The root's children come in a drawn order, and the
    two-module group is given in a drawn order."""
    rng = random.Random(seed)
    children: list[list[int]] = [[]]
    params, buffers, ignored = [1], [0], set()

    def add(parent: int, n_params: int = 1, n_buffers: int = 0) -> int:
        children.append([])
        params.append(n_params)
        buffers.append(n_buffers)
        children[parent].append(len(children) - 1)
        return len(children) - 1

    def nested_group(parent):
        group = add(parent, rng.randint(1, 2))
        for _ in range(rng.randint(1, 3)):
            leaf = add(group, 1, rng.randint(0, 1))
            if rng.random() < 0.3:
                add(leaf)
        return ("group", group)

    def pair(parent):
        a = add(parent)
        for _ in range(rng.randint(0, 2)):
            add(a)
        return ("pair_a", a)

    def half_ignored(parent):
        kept = add(parent, 2)
        ignored.add((kept, 1))
        dropped = add(kept, 1)
        ignored.add((dropped, 0))
        if rng.random() < 0.5:
            add(kept)
        return ("half", kept)

    def buffer_only(parent):
        holder = add(parent, 1, 1)
        ignored.add((holder, 0))
        return ("buffer", holder)

    made = {}
    parts = [nested_group, pair, half_ignored, buffer_only]
    rng.shuffle(parts)
    for part in parts:
        kind, index = part(0)
        made[kind] = index
        if kind == "pair_a":
            made["pair_b"] = add(0)  # b right after a's subtree: a sibling below the root
    # a module registered twice in the root's group (below the root and
    # below the buffer holder): its weight shared by two parents, walked once
    shared = add(0)
    children[made["buffer"]].append(shared)
    a, b = made["pair_a"], made["pair_b"]
    pair_call = (a, b) if rng.random() < 0.5 else (b, a)
    tree = TreeSpec(children=tuple(tuple(c) for c in children), params=tuple(params), tied=((a, b),))
    spec = Fsdp2Spec(tree=tree, roots=(0,), groups=frozenset({made["group"]}), ignored=frozenset(ignored),
                     buffers=tuple(buffers))
    return spec, ((made["group"],), pair_call, (0,))


class Block(nn.Module):
    """``y = tanh(y @ w)`` for each own weight, then ``y + child(y)`` per
    child. Defined outside torch so Dynamo compiles its frames.

    The own computation is a frame of its own: a child's call runs FSDP2's
    hooks, which Dynamo does not trace (``_dynamo_disable``), and a graph
    break inside the loop over children makes Dynamo skip that whole frame;
    ``mix`` is compiled either way."""

    def mix(self, x):
        y = x
        seen = self.__dict__.get("_fsdpcheck_seen")  # set for the forward after the step only (eager)
        if seen is not None:
            seen.update((name, w.detach().float().cpu().clone()) for name, w in self._parameters.items())
        for weight in self._parameters.values():
            if weight.shape[0] == weight.shape[-1]:
                y = torch.tanh(y @ weight)
            else:  # the root's gate: rows fewer than the width
                y = y * (1 + weight.sum(0))
        return y

    def forward(self, x):
        y = self.mix(x)
        for child in self._modules.values():
            y = y + child(y)
        # the root calls a module of the grouped call fully_shard([a, b])
        # once more, after the group's forward ended (pytorch#183702: a
        # grouped module reused later in the same step); not a child, so no
        # walk sees it twice
        for again in self.__dict__.get("_fsdpcheck_again", ()):
            y = y + again(y)
        return y


def build_model(spec: Fsdp2Spec, seed: int = 0) -> BuiltFsdp2:
    """Computing modules in the spec's shape (the oracle reads them as it
    reads :func:`~pytest_fsdpcheck.generators.fsdp2.build_fsdp2`'s)."""
    generator = torch.Generator().manual_seed(seed)
    width = model_width(seed)
    tree = spec.tree
    modules = [Block() for _ in range(tree.size)]
    for parent, kids in enumerate(tree.children):
        for k, child in enumerate(kids):
            modules[parent].add_module(f"c{k}", modules[child])
    for i, count in enumerate(tree.params):
        for p in range(count):
            weight = torch.randn(width, width, generator=generator) / width**0.5
            modules[i].register_parameter(f"w{p}", nn.Parameter(weight))
    # dims 0 no world divides: the weights' (padded last shard) and the gate's (an empty one at 3 ranks)
    modules[0].register_parameter("gate", nn.Parameter(torch.randn(GATE_ROWS, width, generator=generator) / 4))
    for a, b in tree.tied:
        modules[b].register_parameter("tied", next(iter(modules[a]._parameters.values())))
    for i, count in enumerate(spec.buffers):
        for k in range(count):
            modules[i].register_buffer(f"b{k}", torch.zeros(k + 1))
    modules[0].__dict__["_fsdpcheck_again"] = [modules[a] for a, _ in tree.tied]
    ignored = ignored_parameters(spec, modules)
    built_tree = BuiltTree(tree, modules[0], modules)
    return BuiltFsdp2(spec, built_tree, tuple(modules[i] for i in spec.roots), ignored)


def oracle(built: BuiltFsdp2, calls) -> dict:
    """Per call, the modules and parameters it must manage and shard
    (labels), and every module that must carry the Dynamo flags."""
    done: set[int] = set()
    per_call, flagged = [], set()
    for call in calls:
        managed = expected_managed(built, groups=done | set(call), roots=list(call))
        params, _, _ = expected_states(built, managed)
        per_call.append({"roots": [f"m{i}" for i in call], "modules": [f"m{i}" for i in managed], "params": built.labels(params)})
        flagged.update(managed)
        done |= set(call)
    ignored = sorted(built.labels(built.ignored or ()))
    return {"calls": per_call, "flagged": sorted(f"m{i}" for i in flagged), "ignored": ignored}


def _modules_in_order(root) -> list:
    seen, order, stack = set(), [], [root]
    while stack:
        m = stack.pop()
        if id(m) in seen:
            continue
        seen.add(id(m))
        order.append(m)
        stack.extend(reversed([c for c in m._modules.values() if c is not None]))
    return order


def _labels_like(model, base: BuiltFsdp2) -> dict:
    """``(id(module), name) -> label`` for a copy of the base model: module
    ``i`` of the copy is the one at the same registration path."""
    labels = {}
    for copy_module, base_module in zip(_modules_in_order(model), _modules_in_order(base.modules[0]), strict=True):
        for name, p in base_module._parameters.items():
            if p is not None:
                labels[(id(copy_module), name)] = base.label(p)
    return labels


def _like_base(model, base: BuiltFsdp2) -> list:
    """The modules of ``model`` (a copy of the base model) by the base's indices."""
    by_path = dict(zip((id(m) for m in _modules_in_order(base.modules[0])), _modules_in_order(model), strict=True))
    return [by_path[id(m)] for m in base.modules]


def _pair_call(base: BuiltFsdp2) -> set[int]:
    """The roots of the grouped call ``fully_shard([a, b])`` (the tied pair)."""
    return {i for pair in base.spec.tree.tied for i in pair}


def _labels_of_group(base: BuiltFsdp2) -> list[str]:
    """The labels of the parameters the grouped call's modules hold."""
    return [base.label(p) for i in _tied_group(base) for p in base.modules[i]._parameters.values() if p is not None]


def _tied_group(base: BuiltFsdp2) -> list[int]:
    """The modules of the grouped call that holds the tied pair ``[a, b]``
    and what it manages below them (a's children), by index."""
    out = []
    for a, b in base.spec.tree.tied:
        stack = [a, b]
        while stack:
            i = stack.pop()
            if i not in out:
                out.append(i)
                stack.extend(base.spec.tree.children[i])
    return out
