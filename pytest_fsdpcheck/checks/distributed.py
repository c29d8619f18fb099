"""SPL-16 checker: judges what the ranks of a real DDP run reported.

Pure: it reads the per-rank result dicts written by
:mod:`pytest_fsdpcheck.runs.ddp_run` (plain dicts of numbers, strings and CPU
tensors) and returns violations. It shares no code with any splitter.
"""

from __future__ import annotations

from . import Violation, by_rank, short

REASON_MARK = "DDPOptimizer"


def _first_line(text: str) -> str:
    lines = [line for line in str(text).strip().splitlines() if line.strip()]
    return lines[-1].strip() if lines else str(text)


def check_ddp_end_to_end(results: list[dict], spec: str, rtol: float = 1e-5, atol: float = 1e-6) -> list[Violation]:
    """SPL-16 over every rank's result for the implementation ``spec``."""
    violations: list[Violation] = []
    for result in results:
        rank = result.get("rank")
        if result.get("error"):
            violations.append(Violation("SPL-16", f"rank {rank}: expected a training step, but it failed: {_first_line(result['error'])}"))
            continue
        violations += _check_rank(result, spec, rtol, atol)
    violations += _check_ranks_agree([r for r in results if not r.get("error")], rtol, atol)
    return by_rank(violations)  # one line for what every rank reports alike


def _check_rank(result: dict, spec: str, rtol: float, atol: float) -> list[Violation]:
    rank = result["rank"]
    out: list[Violation] = []
    plan = result["plans"].get(spec)
    if plan is None or plan.get("error"):
        why = "no plan was recorded" if plan is None else _first_line(plan["error"])
        return [Violation("SPL-16", f"rank {rank}: expected a plan for the graph Dynamo handed to DDPOptimizer, but split() failed: {why}")]
    handed = result["graphs_handed"]
    if handed < 1:
        out.append(Violation("SPL-16", f"rank {rank}: expected Dynamo to hand DDPOptimizer at least one graph of the DDP module, it handed none"))
    planned = sum(plan["buckets"])
    compiled = result["compiled_subgraphs"]
    if planned != compiled:
        out.append(Violation(
            "SPL-16",
            f"rank {rank}: expected one compiled subgraph per planned bucket ({planned} buckets, per graph "
            f"{plan['buckets']}), torch.compile of DDP compiled {compiled}",
        ))
    # The model has parameters for several caps' worth: one bucket would mean
    # the cap is ignored, and the end-to-end check would prove nothing.
    cap = result["ddp_bucket_bytes_cap"]
    if result["param_bytes"] >= 2 * cap and compiled < 2:
        out.append(Violation(
            "SPL-16",
            f"rank {rank}: expected several buckets for {result['param_bytes']} parameter bytes at a "
            f"{cap}-byte bucket cap, torch.compile produced {compiled} subgraph(s)",
        ))
    if compiled > 1:
        unnamed = [i for i, reason in enumerate(result["reasons"]) if REASON_MARK not in reason]
        if unnamed:
            out.append(Violation(
                "SPL-16",
                f"rank {rank}: expected every split subgraph's compile reason to name {REASON_MARK}, "
                f"subgraph(s) {unnamed} gave {result['reasons'][unnamed[0]]!r}",
            ))
    out += _compare("gradient", rank, result["control"]["grads"], result["compiled"]["grads"], rtol, atol,
                    result["eager"]["grads"])
    out += _compare("parameter after the step", rank, result["control"]["params"], result["compiled"]["params"],
                    rtol, atol, result["eager"]["params"])
    for key, how in (("aot", "through AOTAutograd"),
                     ("aot_loss", "through AOTAutograd, of a model with its loss and a BatchNorm in forward"),
                     ("aot_blocks", "through AOTAutograd, of residual blocks scaled by float attributes with a "
                                    "graph break between them")):
        aot = result.get(key)
        if aot is not None and aot.get("error"):
            out.append(Violation("SPL-16", f"rank {rank}: expected a training step of DDP compiled {how} "
                                           f"(as inductor compiles), but it failed: {_first_line(aot['error'])}"))
        elif aot is not None:
            # the second model's own control and eager DDP step
            control, eager = aot.get("control", result["control"]), aot.get("eager", result["eager"])
            out += _compare(f"gradient ({how})", rank, control["grads"], aot["grads"], rtol, atol, eager["grads"])
            out += _compare(f"parameter after the step ({how})", rank, control["params"], aot["params"], rtol, atol,
                            eager["params"])
    return out


