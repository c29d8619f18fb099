"""FSDP2 checkers (FS2). The oracle works on the spec's indices (children,
marks, groups) and on the built modules' own parameter/buffer registries,
never on an implementation's storage; everything is iterative."""

from __future__ import annotations

import contextlib
import gc
import re
import weakref
from collections import Counter

from . import Violation, error_of, first_difference, one_line, short
from .annotation import MANAGED, ORIG_PARAMS, read_flag

# --- the oracle -------------------------------------------------------------------


#: Not run state: a table derived from one tree alone (kept while the same
#: tree object is asked about), the same in every session that asks.
_KIDS: dict = {}


def _kids(spec, i) -> list[int]:
    """Unique children of module ``i`` (a table per spec, built once)."""
    table = _KIDS.get(id(spec.tree))
    if table is None or table[0] is not spec.tree:
        _KIDS.clear()
        table = _KIDS[id(spec.tree)] = (spec.tree, [list(dict.fromkeys(c)) for c in spec.tree.children])
    return table[1][i]


def _below(spec, starts) -> set[int]:
    seen, stack = set(), [c for s in starts for c in _kids(spec, s)]
    while stack:
        i = stack.pop()
        if i not in seen:
            seen.add(i)
            stack.extend(_kids(spec, i))
    return seen


def effective_roots(spec) -> list[int]:
    """The group's roots as ``fully_shard`` documents them: a module below
    another given module is part of that one's subtree, not a root."""
    roots = list(dict.fromkeys(spec.roots))
    below = _below(spec, roots) if len(roots) > 1 else set()
    return [r for r in roots if r not in below]


def _own(module):
    params = list(dict.fromkeys(p for p in module._parameters.values() if p is not None))
    buffers = [b for b in module._buffers.values() if b is not None]
    return params, buffers


def walk_order(spec, groups=None, roots=None) -> list[int]:
    """FS2-1/2/5: post-order from each root, registration order, each once,
    pruned at replicate marks and at non-root modules with their own group."""
    groups = spec.groups if groups is None else groups
    roots = effective_roots(spec) if roots is None else roots
    root_set = set(roots)

    def pruned(i):
        return i in spec.tree.replicate or (i in groups and i not in root_set)

    order, done = [], set()
    for r in roots:
        if r in done or pruned(r):
            continue
        done.add(r)
        stack = [(r, 0)]
        while stack:
            i, k = stack.pop()
            kids = _kids(spec, i)
            while k < len(kids) and (kids[k] in done or pruned(kids[k])):
                k += 1
            if k < len(kids):
                stack.append((i, k + 1))
                done.add(kids[k])
                stack.append((kids[k], 0))
            else:
                order.append(i)
    return order


def dropped_by_ignore_rule(built) -> set[int]:
    """FS2-3: modules (indices) with no buffers, every own parameter ignored
    and every child dropped too; empty when ignored params are ``None``."""
    if built.ignored is None:
        return set()
    ignored = {id(p) for p in built.ignored}
    spec, mods = built.spec, built.modules
    n = spec.size
    own_ok = []
    for m in mods:
        params, buffers = _own(m)
        own_ok.append(not buffers and all(id(p) in ignored for p in params))
    # children have higher indices: one pass from the leaves up decides all
    drop = [False] * n
    for i in range(n - 1, -1, -1):
        drop[i] = own_ok[i] and all(drop[c] for c in _kids(spec, i))
    return {i for i in range(n) if drop[i]}


def expected_managed(built, groups=None, roots=None) -> list[int]:
    dropped = dropped_by_ignore_rule(built)
    return [i for i in walk_order(built.spec, groups, roots) if i not in dropped]


