"""FS2-9: one training step of a real ``fully_shard`` model, driven by the
implementation under test, at world size >= 2.

What an FSDP2 implementation of this area decides in a real step is which
modules each ``fully_shard`` call manages and which parameters it shards:
torch's ``fully_shard`` takes both from ``_get_managed_modules`` and
``_get_managed_states``. Each rank therefore swaps those two for the
implementation's ``managed_modules``/``managed_states`` (torch's own are
called when the implementation calls them), applies the groups with real
``fully_shard`` (inner first), and takes one step eagerly and one under
``torch.compile``. It records what the implementation returned, what
``fully_shard`` really sharded and flagged, and every gradient, beside the
oracle's expectation (:mod:`pytest_fsdpcheck.checks.fsdp2`, which never
looks at an implementation). :func:`pytest_fsdpcheck.checks.distributed.check_fsdp2_end_to_end`
judges the records.

Inputs differ per rank on purpose: a parameter that was wrongly left out of
every group (or an ignored one wrongly sharded) then has a gradient that
differs from the all-reduced one, so a wrong walk cannot pass by luck. The
reference gradients come from the control, which runs nothing of
``fully_shard`` (so a fault in torch's FSDP2 runtime is a FAIL of the
step, in torch's column too): the unsharded model on each rank's batch,
its gradients averaged over the ranks with plain ``all_reduce``. Sharded
parameters must equal that average (FSDP2 averages over ranks), ignored
parameters this rank's own gradient (FSDP2 leaves them alone). The same
average computed on one rank from every rank's batch (each rank
regenerates every rank's inputs from their seeds) is the world's self-test
on real tensors.

Nothing raises out of :func:`fsdp2_task` but the world's self-test
(:class:`~pytest_fsdpcheck.runs.selftest.WorldSelfTestFailed`, recorded by
the rank with its phase); other errors are recorded. The model, its oracle
and the label queries the control and the step share are
:mod:`pytest_fsdpcheck.runs.fsdp2_model`'s.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import importlib
import os
import shutil
import sys
import traceback

import torch
from torch import nn

from ..checks.distributed import MIXED_MODE
from ..generators.fsdp2 import BuiltFsdp2
from ..generators.trees import BuiltTree
from .fsdp2_model import (
    _labels_like,
    _labels_of_group,
    _like_base,
    _modules_in_order,
    _pair_call,
    _tied_group,
    build_model,
    end_to_end_model,
    model_width,
    oracle,
)
from .precision import cast_inputs_hook, low_leaf, swap_in_leaves

BATCH = 4
STEP_SEED = 1000
#: the plain SGD step taken after the backward, on both sides
LEARNING_RATE = 0.5
#: the mixed precision of FS2-9's third step (``MIXED_MODE``, eager): the
#: grouped call ``fully_shard([a, b])`` computes in bf16 and reduces its
#: gradients in fp32, after the same frozen first forward as every step
#: (pytorch#186998: the dtypes a group latched while it had no trainable
#: parameter); every other call keeps fp32
MIXED_PARAM_DTYPE, MIXED_REDUCE_DTYPE = torch.bfloat16, torch.float32


# --- driving fully_shard with an implementation ---------------------------------------

_INIT_MODULES = (
    "torch.distributed.fsdp._fully_shard._fsdp_init",
    "torch.distributed.fsdp._fully_shard._fully_shard",
    "torch.distributed._composable.fsdp._fsdp_init",
    "torch.distributed._composable.fsdp.fully_shard",
)


def fully_shard_function():
    for module, attr in (("torch.distributed.fsdp", "fully_shard"), ("torch.distributed._composable.fsdp", "fully_shard")):
        with contextlib.suppress(ImportError, AttributeError):
            return getattr(importlib.import_module(module), attr)
    return None


@contextlib.contextmanager
def driven_by(area, record: list):
    """Within the block, ``fully_shard`` asks ``area`` for its managed modules
    and states; ``record`` gets one ``(modules, (params, buffers))`` per call.
    A call from inside the area (torch's adapter calls torch's own walk)
    and ``replicate``'s calls (composability and state functions) go to
    torch's originals."""
    originals: list[tuple[object, str, object]] = []
    inside = [False]
    real = {}
    for name in _INIT_MODULES:
        try:
            module = sys.modules.get(name) or importlib.import_module(name)
        except ImportError:
            continue
        for attr in ("_get_managed_modules", "_get_managed_states"):
            if hasattr(module, attr):
                originals.append((module, attr, getattr(module, attr)))
                real.setdefault(attr, getattr(module, attr))

    # wrapped: whoever reads the signature (torch's adapter does, per release) sees torch's
    @functools.wraps(real["_get_managed_modules"])
    def managed_modules(*args, **kwargs):
        torch_own = kwargs.get("is_composable_fn") or kwargs.get("get_state_fn") or any(a is not None for a in args[2:4])
        if inside[0] or torch_own:
            return real["_get_managed_modules"](*args, **kwargs)
        roots = args[0] if args else kwargs["root_modules"]
        roots = (roots,) if isinstance(roots, nn.Module) else tuple(roots)
        ignored = args[1] if len(args) > 1 else kwargs.get("ignored_params")
        inside[0] = True
        try:
            got = list(area.managed_modules(roots, ignored))
        finally:
            inside[0] = False
        record.append([got, None])
        return got

    @functools.wraps(real["_get_managed_states"])
    def managed_states(*args, **kwargs):
        if inside[0] or not record or record[-1][1] is not None:
            return real["_get_managed_states"](*args, **kwargs)
        modules = args[0] if args else kwargs["modules"]
        ignored = args[1] if len(args) > 1 else kwargs.get("ignored_params")
        inside[0] = True
        try:
            params, buffers = area.managed_states(list(modules), ignored)
        finally:
            inside[0] = False
        record[-1][1] = (list(params), list(buffers))
        return list(params), list(buffers)

    try:
        for module, attr, _ in originals:
            setattr(module, attr, managed_modules if attr == "_get_managed_modules" else managed_states)
        yield
    finally:
        for module, attr, original in originals:
            setattr(module, attr, original)