def _compare(what: str, rank, expected: dict, got: dict, rtol: float, atol: float, eager: dict | None = None) -> list[Violation]:
    """``got`` (the compiled step's) against ``expected`` (the control's: the
    unsharded model's, averaged over the ranks with plain all_reduce, no
    DDP); eager DDP's values (``eager``) are a second opinion the message
    names, never part of the verdict."""
    import torch

    if set(expected) != set(got):
        return [Violation("SPL-16", f"rank {rank}: expected {what}s for {sorted(expected)}, got {sorted(got)}")]
    for name, want in expected.items():
        have = got[name]
        if have.shape != want.shape or not torch.allclose(have, want, rtol=rtol, atol=atol):
            diff = (have - want).abs().max().item() if have.shape == want.shape else "shape"
            return [Violation(
                "SPL-16",
                f"rank {rank}: expected the compiled DDP {what} of {name} to equal the control's (the unsharded "
                f"model's, averaged over the ranks with plain all_reduce), max abs difference {diff}"
                + _eager_says((eager or {}).get(name), want, have, rtol, atol),
            )]
    return []


def _eager_says(eager, control, compiled, rtol: float, atol: float) -> str:
    """What eager DDP, the second opinion, gives for the same tensor."""
    import torch

    def close(a, b):
        return a.shape == b.shape and torch.allclose(a, b, rtol=rtol, atol=atol)

    if eager is None:
        return ""
    if close(eager, control):
        return "; eager DDP gives the control's"
    if close(eager, compiled):
        return "; eager DDP gives the same as the compiled step (DDP's own reduction, compiled or not)"
    return "; eager DDP gives a third value"


def _check_ranks_agree(results: list[dict], rtol: float, atol: float) -> list[Violation]:
    import torch

    if len(results) < 2:
        return []
    first = results[0]
    for other in results[1:]:
        for name, grad in first["compiled"]["grads"].items():
            theirs = other["compiled"]["grads"].get(name)
            if theirs is None or not torch.allclose(grad, theirs, rtol=rtol, atol=atol):
                return [Violation(
                    "SPL-16",
                    f"expected all-reduced gradients equal on every rank, {name} differs between rank "
                    f"{first['rank']} and rank {other['rank']}",
                )]
    return []


# --- FS2-9: a real fully_shard step driven by the implementation ---------------------

#: FS2-9's third step (eager, first world): the grouped call
#: ``fully_shard([a, b])`` in mixed precision (bf16 parameters, fp32
#: reduction) after a first forward with that group frozen, judged against
#: the control at that precision (``reference[MIXED_MODE]``)
MIXED_MODE = "bf16"
#: how its findings name the step
MIXED_STEP = "the step with fully_shard([a, b]) in bf16 (reduced in fp32) after a first forward with that group frozen"


def check_fsdp2_end_to_end(results: list[dict], spec: str, rtol: float = 1e-4, atol: float = 1e-5,
                           where: str = "") -> list[Violation]:
    """FS2-9 over every rank's record (:mod:`pytest_fsdpcheck.runs.fsdp2_run`)
    for the implementation ``spec``: per ``fully_shard`` call the walk and
    states equal the oracle's and are what ``fully_shard`` sharded; exactly
    the managed modules carry the Dynamo flags; eager and compiled gradients
    equal the unsharded model's (global batch for sharded parameters, this
    rank's batch for ignored ones), and so do each rank's shards after the
    optimizer step and the forward after it. ``where`` prefixes every
    finding (``"world size 3, "`` for the second world)."""
    violations: list[Violation] = []
    steps: list[Violation] = []
    for result in results:
        rank = result.get("rank")
        if result.get("error"):
            violations.append(Violation("FS2-9", f"rank {rank}: expected a training step, but the rank failed: {_first_line(result['error'])}"))
            continue
        if "FS2-9" in (result.get("unchecked") or {}):
            continue
        record = result["impls"].get(spec)
        if record is None:
            violations.append(Violation("FS2-9", f"rank {rank}: no record for {spec}"))
        elif record.get("error"):
            violations.append(Violation("FS2-9", f"rank {rank}: fully_shard driven by {spec} failed: {_first_line(record['error'])}"))
        elif not record.get("not_provided"):
            for mode in result.get("modes", ("eager", "compiled")):
                if (record[mode] or {}).get("error"):
                    step = [_step_failed(result, mode, record[mode]["error"])]
                else:
                    step = _fsdp2_step(_judged_against(result, mode), record[mode], mode, len(results), rtol, atol)
                steps += [Violation("FS2-9", f"rank {rank}, {mode}: {m}") for m in step]
    # What the ranks failed with alike is one line; the steps' findings stay
    # per rank and mode: fs2-gloo-grads-summed is that very pattern on every
    # rank in both modes, and its signature reads it.
    found = by_rank(violations) + steps
    if where:
        import dataclasses

        found = [dataclasses.replace(v, message=where + v.message) for v in found]
    return found


