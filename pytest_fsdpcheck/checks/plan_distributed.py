"""FS2-9 on a user's plan: after the plan's real ``fully_shard`` calls at
the runner's world size, one step with each rank's own batch gives, on
every rank and for every parameter, the unsharded model's gradient for all
the ranks' batches at the plan's own precision (each group computed in its
``param_dtype``, the ranks' gradients averaged in its ``reduce_dtype``),
eagerly and under ``torch.compile``; the compiled step must have compiled a
graph (one that ran eagerly shows nothing about compiled FSDP2). Judges the
records of :func:`pytest_fsdpcheck.runs.plan_run.run_plan_ranks`.

The control repeats the policy's casts op for op, so eagerly only the order
in which the ranks' terms are summed may differ: ``world size x eps(reduce
dtype) x the largest entry`` beyond the fp32 tolerance. A compiler may fuse
low-precision ops and round once where eager rounds at each, so a compiled
step computing in a low ``param_dtype`` also gets :data:`COMPILED_ULPS`
``x eps(param dtype) x the largest entry``. Both are stated in the message."""

from __future__ import annotations

from . import Violation

MODES = ("eager", "compiled")
RTOL = 1e-4
ATOL = 1e-5
COMPILED_ULPS = 4


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
        precision = record.get("precision") or {}
        world_size = record.get("world_size") or 1
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
                problem = _compare(grads.get(name, _MISSING), want, rtol, atol,
                                   _low_precision(precision.get(name), mode, world_size))
                if problem:
                    violations.append(Violation("FS2-9", f"rank {rank}, {mode}: the gradient of {name} {problem}"))
            for name in grads.keys() - reference.keys():
                violations.append(Violation("FS2-9", f"rank {rank}, {mode}: {name} is a parameter after the plan "
                                                     "but not of the unsharded model"))
            # a model that compiles nothing even unsharded is the case's limit
            # (uncompilable_model), not the implementation's failure
            if step.get("graphs") == 0 and step.get("unsharded_graphs") != 0:
                violations.append(Violation("FS2-9", f"rank {rank}, {mode}: {_nothing_compiled(step.get('unsharded_graphs'))}"))
    return violations


def uncompilable_model(records) -> str | None:
    """Why the compiled mode cannot say anything about this model, whatever
    the implementation: neither the sharded nor the unsharded model gave
    ``torch.compile``'s backend a graph on any rank."""
    steps = [record.get("compiled") or {} for record in records if not record.get("error")]
    if steps and all(step.get("graphs") == 0 and step.get("unsharded_graphs") == 0 for step in steps):
        return ("FS2-9's compiled step needs a compiled graph, and the model's forward compiles none even "
                "unsharded: it runs outside Dynamo (torch._dynamo.disable, or a graph break at every op)")
    return None


def _nothing_compiled(unsharded) -> str:
    head = "torch.compile gave its backend no graph of the sharded model, so the step ran eagerly and shows nothing about compiled FSDP2"
    if isinstance(unsharded, int):
        return f"{head}; the unsharded model's forward compiles {unsharded} graph(s)"
    return f"{head}; the unsharded model's compiled forward failed: {unsharded}"


_MISSING = object()


def _low_precision(dtypes, mode: str, world_size: int):
    """``(slack relative to the largest entry, how it is worded)`` for a
    parameter the plan computes or reduces in ``dtypes = (param, reduce)``
    below its own dtype; ``None`` for one it keeps in its own."""
    if not dtypes:
        return None
    import torch

    compute, reduce = dtypes
    eps = {name: torch.finfo(getattr(torch, name)).eps for name in dtypes}
    slack = world_size * eps[reduce]
    words = f"{world_size} x eps({reduce}) for the order of the ranks' sum"
    if mode == "compiled" and eps[compute] > torch.finfo(torch.float32).eps:
        slack += COMPILED_ULPS * eps[compute]
        words += f" + {COMPILED_ULPS} x eps({compute}) for fused kernels"
    return slack, (f"at the plan's precision ({compute} compute, {reduce} reduction; allowed: {words}, "
                   "times the largest entry)")


def _compare(have, want, rtol, atol, low=None) -> str | None:
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
    if have.dtype != want.dtype:
        return f"has dtype {str(have.dtype).removeprefix('torch.')}, the unsharded model's " \
               f"{str(want.dtype).removeprefix('torch.')}"
    have, want = have.double(), want.double()
    scale = want.abs().max().item() if want.numel() else 0.0
    slack, words = low if low is not None else (0.0, "")
    if not torch.allclose(have, want, rtol=rtol, atol=atol + slack * scale):
        diff = (have - want).abs().max().item()
        at = f" {words}" if words else ""
        return f"differs from the unsharded model's{at} (max abs difference {diff:.3g}, largest entry {scale:.3g})"
    return None