def _sharded_by_group(root_module, built: BuiltFsdp2, names: dict) -> list[str] | None:
    """The parameters the group at ``root_module`` holds, in its order, as
    the oracle labels them; None where this torch keeps them elsewhere."""
    state = getattr(root_module, "_get_fsdp_state", lambda: None)()
    group = getattr(state, "_fsdp_param_group", None)
    params = getattr(group, "fsdp_params", None)
    if params is None:
        return None
    index = {id(m): i for i, m in enumerate(built.modules)}
    out = []
    for fsdp_param in params:
        info = fsdp_param._module_info
        out.append(names.get((index.get(id(info.module)), info.param_name), f"?.{info.param_name}"))
    return out


def mixed_precision_policy():
    """``MixedPrecisionPolicy`` beside this release's ``fully_shard``."""
    for module in ("torch.distributed.fsdp", "torch.distributed._composable.fsdp"):
        with contextlib.suppress(ImportError, AttributeError):
            return importlib.import_module(module).MixedPrecisionPolicy
    raise ImportError(f"torch {torch.__version__} has no MixedPrecisionPolicy beside fully_shard")


def compile_backend() -> str:
    """``inductor`` where a C++ compiler is on the path (it compiles CPU
    kernels with one), else ``aot_eager`` (Dynamo and AOTAutograd, no codegen).
    ``FSDPCHECK_COMPILE_BACKEND`` overrides."""
    chosen = os.environ.get("FSDPCHECK_COMPILE_BACKEND")
    if chosen:
        return chosen
    compiler = os.environ.get("CXX") or "c++"
    return "inductor" if shutil.which(compiler) or shutil.which("g++") else "aot_eager"