def _fsdp2_step(result: dict, step: dict, mode: str, world_size: int, rtol: float, atol: float) -> list[str]:
    out = _fsdp2_walk(result, step, mode)
    control = result.get("torch_walk", {}).get(mode) or {}
    grads = _wrong_gradients(result, step["grads"], rtol, atol, world_size, control.get("grads"))
    factor = _uniform_factor(result, step["grads"], rtol, atol) if grads else None
    if factor is not None:
        # One statement for a uniform scaling, with its factor, told apart
        # from any gradient that is wrong another way; and whether torch's
        # own walk, in the same run, scales the same: only then is it
        # torch's reduction (summing over ranks instead of averaging), not
        # something the implementation did (a gradient hook firing twice).
        grads = [f"every sharded gradient is {factor:g} times the unsharded gradient of the global batch"
                 + _torch_walk_says(result, mode, factor, world_size, rtol, atol)]
    # the step's result is judged where the gradients were right: wrong
    # gradients already say why the parameters are wrong
    after = [] if grads else _after_step(result, step, world_size, rtol, atol)
    return out + grads + after


def _judged_against(result: dict, mode: str) -> dict:
    """``result`` with the control of ``mode`` as its ``reference``: the
    mixed-precision step's own, the fp32 control for the others."""
    if mode != MIXED_MODE:
        return result
    return {**result, "reference": result["reference"][MIXED_MODE]}


def _step_failed(result: dict, mode: str, error: str) -> str:
    """A step that raised (recorded per step for ``MIXED_MODE``), and what
    torch's own walk did with the same step in the same run: the same
    failure there says the runtime's, never excuses it."""
    first = _first_line(error)
    control = result.get("torch_walk", {}).get(mode)
    if control is None:
        said = ", and torch's own walk took no step to compare"
    elif control.get("error"):
        theirs = _first_line(control["error"])
        said = (", as torch's own walk does in the same run" if theirs == first else
                f", where torch's own walk in the same run fails otherwise: {theirs}")
    else:
        said = ", where torch's own walk in the same run takes the step"
    what = MIXED_STEP if mode == MIXED_MODE else "the step"
    return f"{what} failed: {first}{said}"