def expected_states(built, module_indices) -> tuple[list, list, tuple | None]:
    """FS2-4: ``(params, buffers, scalar)`` for the given modules; ``scalar``
    is ``(module index, name)`` of the first non-ignored scalar parameter."""
    ignored = {id(p) for p in built.ignored} if built.ignored is not None else set()
    params, buffers, seen, seen_b, scalar = [], [], set(), set(), None
    for i in module_indices:
        m = built.modules[i]
        names = {}
        for name, p in m._parameters.items():
            if p is not None:
                names.setdefault(id(p), name)
        for p in _own(m)[0]:
            if id(p) in ignored or id(p) in seen:
                continue
            if p.dim() == 0 and scalar is None:
                scalar = (i, names[id(p)])
            seen.add(id(p))
            params.append(p)
        for b in _own(m)[1]:
            if id(b) not in seen_b:
                seen_b.add(id(b))
                buffers.append(b)
    return params, buffers, scalar


# --- checks -------------------------------------------------------------------------


def check_managed(built, got, invariant_order: str = "FS2-1") -> list[Violation]:
    """FS2-1 (order, each once), FS2-2 (pruning), FS2-3 (ignore rule), FS2-5
    (several roots) for one ``managed_modules`` result."""
    spec = built.spec
    index = {id(m): i for i, m in enumerate(built.modules)}
    got_i = [index.get(id(m), -1) for m in got]
    walk_list = walk_order(spec)
    dropped = dropped_by_ignore_rule(built)
    want = [i for i in walk_list if i not in dropped]
    walk = set(walk_list)
    multi = len(set(spec.roots)) > 1
    lab = [f"m{i}" for i in got_i]
    wlab = [f"m{i}" for i in want]
    out: list[Violation] = []

    counts = Counter(got_i)
    dupes = sorted(f"m{i}" for i, c in counts.items() if c > 1)
    if dupes:
        inv = "FS2-5" if multi else "FS2-1"
        out.append(Violation(inv, f"modules {short(dupes)} are listed more than once (expected {short(wlab)}, got {short(lab)})"))

    want_set, got_set = set(want), set(got_i)
    extra = [i for i in dict.fromkeys(got_i) if i not in want_set]
    missing = [i for i in want if i not in got_set]
    ignore_extra = [f"m{i}" for i in extra if i in walk and i in dropped]
    walk_extra = [f"m{i}" for i in extra if i not in walk]
    if ignore_extra:
        out.append(Violation("FS2-3", f"modules {short(ignore_extra)} should be dropped by the ignore rule, but were managed"))
    own_only = set()
    if built.ignored is not None:
        ignored = {id(p) for p in built.ignored}
        for i in missing:
            params, buffers = _own(built.modules[i])
            if not buffers and all(id(p) in ignored for p in params):
                own_only.add(i)
    ignore_missing = [f"m{i}" for i in missing if i in own_only]
    walk_missing = [f"m{i}" for i in missing if i not in own_only]
    if ignore_missing:
        out.append(
            Violation("FS2-3", f"modules {short(ignore_missing)} were dropped, but a child of each is kept by the ignore rule")
        )
    if walk_extra or walk_missing:
        inv = "FS2-5" if multi else "FS2-2"
        out.append(
            Violation(
                inv,
                f"expected managed modules {short(wlab)}; unexpected {short(walk_extra)} "
                f"(below a replicate module, another group{', or a second root' if multi else ''}), missing {short(walk_missing)}",
            )
        )
    if not out and got_i != want:
        out.append(
            Violation(invariant_order, f"expected post-order {short(wlab)}, got {short(lab)} ({first_difference(wlab, lab)})")
        )
    return out


def check_states(built, module_indices, call) -> list[Violation]:
    """FS2-4: ``call()`` returns ``(params, buffers)`` for those modules."""
    params, buffers, scalar = expected_states(built, module_indices)
    try:
        got_p, got_b = call()
    except ValueError as exc:
        if scalar is None:
            return [Violation("FS2-4", f"managed_states raised ValueError without a scalar parameter: {exc}")]
        if scalar[1] not in str(exc):
            return [Violation("FS2-4", f"the scalar-parameter error does not name {scalar[1]!r} (m{scalar[0]}): {exc}")]
        return []
    if scalar is not None:
        return [Violation("FS2-4", f"scalar parameter m{scalar[0]}.{scalar[1]} was accepted, expected a ValueError naming it")]
    out = []
    for what, want, got in (("parameters", params, got_p), ("buffers", buffers, got_b)):
        w, g = built.labels(want), built.labels(got)
        if [id(t) for t in got] != [id(t) for t in want]:
            out.append(Violation("FS2-4", f"expected {what} {short(w)}, got {short(g)} ({first_difference(w, g)})"))
    return out


