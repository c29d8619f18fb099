"""The signatures of torch's known bugs in fully_shard's runtime: predicates
over a test's violations, each true only for the bug's exact statement (the
invariant, the case or rank, the error torch raises, and what torch's own
walk did in the same run), so anything else beside it, or another error of
the same check, stays a FAIL. Where a bug lies in an area the reference
implements, its signature is a switch of the reference instead
(``pytest_fsdpcheck.reference``); these are the runtime's, which no walk
replays. :mod:`~pytest_fsdpcheck.impls.torch_bugs` names them in its catalog.
"""

from __future__ import annotations

import re

_SUMMED_ON_GLOO = re.compile(
    r"(world size \d+, )?rank (\d+), (eager|compiled|bf16): every sharded gradient is (\d+) times the unsharded "
    r"gradient of the global batch, as torch's own walk gives in the same run \(fully_shard summed over the \4 "
    r"ranks instead of averaged, on gloo\)"
)


def sharded_gradients_summed_on_gloo(violations) -> bool:
    """FS2-9's statement that all sharded gradients, and only they, were
    scaled by exactly the world size on a gloo group, as torch's own walk
    scales them in the same run, on every rank in both eager and compiled
    mode and nothing else. A scaling in one mode or on one rank, by another
    factor, or one torch's own walk does not share (a gradient hook firing
    twice at world size 2) is worded otherwise, or is not all of it: not
    explained. The first world's mixed-precision step (``bf16``, reduced in
    fp32: the same reduction) shows it too where it runs; a world whose
    ``bf16`` step failed otherwise is not this bug alone. FS2-9's second
    world (its findings prefixed ``world size N, ``) takes the eager step
    only: there every rank in eager mode."""
    seen: dict[bool, list] = {False: [], True: []}
    for v in violations:
        match = _SUMMED_ON_GLOO.fullmatch(v.message) if v.invariant == "FS2-9" else None
        if match is None:
            return False
        seen[bool(match[1])].append((int(match[2]), match[3], int(match[4])))
    if not seen[False]:
        return False
    for second, found in seen.items():
        if not found:
            continue
        world_size = found[0][2]
        steps = [("eager",)] if second else [("eager", "compiled"), ("eager", "compiled", "bf16")]
        if not any(len(found) == len(every) and set(found) == every
                   for every in ({(rank, mode, world_size) for rank in range(world_size) for mode in modes}
                                 for modes in steps)):
            return False
    return True


_LATCHED_MIXED = re.compile(
    r"rank (\d+), bf16: the step with fully_shard\(\[a, b\]\) in bf16 \(reduced in fp32\) after a first forward "
    r"with that group frozen failed: RuntimeError: attempting to assign a gradient with dtype 'c10::BFloat16' to a "
    r"tensor with grad_dtype 'Float'\..*, as torch's own walk does in the same run"
)


def mixed_step_latched(violations) -> bool:
    """FS2-9's statement that the mixed-precision step (a group in bf16,
    reduced in fp32, frozen at its first forward) raised torch 2.13's
    gradient-dtype error at its backward, on every rank of the first world,
    as torch's own walk does in the same run, and nothing else failed: the
    fp32 steps, the second world and the walk all right. The error on one
    rank only, another error, a wrong gradient (the silent form, which
    this release does not have), or an error torch's own walk does not
    share is worded otherwise, or is not all of it: not explained."""
    ranks = []
    for v in violations:
        match = _LATCHED_MIXED.fullmatch(v.message) if v.invariant == "FS2-9" else None
        if match is None:
            return False
        ranks.append(int(match[1]))
    return len(ranks) >= 2 and sorted(ranks) == list(range(len(ranks)))


_REUSED_WRONG = re.compile(r"(?:world size (\d+), )?rank (\d+), (eager|compiled): gradient of (\S+): expected the "
                           r"unsharded gradient of the global batch, max abs difference \S+")
_REUSED_SUMMED = re.compile(r"(?:world size (\d+), )?rank (\d+), (eager|compiled): gradient of (\S+) is (\d+) times "
                            r"the unsharded gradient of the global batch, as torch's own walk gives in the same run")