def _after_step(result: dict, step: dict, world_size: int, rtol: float, atol: float) -> list[str]:
    """After the SGD step: this rank's shard of each sharded parameter is
    the rows ``torch.chunk`` semantics give it (computed here: rank ``r``
    of ``S`` holds rows ``r*c : min((r+1)*c, d)``, ``c = ceil(d/S)``) of the
    control's updated parameter, an ignored one the control's update with
    this rank's own gradient; and one more forward (all-gathering what the
    step left) gives the updated unsharded model's outputs. A shard that
    still holds its values from before the step was never updated (the
    shape of pytorch#176076: the last, padded shard of a tied weight)."""
    import torch

    from .fsdp2_world import chunk_rows

    want = result["reference"].get("after_step")
    got = step.get("after_step")
    if want is None or got is None:
        return []
    rank = result.get("rank", 0)
    sharded = set(step.get("dtensors", ()))
    out: list[str] = []
    for label, full in want["params"].items():
        have = got["shards"].get(label)
        if label in sharded and full.dim() > 0:
            start, count, _ = chunk_rows(full.shape[0], world_size, rank)
            expected, before = full[start:start + count], want["before"][label][start:start + count]
            which = f"rank {rank}'s shard of {label} (rows {start}:{start + count} of {full.shape[0]})"
        else:
            expected, before = full, want["before"][label]
            which = f"{label} (not sharded)"
        if have is None:
            out.append(f"after the optimizer step, {which} is missing")
        elif have.shape != expected.shape:
            out.append(f"after the optimizer step, {which} has shape {tuple(have.shape)}, expected {tuple(expected.shape)}")
        elif not torch.allclose(have, expected, rtol=rtol, atol=atol):
            stale = expected.numel() > 0 and torch.equal(have, before)
            out.append(f"after the optimizer step, {which} is not the unsharded model's updated rows"
                       + (": it still holds its values from before the step (never updated)" if stale else
                          f", max abs difference {(have - expected).abs().max().item():.3g}"))
    # the parameters as the forward after the step all-gathered them, one
    # line per finding (a runtime fault repeats it for every parameter)
    # as the forward computes with them: the mixed step's group in its dtype
    computed, computed_before = want.get("gathered", want["params"]), want.get("gathered_before", want["before"])
    alike: dict[str, list[str]] = {}
    for label, full in computed.items():
        used = got.get("gathered", {}).get(label)
        if used is None or used.shape != full.shape or torch.allclose(used, full, rtol=rtol, atol=atol):
            continue
        alike.setdefault(_stale_rows(used, full, computed_before[label], world_size, label in sharded, rtol, atol),
                         []).append(label)
    for finding, labels in alike.items():
        out.append(f"the forward after the optimizer step computes with {short(labels)}, not the unsharded "
                   f"model's updated values: {finding}")
    output = got.get("output")
    if not alike and output is not None and (output.shape != want["output"].shape
                               or not torch.allclose(output, want["output"], rtol=rtol, atol=atol)):
        diff = (output - want["output"]).abs().max().item() if output.shape == want["output"].shape else "shape"
        out.append(f"the forward after the optimizer step (all-gathering the updated shards) gives other outputs "
                   f"than the unsharded model after the same step, max abs difference {diff:.3g}"
                   if diff != "shape" else "the forward after the optimizer step gives outputs of another shape")
    return out


def _stale_rows(used, updated, before, world_size: int, sharded: bool, rtol: float, atol: float) -> str:
    """Which rows of a parameter the forward after the step computed with
    wrongly, by the rank whose shard holds them (``torch.chunk``
    semantics), and whether they are the values from before the step."""
    import torch

    from .fsdp2_world import chunk_rows

    parts = []
    for rank in range(world_size if sharded and updated.dim() > 0 else 1):
        start, count, _ = chunk_rows(updated.shape[0], world_size, rank) if sharded and updated.dim() > 0 else (
            0, updated.shape[0] if updated.dim() else 1, 0)
        if count == 0:
            continue
        have, want = used[start:start + count], updated[start:start + count]
        if torch.allclose(have, want, rtol=rtol, atol=atol):
            continue
        where = f"rows {start}:{start + count} (rank {rank}'s shard)" if sharded else "its values"
        stale = torch.equal(have, before[start:start + count])
        parts.append(f"{where} " + ("still from before the step: never updated" if stale else
                                    f"off by {(have - want).abs().max().item():.3g}"))
    return "; ".join(parts or ["they differ"])


def _fsdp2_walk(result: dict, step: dict, mode: str) -> list[str]:
    """What the implementation's walk decided, against the oracle: every
    FS2-9 statement but the gradients."""
    oracle = result["oracle"]
    out: list[str] = []
    want_calls = oracle["calls"]
    if step["fully_shard_calls"] != len(want_calls):
        out.append(f"expected fully_shard to ask the implementation once per call ({len(want_calls)} calls), "
                   f"it asked {step['fully_shard_calls']} time(s)")
    for k, (want, got) in enumerate(zip(want_calls, step["calls"], strict=False)):
        call = f"fully_shard call {k + 1} ({', '.join(want.get('roots', ()))})"
        if got["impl_modules"] != want["modules"]:
            out.append(f"{call}: expected managed modules {want['modules']}, the implementation gave {got['impl_modules']}")
        if got["impl_params"] is not None and got["impl_params"] != want["params"]:
            out.append(f"{call}: expected managed parameters {want['params']}, the implementation gave {got['impl_params']}")
        if got["sharded"] is not None and got["sharded"] != want["params"]:
            out.append(f"{call}: expected fully_shard to shard {want['params']}, it sharded {got['sharded']}")
    if step["flagged"] != oracle["flagged"]:
        out.append(f"expected the Dynamo flags on exactly {oracle['flagged']}, found them on {step['flagged']}")
    want_sharded = sorted({p for call in want_calls for p in call["params"]})
    if step["dtensors"] != want_sharded:
        out.append(f"expected sharded (DTensor) parameters {want_sharded}, found {step['dtensors']}")
    if mode == "compiled" and step.get("graphs", 1) < 1:
        out.append("torch.compile compiled no graph: the compiled step ran eagerly")
    return out


