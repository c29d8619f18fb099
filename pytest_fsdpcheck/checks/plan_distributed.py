"""FS2-9 on a user's plan: after the plan's real ``fully_shard`` calls at
the runner's world size, one step with each rank's own batch gives, on
every rank and for every parameter, the unsharded model's gradient for all
the ranks' batches at the plan's own precision (each group computed in its
``param_dtype``, the ranks' gradients averaged in its ``reduce_dtype``),
eagerly and under ``torch.compile``; the compiled step must have compiled a
graph (one that ran eagerly shows nothing about compiled FSDP2). Judges the
records of :func:`pytest_fsdpcheck.runs.plan_world.run_plan_ranks`.

The tolerance is stated from the numerics, per parameter, and every
message states it with the measured difference. Beyond the fp32 tolerance
(``rtol``, ``atol``):

- eagerly, the control repeats the policy's casts op for op, so only the
  order in which the ranks' terms are summed may differ: ``world size x
  eps(reduce dtype) x the largest entry`` for a parameter reduced below its
  dtype;
- compiled, where the step computes anything upstream of the parameter
  below fp32 (``upstream``: the coarsest dtype of its own compute and of
  the step's activations, which its gradient is computed through, an fp32
  router downstream of bf16 blocks included), a compiler may fuse
  low-precision ops and round once where eager rounds at each:
  :data:`COMPILED_ULPS` ``x eps(upstream dtype) x the largest entry``, plus
  :data:`NOISE_FACTOR` times the difference measured between the
  *unsharded* model's compiled and eager gradients (``noise``): the
  model's own compiled-vs-eager noise with no FSDP at all is never the
  implementation's failure.

Ranks whose batches reach different parameters or call different modules
(a routed model on per-rank data, the record's ``reach``) are judged as
FSDP2 documents such a step: every parameter's gradient is the average over
the ranks with a zero where a rank's batch did not reach it, and a group
that reduces unused parameters (``set_reduce_scatter_unused_params``)
gives a parameter no rank reached a zero gradient, not none. A step that
fails where the plan leaves that switch off for a parameter some rank does
not reach, or where a rank never calls a group's module (the group
all-gathers in that forward, a collective of every rank), is the plan's:
:func:`reach_mistake`, a case error. With the plan keeping both, a failure
is the implementation's, and its line names the parameters and the ranks
that reach them, a hang included.

A rank killed at the ranks' time limit in the plan's own step, where the
unsharded control's same step took a small part of the time it spent
there, is a hang in ``fully_shard``'s runtime: a FAIL
(:func:`check_plan_end_to_end`). A world killed anywhere else (starting,
the control, or a step no slower than :data:`HANG_FACTOR` times its
control) is too slow to judge: :func:`world_too_slow`, an ERROR."""

from __future__ import annotations

from . import Violation, by_rank

MODES = ("eager", "compiled")
RTOL = 1e-4
ATOL = 1e-5
COMPILED_ULPS = 4
#: the sharded compiled step may fuse differently from the unsharded one
NOISE_FACTOR = 2
#: a step in the plan's world this many times slower than the same step of
#: the unsharded control (and at least MIN_HANG_S) is hung, not slow
HANG_FACTOR = 20
MIN_HANG_S = 5.0
#: an optimizer step on sharded parameters and the same step on plain
#: tensors holding the same gradients may round differently (a foreach or
#: fused kernel against a per-tensor one): this many ulps of the
#: parameter's largest entry
OPTIMIZER_ULPS = 8


def _first_line(text) -> str:
    return (str(text).strip().splitlines() or ["(no message)"])[0]