def probe_internals(device) -> dict:
    """``{comparison: reason}`` for each FS2-9 comparison this torch cannot
    make, decided before any implementation runs: the records it needs come
    from torch's internals (the init functions ``fully_shard`` is driven
    through, and the parameter group it builds, read on a throwaway
    ``fully_shard`` by torch's own walk)."""
    version = torch.__version__
    found = set()
    for name in _INIT_MODULES:
        try:
            module = sys.modules.get(name) or importlib.import_module(name)
        except ImportError:
            continue
        found.update(attr for attr in ("_get_managed_modules", "_get_managed_states") if hasattr(module, attr))
    where = " or ".join(_INIT_MODULES[:2])
    if "_get_managed_modules" not in found:
        return {"FS2-9": f"torch {version} has no _get_managed_modules in {where}: fully_shard cannot be driven by an implementation"}
    unchecked = {}
    if "_get_managed_states" not in found:
        unchecked["managed parameters"] = (f"torch {version} has no _get_managed_states in {where}: the parameters "
                                           "each fully_shard call manages are not compared with the oracle")
    from torch.distributed.device_mesh import init_device_mesh

    probe = nn.Sequential(nn.Linear(2, 2, bias=False)).to(device)
    fully_shard_function()(probe, mesh=init_device_mesh(device.type, (torch.distributed.get_world_size(),)))
    built = BuiltFsdp2(None, BuiltTree(None, probe, [probe, probe[0]]), (probe,), None)
    try:
        readable = _sharded_by_group(probe, built, {(1, "weight"): "m1.weight"}) == ["m1.weight"]
    except AttributeError:
        readable = False
    if not readable:
        unchecked["sharded parameters"] = (f"torch {version}'s fully_shard keeps no readable parameter group "
                                           "(_get_fsdp_state()._fsdp_param_group.fsdp_params[i]._module_info): what "
                                           "each call really sharded is not compared with the oracle")
    return unchecked


