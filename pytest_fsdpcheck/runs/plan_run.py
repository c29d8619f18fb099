"""FS2-9 on a user's model: the case's own plan (its real ``fully_shard``
calls) at the runner's world size, one training step eagerly and one under
``torch.compile``, beside the unsharded model. This module is what one
rank runs (:func:`plan_task`); starting the ranks (spawned on CPU, or this
process's rank of a torchrun world) and their time limit are
:mod:`~pytest_fsdpcheck.runs.plan_world`'s.

Each rank builds the case itself with a picklable builder (the factory's
``pkg.module:factory`` name and keyword arguments; a case without a factory
travels pickled), so what runs is the user's code, not a copy the parent
made. Parameters and tensor inputs are broadcast from rank 0 first, so a
factory that forgets to seed cannot make ranks disagree about the reference.
Each rank takes its own batch (:func:`rank_batches`: rank 0 the case's
``example_inputs``, every other rank a variation of them of the same shapes
and dtypes), and rank ``r``'s loss is scaled by :func:`rank_weight` (1 on
even ranks, 2 on odd ones): with one batch and equal contributions a rank
that skips the reduction (a reduce-scatter that never communicates, a
parameter left out of every group), or a reduction in the wrong dtype (bf16
sums of equal bf16 values are exact), would go unseen. Where the model
rejects the varied batches (the unsharded model raises or gives non-finite
gradients on them), every rank takes the case's own inputs, recorded as
``batches``. Batches that reach different parameters or call different
modules on different ranks (a routed, MoE-style model) are kept, as real
per-rank data gives them: the record's ``reach`` names them, with the ranks
that reach each, and each step's ``plan_groups`` what the plan's groups
hold and whether they reduce unused parameters
(``set_reduce_scatter_unused_params``), so the checker can tell a plan that
leaves FSDP2's documented switch off (the user's) from a runtime that fails
with it on (torch's).

The control is the unsharded model at the plan's own precision
(:class:`PlanGroup`, read from the plan's recorded calls): each group's
parameters cast to its ``param_dtype`` for the step, floating inputs of its
modules cast as ``cast_forward_inputs`` says, outputs to ``output_dtype``,
and its gradients of every rank's batch, weighted, summed in its
``reduce_dtype`` and averaged, as FSDP2's reduce-scatter does; a parameter
in no group keeps its rank's own gradient. Both runs seed torch's generator with :data:`STEP_SEED`
just before the forward (and Inductor draws through aten's generator), so
dropout and random masks draw the same numbers in both.

The compiled step counts the graphs its backend is given: one that compiled
nothing ran eagerly and shows nothing about compiled FSDP2; the unsharded
model is then compiled the same way, so the checker can say whose forward
keeps Dynamo out.

Where the step computes anything below fp32, each rank also measures the
unsharded model's own compiled-vs-eager difference at the plan's precision
(``noise``, the checker's allowance for fused kernels), and records per
parameter the coarsest dtype its gradient is computed through
(``upstream``). Each rank saves its phase as it enters it
(:class:`~pytest_fsdpcheck.runs.plan_world._Progress`), so a rank killed
at the time limit (:func:`~pytest_fsdpcheck.runs.plan_world.rank_limit`)
says whether it hung in the plan's step or the world was slow.

Nothing raises out of a rank: errors are recorded, and
:func:`pytest_fsdpcheck.checks.plan_distributed.check_plan_end_to_end`
judges the records. Where the control itself fails (``control_error``),
the plan's eager step still runs beside it, so the checker can tell a plan
or model that cannot take its own precision (the step fails the same way:
the user's mistake) from a step that fails otherwise.
"""

from __future__ import annotations

import copy
import functools
import traceback
from dataclasses import dataclass

import torch

from .fsdp2_run import compile_backend, dtensor_class
from .precision import cast_floating, cast_inputs_hook, cast_outputs_hook, low_leaf, swap_in_leaves

STEP_SEED = 28
MODES = ("eager", "compiled")