def check_plan_end_to_end(records, rtol: float = RTOL, atol: float = ATOL) -> list[Violation]:
    violations: list[Violation] = []
    reach = _reach(records)
    uneven = bool(reach["params"] or reach["modules"])
    for record in records:
        rank = record.get("rank", "?")
        hang = _hung(record, uneven)
        if hang is not None:
            violations.append(Violation("FS2-9", f"rank {rank}, {hang}", detail=str(record["error"])))
            continue
        if record.get("error"):
            violations.append(Violation("FS2-9", f"rank {rank} failed: {_first_line(record['error'])}",
                                        detail=str(record["error"])))
            continue
        if record.get("control_error"):
            # not the user's mistake (users_mistake): the step did not fail the same way
            step = (record.get("eager") or {}).get("error")
            beside = (f"the plan's eager step failed otherwise: {_first_line(step)}" if step
                      else "the plan's eager step ran")
            dtype = _operators_fail(record)
            if dtype is not None:
                beside = (f"the unsharded model cast wholly to {dtype} (no dtypes mixed, no fully_shard) fails the "
                          "same way: torch's operators fail at the plan's precision on their own")
            violations.append(Violation("FS2-9", f"rank {rank}: the unsharded control at the plan's precision "
                                                 f"failed: {_first_line(record['control_error'])}, where {beside}",
                                        detail=str(record["control_error"])))
            continue
        reference = record.get("reference") or {}
        precision = record.get("precision") or {}
        world_size = record.get("world_size") or 1
        upstream = record.get("upstream") or {}
        noise = record.get("noise") or {}
        for mode in MODES:
            step = record.get(mode)
            if step is not None and step.get("not_run") and uneven:
                continue  # the eager step's failure, in a world it broke, is what is judged
            if step is None:
                violations.append(Violation("FS2-9", f"rank {rank} recorded no {mode} step"))
                continue
            if step.get("error"):
                violations.append(Violation("FS2-9", f"rank {rank}, {mode}: the plan's step failed: "
                                                     f"{_first_line(step['error'])}", detail=str(step["error"])))
                continue
            grads = step.get("grads") or {}
            # the model's own compiled layers run a compiler's kernels even in the eager step
            compiled = mode == "compiled" or bool(step.get("own_compiled"))
            misses = []
            zero_for_unused = _unused_reduced(step)
            for name, want in reference.items():
                have = grads.get(name, _MISSING)
                if want is None and name in zero_for_unused and _all_zero(have):
                    continue  # FSDP2 reduces a zero gradient for a parameter no rank reached, as documented
                problem = _compare(have, want, rtol, atol,
                                   _low_precision(precision.get(name), "compiled" if compiled else mode,
                                                  world_size, upstream.get(name), noise.get(name)))
                if problem:
                    misses.append((name, *problem))
            if misses:
                violations.append(_gradients_missed(rank, mode, misses, len(reference), step, record.get("backend")))
            stepped = _optimizer_missed(rank, mode, step.get("optimizer"))
            if stepped is not None:
                violations.append(stepped)
            for name in grads.keys() - reference.keys():
                violations.append(Violation("FS2-9", f"rank {rank}, {mode}: {name} is a parameter after the plan "
                                                     "but not of the unsharded model"))
            # a model that compiles nothing even unsharded is the case's limit
            # (uncompilable_model), not the implementation's failure; nor does a
            # model that compiles its own modules (torchtitan's per-block
            # torch.compile) owe the outer compile a graph: its blocks run
            # compiled either way, as the user runs them (on 2.13 the outer
            # torch.compile of such an FSDP2 root hands its backend none)
            if step.get("graphs") == 0 and step.get("unsharded_graphs") != 0 and not step.get("own_compiled"):
                violations.append(Violation("FS2-9", f"rank {rank}, {mode}: {_nothing_compiled(step.get('unsharded_graphs'))}"))
    if uneven and violations:
        where = _reach_words(reach)
        groups = _plan_groups(records)
        if groups is not None and _reach_broken(reach, groups) is None:
            where += ("; the plan calls every group's module on every rank and reduces unused parameters, as FSDP2 "
                      "documents such a step")
        violations = [Violation(v.invariant, f"{v.message} ({where})", detail=v.detail) for v in violations]
    # one line for what the ranks report alike (a step failing, or the
    # same gradient wrong on every rank after the reduction)
    return by_rank(violations)