_REUSED_MISSING = re.compile(r"(?:world size (\d+), )?rank (\d+), (eager|compiled): (\S+) has no gradient, expected "
                             r"the unsharded gradient of the global batch")
_REUSED_UNCAST = re.compile(
    r"rank (\d+), bf16: the step with fully_shard\(\[a, b\]\) in bf16 \(reduced in fp32\) after a first forward "
    r"with that group frozen failed: RuntimeError: expected m1 and m2 to have the same dtype, but got: float != "
    r"c10::BFloat16, as torch's own walk does in the same run")


def grouped_module_reused(violations) -> bool:
    """FS2-9's statements that, in the world whose grouped call
    ``fully_shard([a, b])`` had a module called again after the group's
    forward ended, following a forward with the group frozen: on every rank
    of the first world in eager and compiled mode, and of the second world
    (``world size N, ``) in eager mode, the same one parameter's gradient is
    off and the same other one's missing, and nothing else; and the bf16
    step raised the uncast input's dtype error on every rank of the first
    world, as torch's own walk does in the same run. Another parameter, a
    rank or a mode without it, another error or a third wrong gradient is
    not this bug."""
    steps: dict = {}
    uncast = []
    for v in violations:
        if v.invariant != "FS2-9":
            return False
        match = _REUSED_UNCAST.fullmatch(v.message)
        if match:
            uncast.append(int(match[1]))
            continue
        match = _REUSED_WRONG.fullmatch(v.message) or _REUSED_MISSING.fullmatch(v.message)
        if match is None:
            return False
        kind = "off" if match.re is _REUSED_WRONG else "missing"
        steps.setdefault((match[1] or "", int(match[2]), match[3]), {}).setdefault(kind, []).append(match[4])
    worlds = sorted({world for world, _, _ in steps})
    if "" not in worlds or len(worlds) > 2 or not uncast or sorted(uncast) != list(range(len(uncast))):
        return False
    for world in worlds:
        size = len(uncast) if world == "" else int(world)
        modes = ("eager", "compiled") if world == "" else ("eager",)
        if {key for key in steps if key[0] == world} != {(world, r, m) for r in range(size) for m in modes}:
            return False
    pairs = {(tuple(found.get("off", ())), tuple(found.get("missing", ()))) for found in steps.values()}
    if len(pairs) != 1:
        return False
    ((off, missing),) = pairs
    return len(off) == 1 and len(missing) == 1 and off != missing


def grouped_module_reused_summed(violations) -> bool:
    """fs2-grouped-module-reused as a release that also sums gradients over
    the ranks on gloo shows it (fs2-gloo-grads-summed, 2.7 and 2.8): the
    grouped module's statements exactly as :func:`grouped_module_reused`
    reads them, and every other statement of a step that the same sharded
    gradients, at least one, are each exactly the world size times the
    unsharded gradient (2 in the first world, N in ``world size N``), as
    torch's own walk gives in the same run, on every rank and mode of both
    worlds. A factor other than the world size, a gradient summed on one
    rank or mode only, or one torch's own walk does not share is not these
    two bugs."""
    summed: dict = {}
    rest = []
    for v in violations:
        match = _REUSED_SUMMED.fullmatch(v.message) if v.invariant == "FS2-9" else None
        if match is None:
            rest.append(v)
            continue
        world = match[1] or ""
        if int(match[5]) != (int(world) if world else 2):
            return False
        summed.setdefault((world, int(match[2]), match[3]), set()).add(match[4])
    if not grouped_module_reused(rest):
        return False
    # the steps grouped_module_reused found every rank and mode of: each sums the same gradients
    steps = {(m[1] or "", int(m[2]), m[3]) for v in rest
             for m in [_REUSED_WRONG.fullmatch(v.message) or _REUSED_MISSING.fullmatch(v.message)] if m}
    labels = {frozenset(found) for found in summed.values()}
    return set(summed) == steps and len(labels) == 1