@dataclass(frozen=True)
class TrainingStep:
    """How the framework takes its step (a case's ``loss``,
    ``micro_batches`` and ``optimizer``), taken the same way by the sharded
    step and by every unsharded one it is compared with."""

    loss: object = None
    micro_batches: int = 1
    optimizer: object = None

    @classmethod
    def of(cls, case) -> TrainingStep:
        return cls(getattr(case, "loss", None), getattr(case, "micro_batches", 1) or 1,
                   getattr(case, "optimizer", None))

    def backward(self, forward, inputs, weight: float = 1.0, sync=None, after_each=None) -> None:
        """Forward and backward of ``forward`` over the micro-batches of
        ``inputs`` (positional, keyword; :func:`micro_batches`), each loss
        divided by their number and times ``weight``, the gradients
        accumulating; ``sync(last)`` is told before each whether its
        backward is the one that reduces (FSDP2's documented accumulation:
        ``set_requires_gradient_sync(False)`` on all but the last).
        ``after_each()`` runs after every micro-batch's backward."""
        chunks = micro_batches(inputs, self.micro_batches)
        scale = weight / len(chunks)
        for i, chunk in enumerate(chunks):
            if sync is not None:
                sync(i == len(chunks) - 1)
            value = step_loss(forward(*chunk[0], **chunk[1]), chunk, self.loss)
            # a factor of 1 is left out: the one-batch step stays the plain backward of its loss
            (value if scale == 1.0 else value * scale).backward()
            if after_each is not None:
                after_each()


def micro_batches(inputs, count: int) -> list[tuple]:
    """``inputs`` (positional, keyword) as ``count`` micro-batches: every
    tensor whose first dimension is the batch's (the first tensor input
    with a dimension) split along it, other values whole in each. Raises
    ``ValueError`` where ``count`` does not divide the batch."""
    if count <= 1:
        return [inputs]
    batched = [t for t in _tensors(inputs) if t.dim() > 0]
    if not batched:
        raise ValueError(f"micro_batches={count}: no tensor input has a batch dimension to split")
    size = batched[0].shape[0]
    if size % count:
        raise ValueError(f"micro_batches={count} does not divide the batch size {size} "
                         "(the first dimension of the first tensor input)")
    return [_map_tensors(inputs, lambda x, i=i: x.chunk(count)[i] if x.dim() and x.shape[0] == size else x)
            for i in range(count)]


def gradient_sync(model):
    """``sync(last)`` for :meth:`TrainingStep.backward`: before a
    micro-batch that is not the last, every FSDP2-managed module of
    ``model`` is told ``set_requires_gradient_sync(False)``; before the
    last, each gets back the setting the plan left it with (a plan that
    turned a module's sync off keeps it off: that is the plan's step to
    judge, never the suite's to fix). None where no module is managed."""
    from .fsdp2_run import fsdp_module_class

    fsdp_module = fsdp_module_class()
    managed = [m for m in model.modules() if fsdp_module is not None and isinstance(m, fsdp_module)]
    if not managed:
        return None
    planned = [_requires_gradient_sync(module) for module in managed]

    def sync(last: bool) -> None:
        for module, flag in zip(managed, planned, strict=True):
            module.set_requires_gradient_sync(flag if last else False, recurse=False)

    return sync


def _requires_gradient_sync(module) -> bool:
    """Whether ``module``'s FSDP2 group reduces in its next backward, as its
    plan left it (FSDP2 keeps it on the group, ``reduce_grads``; true where
    no group says otherwise)."""
    state = module._get_fsdp_state() if hasattr(module, "_get_fsdp_state") else None
    group = getattr(state, "_fsdp_param_group", None)
    return bool(getattr(group, "reduce_grads", True))


def optimizer_step(step: TrainingStep, model, pristine, grads: dict, copy_of=copy.deepcopy) -> dict:
    """The framework's optimizer after the sharded step: ``{"after": full
    parameters after its step on ``model``, "expected": the same optimizer's
    step on a plain copy of ``pristine`` holding ``grads`` (the sharded
    step's own gathered gradients)}``. The plain step shares no code of
    FSDP2's: it tells an optimizer step on sharded parameters that goes
    wrong from gradients that were already wrong (judged apart)."""
    step.optimizer(model).step()
    after = _full_params(model)
    plain = copy_of(pristine)
    for name, p in plain.named_parameters():
        grad = grads.get(name)
        p.grad = None if grad is None else grad.to(p.dtype).clone()
    step.optimizer(plain).step()
    expected = {name: p.detach().cpu().clone() for name, p in plain.named_parameters()}
    return {"after": after, "expected": expected}