def fsdp2_task(rank: int, world_size: int, device: torch.device, impl_specs, seed: int = 0,
               progress: dict | None = None, modes=("eager", "compiled", MIXED_MODE)) -> dict:
    """This rank's records for every implementation (process group up);
    the model is :func:`end_to_end_model` of ``seed`` (the same on every rank).

    First the world's self-test (:func:`~pytest_fsdpcheck.runs.selftest.self_test`:
    plain collectives on known tensors, as FSDP2 uses them, the ranks'
    agreement on the model and batches, and the control's all-reduce of real
    gradients against the same average computed alone); a world that fails
    it stops here (:class:`~pytest_fsdpcheck.runs.selftest.WorldSelfTestFailed`,
    the only failure FS2-9 calls the world's). Then the control
    (:func:`_control_grads`, which runs nothing of ``fully_shard``), then each
    implementation. Where an implementation's sharded gradients are wrong in
    a mode, the same step is also taken by torch's own walk (``torch_walk``):
    a second opinion the message names (and ``fs2-gloo-grads-summed``
    matches on), never a reason to excuse.

    Each step ends with a plain SGD step; the rank records its shard of
    every sharded parameter after it, and the outputs of one more forward
    (which all-gathers what the step left), beside the control's updated
    model (:func:`_control_after_step`). ``modes``: the steps taken (FS2-9's
    second world, at 3 ranks, takes the eager one only); ``MIXED_MODE`` is
    the eager step with the grouped call in mixed precision, judged against
    the control at that precision (``reference[MIXED_MODE]``), and a failure
    of that step is recorded as its own (``{"error": ...}``), so the fp32
    steps are judged whatever it does. After it, every rank takes FS2-15's
    steps on a (dp, tp) mesh with the same implementations
    (:func:`~pytest_fsdpcheck.runs.fsdp2_tp.with_tp_steps`, called by
    the world's task after this), recorded as ``tp``: they ride on this
    world, which has passed its self-test."""
    from ..impls import load_implementation
    from .selftest import FSDP2_COLLECTIVES, self_test

    progress = {} if progress is None else progress
    progress["phase"] = "setup"
    spec, calls = end_to_end_model(seed)
    base = build_model(spec, seed)
    names = {}
    for i, m in enumerate(base.modules):
        for name, p in m._parameters.items():
            names[(i, name)] = base.label(p)
    width = model_width(seed)
    inputs = [torch.randn(BATCH, width, generator=torch.Generator().manual_seed(STEP_SEED + r)) for r in range(world_size)]
    ignored = set(oracle(base, calls)["ignored"])
    reference: dict = {}

    def control_on_real_gradients():
        reference.update(_control_grads(base, inputs, rank, world_size, ignored, device))
        return _check_control(reference, _local_mean_grads(base, inputs), ignored)

    agreement = {**{f"parameter {label}": p for (_, _), label, p in _labelled(base, names)},
                 **{f"rank {r}'s batch": x for r, x in enumerate(inputs)}}
    progress["phase"] = "selftest"
    self_test(device, FSDP2_COLLECTIVES, agreement, real=control_on_real_gradients)
    progress["phase"] = "control"  # the world passed its self-test: a failure from here on is the check's
    reference["after_step"] = _control_after_step(base, reference, inputs[rank], ignored)
    if MIXED_MODE in modes:
        reference[MIXED_MODE] = _control_mixed(base, inputs, rank, world_size, ignored, device)
    progress["phase"] = "probe"  # torch's fully_shard on a throwaway model: a failure here is the check's
    backend = compile_backend()
    unchecked = probe_internals(device)
    result = {"oracle": oracle(base, calls), "reference": reference, "backend": backend, "seed": seed,
              "spec": spec.to_source(), "impls": {}, "process_group": torch.distributed.get_backend(),
              "unchecked": unchecked, "torch_walk": {}, "modes": list(modes), "world_size": world_size}
    if "FS2-9" in unchecked:
        return result  # FS2-15's step is driven the same way: n/p for the same reason
    progress["phase"] = "impls"
    for spec in impl_specs:
        try:
            area = load_implementation(spec).fsdp2
            if area is None:
                result["impls"][spec] = {"error": None, "not_provided": True}
                continue
            record = {"error": None, "not_provided": False}
            for mode in modes:
                record[mode] = _mode_step(area, base, calls, names, inputs[rank].to(device), device, mode, backend)
            result["impls"][spec] = record
        except BaseException:  # noqa: BLE001 - the checker turns it into a violation
            result["impls"][spec] = {"error": traceback.format_exc(limit=8), "not_provided": False}
    for mode in modes:
        expected = {**result, "reference": reference[MIXED_MODE] if mode == MIXED_MODE else reference}
        wrong = any("error" in (record.get(mode) or {}) or _sharded_grads_wrong(record.get(mode), expected)
                    for record in result["impls"].values())
        # every rank takes the second opinion's step or none does (it runs collectives)
        flag = torch.tensor([float(wrong)], device=device)
        torch.distributed.all_reduce(flag, op=torch.distributed.ReduceOp.MAX)
        if flag.item():
            try:
                result["torch_walk"][mode] = {"grads": _step(None, base, calls, names, inputs[rank].to(device), device, mode, backend)["grads"]}
            except Exception:  # noqa: BLE001 - recorded: the checker says torch's own step failed
                result["torch_walk"][mode] = {"error": traceback.format_exc(limit=8)}
    return result


def _mode_step(area, base, calls, names, x, device, mode: str, backend: str) -> dict:
    """One mode's step; the mixed-precision step's failure is that step's
    record (``{"error": traceback}``), the others' the implementation's."""
    if mode != MIXED_MODE:
        return _step(area, base, calls, names, x, device, mode, backend)
    try:
        return _step(area, base, calls, names, x, device, mode, backend)
    except Exception:  # noqa: BLE001 - the checker turns it into a violation of this step
        return {"error": traceback.format_exc(limit=8)}


#: how far the control's all-reduced fp32 gradients may be from the same
#: average computed on one rank: both sum the same fp32 terms in another
#: order (the mean of the ranks' gradients, or the gradient of the mean
#: loss), so they differ by rounding only, a few eps(fp32) = 1.2e-7 of the
#: largest entry per operation of the model: 1e-4 relative, 1e-5 absolute
#: (the tolerance the implementations are judged with, too)
CONTROL_RTOL, CONTROL_ATOL = 1e-4, 1e-5


def _labelled(base: BuiltFsdp2, names: dict):
    for i, m in enumerate(base.modules):
        for name, p in m._parameters.items():
            if p is not None:
                yield (i, name), names[(i, name)], p


