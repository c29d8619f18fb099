"""Exec-order checkers (EXO-1..8): pure functions returning violations.

The expected values come from the oracles in ``exec_oracle`` (an eager run
observed with hooks and a torch-function mode) and from an unpatched trace,
never from an implementation's recording code.
"""

from __future__ import annotations

from . import Violation, first_difference, short
from .exec_oracle import ObservedExec, graph_signature, observe_eager  # noqa: F401

PATCHED = ("call_module", "create_proxy")


# ------------------------------------------------------------------ EXO-1


def tracer_snapshot(tracer) -> dict:
    """What EXO-1 compares: the instance ``__dict__`` (name -> identity) and
    the patched methods as attribute lookup resolves them."""
    return {
        "dict": {name: id(value) for name, value in vars(tracer).items()},
        "resolved": {name: getattr(tracer, name) for name in PATCHED},
    }


def check_tracer_restored(before: dict, tracer, when: str) -> list[Violation]:
    """``call_module``/``create_proxy`` resolve to the originals again."""
    out = []
    for name in PATCHED:
        now = getattr(tracer, name)
        if now != before["resolved"][name]:
            out.append(
                Violation(
                    "EXO-1",
                    f"after the context exited {when}, expected tracer.{name} to be the original {before['resolved'][name]!r}, got {now!r}",
                )
            )
    return out


def _left(value, tracer, name: str) -> str:
    """What a name left on the tracer's ``__dict__`` holds, in words that
    tell leftovers apart: the class's own method bound to the tracer (a
    restore by assignment), a function or another object (a patch never
    undone, or something else put there)."""
    import inspect

    if inspect.ismethod(value):
        owner = value.__self__
        own = owner is tracer and value.__func__ is getattr(type(tracer), name, None)
        if own:
            return f"{name}=the tracer's own bound method {type(tracer).__name__}.{name}"
        return f"{name}=a bound method {type(owner).__name__}.{value.__func__.__name__} of {'the tracer' if owner is tracer else 'another object'}"
    if inspect.isfunction(value):
        return f"{name}=a function {value.__name__}, not the tracer's method"
    return f"{name}=a {type(value).__name__}"


def check_tracer_clean(before_plain: dict, tracer, when: str) -> list[Violation]:
    """Nothing left on the instance: its ``__dict__`` has the same names as
    after an unpatched trace, and the patched names hold what they held.
    What an extra or replaced name holds is part of the message, so each
    way of leaving the tracer dirty reads differently."""
    now = {name: id(value) for name, value in vars(tracer).items()}
    expected = before_plain["dict"]
    added = sorted(set(now) - set(expected))
    removed = sorted(set(expected) - set(now))
    changed = sorted(n for n in PATCHED if n in now and n in expected and now[n] != expected[n])
    if added or removed or changed:
        left = vars(tracer)
        return [
            Violation(
                "EXO-1",
                f"after the context exited {when}, expected the tracer's __dict__ to hold what an unpatched trace leaves, "
                f"got extra attributes {[_left(left[n], tracer, n) for n in added]}, missing {removed}, "
                f"replaced {[_left(left[n], tracer, n) for n in changed]}",
            )
        ]
    return []


# ------------------------------------------------------------------ EXO-2..5


def _labels(built, items):
    return [built.label(m) for m in items]


def _param_labels(root):
    names = {}
    for name, param in root.named_parameters():
        names.setdefault(id(param), name)
    return lambda params: [names.get(id(p), "<not a root parameter>") for p in params]


def check_module_order(built, info, observed: ObservedExec) -> list[Violation]:
    got, expected = list(info.module_forward_order), observed.module_forward_order
    if len(got) == len(expected) and all(a is b for a, b in zip(got, expected, strict=True)):
        return []
    e, g = _labels(built, expected), _labels(built, got)
    return [
        Violation(
            "EXO-2",
            f"expected module forward order {short(e)}, got {short(g)} ({first_difference(e, g)})",
        )
    ]


def check_param_order(built, info, observed: ObservedExec) -> list[Violation]:
    label = _param_labels(built.root)
    got, expected = list(info.param_forward_order), observed.param_first_use
    out = []
    ids = [id(p) for p in got]
    if len(set(ids)) != len(ids):
        dupes = sorted({n for n in label(got) if label(got).count(n) > 1})
        out.append(
            Violation(
                "EXO-3",
                f"expected each parameter once (first use only), got repeats of {short(dupes)}",
            )
        )
    used = {id(p) for p in expected}
    unused = [p for p in got if id(p) not in used]
    if unused:
        out.append(
            Violation(
                "EXO-3",
                f"expected unused parameters to be absent, got {short(label(unused))} in the order",
            )
        )
    if not out and not (
        len(got) == len(expected) and all(a is b for a, b in zip(got, expected, strict=True))
    ):
        e, g = label(expected), label(got)
        out.append(
            Violation(
                "EXO-3",
                f"expected parameter first-use order {short(e)} (eager oracle), got {short(g)} ({first_difference(e, g)})",
            )
        )
    return out


