"""FS2-10: ``fully_shard`` at the world sizes users run, simulated in one
process. Each rank's view is built on a fake process group (torch's
``FakeStore`` and ``"fake"`` backend: collectives return without moving
data), one rank at a time: the model built anew, the spec's calls made by
the implementation's ``annotate`` on that rank's mesh, then read back as the
implementation reports it (``sharded_groups``) and by the Dynamo flags.

What this proves: construction (the calls succeed at that size), assignment
(each parameter in exactly one group; each rank's dim-0 rows are the ones
``torch.chunk`` semantics give it, padded to the same row count, the padding
only on the last ranks) and agreement (the same managed modules and groups
on every rank built). What it cannot prove: collectives and numerics (the
fake group moves no data), which only real ranks show (FS2-9).

The expected values come from the spec alone: ``ceil(d / S)`` rows a rank
over the S ranks of the sharding dimension, computed here, never by torch.
"""

from __future__ import annotations

import contextlib
import dataclasses

from . import Violation, error_of, short
from .annotation import MANAGED, read_flag
from .fsdp2 import expected_states, managed_and_conflicts

#: ranks built at most where not every rank is: first, second, middle, last two
SAMPLED = "ranks 0, 1, N/2, N-2, N-1 and the ranks where a parameter's rows end"