_PER_RANK_STEP = re.compile(
    r"ranks? (?P<ranks>\d+(?:, \d+)*)(?:, (?:eager|compiled):| failed:) (?P<what>.+) \(the ranks' batches reach different "
    r"parameters (?P<params>[^;()]+); the plan calls every group's module on every rank and reduces unused "
    r"parameters, as FSDP2 documents such a step\)", re.DOTALL)
_GRAPHS_DIFFER_FAILED = re.compile(
    r"the plan's step failed: RuntimeError: .*(Timed out waiting \d+ms for (recv|send) operation to complete|"
    r"[Rr]eceived data size doesn't match expected size|Connection closed by peer).*"
    r"|\d+ of \d+ gradients are wrong; worst: .*|the gradient of \S+ (differs from|is None|exists).*"
    r"|the plan's step did not finish: .*\(hung\)|died without a result")


def unused_params_graphs_differ(violations) -> bool:
    """FS2-9's statements on a user's plan where the ranks' batches reach
    different parameters and call every module alike (no "modules'
    forwards" in the reach: a group whose module every rank calls, its
    output feeding the loss on some ranks only), and the plan reduces
    unused parameters and calls every group's module on every rank, as
    FSDP2 documents: the step hung, a collective timed out or got data of
    another size, a rank died, or gradients came out wrong, on every rank
    (the ranks' reduce-scatters pair up crosswise). A reach with a module
    some rank does not call, a plan that breaks FSDP2's per-rank step (the
    user's case error), another error, or a rank without a statement is not
    this bug."""
    ranks: set[int] = set()
    for v in violations:
        match = _PER_RANK_STEP.fullmatch(v.message) if v.invariant == "FS2-9" else None
        if match is None or not _GRAPHS_DIFFER_FAILED.fullmatch(match["what"]):
            return False
        ranks.update(int(r) for r in match["ranks"].split(", "))
    return len(ranks) >= 2 and sorted(ranks) == list(range(len(ranks)))


_FROZEN_STEP_RAISED = (r"(frozen-low-base|frozen-index): fully_shard with mp_policy bf16 \(reduced in fp32\) and one "
                       r"step raised {error}, as torch's own walk does in the same run")
_FROZEN_DTYPES_ASSERTED = re.compile(_FROZEN_STEP_RAISED.format(
    error=r"AssertionError: FSDP expects uniform original parameter dtype but got \{.*\}"))
_INT_PARAM_REJECTED = re.compile(_FROZEN_STEP_RAISED.format(
    error=r"RuntimeError: [Oo]nly Tensors of floating point (and complex )?dtype can require gradients"))


def frozen_dtypes_asserted(violations) -> bool:
    """FS2-12's one statement that the group's lazy init asserted one
    original dtype for all its parameters, frozen ones included, as torch's
    own walk does in the same run; anything else beside it, or another
    error, is not this bug."""
    return len(violations) == 1 and violations[0].invariant == "FS2-12" and bool(
        _FROZEN_DTYPES_ASSERTED.fullmatch(violations[0].message))


def int_param_rejected(violations) -> bool:
    """FS2-12's one statement, on the frozen integer index only, that
    fully_shard could not make the integer parameter a sharded parameter
    (it asked for a gradient on it), as torch's own walk does."""
    if len(violations) != 1 or violations[0].invariant != "FS2-12":
        return False
    match = _INT_PARAM_REJECTED.fullmatch(violations[0].message)
    return match is not None and match[1] == "frozen-index"


_INPLACE_VIEW_HOOK_DROPPED = re.compile(
    r"view-resharded: an in-place add into the view a fully_shard group returned, then one step, raised "
    r"RuntimeError: setStorage: sizes \[\d+(, \d+)*\], strides \[\d+(, \d+)*\], storage offset \d+, and itemsize \d+ "
    r"requiring a storage size of \d+ are out of bounds for storage of size 0, as torch's own walk does in the same run")