def _full_params(model) -> dict:
    """Full parameters by qualified name (a collective on every rank for sharded ones)."""
    DTensor = dtensor_class()
    out = {}
    for name, p in model.named_parameters():
        value = p.full_tensor() if isinstance(p, DTensor) else p
        out[name] = value.detach().cpu().clone()
    return out


def rank_weight(rank: int) -> float:
    # a power of two, so rank r's gradients are exactly rank_weight(r) times
    # rank 0's in any dtype, and the control needs one backward
    return 2.0 if rank % 2 else 1.0


@dataclass(frozen=True)
class PlanGroup:
    """One group of the plan as its call asked for it: the parameters it
    shards (first qualified names), the modules it was called on, and the
    mixed-precision policy given (``None`` dtypes: no cast). A
    ``replicate``-owned module's parameters are a group with no policy (DDP
    averages them in their own dtype)."""

    params: tuple[str, ...]
    roots: tuple[str, ...] = ()
    param_dtype: object = None
    reduce_dtype: object = None
    output_dtype: object = None
    cast_forward_inputs: bool = True


def _error(exc: BaseException) -> str:
    """``Type: message`` first (the checker shows the first line), the traceback after."""
    return f"{type(exc).__name__}: {exc}\n{traceback.format_exc(limit=8)}"


def plan_task(case, rank: int, world_size: int, groups=None, progress=None, group=None) -> dict:
    """This rank's record (process group up): per mode, the full gradients
    of the model after ``case.plan``, and the control's (``reference``);
    ``upstream``: per parameter, the coarsest floating dtype its gradient
    is computed through; ``noise``: where that is below fp32, how far the
    unsharded model's compiled gradient is from its eager one (the largest
    of every rank's, weighted), the model's own compiled-vs-eager
    difference with no FSDP at all. ``progress(phase, **facts)`` is told
    each phase as it begins. ``group``: the gloo process group of the
    world's ranks (None: the default group)."""
    import time

    progress = progress or (lambda phase, **facts: None)
    import torch.distributed as dist

    base = case.model
    with torch.no_grad():
        for tensor in [*base.parameters(), *base.buffers()]:
            dist.broadcast(tensor.data, src=0, group=group)
    # (positional, keyword): a case may give the forward keyword inputs too
    inputs = _map_tensors((tuple(case.example_inputs), dict(getattr(case, "example_kwargs", None) or {})),
                          lambda x: x.detach().clone().requires_grad_(x.requires_grad))
    for x in _tensors(inputs):
        dist.broadcast(x.data, src=0, group=group)
    # the suite's own copies: a model deepcopy refuses (a lock, a handle) is
    # built afresh by its factory, never a failure charged to the plan's step
    copy_of = getattr(case, "copy_of", None) or copy.deepcopy
    pristine = copy_of(base)
    step = TrainingStep.of(case)
    weight = rank_weight(rank)
    if groups is None:
        groups = (PlanGroup(tuple(name for name, _ in pristine.named_parameters())),)
    backend = compile_backend()
    batches = rank_batches(inputs, world_size)
    # every rank computes the same control for every batch, so they decide alike
    batches_kind = "own" if any(not _same_batch(b, inputs) for b in batches) else "shared: the inputs cannot vary"
    progress("control")
    started = time.monotonic()
    try:
        try:
            reference, precision, reach = _control(pristine, batches, groups, rank, world_size, copy_of, step)
        except _Rejected as exc:
            batches, batches_kind = [inputs] * world_size, f"shared: the model rejects varied inputs ({exc})"
            reference, precision, reach = _control(pristine, batches, groups, rank, world_size, copy_of, step)
    except Exception as exc:  # noqa: BLE001 - the checker compares it with the plan's own step
        # The control runs nothing of fully_shard: its failure is the
        # model's or the plan's at the plan's precision. The plan's eager
        # step still runs, so the checker can tell the user's mistake (the
        # step fails the same way) from torch's (it fails otherwise).
        return _control_failed(case, pristine, _error(exc), inputs, world_size, backend, weight, progress, group,
                               copy_of, groups)
    mine = batches[rank]
    control_s = (time.monotonic() - started) / world_size
    progress("noise", control_s=control_s)
    upstream, noise, compiled_control_s = _compiled_noise(pristine, mine, groups, backend, weight, group, copy_of,
                                                          step)
    progress("eager", compiled_control_s=compiled_control_s)
    result = {"reference": reference, "precision": precision, "backend": backend, "world_size": world_size,
              "case": getattr(case, "name", "?"), "weight": weight, "batches": batches_kind,
              "upstream": upstream, "noise": noise, "reach": reach}
    result.update(_plan_steps(case, pristine, batches[rank], world_size, backend, weight, progress, MODES, group,
                              copy_of, uneven=bool(reach["params"] or reach["modules"])))
    return result