def _sharded_grads_wrong(step, result, rtol: float = 1e-4, atol: float = 1e-5) -> bool:
    if not step:
        return False
    ignored = set(result["oracle"]["ignored"])
    for label, want in result["reference"]["global"].items():
        have = step["grads"].get(label)
        if label not in ignored and (have is None or have.shape != want.shape or not torch.allclose(have, want, rtol=rtol, atol=atol)):
            return True
    return False


def _control_grads(base: BuiltFsdp2, inputs, rank: int, world_size: int, ignored: set, device) -> dict:
    """The control step, which runs nothing of ``fully_shard``: the unsharded
    model on this rank's batch, its gradients averaged over the ranks with
    plain ``all_reduce`` (:func:`~pytest_fsdpcheck.runs.selftest.averaged`),
    except the ignored parameters (FSDP2 leaves them alone). ``global``: the
    averaged gradients (an ignored one this rank's own); ``local``: this
    rank's own. The model's ``fully_shard`` calls give no
    ``mp_policy``: FSDP2 computes and reduces in fp32, and so does the
    control (param and reduce dtype fp32)."""
    from .selftest import averaged

    model = copy.deepcopy(base.modules[0])
    model(inputs[rank]).square().mean().backward()
    local = _grads(model, base)
    everyone = averaged(local, world_size, reduce_dtype=torch.float32, skip=ignored, device=device)
    return {"global": everyone, "local": local}


def _control_mixed(base: BuiltFsdp2, inputs, rank: int, world_size: int, ignored: set, device) -> dict:
    """The control of the mixed-precision step (``MIXED_MODE``), which runs
    nothing of ``fully_shard``: as :func:`_control_grads` and
    :func:`_control_after_step`, with the grouped call's parameters in
    ``MIXED_PARAM_DTYPE`` for the whole step and its roots' inputs cast to
    it (:func:`_at_group_precision`, as FSDP2 gives them), each gradient
    averaged over the ranks in ``MIXED_REDUCE_DTYPE`` and kept in the
    parameter's own dtype (fp32), as FSDP2 reduces and stores it."""
    from .selftest import averaged

    model = copy.deepcopy(base.modules[0])
    hooks = _at_group_precision(model, base)
    try:
        model(inputs[rank]).square().mean().backward()
    finally:
        for hook in hooks:
            hook.remove()
    local = {label: grad.float() for label, grad in _grads(model, base).items()}
    everyone = averaged(local, world_size, reduce_dtype=MIXED_REDUCE_DTYPE, skip=ignored, device=device)
    reference = {"global": everyone, "local": local}
    reference["after_step"] = _control_after_step(base, reference, inputs[rank], ignored, mixed=True)
    return reference


def _at_group_precision(model, base: BuiltFsdp2) -> list:
    """The control's copy ``model`` as FSDP2 runs the grouped call in mixed
    precision: every parameter of the group's modules replaced by one leaf
    in ``MIXED_PARAM_DTYPE`` (a tied one by one leaf wherever it is held),
    for the whole step, and floating inputs cast to it at each call of the
    call's roots (``cast_forward_inputs``). Returns the hooks to remove."""
    modules = _like_base(model, base)
    leaves: dict[int, nn.Parameter] = {}
    for i in _tied_group(base):
        for p in modules[i]._parameters.values():
            if p is not None and id(p) not in leaves:
                leaves[id(p)] = low_leaf(p, MIXED_PARAM_DTYPE)
    swap_in_leaves(model, leaves)
    return [cast_inputs_hook(modules[i], MIXED_PARAM_DTYPE) for i in _pair_call(base)]


