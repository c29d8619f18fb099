"""Traversal checkers (TRV). The oracle reads the generated spec and the
modules' child registries only — never an implementation's state storage."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from . import Violation, first_difference, short


@dataclass
class ExpectedTraversal:
    modules: list  # owning modules in order
    states: list  # states in order
    visit_order: list  # every module visited, pruned ones included


def _unique_children(module):
    # ``children()`` semantics: a module registered under two names is one child.
    seen = set()
    out = []
    for child in module._modules.values():
        if child is not None and id(child) not in seen:
            seen.add(id(child))
            out.append(child)
    return out


def dfs_preorder(root, prune=frozenset()):
    """Iterative ``root.modules()`` order; modules whose ``id`` is in ``prune``
    are visited but not entered. Safe for any depth."""
    order, seen, stack = [], set(), [root]
    while stack:
        module = stack.pop()
        if id(module) in seen:
            continue
        seen.add(id(module))
        order.append(module)
        if id(module) not in prune:
            stack.extend(reversed(_unique_children(module)))
    return order


def expected_traversal(tree) -> ExpectedTraversal:
    spec = tree.spec
    index = {id(m): i for i, m in enumerate(tree.modules)}
    pruned = {id(tree.modules[i]) for i in spec.replicate}
    visit = dfs_preorder(tree.root, pruned)
    modules, states, seen = [], [], set()
    for module in visit:
        if id(module) in pruned:
            continue
        sid = spec.state_of(index[id(module)])
        if sid is not None and sid not in seen:
            seen.add(sid)
            states.append(tree.states[sid])
            modules.append(module)
    return ExpectedTraversal(modules, states, visit)


def check_states_with_modules(tree, states, modules, expected=None) -> list[Violation]:
    """TRV-1..5 for one ``states_with_modules`` result."""
    exp = expected or expected_traversal(tree)
    label = tree.labels
    out: list[Violation] = []

    ids = [id(s) for s in states]
    counts = Counter(ids)
    dupes = sorted({tree.label(s) for s in states if counts[id(s)] > 1})
    if dupes:
        out.append(Violation("TRV-1", f"states {short(dupes)} are listed more than once"))

    if len(states) != len(modules):
        out.append(Violation("TRV-2", f"got {len(states)} states but {len(modules)} modules"))
    else:
        state_of_module = {id(m): tree.states.get(tree.spec.state_of(i)) for i, m in enumerate(tree.modules)}
        for pos, (s, m) in enumerate(zip(states, modules, strict=True)):
            owned = state_of_module.get(id(m))
            if owned is not s:
                out.append(
                    Violation("TRV-2", f"modules[{pos}]={tree.label(m)} does not own states[{pos}]={tree.label(s)}")
                )
                break
        first_owner = {id(s): m for s, m in zip(exp.states, exp.modules, strict=True)}
        for pos, (s, m) in enumerate(zip(states, modules, strict=True)):
            want = first_owner.get(id(s))
            if want is not None and want is not m and state_of_module.get(id(m)) is s:
                out.append(
                    Violation(
                        "TRV-2",
                        f"states[{pos}]={tree.label(s)} is paired with {tree.label(m)}, "
                        f"but the first owner reached is {tree.label(want)}",
                    )
                )
                break

    want_set, got_set = {id(s) for s in exp.states}, set(ids)
    missing = [tree.label(s) for s in exp.states if id(s) not in got_set]
    extra = [tree.label(s) for s in states if id(s) not in want_set]
    if missing or extra:
        out.append(
            Violation("TRV-4", f"expected the states {short(label(exp.states))}; missing {short(missing)}, unexpected {short(extra)}")
        )
    elif not dupes and [id(s) for s in states] != [id(s) for s in exp.states]:
        out.append(
            Violation(
                "TRV-3",
                f"expected DFS pre-order {short(label(exp.states))}, got {short(label(states))} "
                f"({first_difference(label(exp.states), label(states))})",
            )
        )
    if not tree.spec.replicate and not dupes and len(states) == len(modules):
        got_modules = [id(m) for m in modules]
        if got_modules != [id(m) for m in exp.modules]:
            out.append(
                Violation(
                    "TRV-5",
                    f"expected modules in root.modules() order {short(label(exp.modules))}, got {short(label(modules))}",
                )
            )
    return out


def check_handles(tree, handles, expected=None) -> list[Violation]:
    """TRV-6: the states' handles, flattened in state order."""
    exp = expected or expected_traversal(tree)
    index = {id(s): sid for sid, s in tree.states.items()}
    want = [tree.handles[index[id(s)]] for s in exp.states if index[id(s)] in tree.handles]
    if [id(h) for h in handles] != [id(h) for h in want]:
        return [
            Violation(
                "TRV-6",
                f"expected handles {short(tree.labels(want))}, got {short(tree.labels(handles))}",
            )
        ]
    return []