def chunk_rows(rows: int, shards: int, index: int) -> tuple[int, int, int]:
    """``(first row, rows held, rows padded to)`` of shard ``index`` of
    ``shards`` for a dim 0 of ``rows``: ``ceil(rows / shards)`` each, the
    last shards short or empty."""
    chunk = -(-rows // shards)
    start = min(index * chunk, rows)
    return start, min(chunk, rows - start), chunk


def ranks_to_build(mesh: tuple[int, ...], dims=(), every_up_to: int = 8) -> list[int]:
    """Every rank of a world of at most ``every_up_to``; else a sample: the
    first two, a middle one, the last two, and for each dim 0 in ``dims``
    the shard holding its last row and the next one (in the first replica)."""
    world = 1
    for n in mesh:
        world *= n
    if world <= every_up_to:
        return list(range(world))
    shards = mesh[-1]
    picked = {0, 1, world // 2, world - 2, world - 1}
    for rows in dims:
        chunk = -(-rows // shards)
        last = (rows - 1) // chunk
        picked.update(r for r in (last, last + 1) if r < shards)
    return sorted(picked)


@contextlib.contextmanager
def fake_world(rank: int, mesh: tuple[int, ...]):
    """Rank ``rank``'s view of a world of ``prod(mesh)`` ranks on torch's
    fake process group, and its mesh (2-D: ``("replicate", "shard")``)."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.testing._internal.distributed.fake_pg import FakeStore

    world = 1
    for n in mesh:
        world *= n
    dist.init_process_group("fake", rank=rank, world_size=world, store=FakeStore())
    try:
        names = ("replicate", "shard") if len(mesh) == 2 else None
        yield init_device_mesh("cpu", mesh, mesh_dim_names=names)
    finally:
        dist.destroy_process_group()


def _fill_modules(modules) -> dict[int, object]:
    """Give every parameter rows that tell each other apart (0, 1, 2, ...),
    exact in float32; returns id -> a copy of the values."""
    import torch

    originals = {}
    with torch.no_grad():
        for module in modules:
            for p in module._parameters.values():
                if p is None or id(p) in originals:
                    continue
                if p.dim() > 0:
                    p.copy_(torch.arange(p.numel(), dtype=p.dtype).reshape(p.shape))
                originals[id(p)] = p.detach().clone()
    return originals


@dataclasses.dataclass
class Prepared:
    """One rank's model before the calls: its modules, the calls as
    ``(root modules, ignored parameters)``, labels taken before the calls
    (they register new parameter objects), and what the spec expects:
    the managed modules' labels and per group (its roots' labels, sorted)
    the sorted labels of its parameters."""

    modules: list
    calls: list
    label: object  # obj -> str, fixed before the calls
    managed: tuple
    groups: dict


def prepare_spec(built) -> Prepared:
    """A generated tree's calls (FS2-7's plan: inner groups first, then the
    spec's roots) and the spec's expectations."""
    plan = managed_and_conflicts(built)
    managed, groups = set(), {}
    for call, mods, _ in plan:
        managed.update(mods)
        roots = tuple(sorted(f"m{i}" for i in _effective(built, call)))
        params = expected_states(built, mods)[0]
        groups.setdefault(roots, []).append(tuple(sorted(built.labels(params))))
    names = {id(m): f"m{i}" for i, m in enumerate(built.modules)}
    labels = {**names}
    for m in built.modules:
        for p in m._parameters.values():
            if p is not None:
                labels.setdefault(id(p), built.label(p))
    calls = [(tuple(built.modules[i] for i in call), built.ignored) for call, _, _ in plan]
    return Prepared(list(built.modules), calls, _labeller(labels),
                    tuple(sorted(f"m{i}" for i in managed)), {k: sorted(v) for k, v in groups.items()})


def _labeller(table: dict):
    return lambda obj: table.get(id(obj), f"<{type(obj).__name__}>")


def rank_view(make, area, mesh: tuple[int, ...], rank: int):
    """One rank's view: ``(managed, groups, shards, prepared)`` by labels,
    or a list of violations where a call failed. ``make()`` gives a fresh
    :class:`Prepared`. ``shards``: parameter label -> ``[(local, padded
    rows, original values)]``, one entry per group listing it."""
    prep = make()
    originals = _fill_modules(prep.modules)
    where = {}
    for module in prep.modules:
        for name, p in module._parameters.items():
            if p is not None:
                where[(id(module), name)] = (prep.label(p), id(p))
    with fake_world(rank, mesh) as device_mesh:
        for roots, ignored in prep.calls:
            try:
                area.annotate(tuple(roots), device_mesh, ignored)
            except Exception as exc:  # noqa: BLE001 - judged: a call the spec takes
                calls = "(" + ", ".join(prep.label(r) for r in roots) + ")"
                return [Violation("FS2-10", f"fully_shard{calls} raised {type(exc).__name__} on rank {rank} of a "
                                            f"{_mesh_label(mesh)} world: {exc}", error=error_of(exc))]
        groups = area.sharded_groups(list(prep.modules))
    managed = tuple(sorted(prep.label(m) for m in prep.modules if read_flag(m, MANAGED, None) is True))
    view_groups, shards = {}, {}
    for group in groups:
        roots = tuple(sorted(prep.label(r) for r in group.roots))
        labels = []
        for sp in group.params:
            label, pid = where.get((id(sp.module), sp.name), (f"?{sp.name}", None))
            labels.append(label)
            shards.setdefault(label, []).append((sp.local, sp.padded_rows, originals.get(pid)))
        view_groups.setdefault(roots, []).append(tuple(sorted(labels)))
    return managed, {k: sorted(v) for k, v in view_groups.items()}, shards, prep


def _mesh_label(mesh) -> str:
    """``64-rank`` or ``2x4 (replicate x shard) = 8-rank``."""
    if len(mesh) == 1:
        return f"{mesh[0]}-rank"
    return "x".join(map(str, mesh)) + f" (replicate x shard) = {_world(mesh)}-rank"


def _world(mesh) -> int:
    world = 1
    for n in mesh:
        world *= n
    return world


def _effective(built, call):
    from .fsdp2 import _below

    roots = list(dict.fromkeys(call))
    below = _below(built.spec, roots) if len(roots) > 1 else set()
    return [r for r in roots if r not in below]


def check_world(make, area, mesh: tuple[int, ...], ranks=None) -> list[Violation]:
    """FS2-10 on a generated tree: ``make()`` builds it anew (a
    ``BuiltFsdp2``) for each rank of a world shaped ``mesh``."""
    return check_prepared_world(lambda: prepare_spec(make()), area, mesh, ranks)


def check_prepared_world(make, area, mesh: tuple[int, ...], ranks=None) -> list[Violation]:
    """FS2-10 on the ranks ``ranks`` (default :func:`ranks_to_build`) of a
    world shaped ``mesh``; ``make()`` gives a fresh :class:`Prepared` for
    each rank (a generated tree, or a user's recorded plan)."""
    probe = make()
    dims = sorted({p.shape[0] for m in probe.modules for p in m._parameters.values() if p is not None and p.dim() > 0})
    del probe
    ranks = ranks_to_build(mesh, dims) if ranks is None else list(ranks)
    where = _mesh_label(mesh)
    shards_dim = mesh[-1]
    out: list[Violation] = []
    seen: dict[int, tuple] = {}
    full: dict[str, list] = {}  # label -> [(shard index, local, original)] for the coverage check
    for rank in ranks:
        view = rank_view(make, area, mesh, rank)
        if isinstance(view, list):
            return view
        managed, groups, shards, prep = view
        seen[rank] = (managed, groups)
        if managed != prep.managed:
            out.append(Violation("FS2-10", f"rank {rank} of a {where} world: modules carrying the Dynamo flags "
                                           f"{short(managed)}, expected {short(prep.managed)}"))
        if groups != prep.groups:
            out.append(Violation("FS2-10", f"rank {rank} of a {where} world: groups (roots: parameters) "
                                           f"{_groups_text(groups)}, expected {_groups_text(prep.groups)}"))
        twice = sorted(label for label, held in shards.items() if len(held) > 1)
        if twice:
            out.append(Violation("FS2-10", f"rank {rank} of a {where} world: parameters {short(twice)} are in more than one group"))
        index = rank % shards_dim
        for label, held in sorted(shards.items()):
            local, padded, original = held[0]
            if original is None:
                out.append(Violation("FS2-10", f"rank {rank}: a group holds {label}, which no module registered"))
                continue
            out.extend(_shard_violations(rank, where, index, shards_dim, label, local, padded, original))
            if rank < shards_dim:
                full.setdefault(label, []).append((index, local, original))
    out.extend(_disagreements(seen, where))
    if set(range(shards_dim)) <= set(ranks):
        out.extend(_coverage(full, shards_dim, where))
    return _first(out)


def _shard_violations(rank, where, index, shards, label, local, padded, original) -> list[Violation]:
    """One parameter on one rank against the spec's chunk of it."""
    if original.dim() == 0:
        return [Violation("FS2-10", f"rank {rank}: a group shards the scalar {label}")]
    start, count, chunk = chunk_rows(original.shape[0], shards, index)
    want_shape = (count, *original.shape[1:])
    at = f"rank {rank} of a {where} world (shard {index} of {shards})"
    out = []
    if tuple(local.shape) != want_shape:
        out.append(Violation("FS2-10", f"{at}: {label} of {tuple(original.shape)} holds {tuple(local.shape)}, "
                                       f"expected rows {start}:{start + count} {want_shape}"))
    elif not bool((local.detach().cpu().to(original.dtype) == original[start:start + count]).all()):
        out.append(Violation("FS2-10", f"{at}: {label} holds other rows than {start}:{start + count}"))
    if padded != chunk:
        out.append(Violation("FS2-10", f"{at}: {label} of {original.shape[0]} rows padded to {padded} rows, expected "
                                       f"{chunk} on every rank (ceil({original.shape[0]}/{shards}))"))
    return out


def _groups_text(groups) -> str:
    return short(f"({', '.join(roots)}): {[list(p) for p in params]}" for roots, params in sorted(groups.items()))


def _disagreements(seen: dict, where: str) -> list[Violation]:
    """Every rank's managed modules and groups equal the first rank's."""
    if not seen:
        return []
    first = min(seen)
    out = []
    for rank, (managed, groups) in sorted(seen.items()):
        base_managed, base_groups = seen[first]
        if managed != base_managed:
            diff = sorted(set(managed) ^ set(base_managed))
            out.append(Violation("FS2-10", f"ranks {first} and {rank} of a {where} world disagree on the managed "
                                           f"modules: first difference {diff[0]}"))
        elif groups != base_groups:
            keys = sorted(set(groups) | set(base_groups))
            first_key = next(k for k in keys if groups.get(k) != base_groups.get(k))
            out.append(Violation("FS2-10", f"ranks {first} and {rank} of a {where} world disagree on the group of "
                                           f"roots {list(first_key)}: {base_groups.get(first_key)} "
                                           f"against {groups.get(first_key)}"))
    return out


def _coverage(full: dict, shards: int, where: str) -> list[Violation]:
    """With every shard built: each parameter's shards, in shard order,
    are its rows exactly once."""
    import torch

    out = []
    for label, held in sorted(full.items()):
        held.sort(key=lambda t: t[0])
        original = held[0][2]
        joined = torch.cat([local.cpu() for _, local, _ in held]) if held else None
        if [i for i, _, _ in held] != list(range(shards)) or joined is None or joined.shape != original.shape \
                or not bool((joined == original).all()):
            out.append(Violation("FS2-10", f"the shards of {label} over the {shards} ranks of a {where} world do not "
                                           f"cover its {original.shape[0]} rows exactly once"))
    return out


def _first(violations: list[Violation], limit: int = 6) -> list[Violation]:
    """At most ``limit`` violations (a wrong rule repeats on every rank)."""
    return violations[:limit]