def _control_after_step(base: BuiltFsdp2, reference: dict, x, ignored: set, mixed: bool = False) -> dict:
    """The control's SGD step, by hand (nothing of ``fully_shard``, nor of
    ``torch.optim``): every parameter minus ``LEARNING_RATE`` times the
    control's gradient (the ranks' average; an ignored parameter's this
    rank's own), and the updated unsharded model's outputs on this rank's
    batch. ``before``: the parameters before the step (a shard still
    holding them was never updated). ``mixed``: the step of ``MIXED_MODE``:
    the forward after it runs at the group's precision, and ``gathered``/
    ``gathered_before`` are the parameters as that forward computes with
    them (the group's cast to ``MIXED_PARAM_DTYPE``, read back in fp32)."""
    model = copy.deepcopy(base.modules[0])
    labels = _labels_like(model, base)
    before, after = {}, {}
    with torch.no_grad():
        for module in _modules_in_order(model):
            for name, p in module._parameters.items():
                label = labels.get((id(module), name))
                if p is None or label in after:
                    continue
                grad = reference["local" if label in ignored else "global"].get(label)
                before[label] = p.detach().clone()
                if grad is not None:
                    p.sub_(LEARNING_RATE * grad)
                after[label] = p.detach().clone()
        if not mixed:
            return {"before": before, "params": after, "output": model(x).detach().clone()}
        low = set(_labels_of_group(base))
        hooks = _at_group_precision(model, base)
        try:
            output = model(x).detach().float().clone()
        finally:
            for hook in hooks:
                hook.remove()

    def as_computed(values):
        return {label: v.to(MIXED_PARAM_DTYPE).float() if label in low else v for label, v in values.items()}

    return {"before": before, "params": after, "output": output,
            "gathered": as_computed(after), "gathered_before": as_computed(before)}


def _local_mean_grads(base: BuiltFsdp2, inputs) -> dict:
    """The gradients of the mean of every rank's loss, on this rank alone."""
    model = copy.deepcopy(base.modules[0])
    (sum(model(x).square().mean() for x in inputs) / len(inputs)).backward()
    return _grads(model, base)


def _check_control(reference: dict, local_mean: dict, ignored: set) -> str | None:
    from .selftest import check_against_local

    return check_against_local(reference["global"], local_mean, CONTROL_RTOL, CONTROL_ATOL, skip=ignored)


def fsdp_module_class():
    """``FSDPModule`` (what ``fully_shard`` makes a module an instance of):
    public in ``torch.distributed.fsdp`` from 2.6, under
    ``torch.distributed._composable.fsdp`` before; None where neither has it."""
    for home in ("torch.distributed.fsdp", "torch.distributed._composable.fsdp"):
        try:
            return __import__(home, fromlist=["FSDPModule"]).FSDPModule
        except (ImportError, AttributeError):
            continue
    return None


def dtensor_class():
    """``DTensor``: public in ``torch.distributed.tensor`` from 2.5, private
    (``torch.distributed._tensor``) in 2.3 and 2.4."""
    try:
        from torch.distributed.tensor import DTensor
    except ImportError:
        from torch.distributed._tensor import DTensor
    return DTensor


def _grads(model, base: BuiltFsdp2) -> dict:
    """Full gradients by the oracle's labels, each parameter once, in
    registration order (sharded ones gathered: a collective on every rank)."""
    DTensor = dtensor_class()
    labels = _labels_like(model, base)
    out = {}
    for module in _modules_in_order(model):
        for name, p in module._parameters.items():
            if p is None or p.grad is None:
                continue
            label = labels[(id(module), name)]
            if label in out:
                continue
            grad = p.grad.full_tensor() if isinstance(p.grad, DTensor) else p.grad
            out[label] = grad.detach().cpu().clone()
    return out


