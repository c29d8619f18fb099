"""The FSDP2 checks in a world of one rank: FS2-12 (a group's frozen
parameters of other dtypes through a mixed-precision step), FS2-13 (how far
turning gradient reduction off reaches), FS2-14 (a returned view written
into in place) and FS2-7's lifetime: the checkers
on records, the known bugs' signatures as narrow as the bugs, and faults
planted in torch itself that its column must FAIL."""

from __future__ import annotations

import pytest
import torch

from pytest_fsdpcheck.checks import Violation
from pytest_fsdpcheck.checks.fsdp2 import check_frozen_step, check_inplace_output, check_sync_scope
from pytest_fsdpcheck.impls.torch_bugs import TORCH_BUGS
from tests.demands import demand_torch_failures
from tests.helpers import PLANTED_RUN
from tests.planted.torch_faults import FAULT_ENV

BUGS = {bug.id: bug for bug in TORCH_BUGS}

ASSERTED_IN_TORCH = {"tests.planted.torch_faults:FrozenDtypesAsserted": ("FS2-12", "test_frozen_params_step and low")}
CAST_IN_TORCH = {"tests.planted.torch_faults:IntParamCast": ("FS2-12", "test_frozen_params_step and index")}
KEPT = {"tests.planted.torch_faults:ComposableStateKeepsModules": ("FS2-7", "test_fully_shard_flags")}
SYNC_EVERYWHERE = {"tests.planted.torch_faults:GradientSyncIgnoresRecurse": ("FS2-13", "test_gradient_sync_scope")}
KEPT_RESHARDED = {"tests.planted.torch_faults:ReshardAfterForwardIgnored": ("FS2-14", "test_inplace_output_step")}
KEPT_SCALED = {"tests.planted.torch_faults:ReduceScatterScalesTenPercent": ("FS2-14", "test_inplace_output_step and kept")}


def _record(case="frozen-low-base", **extra):
    return {"case": case, "output": torch.ones(3, 6), "grads": {"adapter.weight": torch.ones(6, 6)}, **extra}


@pytest.mark.unit
def test_the_step_equal_to_its_control_passes_and_each_departure_is_named():
    control = _record()
    assert check_frozen_step(_record(), control) == []
    off = _record(output=torch.ones(3, 6) * 1.5)
    (v,) = check_frozen_step(off, control)
    assert v.invariant == "FS2-12" and v.message.startswith("frozen-low-base: the output differs from the control's by 0.5")
    (v,) = check_frozen_step(_record(grads={"adapter.weight": None}), control)
    assert "the gradient of adapter.weight is missing" in v.message
    raised = _record(error=("AssertionError", "FSDP expects uniform original parameter dtype but got {x}"))
    (v,) = check_frozen_step(raised, control, {"error": ("AssertionError", "something else")})
    assert v.error[0] == "AssertionError" and "; torch's own walk: raises AssertionError: something else" in v.message
    index = {"case": "frozen-index", "output": torch.ones(3, 3), "grads": {}, "seen": ("int64", [1.0, 257.0, 3.0])}
    (v,) = check_frozen_step({**index, "seen": ("bfloat16", [1.0, 256.0, 3.0])}, index)
    assert "the forward got the frozen integer parameter as bfloat16 [1.0, 256.0, 3.0], not int64" in v.message
    # a comparison with NaN is false: a NaN gradient must not slip past 'difference > tolerance'
    (v,) = check_frozen_step(_record(grads={"adapter.weight": torch.full((6, 6), float("nan"))}), control)
    assert v.message.startswith("frozen-low-base: the gradient of adapter.weight differs from the control's by nan")


def _raised(case, error, walk=", as torch's own walk does in the same run"):
    return Violation("FS2-12", f"{case}: fully_shard with mp_policy bf16 (reduced in fp32) and one step raised "
                               f"{error}{walk}", error=tuple(error.split(": ", 1)))


ASSERTED = "AssertionError: FSDP expects uniform original parameter dtype but got {torch.float32, torch.bfloat16}"
REJECTED = "RuntimeError: Only Tensors of floating point and complex dtype can require gradients"