def _wrong_gradients(result: dict, got: dict, rtol: float, atol: float, world_size: int | None = None,
                     walk_grads: dict | None = None) -> list[str]:
    """One line per wrong gradient. A sharded one that is exactly
    ``world_size`` times its expected value (summed over the ranks, not
    averaged) says so, and whether torch's own walk's gradient
    (``walk_grads``, the same step in the same run) is the same, so a
    signature can tell that reduction apart from a gradient wrong
    otherwise beside it (fs2-gloo-grads-summed with another bug)."""
    import torch

    ignored = set(result["oracle"]["ignored"])
    grads: list[str] = []

    def summed(tensor, want) -> bool:
        return (isinstance(tensor, torch.Tensor) and tensor.shape == want.shape and bool(want.any())
                and torch.allclose(tensor, want * world_size, rtol=rtol, atol=atol))

    for label, global_grad in result["reference"]["global"].items():
        local = label in ignored
        want = result["reference"]["local"][label] if local else global_grad
        have = got.get(label)
        which = "this rank's unsharded gradient (ignored: not reduced)" if local else "the unsharded gradient of the global batch"
        if have is None:
            grads.append(f"{label} has no gradient, expected {which}")
        elif have.shape != want.shape or not torch.allclose(have, want, rtol=rtol, atol=atol):
            if not local and world_size and world_size > 1 and summed(have, want):
                walk = (", as torch's own walk gives in the same run" if summed((walk_grads or {}).get(label), want)
                        else ", where torch's own walk in the same run does not")
                grads.append(f"gradient of {label} is {world_size} times {which}{walk}")
                continue
            diff = (have - want).abs().max().item() if have.shape == want.shape else f"shape {tuple(have.shape)}"
            grads.append(f"gradient of {label}: expected {which}, max abs difference {diff}")
    return grads


def _uniform_factor(result: dict, grads: dict, rtol: float, atol: float) -> float | None:
    """The one factor (3 significant digits) by which every sharded gradient,
    and only they, differ from the expected ones; None if there is none."""
    import torch

    ignored = set(result["oracle"]["ignored"])
    factor = None
    for label, global_grad in result["reference"]["global"].items():
        local = label in ignored
        want = result["reference"]["local"][label] if local else global_grad
        have = grads.get(label)
        if have is None or have.shape != want.shape:
            return None
        if local:
            if not torch.allclose(have, want, rtol=rtol, atol=atol):
                return None
            continue
        if factor is None:
            norm = (want * want).sum().item()
            if norm == 0:
                return None
            factor = float(f"{(have * want).sum().item() / norm:.3g}")
        if not torch.allclose(have, want * factor, rtol=rtol, atol=atol):
            return None
    return None if factor is None or factor == 1 else factor


def _torch_walk_says(result: dict, mode: str, factor: float, world_size: int, rtol: float, atol: float) -> str:
    control = result.get("torch_walk", {}).get(mode)
    if control is None:
        return ", and torch's own walk took no step to compare"
    if control.get("error"):
        return f", and torch's own walk failed the same step: {_first_line(control['error'])}"
    theirs = _uniform_factor(result, control["grads"], rtol, atol)
    if theirs == factor == world_size:
        group = result.get("process_group", "?")
        return (f", as torch's own walk gives in the same run (fully_shard summed over the {world_size} ranks "
                f"instead of averaged, on {group})")
    if theirs == factor:
        return ", as torch's own walk gives in the same run"
    if theirs is None and not _any_wrong(result, control["grads"], rtol, atol):
        return ", where torch's own walk in the same run gives the expected gradients"
    return f", where torch's own walk in the same run gives {'other wrong gradients' if theirs is None else f'{theirs:g} times'}"


def _any_wrong(result: dict, grads: dict, rtol: float, atol: float) -> bool:
    import torch

    ignored = set(result["oracle"]["ignored"])
    for label, global_grad in result["reference"]["global"].items():
        want = result["reference"]["local"][label] if label in ignored else global_grad
        have = grads.get(label)
        if have is None or have.shape != want.shape or not torch.allclose(have, want, rtol=rtol, atol=atol):
            return True
    return False