def _control_failed(case, pristine, error: str, inputs, world_size: int, backend, weight: float, progress,
                    group=None, copy_of=copy.deepcopy, groups=None) -> dict:
    """This rank's record where the unsharded control failed with ``error``
    (``control_error``): the plan's eager step on the case's own inputs
    beside it, the one the checker compares the failure with (the
    compiled step would show nothing more about whose failure it is)."""
    result = {"control_error": error, "world_size": world_size, "case": getattr(case, "name", "?"),
              "weight": weight, "backend": backend}
    result.update(_plan_steps(case, pristine, inputs, world_size, backend, weight, progress, ("eager",), group,
                              copy_of))
    result["uniform"] = _uniform_step(pristine, inputs, groups, copy_of, TrainingStep.of(case))
    return result


def _uniform_step(pristine, inputs, groups, copy_of, step: TrainingStep) -> dict | None:
    """A step the plan did not ask for, to tell whose a failure at the
    plan's precision is: the unsharded model with *every* floating
    parameter, buffer and input cast to the plan's coarsest compute dtype,
    so nothing mixes dtypes. Where it runs, the failure comes from the
    plan's mix of precisions (the user's); where it fails the same way,
    torch's operators fail at that dtype on their own (torch's).
    ``{"dtype": ..., "error": None or the error}``, or None where the plan
    computes nothing below the parameters' own dtypes."""
    lows = [g.param_dtype for g in groups or () if g.param_dtype is not None and g.param_dtype.is_floating_point
            and torch.finfo(g.param_dtype).eps > torch.finfo(torch.float32).eps]
    if not lows:
        return None
    dtype = max(lows, key=lambda d: torch.finfo(d).eps)
    record: dict = {"dtype": str(dtype).removeprefix("torch."), "error": None}
    try:
        model = copy_of(pristine)
        for tensor in [*model.parameters(), *model.buffers()]:
            if tensor.is_floating_point():
                tensor.data = tensor.data.to(dtype)
        cast = cast_floating(dtype, inputs)
        torch.manual_seed(STEP_SEED)
        step.backward(model, cast)
    except Exception as exc:  # noqa: BLE001 - compared with the control's failure by the checker
        record["error"] = _error(exc)
    return record


def _plan_steps(case, pristine, mine, world_size: int, backend, weight: float, progress, modes, group=None,
                copy_of=copy.deepcopy, uneven: bool = False) -> dict:
    """Per mode in ``modes``, the plan's step on a copy of ``pristine``
    with this rank's batch ``mine``: its gradients, or its error, and
    ``plan_groups`` (:func:`plan_groups`, read before the step). Where the
    ranks' batches reach different parameters (``uneven``) and the eager
    step failed, the compiled step is not run: its world is broken (a rank
    died or a collective timed out) and the eager failure is judged."""
    from torch.distributed.device_mesh import DeviceMesh, init_device_mesh

    result = {}
    step = TrainingStep.of(case)
    mesh = init_device_mesh("cpu", (world_size,)) if group is None else DeviceMesh.from_group(group, "cpu")
    for mode in modes:
        if uneven and mode != "eager" and (result.get("eager") or {}).get("error"):
            result[mode] = {"error": None, "not_run": "the eager step failed with the ranks reaching different "
                                                      "parameters: that failure is judged"}
            continue
        progress(mode)
        record: dict = {"error": None}
        try:
            model = copy_of(pristine)
            case.plan(model, mesh)
            record["plan_groups"] = plan_groups(model)
            forward, graphs = model, []
            if mode == "compiled":
                forward = _compiled(model, backend, graphs)
            torch.manual_seed(STEP_SEED)
            step.backward(forward, mine, weight, gradient_sync(model) if step.micro_batches > 1 else None)
            record["grads"] = _grads(model)
            if step.optimizer is not None:
                record["optimizer"] = optimizer_step(step, model, pristine, record["grads"], copy_of)
            record["own_compiled"] = own_compiled_modules(model)
            if mode == "compiled":
                record["graphs"] = len(graphs)
                if not graphs:
                    record["unsharded_graphs"] = _graphs_of_unsharded(pristine, mine, backend, copy_of)
        except Exception as exc:  # noqa: BLE001 - the checker turns it into a violation
            record["error"] = _error(exc)
        result[mode] = record
    return result