@pytest.mark.unit
def test_the_frozen_step_signatures_are_as_narrow_as_the_bugs():
    asserted, rejected = BUGS["fs2-frozen-dtypes-asserted"].predicate, BUGS["fs2-int-param-rejected"].predicate
    assert asserted([_raised("frozen-low-base", ASSERTED)]) and asserted([_raised("frozen-index", ASSERTED)])
    assert rejected([_raised("frozen-index", REJECTED)])
    assert rejected([_raised("frozen-index", REJECTED.replace("Only", "only").replace(" and complex", ""))])
    # the base case cannot be this bug, another error is not it, nor one torch's own walk does not share
    assert not rejected([_raised("frozen-low-base", REJECTED)])
    assert not asserted([_raised("frozen-low-base", "AssertionError: FSDP expects uniform reduce dtype")])
    assert not asserted([_raised("frozen-low-base", ASSERTED, walk="; torch's own walk: runs the step")])
    # nothing may fail beside it
    beside = Violation("FS2-12", "frozen-index: the output differs from the control's by 0.5 (tolerance 0.03)")
    assert not asserted([_raised("frozen-index", ASSERTED), beside])
    assert not rejected([beside])


@pytest.mark.unit
def test_the_lifetime_signature_reads_the_lifetime_alone():
    kept = BUGS["fs2-state-mapping-keeps-modules"].predicate
    alive = Violation("FS2-7", "the model outlives its caller: [m0, m2] still alive after fully_shard's caller dropped "
                               "it and the garbage collector ran (a module is held outside the model)")
    assert kept([alive])
    assert not kept([alive, Violation("FS2-7", "flags (_is_fsdp_managed_module, _fsdp_use_orig_params) wrong on [m1]")])
    assert not kept([Violation("FS2-8", alive.message)])


@pytest.fixture
def run_faulted(run_suite, monkeypatch):
    """As tests/test_excuses.py's: one fault in torch, no shrink phase (a
    shrink step of the kept-alive fault runs a full garbage collection)."""

    def run(table: dict):
        (killer, (_, selection)), = table.items()
        monkeypatch.setenv(FAULT_ENV, killer.rpartition(":")[2])
        return run_suite("torch", k=selection, extra=("-p", "tests.planted.torch_faults", *PLANTED_RUN))

    return run


@pytest.mark.kill
def test_torch_asserting_the_frozen_dtypes_fails_fs2_12(run_faulted):
    """Outside the known bug's range (2.3-2.7), the same shape in torch is a FAIL."""
    result, report = run_faulted(ASSERTED_IN_TORCH)
    demand_torch_failures(result, report, ASSERTED_IN_TORCH)


@pytest.mark.kill
def test_torch_casting_a_frozen_index_fails_fs2_12(run_faulted):
    """The silent form (the index all-gathered in bf16): the forward's view of it is named."""
    result, report = run_faulted(CAST_IN_TORCH)
    demand_torch_failures(result, report, CAST_IN_TORCH)


@pytest.mark.kill
def test_torch_keeping_the_model_alive_fails_fs2_7(run_faulted):
    result, report = run_faulted(KEPT)
    demand_torch_failures(result, report, KEPT)


@pytest.mark.kill
def test_torch_stopping_every_groups_reduction_fails_fs2_13(run_faulted):
    """recurse=False ignored: the inner group stops reducing too."""
    result, report = run_faulted(SYNC_EVERYWHERE)
    demand_torch_failures(result, report, SYNC_EVERYWHERE)


@pytest.mark.unit
def test_the_sync_scope_check_names_both_directions():
    grads = {"0.weight": torch.ones(2), "1.weight": None}
    control = {"grads": {"0.weight": torch.ones(2), "1.weight": torch.ones(2)}, "stopped": {"1.weight"}}
    assert check_sync_scope({"case": "root-only", "grads": grads}, control) == []
    (v,) = check_sync_scope({"case": "root-only", "grads": {**grads, "0.weight": None}}, control)
    assert v.invariant == "FS2-13" and "[0.weight] got no gradient though their group still reduces" in v.message
    (v,) = check_sync_scope({"case": "root-only", "grads": {**grads, "1.weight": torch.ones(2)}}, control)
    assert "[1.weight] got a reduced gradient though their group's reduction was turned off" in v.message
    (v,) = check_sync_scope({"case": "root-only", "grads": {**grads, "0.weight": torch.zeros(2)}}, control)
    assert "the gradient of 0.weight is not the control's" in v.message