def fsdp2_unchecked(results: list[dict], spec: str) -> list[str]:
    """The FS2-9 comparisons not made for ``spec``, each with its reason:
    those the installed torch cannot make (probed before any implementation
    ran), and any whose record torch's fully_shard never produced."""
    reasons: dict[str, str] = {}
    for result in results:
        if result.get("error"):
            continue
        reasons.update(result.get("unchecked") or {})
        record = result["impls"].get(spec) or {}
        for mode in result.get("modes", ("eager", "compiled")):
            for call in (record.get(mode) or {}).get("calls", ()):
                if call.get("impl_params") is None and "managed parameters" not in reasons:
                    reasons["managed parameters"] = ("torch's fully_shard never asked _get_managed_states: the "
                                                     "parameters each call manages were not compared with the oracle")
                if call.get("sharded") is None and "sharded parameters" not in reasons:
                    reasons["sharded parameters"] = ("torch's fully_shard built no readable parameter group: what each "
                                                     "call really sharded was not compared with the oracle")
    return [why if what == "FS2-9" else f"FS2-9 ({what}): {why}" for what, why in reasons.items()]


# --- the world: when a check cannot judge the implementation --------------------------

#: a rank's ``phase`` when it failed that is the world's: joining the
#: process group, or the world's own self-test
#: (:func:`pytest_fsdpcheck.runs.selftest.self_test`: plain collectives on
#: known tensors, the ranks' agreement on their inputs, the control's
#: all-reduce of real gradients against the same average computed alone).
#: Any other phase, the control's and the results' exchange included, is
#: charged to the check.
WORLD_PHASES = {
    "world": "joining the process group",
    "selftest": "the world's self-test, before any implementation ran",
}


def describe_world(results: list[dict]) -> str:
    """One line naming the world from the ranks' ``world`` records
    (:func:`pytest_fsdpcheck.runs.world.world_record`): backend, device,
    world size, each host with its visible GPUs."""
    worlds = [r["world"] for r in results if r.get("world")]
    if not worlds:
        return "no rank recorded its world"
    first = worlds[0]
    hosts: dict[str, str] = {}
    for world in worlds:
        visible = world.get("visible")
        hosts.setdefault(world.get("host", "?"), f"{world.get('gpus', '?')} visible GPU(s), CUDA_VISIBLE_DEVICES="
                                                 f"{'unset' if visible is None else repr(visible)}")
    where = "; ".join(f"host {host}: {gpus}" for host, gpus in sorted(hosts.items()))
    return (f"{first.get('backend', '?')} on {first.get('device', '?')}, world size {first.get('world_size', '?')}, "
            f"torch {first.get('torch', '?')}; {where}")


def _environment(results: list[dict], why: str, spec: str) -> str:
    return f"environment ({describe_world(results)}): {why}; not a verdict on {spec}"


def _world_failed(results: list[dict]) -> str | None:
    for result in results:
        phase = result.get("phase")
        if result.get("error") and phase in WORLD_PHASES:
            return f"rank {result.get('rank')} failed while {WORLD_PHASES[phase]}: {_first_line(result['error'])}"
    return None


def ddp_environment(results: list[dict], spec: str) -> str | None:
    """Why SPL-16 cannot judge ``spec`` in this world, or None: a rank could
    not join the process group, or the world failed its self-test. Nothing
    else: a world that passed its self-test never turns a violation into an
    error, whatever the control or eager DDP say."""
    why = _world_failed(results)
    return None if why is None else _environment(results, why, spec)


def fsdp2_environment(results: list[dict], spec: str) -> str | None:
    """Why FS2-9 cannot judge ``spec`` in this world, or None: as
    :func:`ddp_environment` (joining, the self-test). A wrong gradient that
    torch's own walk shares is torch's ``fully_shard`` runtime, which every
    walk drives: a ``FAIL`` (or the known bug that models it), never the
    world's."""
    why = _world_failed(results)
    return None if why is None else _environment(results, why, spec)


# --- SPL-20, FS2-11, EXO-9: every rank gives the same answer ---------------------------

#: the agreement invariant of each area, and what its entries are
AGREEMENT = {
    "splitting": ("SPL-20", "bucket plan"),
    "fsdp2": ("FS2-11", "managed modules and groups"),
    "exec_order": ("EXO-9", "exec order"),
}
#: the rank task whose records each area's agreement reads
AGREEMENT_TASK = {"splitting": "ddp", "exec_order": "ddp", "fsdp2": "fsdp2"}


