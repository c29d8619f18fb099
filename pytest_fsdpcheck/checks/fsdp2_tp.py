"""FS2-15 checker: ``fully_shard`` over the dp dimension of a 2-D (dp, tp)
mesh gives tensor-parallel parameters the gradients of the unsharded model,
each reduction in the policy's ``reduce_dtype``.

Pure: it reads the ranks' ``tp`` records (:mod:`pytest_fsdpcheck.runs.fsdp2_tp`)
and returns violations. The expected gradient of a parameter is computed
here from the control's partial gradients (every rank's, fp32, from the
plain model on its own rows): summed over the tp ranks and averaged over
the dp ranks, in fp32, as ``reduce_dtype=fp32`` asks (and as the fp32 step
does by default). The tolerance is fp32's: both sides add the same few fp32
terms, possibly in another order.

Where a gradient of the bf16 step differs, the finding also says whether
the difference is no more than rounding the tp sum to bf16 could make (at
most ``tp`` bf16 roundings, 2**-8 of the summed magnitudes each, averaged
over dp): that is what a tp reduction in the compute dtype gives, which
the message names, so a known bug can be exactly that wide.
"""

from __future__ import annotations

import dataclasses

import torch

from . import Violation, by_rank, short
from .distributed import _first_line

FS2_15 = "FS2-15"
#: fp32 summation of a handful of terms, in any order (FS2-9's tolerance)
TP_RTOL, TP_ATOL = 1e-4, 1e-5
#: one bf16 rounding, relative (8 bits of significand: half an ulp is 2**-9;
#: a whole ulp leaves room for the rounding of the operands' sum)
BF16_ROUNDING = 2.0 ** -8
#: how each step is named in a finding (``runs.fsdp2_tp.TP_STEP_NAMES``)
STEP_NAMES = {"fp32": "fp32 (no policy)", "bf16": "bf16 (param bf16, reduce fp32)"}
WITHIN_BF16 = "the tp reduction ran in bf16, not in the policy's reduce_dtype (fp32)"


def check_fsdp2_tp(results: list[dict], spec: str, where: str = "") -> list[Violation]:
    """FS2-15 over every rank's record for the implementation ``spec``:
    each parameter a DTensor on the (dp, tp) mesh after the ``fully_shard``
    calls, each with a gradient, each gradient the control's. ``where``
    prefixes every finding (``"world size 3, "`` for the second world)."""
    found: list[Violation] = []
    for result in results:
        rank = result.get("rank")
        if result.get("error"):
            found.append(Violation(FS2_15, f"rank {rank}: expected a step on a (dp, tp) mesh, but the rank failed: "
                                           f"{_first_line(result['error'])}"))
            continue
        if "FS2-9" in (result.get("unchecked") or {}):
            continue  # the world could not drive fully_shard at all: n/p (fsdp2_tp_unchecked)
        record = result.get("tp")
        if record is None:
            found.append(Violation(FS2_15, f"rank {rank}: no record of the step on a (dp, tp) mesh"))
            continue
        if record.get("unchecked"):
            continue
        if record.get("control_error"):
            found.append(Violation(FS2_15, f"rank {rank}: the (dp, tp) mesh or the control (the plain model's "
                                           f"gradients, gathered with all_gather) failed: "
                                           f"{_first_line(record['control_error'])}"))
            continue
        found += _check_impl(rank, record, spec)
    found = by_rank(found)
    if where:
        found = [dataclasses.replace(v, message=where + v.message) for v in found]
    return found


def _check_impl(rank, record: dict, spec: str) -> list[Violation]:
    mine = record["impls"].get(spec)
    if mine is None:
        return [Violation(FS2_15, f"rank {rank}: no record for {spec}")]
    if mine.get("error"):
        return [Violation(FS2_15, f"rank {rank}: fully_shard driven by {spec} on a (dp, tp) mesh failed: "
                                  f"{_first_line(mine['error'])}")]
    if mine.get("not_provided"):
        return []
    dp, tp = record["mesh"]
    out = []
    for mode in record["modes"]:
        step = f"rank {rank}, {STEP_NAMES.get(mode, mode)}, mesh {dp}x{tp} (dp x tp)"
        got = mine.get(mode) or {}
        if got.get("error"):
            out.append(Violation(FS2_15, f"{step}: the step raised {_first_line(got['error'])}"))
            continue
        out += _placements(step, got["placements"])
        out += _gradients(step, got["grads"], record["control"][mode]["partials"], dp, tp, mode)
    return out