def _entry_repr(built, entry, label):
    module, named = entry
    return f"({built.label(module)}, {[n for n, _ in named]})"


def _same_entry(a, b) -> bool:
    (ma, na), (mb, nb) = a, b
    return (
        ma is mb
        and len(na) == len(nb)
        and all(x[0] == y[0] and x[1] is y[1] for x, y in zip(na, nb, strict=True))
    )


def check_usage_infos(built, info, observed: ObservedExec) -> list[Violation]:
    label = _param_labels(built.root)
    got, expected = info.module_to_param_usage_infos, observed.usage
    got_keys, expected_keys = {id(m) for m in got}, {id(m) for m in expected}
    if got_keys != expected_keys:
        missing = [built.label(m) for m in expected if id(m) not in got_keys]
        extra = [built.label(m) for m in got if id(m) not in expected_keys]
        return [
            Violation(
                "EXO-4",
                f"expected usage infos for exactly the called modules (and the root), got missing {missing}, extra {extra}",
            )
        ]
    by_id = {id(m): entries for m, entries in got.items()}
    for module, want in expected.items():
        have = list(by_id[id(module)])
        if len(have) != len(want) or not all(
            _same_entry(a, b) for a, b in zip(have, want, strict=True)
        ):
            w = [_entry_repr(built, e, label) for e in want]
            h = [_entry_repr(built, e, label) for e in have]
            return [
                Violation(
                    "EXO-4",
                    f"expected usage infos of {built.label(module)} to be {short(w, 6)}, got {short(h, 6)} ({first_difference(w, h)})",
                )
            ]
    return []


def check_visited(built, info) -> list[Violation]:
    label = _param_labels(built.root)
    order_ids = {id(p) for p in info.param_forward_order}
    visited_ids = {id(p) for p in info.visited_params}
    out = []
    if order_ids != visited_ids:
        only_v = [p for p in info.visited_params if id(p) not in order_ids]
        only_o = [p for p in info.param_forward_order if id(p) not in visited_ids]
        out.append(
            Violation(
                "EXO-5",
                f"expected the visited set to equal the ordered parameters, got {short(label(only_v))} only visited and {short(label(only_o))} only ordered",
            )
        )
    # A module's own entries (direct uses, a leaf's call) are uses; a child
    # call's entry lists all the child's parameters, used or not (EXO-4).
    missing = []
    for module, entries in info.module_to_param_usage_infos.items():
        for entry_module, named in entries:
            if entry_module is module:
                missing += [name for name, p in named if id(p) not in order_ids]
    if missing:
        out.append(
            Violation(
                "EXO-5",
                f"expected every parameter of a module's own usage entries in the parameter order, got {short(sorted(set(missing)))} missing",
            )
        )
    return out


# ------------------------------------------------------------------ EXO-6, EXO-7


def check_same_graph(plain_graph, patched_graph) -> list[Violation]:
    expected, got = graph_signature(plain_graph), graph_signature(patched_graph)
    if expected == got:
        return []
    return [
        Violation(
            "EXO-6",
            f"expected the patched tracer's graph to equal the unpatched one ({len(expected)} nodes), got {len(got)} nodes ({first_difference(expected, got)})",
        )
    ]


def check_subclass_overrides(
    plain_counts: dict | None, patched_counts: dict | None
) -> list[Violation]:
    """A tracer subclass's own ``call_module``/``create_proxy`` still run,
    as often as in an unpatched trace."""
    if plain_counts is None or plain_counts == patched_counts:
        return []
    return [
        Violation(
            "EXO-7",
            f"expected the tracer subclass's own overrides to run as in an unpatched trace {plain_counts}, got {patched_counts}",
        )
    ]


def as_exo7(violations: list[Violation], config: str) -> list[Violation]:
    """Under a tracer subclass or ``concrete_args``, any wrong recording is EXO-7."""
    return [
        v if v.invariant == "EXO-7" else Violation("EXO-7", f"with {config}: {v}")
        for v in violations
    ]


# ------------------------------------------------------------------ EXO-8