def _area_record(result: dict, spec: str, area: str) -> dict | None:
    if area == "splitting":
        return (result.get("plans") or {}).get(spec)
    if area == "exec_order":
        return (result.get("exec_orders") or {}).get(spec)
    if "FS2-9" in (result.get("unchecked") or {}):
        return {"not_provided": True}  # this torch's fully_shard cannot be driven: nothing recorded
    return (result.get("impls") or {}).get(spec)


def rank_entries(result: dict, spec: str, area: str) -> list[str] | str | None:
    """One rank's answer for ``spec`` in ``area`` as a flat list of short
    entries (each names where it is: graph and bucket, call and mode,
    position), a string saying why the rank has none (it failed), or None
    where the area is not provided."""
    if result.get("error"):
        return f"the rank failed: {_first_line(result['error'])}"
    record = _area_record(result, spec, area)
    if record is None:
        return f"no record for {spec}"
    if record.get("error"):
        return f"{spec} failed: {_first_line(record['error'])}"
    if record.get("not_provided"):
        return None
    if area == "splitting":
        return [f"graph {g}, bucket {b}: {', '.join(nodes) or '(no nodes)'}"
                for g, graph in enumerate(record.get("nodes") or ()) for b, nodes in enumerate(graph)]
    if area == "exec_order":
        return ([f"module {i}: {name}" for i, name in enumerate(record["modules"])]
                + [f"parameter {i}: {name}" for i, name in enumerate(record["params"])])
    entries = []
    for mode in result.get("modes", ("eager", "compiled")):
        for c, call in enumerate((record[mode] or {}).get("calls", ())):  # a failed step has none
            entries.append(f"{mode}, call {c}: modules {' '.join(call['impl_modules'])}")
            params = call.get("impl_params")
            entries.append(f"{mode}, call {c}: parameters {'(not asked)' if params is None else ' '.join(params)}")
    return entries


def _ranks(ranks: list) -> str:
    return f"rank {ranks[0]}" if len(ranks) == 1 else "ranks " + ", ".join(str(r) for r in ranks)


def agreement_not_provided(results: list[dict], spec: str, area: str) -> bool:
    """True when no rank has ``area``'s answer to compare because the area is
    not provided (by the implementation or, for FS2, by this torch) on every
    rank that ran; a rank that failed is compared, never this."""
    answers = [rank_entries(r, spec, area) for r in results]
    return all(a is None for a in answers) and bool(answers)


def check_ranks_agree(results: list[dict], spec: str, area: str, where: str = "") -> list[Violation]:
    """SPL-20 / FS2-11 / EXO-9 over every rank's record for ``spec``: each
    rank's answer (bucket plan; managed modules and parameters of each
    ``fully_shard`` call; module and parameter exec order) equals every
    other rank's. The ranks are grouped by their answer; each group other
    than the lowest rank's is one violation naming both groups' ranks and
    the first entry where they differ. A rank with no answer (it failed)
    is a violation: an answer nobody compared is no agreement."""
    invariant, what = AGREEMENT[area]
    found: list[Violation] = []
    groups: dict[tuple, list] = {}
    for result in sorted(results, key=lambda r: r.get("rank", 0)):
        rank = result.get("rank")
        got = rank_entries(result, spec, area)
        if isinstance(got, str):
            found.append(Violation(invariant, f"rank {rank}: expected its {what} to compare, but {got}"))
        else:
            groups.setdefault(("(not provided)",) if got is None else tuple(got), []).append(rank)
    if len(groups) > 1:
        (first, first_ranks), *others = groups.items()
        for theirs, ranks in others:
            at = next((i for i, (a, b) in enumerate(zip(first, theirs, strict=False)) if a != b), min(len(first), len(theirs)))
            mine = first[at] if at < len(first) else "nothing more"
            other = theirs[at] if at < len(theirs) else "nothing more"
            found.append(Violation(invariant, (
                f"expected every rank to give the same {what}, but {_ranks(ranks)} {'differs' if len(ranks) == 1 else 'differ'} from "
                f"{_ranks(first_ranks)} at entry {at}: {_ranks(first_ranks)} {'has' if len(first_ranks) == 1 else 'have'} "
                f"{mine!r}, {_ranks(ranks)} {'has' if len(ranks) == 1 else 'have'} {other!r}")))
    merged = by_rank(found)
    if where:
        import dataclasses

        merged = [dataclasses.replace(v, message=where + v.message) for v in merged]
    return merged