def own_compiled_modules(model) -> list[str]:
    """The qualified names of ``model``'s modules that compile their own
    forward (``module.compile()``, ``torch.compile(module)`` held as a
    child): a step through them runs compiled kernels even where the check
    calls the model eagerly, so its numerics are a compiler's."""
    from torch._dynamo.eval_frame import OptimizedModule

    return [name or "<root>" for name, module in model.named_modules()
            if isinstance(module, OptimizedModule) or getattr(module, "_compiled_call_impl", None) is not None]


def plan_groups(model) -> list[dict] | None:
    """The FSDP2 groups the plan left on ``model``, each ``{"roots": the
    qualified names of the modules whose forward all-gathers it, "params":
    the qualified names of the parameters it shards, "unused_reduced":
    whether its reduce-scatter includes zero gradients of parameters no
    backward reached (``set_reduce_scatter_unused_params``; False on a
    release without it)}``, read from the groups' states before the step;
    None where this torch's states cannot be read."""
    from .fsdp2_run import fsdp_module_class

    fsdp_module = fsdp_module_class()
    if fsdp_module is None:
        return None
    name_of = {id(p): name for name, p in model.named_parameters(remove_duplicate=False)}
    groups: dict[int, dict] = {}
    try:
        for module_name, module in model.named_modules():
            if not isinstance(module, fsdp_module):
                continue
            param_group = getattr(module._get_fsdp_state(), "_fsdp_param_group", None)
            if param_group is None:
                continue
            entry = groups.setdefault(id(param_group), {
                "roots": [], "unused_reduced": bool(getattr(param_group, "reduce_scatter_unused_params", False)),
                "params": sorted({name_of[id(fp.sharded_param)] for fp in param_group.fsdp_params
                                  if id(fp.sharded_param) in name_of})})
            entry["roots"].append(module_name)
    except AttributeError:  # a release whose states hold other names: nothing to read
        return None
    return list(groups.values())


def _compiled_noise(pristine, batch, groups, backend, weight: float, group=None, copy_of=copy.deepcopy,
                    step: TrainingStep = TrainingStep()):
    """``(upstream, noise, seconds)``: ``upstream`` per parameter the
    coarsest floating dtype of its own compute and of every module output
    of the unsharded step (its gradient is its module's inputs, computed
    upstream in the forward, times the gradient flowing back through
    everything downstream); where any is below fp32, ``noise`` per
    parameter the largest absolute difference between the unsharded
    model's compiled and eager gradients on this rank's ``batch`` at the
    plan's precision, times the rank's loss weight, the largest over the
    ranks (a collective: every rank computes it), and ``seconds`` the
    compiled step's time; else ``{}`` and ``None``."""
    import time

    import torch.distributed as dist

    seen: set = set()
    eager, plan_of = _unsharded_grads(copy_of(pristine), batch, groups, dtypes_seen=seen, step=step)
    upstream = {}
    for name, p in pristine.named_parameters():
        compute = plan_of.get(name, (p.dtype,))[0]
        floats = [d for d in (compute, *seen) if d.is_floating_point]
        upstream[name] = str(max(floats, key=lambda d: torch.finfo(d).eps)).removeprefix("torch.")
    if all(torch.finfo(getattr(torch, d)).eps <= torch.finfo(torch.float32).eps for d in upstream.values()):
        return upstream, {}, None
    started = time.monotonic()
    compiled, _ = _unsharded_grads(copy_of(pristine), batch, groups, compile_with=backend, step=step)
    seconds = time.monotonic() - started
    names = [name for name, grad in eager.items() if grad is not None and compiled.get(name) is not None]
    measured = torch.tensor([(compiled[n].double() - eager[n].double()).abs().max().item() * weight
                             if compiled[n].shape == eager[n].shape else float("inf") for n in names],
                            dtype=torch.float64)
    if names:
        dist.all_reduce(measured, op=dist.ReduceOp.MAX, group=group)
    return upstream, dict(zip(names, measured.tolist(), strict=True)), seconds


