"""FS2-15's checker on hand-made rank records (a (dp, tp) mesh's step: each
parameter's placement, every gradient against the control's partial
gradients), and the width of torch's known ``fs2-tp-reduce-in-compute-dtype``.
The planted walk and the fault in torch's runtime run through real worlds:
tests/test_planted_distributed.py and tests/test_distributed_world.py."""

import pytest
import torch

from pytest_fsdpcheck.checks import Violation
from pytest_fsdpcheck.checks.fsdp2_tp import (
    bf16_rounding_bound,
    check_fsdp2_tp,
    expected_gradient,
    fsdp2_tp_unchecked,
)
from pytest_fsdpcheck.impls.torch_bug_signatures import tp_reduced_in_compute_dtype

pytestmark = pytest.mark.unit

ON_MESH = "a DTensor on the (dp, tp) mesh, (Shard(dim=0), Replicate())"
#: the two tp ranks' partial gradients of one parameter, exact in bf16
PARTIALS = torch.tensor([[1.0, 0.5], [2.0 ** -9, 0.25]])
FP32_SUM = PARTIALS.sum(0)
BF16_SUM = FP32_SUM.to(torch.bfloat16).float()


def _record(rank=0, fp32=None, bf16=None, placements=None, **changes):
    def step(grad):
        return {"placements": placements or {"norm.weight": ON_MESH}, "grads": {"norm.weight": grad},
                "fully_shard_calls": 2}

    tp = {
        "mesh": [1, 2], "modes": ["fp32", "bf16"],
        "control": {mode: {"partials": {"norm.weight": PARTIALS.clone()}} for mode in ("fp32", "bf16")},
        "impls": {"impl": {"error": None, "not_provided": False,
                           "fp32": step(FP32_SUM.clone() if fp32 is None else fp32),
                           "bf16": step(FP32_SUM.clone() if bf16 is None else bf16)}},
    }
    tp.update(changes)
    return {"rank": rank, "error": None, "unchecked": {}, "tp": tp}


def test_expected_gradient_sums_over_tp_and_averages_over_dp():
    partials = torch.arange(4.0).reshape(4, 1)  # ranks (d, t): 0 (0, 0), 1 (0, 1), 2 (1, 0), 3 (1, 1)
    assert expected_gradient(partials, 2, 2).tolist() == [(0 + 1 + 2 + 3) / 2]
    assert expected_gradient(partials, 1, 4).tolist() == [6.0]
    assert bf16_rounding_bound(partials, 2, 2).tolist() == [2 * 2.0 ** -8 * 6 / 2]


def test_a_right_step_passes_on_every_rank():
    assert check_fsdp2_tp([_record(0), _record(1)], "impl") == []


def test_a_bf16_step_summed_over_tp_in_bf16_is_named_so_once_for_every_rank():
    assert not torch.equal(BF16_SUM, FP32_SUM)
    (v,) = check_fsdp2_tp([_record(0, bf16=BF16_SUM), _record(1, bf16=BF16_SUM)], "impl")
    assert v.invariant == "FS2-15"
    assert v.message == (
        "ranks 0, 1, bf16 (param bf16, reduce fp32), mesh 1x2 (dp x tp): the gradients of [norm.weight] differ from "
        "the control's (the largest by 0.00195, of norm.weight; tolerance 0.0001 relative, 1e-05 absolute), each by "
        "no more than rounding its sum over the 2 tp ranks to bf16 gives: the tp reduction ran in bf16, not in the "
        "policy's reduce_dtype (fp32)")
    assert tp_reduced_in_compute_dtype([v])


def test_a_difference_beyond_bf16_rounding_or_in_the_fp32_step_is_not_named_a_bf16_sum():
    lost = PARTIALS[0].clone()  # rank 0's partial only: the tp sum never taken
    (beyond,) = check_fsdp2_tp([_record(0, bf16=lost)], "impl")
    assert beyond.message.startswith("rank 0, bf16 (param bf16, reduce fp32), mesh 1x2 (dp x tp): the gradients of "
                                     "[norm.weight] differ from the control's (the largest by 0.25, of norm.weight")
    assert beyond.message.endswith("beyond what rounding each sum over the tp ranks to bf16 gives")
    (fp32,) = check_fsdp2_tp([_record(0, fp32=BF16_SUM)], "impl")
    assert fp32.message.startswith("rank 0, fp32 (no policy), mesh 1x2 (dp x tp): the gradients of [norm.weight] "
                                   "differ from the control's")
    assert "bf16" not in fp32.message.split("mesh", 1)[1]
    assert not tp_reduced_in_compute_dtype([beyond]) and not tp_reduced_in_compute_dtype([fp32])