def _reach(records) -> dict:
    """The ranks' reach as the records say it (every rank computes every
    rank's batch, so any record that has it has all of it)."""
    for record in records:
        if record.get("reach"):
            return record["reach"]
    return {"params": {}, "modules": {}}


def _plan_groups(records) -> list[dict] | None:
    for record in records:
        for mode in MODES:
            groups = (record.get(mode) or {}).get("plan_groups")
            if groups is not None:
                return groups
    return None


def _unused_reduced(step: dict) -> set:
    return {name for group in step.get("plan_groups") or () if group.get("unused_reduced")
            for name in group.get("params") or ()}


def _all_zero(tensor) -> bool:
    import torch

    return isinstance(tensor, torch.Tensor) and not bool(tensor.any())


def _ranks(ranks) -> str:
    return f"rank{'s' if len(ranks) > 1 else ''} {', '.join(map(str, ranks))}"


def _reach_words(reach: dict, limit: int = 3) -> str:
    """The ranks' batches' uneven reach, in a few words."""
    parts = []
    for kind, items in (("parameters", reach["params"]), ("modules' forwards", reach["modules"])):
        if items:
            shown = [f"{name} only on {_ranks(ranks)}" for name, ranks in list(items.items())[:limit]]
            more = f" and {len(items) - limit} more" if len(items) > limit else ""
            parts.append(f"{kind} {', '.join(shown)}{more}")
    return "the ranks' batches reach different " + "; ".join(parts)


def _step_failed(records, violations) -> bool:
    """Whether the plan's own step did not pass: a step raised, a rank died
    or was killed in one (its last phase a step), or, where no rank failed
    elsewhere (starting, the control), a violation (a wrong gradient)."""
    def in_step(record) -> bool:
        return (record.get("progress") or {}).get("phase") in MODES

    if any((record.get(mode) or {}).get("error") for record in records for mode in MODES):
        return True
    if any(record.get("error") and in_step(record) for record in records):
        return True
    elsewhere = any(record.get("error") and not in_step(record) for record in records)
    return bool(violations) and not elsewhere


def reach_mistake(records, violations) -> str | None:
    """Why FS2-9 judges no implementation on a plan whose step did not
    pass (``violations``, or a rank that failed, died or was killed) where
    the ranks' batches reach different parameters or call different modules
    (:func:`_reach`), and the plan breaks what FSDP2 documents such a step
    needs:

    - every rank calls the forward of each group's modules (its ``roots``):
      the group all-gathers its parameters there, a collective of all its
      ranks, so a rank that skips it leaves the others waiting;
    - a group holding a parameter some rank's batch does not reach reduces
      unused parameters (``set_reduce_scatter_unused_params(True)``, which
      FSDP2 documents as needed where ranks use different parameters, as
      DDP's ``find_unused_parameters``): without it the ranks' reduce-scatters
      differ in size.

    The user's mistake, a case error naming the module or parameter. None
    where the step passed, the reach is even, or the plan keeps both: a
    failure is then the implementation's (:func:`check_plan_end_to_end`)."""
    reach = _reach(records)
    if not (reach["params"] or reach["modules"]) or not _step_failed(records, violations):
        return None
    groups = _plan_groups(records)
    return None if groups is None else _reach_broken(reach, groups)


def _reach_broken(reach: dict, groups: list[dict]) -> str | None:
    """What of FSDP2's documented per-rank step the plan's ``groups``
    break for the ranks' ``reach`` (:func:`reach_mistake`), or None."""
    for group in groups:
        for root in group.get("roots") or ():
            ranks = reach["modules"].get(root)
            if ranks is not None:
                return (f"the ranks' batches call {root or '<root>'}'s forward only on {_ranks(ranks)}, and the plan "
                        "makes it a fully_shard group, which all-gathers its parameters in that forward, a collective "
                        "of every rank: the other ranks never join it and the step fails or hangs; call the group's "
                        "module on every rank, or shard it with its caller's group")
    for group in groups:
        if group.get("unused_reduced"):
            continue
        for name in group.get("params") or ():
            ranks = reach["params"].get(name)
            if ranks is not None:
                root = ", ".join(r or "<root>" for r in group.get("roots") or ()) or "?"
                return (f"the ranks' batches reach {name} only on {_ranks(ranks)}, and its group ({root}) leaves "
                        "set_reduce_scatter_unused_params off, which FSDP2 documents as needed where ranks use "
                        "different parameters: the ranks' reduce-scatters differ and the step fails, hangs or mixes "
                        "gradients; call it on the group, True")
    return None