def _placements(step: str, placements: dict) -> list[Violation]:
    """Every parameter sharded over dp by some call: a DTensor on the
    (dp, tp) mesh after the calls (``fully_shard`` of a parameter that is a
    DTensor on the tp mesh makes it one on their parent mesh)."""
    by_where: dict[str, list[str]] = {}
    for name, where in placements.items():
        if not where.startswith("a DTensor on the (dp, tp) mesh"):
            by_where.setdefault(where, []).append(name)
    return [Violation(FS2_15, f"{step}: {short(names)} were sharded over dp by no fully_shard call: each is {where} "
                              "after the calls, not a DTensor on the (dp, tp) mesh", evidence=tuple(names))
            for where, names in by_where.items()]


def expected_gradient(partials: torch.Tensor, dp: int, tp: int) -> torch.Tensor:
    """Every rank's partial gradient (rank order: rank = d * tp + t) summed
    over tp and averaged over dp, in fp32."""
    return partials.reshape(dp, tp, *partials.shape[1:]).sum(dim=(0, 1)) / dp


def bf16_rounding_bound(partials: torch.Tensor, dp: int, tp: int) -> torch.Tensor:
    """Per entry, the most that summing the ``tp`` partial gradients in
    bf16 (each addition rounded) moves the average over dp from the fp32
    one: ``tp`` roundings of at most the summed magnitudes each."""
    return tp * BF16_ROUNDING * partials.abs().reshape(dp, tp, *partials.shape[1:]).sum(dim=(0, 1)) / dp


def _gradients(step: str, grads: dict, partials: dict, dp: int, tp: int, mode: str) -> list[Violation]:
    missing = [name for name in partials if name not in grads]
    within, beyond = [], []
    for name, parts in partials.items():
        have = grads.get(name)
        if have is None:
            continue
        want = expected_gradient(parts, dp, tp)
        if have.shape != want.shape:
            beyond.append((float("inf"), name))
            continue
        if torch.allclose(have, want, rtol=TP_RTOL, atol=TP_ATOL):
            continue
        off = (have - want).abs()
        rounding = bool(mode == "bf16" and (off <= bf16_rounding_bound(parts, dp, tp) + TP_ATOL).all())
        (within if rounding else beyond).append((off.max().item(), name))
    out = []
    if missing:
        out.append(Violation(FS2_15, f"{step}: {short(missing)} got no gradient", evidence=tuple(missing)))
    tolerance = f"tolerance {TP_RTOL:g} relative, {TP_ATOL:g} absolute"
    if beyond:
        largest, name = max(beyond)
        names = [n for _, n in beyond]
        more = ", beyond what rounding each sum over the tp ranks to bf16 gives" if mode == "bf16" else ""
        out.append(Violation(FS2_15, f"{step}: the gradients of {short(names)} differ from the control's (the "
                                     f"largest by {largest:.3g}, of {name}; {tolerance}){more}", evidence=tuple(names)))
    if within:
        largest, name = max(within)
        names = [n for _, n in within]
        out.append(Violation(FS2_15, f"{step}: the gradients of {short(names)} differ from the control's (the "
                                     f"largest by {largest:.3g}, of {name}; {tolerance}), each by no more than "
                                     f"rounding its sum over the {tp} tp ranks to bf16 gives: {WITHIN_BF16}",
                             evidence=tuple(names)))
    return out


def fsdp2_tp_unchecked(results: list[dict]) -> str | None:
    """Why no rank could take FS2-15's step, or None: FS2-9's world could
    not drive ``fully_shard`` on this torch, or this torch builds no named
    2-D mesh (decided before anything ran)."""
    reasons = []
    for result in results:
        if result.get("error"):
            return None
        if "FS2-9" in (result.get("unchecked") or {}):
            reasons.append(result["unchecked"]["FS2-9"])
        elif (result.get("tp") or {}).get("unchecked"):
            reasons.append(result["tp"]["unchecked"])
        else:
            return None
    return reasons[0] if reasons else None