def test_each_other_departure_is_named():
    outside = "a DTensor on the (tp) mesh, (Replicate(),)"
    (placed,) = check_fsdp2_tp([_record(0, placements={"norm.weight": outside})], "impl")[:1]
    assert placed.message == ("rank 0, fp32 (no policy), mesh 1x2 (dp x tp): [norm.weight] were sharded over dp by no "
                              f"fully_shard call: each is {outside} after the calls, not a DTensor on the (dp, tp) mesh")
    missing = _record(0)
    missing["tp"]["impls"]["impl"]["bf16"]["grads"] = {}
    (v,) = check_fsdp2_tp([missing], "impl")
    assert v.message == "rank 0, bf16 (param bf16, reduce fp32), mesh 1x2 (dp x tp): [norm.weight] got no gradient"
    raised = _record(0)
    raised["tp"]["impls"]["impl"]["bf16"] = {"error": "Traceback ...\nRuntimeError: gloo: no bf16"}
    (v,) = check_fsdp2_tp([raised], "impl")
    assert v.message == "rank 0, bf16 (param bf16, reduce fp32), mesh 1x2 (dp x tp): the step raised RuntimeError: gloo: no bf16"
    failed = _record(0)
    failed["tp"]["impls"]["impl"] = {"error": "Traceback ...\nValueError: walk", "not_provided": False}
    (v,) = check_fsdp2_tp([failed], "impl")
    assert v.message == "rank 0: fully_shard driven by impl on a (dp, tp) mesh failed: ValueError: walk"
    control = _record(0)
    control["tp"]["control_error"] = "Traceback ...\nRuntimeError: all_gather"
    (v,) = check_fsdp2_tp([control], "impl")
    assert v.message.startswith("rank 0: the (dp, tp) mesh or the control (the plain model's gradients, gathered "
                                "with all_gather) failed: RuntimeError: all_gather")
    (v,) = check_fsdp2_tp([{"rank": 1, "error": "Traceback ...\nRuntimeError: killed"}], "impl")
    assert v.message == "rank 1: expected a step on a (dp, tp) mesh, but the rank failed: RuntimeError: killed"
    (v,) = check_fsdp2_tp([{"rank": 0, "error": None, "unchecked": {}}], "impl")
    assert v.message == "rank 0: no record of the step on a (dp, tp) mesh"
    (v,) = check_fsdp2_tp([_record(0)], "other")
    assert v.message == "rank 0: no record for other"
    assert check_fsdp2_tp([_record(0, bf16=BF16_SUM)], "impl", where="world size 3, ")[0].message.startswith(
        "world size 3, rank 0, bf16")


def test_what_this_torch_cannot_build_is_not_provided_with_its_reason():
    assert fsdp2_tp_unchecked([_record(0), _record(1)]) is None
    undrivable = {"rank": 0, "error": None, "unchecked": {"FS2-9": "torch 9.9 has no _get_managed_modules"}}
    assert fsdp2_tp_unchecked([undrivable]) == "torch 9.9 has no _get_managed_modules"
    assert check_fsdp2_tp([undrivable], "impl") == []
    no_mesh = _record(0)
    no_mesh["tp"] = {"unchecked": "torch 9.9 cannot build a named (dp, tp) device mesh: TypeError: x"}
    assert fsdp2_tp_unchecked([no_mesh]) == no_mesh["tp"]["unchecked"]
    assert check_fsdp2_tp([no_mesh], "impl") == []
    assert fsdp2_tp_unchecked([no_mesh, {"rank": 1, "error": "killed"}]) is None


def test_the_tp_sum_bug_explains_the_bf16_steps_rounding_and_nothing_beside_it():
    """``fs2-tp-reduce-in-compute-dtype``: the bf16 step's gradients each
    within bf16's rounding of their tp sum, in one world or both; a wrong
    fp32 step, a difference beyond that rounding, a parameter left unsharded
    or without a gradient, or another invariant beside it is not this bug."""
    rounded = check_fsdp2_tp([_record(0, bf16=BF16_SUM), _record(1, bf16=BF16_SUM)], "impl")
    second = check_fsdp2_tp([_record(r, bf16=BF16_SUM) for r in range(3)], "impl", where="world size 3, ")
    assert tp_reduced_in_compute_dtype(rounded + second)
    assert not tp_reduced_in_compute_dtype([])
    besides = [
        check_fsdp2_tp([_record(0, fp32=PARTIALS[0].clone())], "impl"),
        check_fsdp2_tp([_record(0, bf16=PARTIALS[0].clone())], "impl"),
        check_fsdp2_tp([_record(0, placements={"norm.weight": "a plain tensor"})], "impl"),
        [Violation("FS2-9", rounded[0].message)],
    ]
    for other in besides:
        assert other and not tp_reduced_in_compute_dtype(rounded + other), other
