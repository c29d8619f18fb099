"""Every way a plan reaches ``fully_shard`` is recorded (issue 28 item 3):
the function object is intercepted, not the names bound to it at import, so
a reference held in an attribute, a closure, a container, a
``functools.partial``, a framework's decorator or generated code's globals
is seen; and the function is exactly as it was after the plan."""

import pytest

pytestmark = pytest.mark.unit

pytest.importorskip("torch.distributed.fsdp")

from pytest_fsdpcheck.cases import build_case, checks  # noqa: E402
from pytest_fsdpcheck.cases.recording import fully_shard_originals, record_plan  # noqa: E402
from tests.planted import stored_refs  # noqa: E402

GOOD_CALLS = [("layers.0",), ("layers.1",), ("embed", "lm_head"), ("",)]


def _state(fn):
    return fn.__code__, fn.__defaults__, fn.__kwdefaults__


@pytest.mark.parametrize("factory", stored_refs.FACTORIES, ids=lambda f: f.__name__)
def test_a_stored_reference_is_recorded(factory):
    before = [_state(fn) for fn in fully_shard_originals()]
    record = record_plan(build_case(factory))
    assert record.plan_error is None
    assert [c.roots for c in record.calls] == GOOD_CALLS
    assert all(c.error is None and c.walk for c in record.calls)
    assert record.calls[2].params == ["embed.weight"]
    assert [_state(fn) for fn in fully_shard_originals()] == before


def test_a_plan_holding_it_in_an_attribute_passes_the_fsdp2_checks():
    """The issue's plan (self.shard_fn = fully_shard): 'made no fully_shard
    call' and 11 FAIL cells before; every FSDP2 check passes now."""
    case = build_case(stored_refs.attribute)
    for check in (checks.check_plan_rules, checks.check_fsdp2_walk, checks.check_fsdp2_recorded,
                  checks.check_fully_shard_calls):
        check(case)


def test_partial_keywords_are_recorded():
    record = record_plan(build_case(stored_refs.partial))
    assert all(c.kwargs.get("reshard_after_forward") is True for c in record.calls)


def test_fully_shard_is_restored_when_the_plan_raises():
    from pytest_fsdpcheck.cases import ModelCase

    def plan(model, mesh):
        stored_refs._SHARDER.shard_fn(model.layers[0], mesh=mesh)
        raise KeyError("x")

    before = [_state(fn) for fn in fully_shard_originals()]
    case = build_case(stored_refs.attribute)
    record = record_plan(ModelCase("raises", case.model, case.example_inputs, plan=plan))
    assert isinstance(record.plan_error, KeyError)
    assert [c.roots for c in record.calls] == [("layers.0",)]
    assert [_state(fn) for fn in fully_shard_originals()] == before
    # and it still shards after the plan, unrecorded
    import torch.distributed.fsdp as fsdp

    from pytest_fsdpcheck.cases.recording import mesh_of_this_world

    model = build_case(stored_refs.attribute).model
    with mesh_of_this_world() as mesh:
        fsdp.fully_shard(model, mesh=mesh)
    assert model._is_fsdp_managed_module is True