def _compiled(model, backend, graphs: list):
    """``torch.compile(model)`` with ``backend``, each graph it is given appended to ``graphs``."""
    from torch import _dynamo

    _dynamo.reset()
    compile_graph = _draw_through_aten(backend, _dynamo.lookup_backend(backend))

    def counting(gm, example_inputs):
        graphs.append(gm)
        return compile_graph(gm, example_inputs)

    return torch.compile(model, backend=counting)


def _graphs_of_unsharded(pristine, inputs, backend, copy_of=copy.deepcopy) -> int | str:
    """How many graphs the unsharded model's compiled forward on ``inputs``
    (positional, keyword) gives (a rank-local forward, no collective), or
    why it could not be compiled."""
    graphs: list = []
    try:
        torch.manual_seed(STEP_SEED)
        _compiled(copy_of(pristine), backend, graphs)(*inputs[0], **inputs[1])
    except Exception as exc:  # noqa: BLE001 - reported with the sharded count
        return _error(exc).splitlines()[0]
    return len(graphs)


def rank_batches(inputs: tuple, world_size: int) -> list[tuple]:
    """Each rank's batch: rank 0 the case's inputs; rank ``r`` the same
    structure with each floating tensor's finite entries moved by noise of
    their own scale, and each integer tensor's entries permuted (token ids
    stay valid ids), drawn from a generator seeded with ``r``. Booleans
    (masks) and one-element tensors stay as they are."""
    out = [inputs]
    for r in range(1, world_size):
        generator = torch.Generator().manual_seed(STEP_SEED * 1000 + r)
        out.append(_map_tensors(inputs, lambda x, g=generator: _varied(x, g)))
    return out


def _varied(x: torch.Tensor, generator) -> torch.Tensor:
    if x.numel() < 2 or x.dtype == torch.bool or x.is_complex():
        return x.clone()
    flat = x.detach().reshape(-1)
    if x.is_floating_point():
        finite = torch.isfinite(flat)
        scale = flat[finite].abs().mean().item() if finite.any() else 1.0
        noise = torch.randn(flat.shape, generator=generator).to(flat.dtype) * (scale or 1.0)
        varied = torch.where(finite, flat + noise, flat)
    else:
        varied = flat[torch.randperm(flat.numel(), generator=generator).to(flat.device)]
    return varied.reshape(x.shape).clone().requires_grad_(x.requires_grad)


def _map_tensors(obj, fn):
    """``obj`` with every tensor in it (through tuples, lists and dicts) replaced by ``fn(tensor)``."""
    if isinstance(obj, torch.Tensor):
        return fn(obj)
    if isinstance(obj, dict):
        return type(obj)((k, _map_tensors(v, fn)) for k, v in obj.items())
    if isinstance(obj, (tuple, list)):
        items = [_map_tensors(v, fn) for v in obj]
        return type(obj)(*items) if hasattr(obj, "_fields") else type(obj)(items)
    return obj


def _tensors(obj) -> list:
    found: list = []
    _map_tensors(obj, found.append)
    return found


def _same_batch(a, b) -> bool:
    left, right = _tensors(a), _tensors(b)
    return len(left) == len(right) and all(torch.equal(x, y) for x, y in zip(left, right, strict=True))


class _Rejected(Exception):
    """The unsharded model cannot take a varied batch."""


def _draw_through_aten(backend, compile_graph):
    """``compile_graph`` (the backend ``backend`` names), drawing as eager
    does: Inductor draws dropout masks and ``rand`` with its own Philox
    generator unless told to fall back to aten's (``fallback_random``), then
    it draws what eager draws from the same seed.

    Told for its own compiles only (``compile_fx``'s ``config_patches``, as
    ``torch.compile(options=...)`` does, its lazily compiled backward
    included), never in Inductor's process-wide config: under torchrun this
    step runs in the test process, where the isolation check would charge a
    setting left changed to torch (issue 56), and a real leak of that
    setting by torch must still be seen."""
    if backend != "inductor":
        return compile_graph
    return functools.partial(compile_graph, config_patches={"fallback_random": True})


