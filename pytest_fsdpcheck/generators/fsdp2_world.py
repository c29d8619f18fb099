"""FSDP2 groups at the world sizes users run (FS2-10): an FSDP2 spec from
:func:`~pytest_fsdpcheck.generators.fsdp2.fully_shard_specs`, the rows its
parameters get (dims the world size does not divide, drawn on purpose) and
the mesh it is sharded on: 1-D of 8 to 1024 ranks, or 2-D
``(replicate, shard)`` (HSDP). Pure data; the ranks are simulated by the
check (``checks/fsdp2_world.py``), one rank's view at a time.
"""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import strategies as st

from .fsdp2 import BuiltFsdp2, Fsdp2Spec, build_fsdp2, fully_shard_specs
from .trees import TreeSpec

#: the meshes drawn and fixed: 1-D worlds, and HSDP (replicate x shard)
MESHES: tuple[tuple[int, ...], ...] = ((8,), (64,), (256,), (1024,), (2, 4), (4, 256))


@dataclass(frozen=True)
class WorldSpec:
    """``spec``'s parameters reshaped: the k-th distinct parameter (build
    order) gets ``rows[k % len(rows)]`` rows, and ``cols`` columns where
    ``cols`` is not 0 (else it is 1-D); sharded over ``mesh``."""

    spec: Fsdp2Spec
    rows: tuple[int, ...]
    cols: int = 0
    mesh: tuple[int, ...] = (8,)

    @property
    def world_size(self) -> int:
        size = 1
        for n in self.mesh:
            size *= n
        return size

    def to_source(self) -> str:
        return f"WorldSpec({self.spec.to_source()}, rows={self.rows!r}, cols={self.cols!r}, mesh={self.mesh!r})"


def build_world_model(world: WorldSpec, area=None) -> BuiltFsdp2:
    """Real modules for ``world``: :func:`build_fsdp2` without groups (the
    check makes them with ``fully_shard`` calls), every non-scalar parameter
    given its rows, tied ones still one object under every name."""
    import torch
    from torch import nn

    built = build_fsdp2(world.spec, area, groups=False)
    new: dict[int, nn.Parameter] = {}
    for module in built.modules:
        for name, p in list(module._parameters.items()):
            if p is None or p.dim() == 0:
                continue
            if id(p) not in new:
                k = len(new)
                shape = (world.rows[k % len(world.rows)],) + ((world.cols,) if world.cols else ())
                new[id(p)] = nn.Parameter(torch.zeros(shape), requires_grad=p.requires_grad)
            module._parameters[name] = new[id(p)]
    if built.ignored is not None:
        built.ignored = {new.get(id(p), p) for p in built.ignored}
    built._index = None
    return built


@st.composite
def fsdp2_world_specs(draw, meshes=MESHES) -> WorldSpec:
    """Groups without conflicts (FS2-7's specs), rows drawn mostly where the
    world does not divide them (a few rows, a multiple plus a remainder),
    1-D or 2-D parameters, one of ``meshes``."""
    spec = draw(fully_shard_specs(conflicts=False, max_modules=6))
    mesh = draw(st.sampled_from(meshes))
    shards = mesh[-1]
    row = st.one_of(
        st.integers(1, 5),  # fewer rows than ranks: most ranks empty
        st.tuples(st.integers(1, 3), st.integers(1, shards - 1)).map(lambda t: t[0] * shards + t[1]),  # uneven
        st.integers(1, 3).map(lambda m: m * shards),  # even
    )
    rows = tuple(draw(st.lists(row, min_size=1, max_size=4)))
    cols = draw(st.sampled_from((0, 3)))
    return WorldSpec(spec, rows, cols, mesh)


def _spec(children, params, roots=(0,), groups=()) -> Fsdp2Spec:
    return Fsdp2Spec(TreeSpec(tuple(children), params=tuple(params)), tuple(roots), frozenset(groups))


#: fixed worlds with uneven dims, each sharded at its size: a model of two
#: layers under a root (each layer its own group, the root's group last)
_TWO_LAYERS = _spec(((1, 2), (), ()), (1, 2, 2), groups=(1, 2))
UNEVEN_WORLDS: dict[str, WorldSpec] = {
    # 1000 rows over 64: 16 a rank, rank 62 holds 8, rank 63 none (two short ranks)
    "1000-rows-on-64": WorldSpec(_TWO_LAYERS, rows=(1000, 7, 1000, 5, 64), cols=5, mesh=(64,)),
    # one row more and one fewer than the ranks: 2 rows a rank, 511 or 513 ranks hold some
    "1023-and-1025-rows-on-1024": WorldSpec(_TWO_LAYERS, rows=(1023, 1025, 3), mesh=(1024,)),
    # 9 rows over 8: 2 a rank, rank 4 holds 1, ranks 5-7 none
    "9-rows-on-8": WorldSpec(_TWO_LAYERS, rows=(9, 17), cols=3, mesh=(8,)),
    # 300 rows over 256: 2 a rank, 150 ranks hold rows
    "300-rows-on-256": WorldSpec(_spec(((1,), ()), (2, 1), groups=(1,)), rows=(300, 257), mesh=(256,)),
    # HSDP: 2 replicas of 4 shards, 10 rows -> 3, 3, 3, 1 in each replica
    "hsdp-2x4-10-rows": WorldSpec(_TWO_LAYERS, rows=(10, 7, 4), cols=3, mesh=(2, 4)),
    # HSDP at 1024 ranks: 4 replicas of 256 shards
    "hsdp-4x256-1000-rows": WorldSpec(_TWO_LAYERS, rows=(1000, 255), mesh=(4, 256)),
    # a group of two modules (tied weights' shape) and a divisible dim beside an uneven one
    "grouped-call-on-64": WorldSpec(_spec(((1, 2), (), ()), (0, 1, 1), roots=(1, 2)), rows=(128, 130), mesh=(64,)),
}
