"""--fsdpcheck-world-size is the world users' plans are checked at in the
simulated tier (FS2-10, in one process), never a count of processes: the
real ranks of SPL-16 and FS2-9 stay small (issue 41, item 4). A plan that
states its own mesh (``ModelCase.mesh_shape``, HSDP included) is checked
on it."""

from types import SimpleNamespace

import pytest

from pytest_fsdpcheck.plugin.options import SPAWNED_RANKS_CAP, spawned_ranks, spawned_ranks_note
from pytest_fsdpcheck.plugin.session import simulated_world_size, world_size_for

pytestmark = pytest.mark.unit


def _config_asking(monkeypatch, world_size):
    from pytest_fsdpcheck.plugin import session

    config = SimpleNamespace()
    monkeypatch.setattr(session, "get_session", lambda cfg: SimpleNamespace(world_size=world_size) if cfg is config else None)
    return config


def test_world_size_1024_spawns_three_ranks_and_checks_plans_at_1024(monkeypatch):
    config = _config_asking(monkeypatch, 1024)
    assert world_size_for(config, "cpu") == SPAWNED_RANKS_CAP == 3  # what SPL-16/FS2-9 spawn
    assert simulated_world_size(config) == 1024  # what test_model_plan_simulated checks the plan at
    note = spawned_ranks_note(1024)
    assert "\n" not in note and "checked at 1024 simulated ranks (FS2-10)" in note and "at most 3 on CPU" in note
    # CUDA: every visible GPU where they are more; never the 1024 asked
    assert spawned_ranks(1024, gpus=8) == 8
    # a size the host runs stays what was asked, and says nothing
    for asked in (1, 2, 3):
        assert spawned_ranks(asked) == asked and spawned_ranks_note(asked) is None
    assert world_size_for(_config_asking(monkeypatch, 2), "cpu") == 2


def test_the_header_says_the_real_ranks_are_capped():
    from pytest_fsdpcheck.report.terminal import _world_size_header

    (line,) = _world_size_header(SimpleNamespace(world_size=1024))
    assert line.startswith("fsdpcheck: --fsdpcheck-world-size 1024: users' plans are checked at 1024 simulated "
                           "ranks (FS2-10); the real ranks of SPL-16 and FS2-9 are at most 3 on CPU"), line
    assert _world_size_header(SimpleNamespace(world_size=None)) == _world_size_header(SimpleNamespace(world_size=3)) == []


def test_a_users_plan_is_checked_on_the_mesh_it_states():
    """``good``'s plan stated on a 2 x 16 HSDP mesh: a layout wrong past 8
    shards fails FS2-10 there, on the default size (no option given); torch
    passes."""
    from pytest_fsdpcheck.cases import checks
    from pytest_fsdpcheck.checks import ConformanceFailure
    from tests.planted import plans

    case = plans.good_on_hsdp()
    checks.check_plan_simulated(case, "torch")
    with pytest.raises(ConformanceFailure) as failed:
        checks.check_plan_simulated(plans.good_on_hsdp(), "tests.planted.fsdp2:PaddingFirstPastEight")
    assert "FS2-10" in str(failed.value) and "2x16 (replicate x shard)" in str(failed.value), str(failed.value)[:2000]
    # the same plan with no mesh of its own is checked at the default 8 ranks, where that layout is right
    checks.check_plan_simulated(plans.good(), "tests.planted.fsdp2:PaddingFirstPastEight")


@pytest.mark.parametrize("shape", [(0,), (2, 3, 4), (8.0,), (4096, 2), "8"])
def test_a_mesh_shape_that_is_no_mesh_is_one_line(shape):
    import dataclasses

    from pytest_fsdpcheck.cases.model import MAX_MESH_RANKS, case_problems
    from pytest_fsdpcheck.plugin.options import MAX_WORLD_SIZE
    from tests.planted import plans

    assert MAX_MESH_RANKS == MAX_WORLD_SIZE
    (problem,) = case_problems(dataclasses.replace(plans.good(), mesh_shape=shape))
    assert problem == (f"case 'good': mesh_shape must be (shard,) or (replicate, shard), whole numbers of ranks, "
                       f"at most 4096 in all, got {shape!r}")