# --- real fully_shard (FS2-7, FS2-8) ---------------------------------------------------


@contextlib.contextmanager
def world_of_one():
    """A gloo process group of one rank and its 1-D CPU mesh, destroyed
    after. A torch without device meshes (before 2.2) has no fully_shard to
    give one to: the mesh is None there, for areas that need none (the
    reference's)."""
    import torch.distributed as dist

    try:
        from torch.distributed.device_mesh import init_device_mesh
    except ImportError:
        init_device_mesh = None
    dist.init_process_group("gloo", rank=0, world_size=1, store=dist.HashStore())
    try:
        yield None if init_device_mesh is None else init_device_mesh("cpu", (1,))
    finally:
        dist.destroy_process_group()


def group_calls(spec) -> list[tuple[int, ...]]:
    """The ``fully_shard`` calls that make the spec's groups, inner first, then
    the spec's own group."""
    return [(g,) for g in sorted(spec.groups, reverse=True)] + [tuple(spec.roots)]


def managed_and_conflicts(built):
    """Per call: its managed modules (indices), and the conflicts the call
    must reject: ``(kind, index, param name)`` for a root an earlier call
    already gave a group of its own (``"root"``, whether or not that group
    manages anything under it: fully_shard applies to a module once), then
    for a module or parameter an earlier call manages. Stops at the first
    call with a conflict."""
    spec = built.spec
    done: set[int] = set()  # groups applied
    managed_by: dict[int, int] = {}
    param_owner: dict[int, int] = {}
    ignored = {id(p) for p in built.ignored} if built.ignored is not None else set()
    plan = []
    for call_no, call in enumerate(group_calls(spec)):
        roots = list(dict.fromkeys(call))
        if len(roots) > 1:
            below = _below(spec, roots)
            roots = [r for r in roots if r not in below]
        managed = expected_managed(built, groups=done | set(roots), roots=roots)
        conflicts = [("root", r, None) for r in roots if r in done]
        for i in managed:
            if i in managed_by:
                conflicts.append(("module", i, None))
        if not conflicts:
            for i in managed:
                for name, p in built.modules[i]._parameters.items():
                    if p is not None and id(p) not in ignored and id(p) in param_owner:
                        conflicts.append(("parameter", i, name))
        plan.append((call, managed, conflicts))
        if conflicts:
            break
        for i in managed:
            managed_by.setdefault(i, call_no)
            for p in _own(built.modules[i])[0]:
                if id(p) not in ignored:
                    param_owner.setdefault(id(p), call_no)
        done |= set(roots)
    return plan


def names_for(built, call, index, param=None, limit: int = 64) -> set[str]:
    """Qualified names of module ``index`` below the call's roots (every
    path, up to ``limit``), and ``roots[i]`` for a root; ``.param`` appended."""
    spec = built.spec
    names, queue, head = set(), [], 0
    for k, r in enumerate(call):
        queue.append((f"roots[{k}]", r))
    while head < len(queue) and len(names) < limit and len(queue) < 4096:
        path, i = queue[head]
        head += 1
        if i == index:
            names.add(path)
        for k, c in enumerate(spec.tree.children[i]):
            queue.append((f"{path}.c{k}", c))
    # a bare attribute path (without the roots[i] prefix) names it as well
    names |= {n.split(".", 1)[1] for n in names if "." in n}
    if param is not None:
        names = {f"{n}.{param}" for n in names}
    return names