def _step(area, base: BuiltFsdp2, calls_made, names: dict, x, device, mode: str, backend: str) -> dict:
    from torch.distributed.device_mesh import init_device_mesh

    DTensor = dtensor_class()
    fully_shard = fully_shard_function()
    model = copy.deepcopy(base.modules[0]).to(device)
    # the copy's modules and ignored parameters, by the base's indices
    modules = _like_base(model, base)
    ignored = None
    if base.ignored is not None:
        ignored = set()
        for i, m in enumerate(base.modules):
            for name, p in m._parameters.items():
                if p is not None and p in base.ignored:
                    ignored.add(modules[i]._parameters[name])
    copy_built = BuiltFsdp2(base.spec, BuiltTree(base.spec.tree, modules[0], modules), (modules[0],), ignored)
    copy_built.label(modules[0])  # labels the parameters before fully_shard swaps them for DTensors
    mesh = init_device_mesh(device.type, (torch.distributed.get_world_size(),))
    record: list = []
    calls = []
    mixed = {}
    if mode == MIXED_MODE:
        mixed = {"mp_policy": mixed_precision_policy()(param_dtype=MIXED_PARAM_DTYPE, reduce_dtype=MIXED_REDUCE_DTYPE)}
    # area None: torch's own walk (the control step)
    with driven_by(area, record) if area is not None else contextlib.nullcontext():
        for call in calls_made:
            targets = [modules[i] for i in call]
            fully_shard(targets[0] if len(targets) == 1 else targets, mesh=mesh, ignored_params=ignored,
                        **(mixed if set(call) == _pair_call(base) else {}))
            # what torch's walk reads from the module's FSDP state, the area
            # learns through its contract (the roots of the call own the group)
            for i in call:
                if area is not None:
                    area.mark_own_group(modules[i])
    for (got_modules, states), call in zip(record, calls_made, strict=False):
        calls.append({
            "impl_modules": copy_built.labels(got_modules),
            "impl_params": copy_built.labels(states[0]) if states else None,
            "sharded": _sharded_by_group(modules[call[0]], copy_built, names),
        })
    flagged = sorted(f"m{i}" for i, m in enumerate(modules) if m.__dict__.get("_is_fsdp_managed_module") is True
                     and m.__dict__.get("_fsdp_use_orig_params") is True)
    dtensors = sorted({names[(i, n)] for i, m in enumerate(modules) for n, p in m._parameters.items()
                       if p is not None and isinstance(p, DTensor)})
    # a first forward with the tied pair's group frozen (every parameter of
    # fully_shard([a, b]) requires no grad: FSDP2's lazy init runs here and
    # sees that group with no trainable parameter), then unfrozen for the
    # step (pytorch#186998: what the first forward saw latched); the
    # unsharded model is unchanged by a forward, so the control stands
    frozen = [p for i in _tied_group(base) for p in modules[i].parameters() if p.requires_grad]
    for p in frozen:
        p.requires_grad_(False)
    try:
        model(x)
    finally:
        for p in frozen:
            p.requires_grad_(True)
    forward, graphs = model, []
    if mode == "compiled":
        from torch import _dynamo

        _dynamo.reset()

        def counting_backend(gm, example_inputs):
            graphs.append(gm)
            return _dynamo.lookup_backend(backend)(gm, example_inputs)

        forward = torch.compile(model, backend=counting_backend)
    loss = forward(x).square().mean()
    loss.backward()
    grads = _grads(model, base)
    # the step FSDP2 is for: the optimizer updates each rank's shard in place,
    # and the next forward all-gathers what it left
    torch.optim.SGD(model.parameters(), lr=LEARNING_RATE).step()
    shards = {}
    for i, m in enumerate(modules):
        for n, p in m._parameters.items():
            label = names[(i, n)]
            if p is not None and label not in shards:
                local = p.to_local() if isinstance(p, DTensor) else p
                shards[label] = local.detach().cpu().clone()
    # eager: each module records the parameters its forward computes with
    # (all-gathered from the updated shards), by the oracle's labels
    seen = [{} for _ in modules]
    for module, found in zip(modules, seen, strict=True):
        module.__dict__["_fsdpcheck_seen"] = found
    try:
        with torch.no_grad():
            output = model(x).detach().float().cpu().clone()
    finally:
        for module in modules:
            module.__dict__.pop("_fsdpcheck_seen", None)
    gathered = {}
    for i, found in enumerate(seen):
        for n, tensor in found.items():
            gathered.setdefault(names[(i, n)], tensor)
    return {"calls": calls, "fully_shard_calls": len(record), "flagged": flagged, "dtensors": dtensors,
            "grads": grads, "loss": loss.item(), "graphs": len(graphs),
            "after_step": {"shards": shards, "output": output, "gathered": gathered}}