def check_root_states(tree, root_states, expected=None) -> list[Violation]:
    """TRV-7: exactly the traversal's states with ``_is_root``, in state order."""
    exp = expected or expected_traversal(tree)
    index = {id(s): sid for sid, s in tree.states.items()}
    want = [s for s in exp.states if index[id(s)] in tree.spec.root_states]
    if [id(s) for s in root_states] != [id(s) for s in want]:
        return [
            Violation(
                "TRV-7",
                f"expected root states {short(tree.labels(want))} (the traversal's states with _is_root, "
                f"in its order), got {short(tree.labels(root_states))}",
            )
        ]
    return []


def snapshot(tree) -> list:
    """Everything a traversal could mutate, per module: its ``__dict__`` entries
    and the contents of its registries (shallow, by identity)."""
    snap = []
    for module in tree.modules:
        entry = {}
        for key, value in module.__dict__.items():
            if isinstance(value, dict):
                entry[key] = ("dict", tuple((k, id(v)) for k, v in value.items()))
            else:
                entry[key] = ("obj", id(value), value if isinstance(value, (bool, int, str, type(None))) else None)
        snap.append(entry)
    state_view = [(sid, tuple(sorted((k, id(v)) for k, v in _attrs(s).items()))) for sid, s in sorted(tree.states.items())]
    return [snap, state_view]


def _spans(indices, prefix: str = "m") -> str:
    """``m0-m3, m7``: every index, runs written as spans, so that a message
    names every module of a large tree exactly and stays short."""
    runs: list[list[int]] = []
    for i in sorted(indices):
        if runs and i == runs[-1][-1] + 1:
            runs[-1].append(i)
        else:
            runs.append([i])
    return ", ".join(f"{prefix}{r[0]}" if len(r) == 1 else f"{prefix}{r[0]}-{prefix}{r[-1]}" for r in runs)


def _changes(before: dict, after: dict) -> tuple:
    return (
        tuple(sorted(set(after) - set(before))),
        tuple(sorted(set(before) - set(after))),
        tuple(sorted(k for k in after if k in before and after[k] != before[k])),
    )


def check_unmutated(tree, before) -> list[Violation]:
    """TRV-9: ``before`` is a :func:`snapshot` taken before the traversal.

    The message names every changed module and state and every attribute
    added, removed or changed on each (those with the same change share a
    clause): traversals that mutate differently never read alike, so a
    known bug that adds one attribute explains exactly that change."""
    after = snapshot(tree)
    if after == before:
        return []
    clauses = []
    states_before, states_after = (dict(before[1]), dict(after[1]))
    for what, prefix, pairs in (
        ("modules", "m", [(i, b, a) for i, (b, a) in enumerate(zip(before[0], after[0], strict=True))]),
        ("FSDP states", "s", [(sid, dict(states_before.get(sid, ())), dict(states_after.get(sid, ())))
                               for sid in sorted(set(states_before) | set(states_after))]),
    ):
        by_change: dict[tuple, list] = {}
        for i, b, a in pairs:
            change = _changes(b, a)
            if any(change):
                by_change.setdefault(change, []).append(i)
        for change, where in by_change.items():
            parts = [f"{verb} {list(keys)}" for verb, keys in zip(("added", "removed", "changed"), change, strict=True) if keys]
            clauses.append(f"{what} {_spans(where, prefix)}: {', '.join(parts)}")
    return [Violation("TRV-9", "the traversal changed " + "; ".join(clauses))]


def _attrs(obj) -> dict:
    if hasattr(obj, "__dict__"):
        return dict(vars(obj))
    slots = [n for cls in type(obj).__mro__ for n in getattr(cls, "__slots__", ()) if n != "__weakref__"]
    return {n: getattr(obj, n, None) for n in slots}


def diff_against_reference(ref_tree, ref_traversal, tree, traversal) -> list[Violation]:
    """Compare two builds of one spec by labels: the implementation's results
    against the reference implementation's."""
    out = []
    r_states, r_modules = ref_traversal.states_with_modules(ref_tree.root)
    g_states, g_modules = traversal.states_with_modules(tree.root)
    r_s, g_s = ref_tree.labels(r_states), tree.labels(g_states)
    if sorted(set(r_s)) != sorted(set(g_s)):
        out.append(Violation("TRV-4", f"reference lists states {short(r_s)}, implementation {short(g_s)}"))
    elif len(g_s) != len(set(g_s)):
        out.append(Violation("TRV-1", f"implementation lists {short(g_s)}, with repeats (reference {short(r_s)})"))
    elif r_s != g_s:
        out.append(Violation("TRV-3", f"reference order {short(r_s)}, implementation {short(g_s)}"))
    elif ref_tree.labels(r_modules) != tree.labels(g_modules):
        out.append(
            Violation("TRV-2", f"reference owners {short(ref_tree.labels(r_modules))}, implementation {short(tree.labels(g_modules))}")
        )
    r_h, g_h = ref_tree.labels(ref_traversal.handles(ref_tree.root)), tree.labels(traversal.handles(tree.root))
    if r_h != g_h:
        out.append(Violation("TRV-6", f"reference handles {short(r_h)}, implementation {short(g_h)}"))
    r_r, g_r = ref_tree.labels(ref_traversal.root_states(ref_tree.root)), tree.labels(traversal.root_states(tree.root))
    if r_r != g_r:
        out.append(Violation("TRV-7", f"reference root states {short(r_r)}, implementation {short(g_r)}"))
    return out