def users_mistake(records) -> str | None:
    """Why FS2-9 judges no implementation on the plan: on every rank the
    unsharded control at the plan's precision (which runs nothing of
    ``fully_shard``) failed, and the plan's own eager step failed the same
    way (the same exception type and first line). The plan or the model
    cannot take its own precision: the user's mistake, a case error, never
    a cell in torch's column. ``None`` where any rank's step ran, failed
    otherwise, or the control ran: those stay the implementation's to
    judge (:func:`check_plan_end_to_end`)."""
    failures = set()
    for record in records:
        control = record.get("control_error")
        step = (record.get("eager") or {}).get("error")
        if record.get("error") or not control or not step or _first_line(control) != _first_line(step):
            return None
        if _operators_fail(record):
            return None  # the model wholly in the plan's dtype fails too: torch's operators, not the plan
        failures.add(_first_line(control))
    if not failures:
        return None
    return ("the plan's step fails in the unsharded model at the plan's own precision too, where no fully_shard "
            f"runs: {' / '.join(sorted(failures))} (the plan's eager step raises the same on every rank); "
            "fix the plan or the model: FS2-9 judges no implementation on it")


def _operators_fail(record) -> str | None:
    """The dtype at which the unsharded model, cast *wholly* to the plan's
    coarsest compute dtype (a step the plan did not ask for: nothing mixes
    dtypes), failed as the control did, or None. A control failing at the
    plan's precision shares torch's operators with the sharded step; this
    step tells a plan mixing precisions (the user's: it runs) from
    operators failing at that dtype on their own (torch's: it fails the
    same way)."""
    uniform = record.get("uniform") or {}
    error = uniform.get("error")
    if error and _first_line(error) == _first_line(record.get("control_error")):
        return uniform.get("dtype")
    return None


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


def _low_precision(dtypes, mode: str, world_size: int, upstream: str | None = None, noise: float | None = None):
    """``(slack relative to the largest entry, absolute slack, how it is
    worded)`` for a parameter the plan computes or reduces in ``dtypes =
    (param, reduce)`` below its own dtype, or (compiled) whose gradient is
    computed through ``upstream`` below fp32, with the unsharded model's own
    compiled-vs-eager difference ``noise``; ``None`` where nothing is below
    fp32."""
    import torch

    fp32 = torch.finfo(torch.float32).eps
    compute, reduce = dtypes or (None, None)
    slack, absolute, words = 0.0, 0.0, []
    if reduce is not None:
        slack += world_size * torch.finfo(getattr(torch, reduce)).eps
        words.append(f"{world_size} x eps({reduce}) for the order of the ranks' sum")
    coarse = [d for d in (compute, upstream) if d is not None and torch.finfo(getattr(torch, d)).eps > fp32]
    if mode == "compiled" and coarse:
        fused = max(coarse, key=lambda d: torch.finfo(getattr(torch, d)).eps)
        slack += COMPILED_ULPS * torch.finfo(getattr(torch, fused)).eps
        words.append(f"{COMPILED_ULPS} x eps({fused}) for fused kernels")
        if noise:
            absolute = NOISE_FACTOR * noise
            words.append(f"{NOISE_FACTOR} x {noise:.3g}, the unsharded model's own compiled-vs-eager difference")
    if not words:
        return None
    where = (f"at the plan's precision ({compute} compute, {reduce} reduction" if dtypes
             else f"(computed through {upstream}")
    return slack, absolute, f"{where}; allowed: {' + '.join(words)}"


