"""FS2-10: fully_shard at the world sizes users run (8 to 1024 ranks, and
a 2-D replicate x shard mesh), simulated in one process on torch's fake
process group, one rank's view at a time. Proves construction, assignment
and agreement; collectives and numerics only real ranks prove (FS2-9)."""

import pytest
from hypothesis import given

from pytest_fsdpcheck.checks.fsdp2_world import check_world, ranks_to_build
from pytest_fsdpcheck.checks.repro import snippet
from pytest_fsdpcheck.core.not_provided import NotProvided
from pytest_fsdpcheck.core.profiles import examples
from pytest_fsdpcheck.core.provided import (
    expected_provided,
    first_release,
    installed_torch,
)
from pytest_fsdpcheck.generators.fsdp2_world import (
    UNEVEN_WORLDS,
    build_world_model,
    fsdp2_world_specs,
)
from pytest_fsdpcheck.known.judge import conform


def _require(impl):
    """A torch release the simulated worlds are not measured on
    (``provided.py``: the fake process group is the installed torch's, so
    for every implementation), or an area that does not report its shards,
    is not provided."""
    if not expected_provided("fsdp2.simulated_world", installed_torch()):
        raise NotProvided("simulated worlds (torch's fake process group) are recorded "
                          f"from torch {first_release('fsdp2.simulated_world')} (provided.py)",
                          release_lacks="fsdp2.simulated_world")
    area = impl.fsdp2
    if not callable(getattr(area, "sharded_groups", None)):
        raise NotProvided("this implementation's fsdp2 area has no sharded_groups (FS2-10)")
    if not getattr(area, "simulated_world", True):
        raise NotProvided("simulated worlds (a fake process group) are recorded from torch 2.13 (provided.py)")


def _takes(impl, world):
    import dataclasses

    area = impl.fsdp2
    spec = world.spec.restricted(getattr(area, "several_roots", True), getattr(area, "takes_ignored_params", True))
    return world if spec is world.spec else dataclasses.replace(world, spec=spec)


def reproducer(impl, world, every_up_to=8):
    return snippet(
        impl,
        [f"world = {world.to_source()}",
         f"ranks = ranks_to_build(world.mesh, sorted(set(world.rows)), {every_up_to})",
         "violations = check_world(lambda: build_world_model(world, impl.fsdp2), impl.fsdp2, world.mesh, ranks)"],
        ["assert not violations, violations"],
        imports=[
            "from pytest_fsdpcheck.generators.trees import TreeSpec",
            "from pytest_fsdpcheck.generators.fsdp2 import Fsdp2Spec",
            "from pytest_fsdpcheck.generators.fsdp2_world import WorldSpec, build_world_model",
            "from pytest_fsdpcheck.checks.fsdp2_world import check_world, ranks_to_build",
        ],
    )


def _body(world, every_up_to=8):
    def body(impl):
        area = impl.fsdp2
        ranks = ranks_to_build(world.mesh, _dims(world), every_up_to)
        return check_world(lambda: build_world_model(world, area), area, world.mesh, ranks)

    return body


def _dims(world):
    return sorted(set(world.rows))


@pytest.mark.invariant("FS2-10")
@pytest.mark.parametrize("case", list(UNEVEN_WORLDS))
def test_uneven_worlds(fsdpcheck_impl, case):
    """Fixed worlds whose dims the world size does not divide: 9 rows on 8
    ranks, 1000 on 64, 300 on 256, 1023 and 1025 on 1024, HSDP 2x4 and 4x256,
    a grouped call: each rank holds exactly its rows, padded to the same
    count, the padding on the last ranks only. Every rank is built up to 64
    (so the shards are seen to cover each parameter once), a sample above."""
    _require(fsdpcheck_impl)
    world = _takes(fsdpcheck_impl, UNEVEN_WORLDS[case])
    conform(fsdpcheck_impl, _body(world, every_up_to=64), reproducer(fsdpcheck_impl, world, every_up_to=64))


@pytest.mark.invariant("FS2-10")
@examples(8)
@given(world=fsdp2_world_specs())
def test_simulated_worlds(fsdpcheck_impl, world):
    """Drawn module trees (nested groups, several roots, ignored
    parameters, replicate marks, buffers) with drawn rows, at 8 to 1024
    ranks or on an HSDP mesh."""
    _require(fsdpcheck_impl)
    world = _takes(fsdpcheck_impl, world)
    conform(fsdpcheck_impl, _body(world), reproducer(fsdpcheck_impl, world))