def _inplace(case="view-kept", **extra):
    return {"case": case, "output": torch.ones(4, 2), "grads": {"block.lin0.weight": torch.ones(8, 8)}, **extra}


SET_STORAGE = ("RuntimeError", "setStorage: sizes [8, 8], strides [8, 1], storage offset 0, and itemsize 4 requiring "
                               "a storage size of 256 are out of bounds for storage of size 0")


@pytest.mark.unit
def test_the_inplace_output_check_names_each_departure():
    control = _inplace()
    assert check_inplace_output(_inplace(), control) == []
    (v,) = check_inplace_output(_inplace(output=torch.ones(4, 2) * 1.5), control)
    assert v.invariant == "FS2-14" and v.message.startswith("view-kept: the output differs from the control's by 0.5 "
                                                            "(tolerance 1.1e-05: 1e-05 of its largest entry + 1e-06)")
    (v,) = check_inplace_output(_inplace(grads={"block.lin0.weight": torch.full((8, 8), float("nan"))}), control)
    assert v.message.startswith("view-kept: the gradient of block.lin0.weight differs from the control's by nan")
    (v,) = check_inplace_output(_inplace(grads={"block.lin0.weight": None}), control)
    assert v.message == "view-kept: the gradient of block.lin0.weight is missing, the control's of shape (8, 8)"
    (v,) = check_inplace_output(_inplace(grads={"block.lin0.weight": torch.ones(8)}), control)
    assert "is of shape (8,), the control's of shape (8, 8)" in v.message
    (v,) = check_inplace_output(_inplace("view-resharded", error=SET_STORAGE), control, {"error": ("RuntimeError", "x")})
    assert v.error == SET_STORAGE and v.message.endswith("; torch's own walk: raises RuntimeError: x")


@pytest.mark.unit
def test_the_inplace_view_signature_is_the_resharded_cases_freed_storage_alone():
    dropped = BUGS["fs2-inplace-view-hook-dropped"].predicate
    control = _inplace()
    (resharded,) = check_inplace_output(_inplace("view-resharded", error=SET_STORAGE), control)
    assert dropped([resharded])
    # the kept case never frees the storage: the same error there is another bug
    (kept,) = check_inplace_output(_inplace("view-kept", error=SET_STORAGE), control)
    assert not dropped([kept])
    # another error, or one torch's own walk does not share, is not it
    (other,) = check_inplace_output(_inplace("view-resharded", error=("RuntimeError", "gloo: connection closed")), control)
    assert not dropped([other])
    (alone,) = check_inplace_output(_inplace("view-resharded", error=SET_STORAGE), control, {"output": None})
    assert not dropped([alone])
    # nothing may fail beside it, nor may it be another invariant's
    (wrong,) = check_inplace_output(_inplace(output=torch.ones(4, 2) * 2), control)
    assert not dropped([resharded, wrong])
    assert not dropped([Violation("FS2-12", resharded.message, error=SET_STORAGE)])


@pytest.mark.kill
def test_torch_resharding_a_kept_group_fails_fs2_14_beside_the_known_bug(run_faulted):
    """reshard_after_forward=False ignored: the kept case's backward reads
    freed storage with the known bug's own error, and the known bug is the
    resharded case's alone."""
    result, report = run_faulted(KEPT_RESHARDED)
    demand_torch_failures(result, report, KEPT_RESHARDED)


@pytest.mark.kill
def test_torch_scaling_the_kept_groups_gradients_fails_fs2_14(run_faulted):
    """A reduction ten percent off where the in-place add runs: a wrong
    gradient, no error, is FS2-14's FAIL."""
    result, report = run_faulted(KEPT_SCALED)
    demand_torch_failures(result, report, KEPT_SCALED)