def _compare(have, want, rtol, atol, low=None) -> tuple[str, float] | None:
    """``(what is wrong, the difference relative to the largest entry)``
    (infinite where no number compares: missing, None, another shape or
    dtype), or None where the gradient is within the tolerance."""
    import torch

    inf = float("inf")
    if have is _MISSING:
        return "is missing: the parameter is gone after the plan", inf
    if want is None or have is None:
        if want is None and have is None:
            return None
        return ("is None, the unsharded model's is not" if have is None
                else "exists, the unsharded model has none"), inf
    if tuple(have.shape) != tuple(want.shape):
        return f"has shape {tuple(have.shape)}, the unsharded model's {tuple(want.shape)}", inf
    if have.dtype != want.dtype:
        return (f"has dtype {str(have.dtype).removeprefix('torch.')}, the unsharded model's "
                f"{str(want.dtype).removeprefix('torch.')}"), inf
    have, want = have.double(), want.double()
    scale = want.abs().max().item() if want.numel() else 0.0
    slack, absolute, words = low if low is not None else (0.0, 0.0, "")
    allowed = atol + slack * scale + absolute
    if not torch.allclose(have, want, rtol=rtol, atol=allowed):
        diff = (have - want).abs().max().item()
        at = f" {words}" if words else ""
        tolerance = f"{allowed:.3g} + rtol {rtol:g} x each entry"
        return (f"differs from the unsharded model's{at}{')' if words else ''} (max abs difference {diff:.3g}, "
                f"largest entry {scale:.3g}, tolerance {tolerance})"), (diff / scale if scale else inf)
    return None


def _what_compiled(mode: str, step: dict, backend) -> str:
    """What the step ran through a compiler: the numerics its tolerance is for."""
    own = step.get("own_compiled") or []
    parts = []
    if mode == "compiled":
        graphs = step.get("graphs")
        parts.append(f"the whole step with {backend or 'its backend'}"
                     + (f" ({graphs} graph{'s' if graphs != 1 else ''})" if graphs is not None else ""))
    if own:
        parts.append(f"{len(own)} of the model's own compiled modules ({', '.join(own[:2])}"
                     f"{', ...' if len(own) > 2 else ''})")
    return " and ".join(parts) or "nothing (eager)"


def _gradients_missed(rank, mode: str, misses: list, total: int, step: dict, backend) -> Violation:
    """One violation for a step's wrong gradients: its first line says how
    many differ, the worst (by its difference relative to its largest
    entry, with that figure), what the step compiled and the tolerance; the
    detail lists every parameter's line."""
    worst, detail = _summary(misses, total, "gradients", "the gradient of ")
    message = f"rank {rank}, {mode}: {worst}; the step compiled {_what_compiled(mode, step, backend)}"
    return Violation("FS2-9", message, detail=detail)


def _summary(misses: list, total: int, what: str, prefix: str = "") -> tuple[str, str]:
    """``(first line, detail)`` of ``misses`` (``(name, problem, relative
    difference)`` each): how many of ``total`` ``what`` are wrong where more
    than one, the worst by its relative difference with that figure; the
    detail every one's line."""
    name, problem, relative = max(misses, key=lambda miss: miss[2])
    worst = f"{prefix}{name} {problem}"
    if relative != float("inf"):
        worst += f", {relative:.3g} of its largest entry"
    count = f"{len(misses)} of {total} {what} are wrong; worst: " if len(misses) > 1 else ""
    return count + worst, "\n".join(f"{prefix}{n} {p}" for n, p, _ in misses)


