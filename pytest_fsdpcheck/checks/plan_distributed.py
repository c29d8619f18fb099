"""FS2-9 on a user's plan: after the plan's real ``fully_shard`` calls at
the runner's world size, one step with the same inputs on every rank gives,
on every rank and for every parameter, the unsharded model's gradient for
those inputs (FSDP2 averages over ranks), eagerly and under
``torch.compile``. Judges the records of
:func:`pytest_fsdpcheck.runs.plan_run.run_plan_ranks`."""

from __future__ import annotations

from . import Violation

MODES = ("eager", "compiled")
RTOL = 1e-4
ATOL = 1e-5


def _first_line(text) -> str:
    return (str(text).strip().splitlines() or ["(no message)"])[0]


def check_plan_end_to_end(records, rtol: float = RTOL, atol: float = ATOL) -> list[Violation]:
    violations: list[Violation] = []
    for record in records:
        rank = record.get("rank", "?")
        if record.get("error"):
            violations.append(Violation("FS2-9", f"rank {rank} failed: {_first_line(record['error'])}",
                                        detail=str(record["error"])))
            continue
        reference = record.get("reference") or {}
        for mode in MODES:
            step = record.get(mode)
            if step is None:
                violations.append(Violation("FS2-9", f"rank {rank} recorded no {mode} step"))
                continue
            if step.get("error"):
                violations.append(Violation("FS2-9", f"rank {rank}, {mode}: the plan's step failed: "
                                                     f"{_first_line(step['error'])}", detail=str(step["error"])))
                continue
            grads = step.get("grads") or {}
            for name, want in reference.items():
                problem = _compare(grads.get(name, _MISSING), want, rtol, atol)
                if problem:
                    violations.append(Violation("FS2-9", f"rank {rank}, {mode}: the gradient of {name} {problem}"))
            for name in grads.keys() - reference.keys():
                violations.append(Violation("FS2-9", f"rank {rank}, {mode}: {name} is a parameter after the plan "
                                                     "but not of the unsharded model"))
    return violations


_MISSING = object()


def _compare(have, want, rtol, atol) -> str | None:
    import torch

    if have is _MISSING:
        return "is missing: the parameter is gone after the plan"
    if want is None or have is None:
        if want is None and have is None:
            return None
        return ("is None, the unsharded model's is not" if have is None
                else "exists, the unsharded model has none")
    if tuple(have.shape) != tuple(want.shape):
        return f"has shape {tuple(have.shape)}, the unsharded model's {tuple(want.shape)}"
    have, want = have.double(), want.double()
    if not torch.allclose(have, want, rtol=rtol, atol=atol):
        diff = (have - want).abs().max().item()
        scale = want.abs().max().item()
        return f"differs from the unsharded model's (max abs difference {diff:.3g}, largest entry {scale:.3g})"
    return None