def _control(pristine, batches, groups, rank: int, world_size: int, copy_of=copy.deepcopy,
             step: TrainingStep = TrainingStep()):
    """The unsharded model's gradients reduced as the plan's groups say (see
    the module docstring), and ``{name: (param_dtype, reduce_dtype)}`` for
    the parameters the plan computes or reduces below their own dtype.
    Raises :class:`_Rejected` where a batch other than rank 0's gives an
    error or a non-finite gradient. Third, ``reach``: ``{"params": {name:
    the ranks whose batch gives it a gradient}, "modules": {name: the ranks
    whose batch calls its forward}}`` for the parameters and modules some
    rank's batch reaches and another's does not (a routed model on per-rank
    data); a parameter's reference is then the average over every rank
    with a zero where a rank's batch did not reach it, as FSDP2's
    reduce-scatter of unused parameters documents it."""
    grads_per_batch, calls_per_batch = [], []
    for r, batch in enumerate(batches):
        calls: set = set()
        try:
            grads, plan_of = _unsharded_grads(copy_of(pristine), batch, groups, step=step, calls_seen=calls)
        except Exception as exc:
            if r == 0 or batches[r] is batches[0]:
                raise
            raise _Rejected(_error(exc).splitlines()[0]) from exc
        if r > 0 and any(g is not None and not torch.isfinite(g).all() for g in grads.values()):
            raise _Rejected(f"non-finite gradients on rank {r}'s batch")
        grads_per_batch.append(grads)
        calls_per_batch.append(calls)
    reached = {name: [r for r, grads in enumerate(grads_per_batch) if grads[name] is not None]
               for name in grads_per_batch[0]}
    called = {name: [r for r, calls in enumerate(calls_per_batch) if name in calls]
              for name in sorted(set().union(*calls_per_batch))}
    reach = {"params": {n: ranks for n, ranks in reached.items() if 0 < len(ranks) < len(batches)},
             "modules": {n: ranks for n, ranks in called.items() if len(ranks) < len(batches)}}
    weights = [rank_weight(r) for r in range(world_size)]
    reference, precision = {}, {}
    for name, p in pristine.named_parameters():
        mine = grads_per_batch[rank][name]
        if name not in plan_of:  # in no group: nothing reduces it
            reference[name] = None if mine is None else (mine * rank_weight(rank)).to(p.dtype)
            continue
        if not reached[name]:
            reference[name] = None
            continue
        compute, reduce_dtype = plan_of[name]
        total = None
        for w, grads in zip(weights, grads_per_batch, strict=True):
            if grads[name] is None:  # this rank's batch never reached it: a zero term
                continue
            term = (grads[name] * w).to(reduce_dtype)
            total = term if total is None else total + term
        reference[name] = (total / world_size).to(p.dtype)
        if compute != p.dtype or reduce_dtype != p.dtype:
            precision[name] = (str(compute).removeprefix("torch."), str(reduce_dtype).removeprefix("torch."))
    return {k: v.cpu().clone() if v is not None else None for k, v in reference.items()}, precision, reach