def names_it(text: str, name: str) -> bool:
    """``name`` (a dotted path such as ``roots[0].c4.w0``) appears in
    ``text`` as a whole: not inside a longer identifier, number or address
    (``c4`` is not named by ``object at 0x7f1c4e2a9d10``), nor as the head
    or tail of a longer dotted path (``c4`` is not ``c0.c4`` or ``c4.c1``)."""
    return re.search(rf"(?<![\w.\]]){re.escape(name)}(?![\w\[]|\.\w)", text) is not None


def _is_clear(exc) -> bool:
    return isinstance(exc, (ValueError, RuntimeError)) and type(exc).__name__ not in ("NotImplementedError",)


def check_fully_shard(built, area, mesh) -> list[Violation]:
    """FS2-7 and FS2-8: apply the groups by ``area.annotate`` (inner first,
    then the spec's roots) and check flags, structure and conflicts."""
    before = structure(built)
    plan = managed_and_conflicts(built)
    for call, _managed, conflicts in plan:
        roots = tuple(built.modules[i] for i in call)
        try:
            area.annotate(roots, mesh, built.ignored)
        except Exception as exc:  # noqa: BLE001 - judged below
            if not conflicts:
                # the first line is the error; what follows is a module's repr,
                # which names the classes fully_shard swapped in (FSDPLinear)
                first = (str(exc).splitlines() or [""])[0]
                return [Violation("FS2-7", f"fully_shard{call_label(call)} raised {type(exc).__name__}: {one_line(exc)}",
                                  error=(type(exc).__name__, first), evidence=(type(exc).__name__, first))]
            kind, i, param = conflicts[0]
            names = set()
            for _kind, j, pn in conflicts:
                names |= names_for(built, call, j, pn)
            if not _is_clear(exc):
                return [Violation("FS2-8", f"fully_shard{call_label(call)} of a group sharing {kind} m{i}{'.' + param if param else ''} "
                                           "with an earlier group failed with an internal error, not a clear one naming it",
                                  detail=f"{type(exc).__name__}: {exc}", error=error_of(exc))]
            if not any(names_it(str(exc), n) for n in names):
                return [Violation("FS2-8", f"the error for the {kind} shared with an earlier group names none of "
                                           f"{short(sorted(names))}: {one_line(exc)}", evidence=(str(exc),))]
            return []
        if conflicts:
            kind, i, param = conflicts[0]
            return [Violation("FS2-8", f"fully_shard{call_label(call)} accepted {accepted(kind, i, param)}")]
    managed_all = set()
    for _, managed, _ in plan:
        managed_all.update(managed)
    out = []
    wrong = []
    for i, m in enumerate(built.modules):
        flags = (read_flag(m, MANAGED, None), read_flag(m, ORIG_PARAMS, None))
        want = (True, True) if i in managed_all else (None, None)
        if flags != want:
            wrong.append(f"m{i}={flags}")
    if wrong:
        out.append(Violation("FS2-7", f"flags (_is_fsdp_managed_module, _fsdp_use_orig_params) wrong on {short(wrong)}; "
                                      f"managed: {short(sorted(f'm{i}' for i in managed_all))}"))
    after = structure(built)
    if after != before:
        diff = [f"m{i}" for i, (a, b) in enumerate(zip(before, after, strict=True)) if a != b]
        out.append(Violation("FS2-7", f"structure changed (children, parameter or buffer names, training flag) on {short(diff)}"))
    return out


def check_fully_shard_released(holder: list, area, mesh) -> list[Violation]:
    """FS2-7 with the model's lifetime: :func:`check_fully_shard` on the one
    ``BuiltFsdp2`` in ``holder`` (taken out of it, so the caller keeps no
    reference), then the model dropped and the garbage collector run: every
    module must be freed. ``fully_shard`` may keep its state on the modules,
    never the modules anywhere else (torch 2.3-2.5's composable-state
    mapping held every module given a state for the life of the process,
    pytorch#139650). Judged only where the calls raised nothing: a caught
    exception's traceback may hold the model itself."""
    built = holder.pop()
    violations = check_fully_shard(built, area, mesh)
    if violations:
        return violations
    alive = [weakref.ref(m) for m in built.modules]
    del built
    gc.collect()
    kept = [f"m{i}" for i, ref in enumerate(alive) if ref() is not None]
    if kept:
        return [Violation("FS2-7", f"the model outlives its caller: {short(kept)} still alive after fully_shard's caller "
                                   "dropped it and the garbage collector ran (a module is held outside the model)")]
    return []