def _optimizer_missed(rank, mode: str, optimizer: dict | None) -> Violation | None:
    """The framework's optimizer step on the sharded parameters against the
    same optimizer's step on plain tensors holding the sharded step's own
    gathered gradients (``optimizer``: ``after`` and ``expected``, full
    parameters by name): the same numbers go into the same formulas, in the
    parameters' own dtype, so only the rounding of a differently ordered
    elementwise kernel may differ (:data:`OPTIMIZER_ULPS` ulps of the
    parameter's largest entry). Wrong gradients are judged apart; this
    judges what the optimizer does with sharded parameters."""
    if not optimizer:
        return None
    import torch

    after, expected = optimizer.get("after") or {}, optimizer.get("expected") or {}
    misses = []
    for name, want in expected.items():
        low = None
        if isinstance(want, torch.Tensor) and want.is_floating_point():
            low = (OPTIMIZER_ULPS * torch.finfo(want.dtype).eps, 0.0, "")
        problem = _compare(after.get(name, _MISSING), want, 0.0, 0.0, low)
        if problem:
            text, relative = problem
            misses.append((name, text.replace("the unsharded model", "the plain optimizer"), relative))
    if not misses:
        return None
    worst, detail = _summary(misses, len(expected), "parameters")
    return Violation("FS2-9", f"rank {rank}, {mode}: after the framework's optimizer step on the sharded parameters, "
                              f"{worst} (the same optimizer stepped on plain tensors holding the step's own gradients)",
                     detail=detail)


def _hung(record, uneven: bool = False) -> str | None:
    """How a rank killed at the limit hung in the plan's own step (eager or
    compiled), where it spent more than :data:`HANG_FACTOR` times (and at
    least :data:`MIN_HANG_S`) what the unsharded control's same step took,
    or (no such step measured: an fp32 plan's compiled step) at least the
    per-call limit ``--fsdpcheck-timeout``, as any implementation call that
    long is hung; ``None`` for any other rank."""
    progress = record.get("progress") or {}
    mode = progress.get("phase")
    if not record.get("timed_out") or mode not in MODES or record.get("killed_at") is None:
        return None
    control = progress.get("control_s") if mode == "eager" else progress.get("compiled_control_s")
    spent = record["killed_at"] - progress.get("phase_at", record["killed_at"])
    head = (f"{mode}: the plan's step did not finish: killed after {spent:.0f} s in it at the ranks' limit of "
            f"{record.get('limit_s') or 0:.0f} s")
    if control is not None and spent >= max(MIN_HANG_S, HANG_FACTOR * control):
        kind = "step" if mode == "eager" else "step (compiling included)"
        return f"{head}, where the unsharded model's {kind} took {control:.2g} s (a hang in fully_shard's runtime)"
    call_limit = record.get("call_limit_s")
    if call_limit and spent >= call_limit:
        return f"{head}, longer than one call may take (--fsdpcheck-timeout {call_limit:g} s): hung"
    if uneven:
        # the other ranks finished their step's share: this one waits on a collective they never reached
        return f"{head}, waiting on a collective the other ranks never reached (hung)"
    return None


def world_too_slow(records) -> str | None:
    """Why the world could not judge the plan: a rank was killed at the
    ranks' time limit outside the plan's steps (starting, the control), or
    in a step no slower than its control allows (:func:`_hung`): the whole
    world is slow, an ERROR of the environment, never the implementation's
    FAIL. ``None`` where no rank timed out that way."""
    reach = _reach(records)
    uneven = bool(reach["params"] or reach["modules"])
    for record in records:
        if record.get("timed_out") and _hung(record, uneven) is None:
            progress = record.get("progress") or {}
            phase = progress.get("phase", "starting")
            spent = (record.get("killed_at") or 0) - progress.get("phase_at", record.get("killed_at") or 0)
            measured = ", ".join(f"{key} {progress[key]:.2g} s" for key in ("control_s", "compiled_control_s")
                                 if progress.get(key) is not None) or "no step measured yet"
            return (f"rank {record.get('rank', '?')} was killed at the ranks' limit of {record.get('limit_s') or 0:.0f} s "
                    f"in phase {phase!r} after {spent:.0f} s there ({measured}): the world is too slow to judge "
                    "the plan; raise --fsdpcheck-timeout")
    return None