def inplace_view_hook_dropped(violations) -> bool:
    """FS2-14's one statement, on the resharded case only, that the block's
    backward read freed parameter storage (its all-gather never ran), as
    torch's own walk does; the kept case failing, another error, or a wrong
    gradient beside it is not this bug."""
    return len(violations) == 1 and violations[0].invariant == "FS2-14" and bool(
        _INPLACE_VIEW_HOOK_DROPPED.fullmatch(violations[0].message))


_MODEL_KEPT = re.compile(r"the model outlives its caller: \[m\d+(, m\d+)*\] still alive after fully_shard's caller "
                         r"dropped it and the garbage collector ran \(a module is held outside the model\)")


def model_kept_alive(violations) -> bool:
    """FS2-7's one statement that the model outlived its caller, and
    nothing else wrong (the flags and the structure right)."""
    return len(violations) == 1 and violations[0].invariant == "FS2-7" and bool(
        _MODEL_KEPT.fullmatch(violations[0].message))


#: ANN-8's model ``attention`` reads these int attributes (``checks.annotation``): its head
#: count, the two ints of its tuple shape, and its scale
_INT_ATTRIBUTE = r"self\.(?:attn\.heads|attn\.shape\[[01]\]|scale) \(SymInt\)"
_INT_ATTRIBUTES_LIFTED = re.compile(
    r"attention: compiled with dynamic=True, the annotated module's graphs take inputs the plain module's do not: "
    rf"{_INT_ATTRIBUTE}(?:, {_INT_ATTRIBUTE})*"
)


def int_attributes_lifted(violations) -> bool:
    """ANN-8's one statement, on the model with int attributes, that the
    annotated module's graphs take some of those attributes, and nothing
    else, as symbolic inputs the plain module's graphs do not: Dynamo's
    handling of every FSDP-managed module, whatever annotated it. A
    recompile, an input missing, an output unlike eager, a parameter's or
    an input's size lifted, or an attribute that is not an int of the
    model (one an implementation added) is not this bug."""
    return len(violations) == 1 and violations[0].invariant == "ANN-8" and bool(
        _INT_ATTRIBUTES_LIFTED.fullmatch(violations[0].message))


_FLOAT_PARTITION_OUTPUT = re.compile(
    r"(?:rank \d+|ranks \d+(?:, \d+)*): expected a training step of DDP compiled through AOTAutograd, of residual "
    r"blocks scaled by float attributes with a graph break between them \(as inductor compiles\), but it failed: "
    r"(?:BackendCompilerFailed: [^<]* <- )?AttributeError: 'float' object has no attribute 'meta'"
)


def float_partition_output(violations) -> bool:
    """SPL-16's one statement that the float-scaled blocks' compiled DDP
    step failed in the split's bucket compile on a float's missing
    ``meta``, as every rank reports it, and nothing else wrong in the
    world: another error of that step, a wrong gradient of it, or any other
    step's violation beside it is not this bug."""
    return len(violations) == 1 and violations[0].invariant == "SPL-16" and bool(
        _FLOAT_PARTITION_OUTPUT.fullmatch(violations[0].message))


_TP_REDUCED_IN_BF16 = re.compile(
    r"(?:world size \d+, )?(?:rank \d+|ranks \d+(?:, \d+)*), bf16 \(param bf16, reduce fp32\), mesh \d+x\d+ "
    r"\(dp x tp\): the gradients of \[[^\]]*\] differ from the control's \(the largest by \S+, of \S+; tolerance "
    r"\S+ relative, \S+ absolute\), each by no more than rounding its sum over the \d+ tp ranks to bf16 gives: "
    r"the tp reduction ran in bf16, not in the policy's reduce_dtype \(fp32\)"
)


def tp_reduced_in_compute_dtype(violations) -> bool:
    """FS2-15's statements, one per world, that the bf16 step's gradients
    differ from the control's by no more than summing the partial gradients
    over tp in bf16 makes, and nothing else: the fp32 step wrong, a
    parameter left unsharded or without a gradient, a difference beyond
    bf16 rounding, or an error beside it is not this bug."""
    return bool(violations) and all(
        v.invariant == "FS2-15" and _TP_REDUCED_IN_BF16.fullmatch(v.message) for v in violations)