def accepted(kind, index, param=None) -> str:
    """What a call that raised nothing took on, for an FS2-8 message."""
    if kind == "root":
        return f"root m{index}, which already holds a group of its own (fully_shard applied to it twice, no error)"
    return f"{kind} m{index}{'.' + param if param else ''}, which an earlier group already manages (managed twice, no error)"


def call_label(call) -> str:
    return "(" + ", ".join(f"m{i}" for i in call) + ")"


def structure(built) -> list:
    """Per module: its children (identity), parameter and buffer names, ``training``."""
    return [
        (
            tuple((k, id(c)) for k, c in m._modules.items()),
            tuple(k for k, p in m._parameters.items() if p is not None),
            tuple(k for k, b in m._buffers.items() if b is not None),
            m.training,
        )
        for m in built.modules
    ]


#: FS2-12's tolerance, in bf16 epsilons of the control's largest entry: the
#: step and its control compute the same bf16 operations (measured equal on
#: torch 2.13), so this only allows a kernel's other summation order
FROZEN_STEP_EPS = 4


def check_frozen_step(got: dict, control: dict, torch_own: dict | None = None) -> list[Violation]:
    """FS2-12 on one case's records (``runs/frozen_step``): the step with
    ``fully_shard`` (``got``) raised nothing, its forward saw each frozen
    integer parameter in its own dtype, and its output and trainable
    gradients are the control's. ``torch_own``: the same step driven by
    torch's own walk in the same run, named beside a failure (a second
    opinion, never the verdict)."""
    import torch

    case = got["case"]
    out = []
    if control.get("seen") is not None and got.get("seen") not in (None, control["seen"]):
        dtype, values = got["seen"]
        out.append(Violation("FS2-12", f"{case}: the forward got the frozen integer parameter as {dtype} {values}, "
                                       f"not {control['seen'][0]} {control['seen'][1]}"))
    if "error" in got:
        kind, text = got["error"]
        if torch_own is None or torch_own.get("error") == got["error"]:
            beside = ", as torch's own walk does in the same run"
        else:
            beside = f"; torch's own walk: {_step_outcome(torch_own)}"
        out.append(Violation("FS2-12", f"{case}: fully_shard with mp_policy bf16 (reduced in fp32) and one step "
                                       f"raised {kind}: {text}{beside}", error=(kind, text)))
        return out
    eps = torch.finfo(torch.bfloat16).eps
    pairs = [("the output", got["output"], control["output"])]
    pairs += [(f"the gradient of {name}", got["grads"].get(name), grad) for name, grad in control["grads"].items()]
    for what, mine, theirs in pairs:
        if mine is None or theirs is None:
            if (mine is None) != (theirs is None):
                out.append(Violation("FS2-12", f"{case}: {what} is {'missing' if mine is None else 'present'}, "
                                               f"the control's {'present' if mine is None else 'missing'}"))
            continue
        if mine.shape != theirs.shape:
            out.append(Violation("FS2-12", f"{case}: {what} has shape {tuple(mine.shape)}, the control's "
                                           f"{tuple(theirs.shape)}"))
            continue
        tolerance = FROZEN_STEP_EPS * eps * max(1.0, theirs.abs().max().item())
        difference = (mine - theirs).abs().max().item() if mine.numel() else 0.0
        if not difference <= tolerance:  # a NaN difference fails too
            out.append(Violation("FS2-12", f"{case}: {what} differs from the control's by {difference:.3g} "
                                           f"(tolerance {tolerance:.3g}: {FROZEN_STEP_EPS} bf16 epsilons of its "
                                           "largest entry)"))
    return out