def _unsharded_grads(model, inputs, groups, compile_with=None, dtypes_seen=None, step: TrainingStep = TrainingStep(),
                     calls_seen=None):
    """The framework's ``step`` (its micro-batches accumulated) of the
    unsharded ``model`` on ``inputs`` (positional, keyword) at the groups' precision: ``({name: gradient in the compute dtype or None}, {name:
    (compute dtype, reduce dtype)} for the parameters in a group)``.

    The parameters are cast *for the whole step*, as FSDP2's all-gather
    gives them in ``param_dtype`` to the forward, to any recompute in the
    backward (activation checkpointing) and to the backward itself: each
    one computed below its dtype is replaced in its modules by a leaf of
    the compute dtype (a tied parameter by one leaf in every module holding
    it), never swapped in for the forward only (a checkpoint's recompute
    then saw fp32 parameters and torch raised ``CheckpointError``).
    ``calls_seen``: a set the qualified names of the modules whose forward
    ran are added to."""
    params = dict(model.named_parameters())
    modules = dict(model.named_modules())
    low: dict = {}
    plan_of: dict = {}
    hooks = []
    for group in groups:
        for name in group.params:
            p = params.get(name)
            if p is None or name in plan_of:
                continue
            param_dtype = group.param_dtype
            # FSDP2 leaves a parameter alone where param_dtype is its own or it is not floating
            if param_dtype == p.dtype or not p.is_floating_point():
                param_dtype = None
            compute = param_dtype or p.dtype
            plan_of[name] = (compute, group.reduce_dtype or compute)
            if param_dtype is not None:
                low[name] = low_leaf(p, param_dtype)
        for root in group.roots:
            module = modules.get(root)
            if module is not None:
                hooks.extend(_precision_hooks(module, group))
    swap_in_leaves(model, {id(params[name]): leaf for name, leaf in low.items()})
    if calls_seen is not None:
        for module_name, module in model.named_modules():
            hooks.append(module.register_forward_pre_hook(
                lambda module, args, module_name=module_name: calls_seen.add(module_name)))
    if dtypes_seen is not None:
        def record_dtypes(module, args, output):
            dtypes_seen.update(t.dtype for t in output_tensors(output) if t.is_floating_point())

        hooks.extend(module.register_forward_hook(record_dtypes) for module in model.modules())
    forward = model if compile_with is None else _compiled(model, compile_with, [])
    # Micro-batches' gradients of a parameter computed below its reduce
    # dtype accumulate in the reduce dtype, as FSDP2 keeps them while sync
    # is off (``MixedPrecisionPolicy``: the unsharded gradient is upcast to
    # ``reduce_dtype`` and accumulated there, never summed in bf16)
    accumulated: dict = {}

    def accumulate():
        for name, leaf in low.items():
            reduce_dtype = plan_of[name][1]
            if leaf.grad is not None and leaf.grad.dtype != reduce_dtype:
                grad, leaf.grad = leaf.grad.detach().to(reduce_dtype), None
                accumulated[name] = grad if name not in accumulated else accumulated[name] + grad

    try:
        torch.manual_seed(STEP_SEED)
        step.backward(forward, inputs, after_each=accumulate if step.micro_batches > 1 else None)
    finally:
        for hook in hooks:
            hook.remove()
    grads = {}
    for name, p in params.items():
        grad = accumulated.get(name, low[name].grad if name in low else p.grad)
        grads[name] = None if grad is None else grad.detach()
    return grads, plan_of


def _precision_hooks(module, group):
    """FSDP2's casts at a group's modules: floating inputs to ``param_dtype``
    (``cast_forward_inputs``), outputs to ``output_dtype``."""
    hooks = []
    if group.param_dtype is not None and group.cast_forward_inputs:
        hooks.append(cast_inputs_hook(module, group.param_dtype))
    if group.output_dtype is not None:
        hooks.append(cast_outputs_hook(module, group.output_dtype))
    return hooks


def output_tensors(output) -> list:
    """Every tensor in what a model returns, through tuples, lists, dicts and
    dataclass-like outputs, in order."""
    found, pending = [], [output]
    while pending:
        obj = pending.pop()
        if isinstance(obj, torch.Tensor):
            found.append(obj)
        elif isinstance(obj, dict):
            pending.extend(reversed(list(obj.values())))
        elif isinstance(obj, (tuple, list)):
            pending.extend(reversed(obj))
        elif hasattr(obj, "to_tuple"):  # transformers' ModelOutput
            pending.append(obj.to_tuple())
    return found


def step_loss(output, inputs, loss=None) -> torch.Tensor:
    """The step's scalar: the case's own ``loss(output, *args, **kwargs)``
    (``inputs`` is ``(args, kwargs)``), or :func:`_loss` where it gives none."""
    if loss is None:
        return _loss(output)
    args, kwargs = inputs
    value = loss(output, *args, **kwargs)
    if not (isinstance(value, torch.Tensor) and value.numel() == 1 and value.is_floating_point()):
        raise TypeError(f"the case's loss returned {type(value).__name__}"
                        f"{tuple(value.shape) if isinstance(value, torch.Tensor) else ''}, not a floating scalar")
    return value.reshape(())


def _loss(output) -> torch.Tensor:
    """A scalar from whatever the model returns: every floating tensor in it
    squared and averaged."""
    found = [t for t in output_tensors(output) if t.is_floating_point()]
    if not found:
        raise TypeError(f"the model's output ({type(output).__name__}) holds no floating-point tensor to take a loss of")
    total = found[0].float().square().mean()
    for tensor in found[1:]:
        total = total + tensor.float().square().mean()
    return total


def _grads(model) -> dict:
    """Full gradients by qualified name, each parameter once (a tied one under
    its first name); sharded ones gathered, a collective on every rank."""
    DTensor = dtensor_class()
    out = {}
    for name, p in model.named_parameters():
        grad = p.grad
        if grad is None:
            out[name] = None
            continue
        grad = grad.full_tensor() if isinstance(grad, DTensor) else grad
        out[name] = grad.detach().cpu().clone()
    return out