def _step_outcome(result: dict) -> str:
    if "error" in result:
        return f"raises {result['error'][0]}: {result['error'][1]}"
    return "runs the step"


#: FS2-14's fp32 step at one rank: FSDP2's reduction there only copies, so
#: the gradients are the control's but for the order of a sum or two
INPLACE_RTOL, INPLACE_ATOL = 1e-5, 1e-6


def check_inplace_output(got: dict, control: dict, torch_own: dict | None = None) -> list[Violation]:
    """FS2-14 on one case's records (``runs/inplace_output``): the step whose
    caller wrote into the view a group returned raised nothing, and its
    output and every gradient are the unsharded control's. ``torch_own``:
    the same step driven by torch's own walk, named beside a failure (a
    second opinion, never the verdict)."""
    case = got["case"]
    if "error" in got:
        kind, text = got["error"]
        if torch_own is None or torch_own.get("error") == got["error"]:
            beside = ", as torch's own walk does in the same run"
        else:
            beside = f"; torch's own walk: {_step_outcome(torch_own)}"
        return [Violation("FS2-14", f"{case}: an in-place add into the view a fully_shard group returned, then one "
                                    f"step, raised {kind}: {text}{beside}", error=(kind, text))]
    out = []
    pairs = [("the output", got["output"], control["output"])]
    pairs += [(f"the gradient of {name}", got["grads"].get(name), grad) for name, grad in control["grads"].items()]
    for what, mine, theirs in pairs:
        if mine is None or theirs is None or mine.shape != theirs.shape:
            if not (mine is None and theirs is None):
                out.append(Violation("FS2-14", f"{case}: {what} is {_shape_of(mine)}, the control's {_shape_of(theirs)}"))
            continue
        tolerance = INPLACE_ATOL + INPLACE_RTOL * (theirs.abs().max().item() if theirs.numel() else 0.0)
        difference = (mine - theirs).abs().max().item() if mine.numel() else 0.0
        if not difference <= tolerance:  # a NaN difference fails too
            out.append(Violation("FS2-14", f"{case}: {what} differs from the control's by {difference:.3g} (tolerance "
                                           f"{tolerance:.3g}: {INPLACE_RTOL:g} of its largest entry + {INPLACE_ATOL:g})"))
    return out


def _shape_of(tensor) -> str:
    return "missing" if tensor is None else f"of shape {tuple(tensor.shape)}"


def check_sync_scope(got: dict, control: dict) -> list[Violation]:
    """FS2-13 on one case's records (``runs/sync_scope``): no error; every
    parameter of a group asked to stop reducing has no sharded gradient
    after the backward, every other one the control's gradient."""
    import torch

    case = got["case"]
    if "error" in got:
        kind, text = got["error"]
        return [Violation("FS2-13", f"{case}: set_requires_gradient_sync and one step raised {kind}: {text}",
                          error=(kind, text))]
    out = []
    stopped = control["stopped"]
    reduced_anyway = sorted(n for n in stopped if got["grads"].get(n) is not None)
    never_reduced = sorted(n for n in control["grads"] if n not in stopped and got["grads"].get(n) is None)
    if reduced_anyway:
        out.append(Violation("FS2-13", f"{case}: {short(reduced_anyway)} got a reduced gradient though their "
                                       "group's reduction was turned off"))
    if never_reduced:
        out.append(Violation("FS2-13", f"{case}: {short(never_reduced)} got no gradient though their group still "
                                       "reduces (its reduction was turned off beyond what was asked)"))
    for name, grad in control["grads"].items():
        mine = got["grads"].get(name)
        if name in stopped or mine is None:
            continue
        if mine.shape != grad.shape or not torch.allclose(mine, grad, rtol=1e-5, atol=1e-6):
            out.append(Violation("FS2-13", f"{case}: the gradient of {name} is not the control's"))
    return out
