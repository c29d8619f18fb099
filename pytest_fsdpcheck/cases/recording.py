"""Recording a plan's real ``fully_shard`` calls.

:func:`record_plan` runs ``case.plan(model, mesh)`` on a world-of-one gloo
mesh on CPU while ``fully_shard`` itself records (:func:`_intercepted`:
the function object's code is swapped for the plan's duration, so every
reference to it, wherever it is held, reaches the recorder): each call's
arguments and order, what torch's
walk and state collection returned inside it, the parameters its group
sharded, and an exception it raised. A call that raises is recorded and the
plan goes on (it gets its module back), so the rules about the whole plan
are judged on every call it makes.

Everything is recorded by qualified name (taken before the plan ran:
``fully_shard`` replaces parameters by sharded ones), and the model as it
was before the plan is kept (``pristine``) for the oracle.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import sys
import types
from dataclasses import dataclass, field

_FULLY_SHARD_HOMES = (
    "torch.distributed.fsdp",
    "torch.distributed.fsdp._fully_shard",
    "torch.distributed.fsdp._fully_shard._fully_shard",
    "torch.distributed._composable.fsdp",
    "torch.distributed._composable.fsdp.fully_shard",
)
_INIT_MODULES = (
    "torch.distributed.fsdp._fully_shard._fsdp_init",
    "torch.distributed.fsdp._fully_shard._fully_shard",
    "torch.distributed._composable.fsdp._fsdp_init",
    "torch.distributed._composable.fsdp.fully_shard",
)


@dataclass
class RecordedCall:
    index: int
    roots: tuple[str, ...]  # qualified names ("" the model's root), as given
    as_list: bool  # fully_shard was given a list of modules
    ignored: frozenset[str] | None  # qualified parameter names, or None
    kwargs: dict  # every other keyword (mesh, reshard_after_forward, mp_policy...)
    replicate: frozenset[str]  # modules another composable API owned at the call
    walk: list[str] | None = None  # torch's managed modules, inside the call
    params: list[str] | None = None  # torch's managed parameters, inside the call
    buffers: list[str] | None = None
    sharded: list[str] | None = None  # what the group holds after the call
    error: BaseException | None = None

    def label(self) -> str:
        inner = ", ".join(r or "<root>" for r in self.roots)
        return f"fully_shard({'[' + inner + ']' if self.as_list else inner})"


class RejectedCall(Exception):
    """A plan's ``fully_shard`` call whose arguments the installed
    ``fully_shard`` does not take (its signature, or a value of the wrong
    kind): the plan's mistake, which stops the plan like its own error."""


def _fsdp2_types() -> dict:
    from torch.distributed.device_mesh import DeviceMesh

    found = {"mesh": DeviceMesh}
    for home in ("torch.distributed.fsdp", "torch.distributed._composable.fsdp"):
        module = _mod(home)
        for arg, cls in (("mp_policy", "MixedPrecisionPolicy"), ("offload_policy", "OffloadPolicy")):
            if module is not None and arg not in found and isinstance(getattr(module, cls, None), type):
                found[arg] = getattr(module, cls)
    return found


def _names_only(signature) -> str:
    """``fully_shard(module, *, mesh, ...)``: the signature in one short line."""
    import inspect

    parts, starred = [], False
    for param in signature.parameters.values():
        if param.kind is inspect.Parameter.KEYWORD_ONLY and not starred:
            parts.append("*")
            starred = True
        prefix = {inspect.Parameter.VAR_POSITIONAL: "*", inspect.Parameter.VAR_KEYWORD: "**"}.get(param.kind, "")
        starred = starred or param.kind is inspect.Parameter.VAR_POSITIONAL
        parts.append(prefix + param.name)
    return f"fully_shard({', '.join(parts)})"


def rejected_arguments(fn, module, args, kwargs, names) -> str | None:
    """Why the installed ``fully_shard`` (``fn``) does not take this call,
    stated from its signature and its documented argument kinds (never by
    running it), or None."""
    import inspect

    from torch import nn

    try:
        signature = inspect.signature(fn)
        bound = signature.bind(module, *args, **kwargs)
    except TypeError as exc:
        return f"does not fit {_names_only(signature)}: {exc}"
    except ValueError:  # no signature to read: nothing to say
        return None
    roots = [module] if isinstance(module, nn.Module) else list(module) if isinstance(module, (list, tuple)) else None
    if not roots or not all(isinstance(m, nn.Module) for m in roots):
        return f"module must be an nn.Module or a non-empty list of them, got {type(module).__name__}"
    # every release's fully_shard refuses such a container (2.3-2.11 one
    # with a forward of its own too: torch's known bug, not the plan's mistake)
    for m in roots:
        if isinstance(m, (nn.ModuleList, nn.ModuleDict)) and type(m).forward is nn.Module.forward:
            return (f"{names.get(id(m)) or '<root>'} is a {type(m).__name__}, a container without a forward of "
                    "its own, which fully_shard does not take as a group: shard the modules in it, or the module "
                    "that runs them")
    given = bound.arguments
    reshard = given.get("reshard_after_forward")
    if reshard is not None and not isinstance(reshard, (bool, int)):
        return f"reshard_after_forward={reshard!r}: a bool, or a whole number of ranks to reshard to"
    if isinstance(reshard, int) and not isinstance(reshard, bool) and reshard < 1:
        return f"reshard_after_forward={reshard!r}: a number of ranks is at least 1"
    for arg, cls in _fsdp2_types().items():
        value = given.get(arg)
        if value is not None and not isinstance(value, cls):
            return f"{arg}={type(value).__name__}(...): expected a {cls.__name__}"
    ignored = given.get("ignored_params")
    if ignored is not None and not all(isinstance(p, nn.Parameter) for p in ignored):
        return "ignored_params must hold parameters"
    return None


@dataclass
class RecordedPlan:
    case: object
    calls: list[RecordedCall]
    pristine: object  # the model before the plan
    model: object  # the model after it
    plan_error: BaseException | None = None  # the plan itself raised (outside fully_shard)
    names: dict = field(default_factory=dict)  # id -> qualified name (pre-plan objects)
    #: ids of the parameters some FSDP2 group holds in ``model`` once the plan returned
    managed_after: frozenset = frozenset()


def _mod(name):
    try:
        return sys.modules.get(name) or importlib.import_module(name)
    except ImportError:
        return None


def fully_shard_originals() -> list:
    found = []
    for home in _FULLY_SHARD_HOMES:
        module = _mod(home)
        fn = getattr(module, "fully_shard", None) if module is not None else None
        if callable(fn) and not isinstance(fn, type(sys)) and all(fn is not f for f in found):
            found.append(fn)
    return found


def names_of(model) -> dict[int, str]:
    """id -> first qualified name for modules, parameters and buffers."""
    names: dict[int, str] = {}
    for name, m in model.named_modules():
        names.setdefault(id(m), name)
    for name, p in model.named_parameters():
        names.setdefault(id(p), name)
    for name, b in model.named_buffers():
        names.setdefault(id(b), name)
    return names


@contextlib.contextmanager
def mesh_of_this_world():
    """The default process group's 1-D CPU mesh; a gloo world of one set up
    (and torn down after) where none is initialised."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh

    mine = not dist.is_initialized()
    if mine:
        dist.init_process_group("gloo", rank=0, world_size=1, store=dist.HashStore())
    try:
        yield init_device_mesh("cpu", (dist.get_world_size(),))
    finally:
        if mine:
            dist.destroy_process_group()


def _incompatible(model) -> set[int]:
    from ..reference.fsdp2 import INCOMPATIBLE_APIS

    key = _mod("torch.distributed._composable.contract").REGISTRY_KEY
    return {id(m) for m in model.modules() if INCOMPATIBLE_APIS & set(m.__dict__.get(key) or ())}


def _trampoline_code(freevars: int):
    """Code of ``(*args, _fsdpcheck_call, **kwargs) -> _fsdpcheck_call(*args,
    **kwargs)`` with ``freevars`` free variables: a function's ``__code__``
    may only be swapped for one whose free variables match its closure."""
    names = [f"_fsdpcheck_free{i}" for i in range(freevars)]
    lines = ["def _outer():"]
    lines += [f"    {n} = None" for n in names]
    lines += ["    def fully_shard(*args, _fsdpcheck_call, **kwargs):"]
    lines += [f"        {n}" for n in names]
    lines += ["        return _fsdpcheck_call(*args, **kwargs)", "    return fully_shard"]
    space: dict = {}
    exec("\n".join(lines), space)  # noqa: S102 - fixed source, no user input
    code = space["_outer"]().__code__
    assert len(code.co_freevars) == freevars
    return code


@contextlib.contextmanager
def _intercepted(originals, recorder, plan):
    """Inside the block every call of one of ``originals`` is
    ``recorder(untouched, *args, **kwargs)``, ``untouched`` a copy of the
    function as it was.

    A plan may hold ``fully_shard`` anywhere (an attribute, a closure, a
    container, a ``functools.partial``, a framework's decorator), where no
    binding can be found and replaced; so the function object itself is
    changed: its ``__code__`` becomes a trampoline to the recorder, and its
    code, defaults and keyword defaults are put back after the block.
    ``fully_shard`` is torch's ``contract`` wrapper, a plain function on
    every release with FSDP2 (2.3 on), whose closure (``func``,
    ``state_cls``) the untouched copy shares. An original that is not a
    plain function (a callable object) falls back to replacing its
    bindings in loaded modules and the plan's globals."""
    swapped, bound = [], []
    for fn in originals:
        if isinstance(fn, types.FunctionType):
            untouched = types.FunctionType(fn.__code__, fn.__globals__, fn.__name__, fn.__defaults__, fn.__closure__)
            untouched.__kwdefaults__ = dict(fn.__kwdefaults__) if fn.__kwdefaults__ else None
            functools.update_wrapper(untouched, fn)
            swapped.append((fn, untouched, fn.__code__, fn.__defaults__, fn.__kwdefaults__))
        else:
            bound.append(fn)
    try:
        for fn, untouched, _, _, _ in swapped:
            fn.__code__ = _trampoline_code(len(fn.__code__.co_freevars))
            fn.__defaults__ = None
            fn.__kwdefaults__ = {"_fsdpcheck_call": functools.partial(recorder, untouched)}
        with contextlib.ExitStack() as stack:
            for fn in bound:
                replacement = functools.update_wrapper(functools.partial(recorder, fn), fn)
                stack.enter_context(_patched([fn], replacement, plan))
            yield
    finally:
        for fn, _, code, defaults, kwdefaults in swapped:
            fn.__code__, fn.__defaults__, fn.__kwdefaults__ = code, defaults, kwdefaults


@contextlib.contextmanager
def _patched(originals, replacement, plan):
    """Every module attribute and the plan's globals bound to one of
    ``originals`` is ``replacement`` inside the block."""
    ids = {id(f) for f in originals}
    undo = []
    spaces = [m.__dict__ for m in list(sys.modules.values()) if m is not None and hasattr(m, "__dict__")]
    plan_globals = getattr(getattr(plan, "__func__", plan), "__globals__", None)
    if plan_globals is not None:
        spaces.append(plan_globals)
    seen = set()
    for space in spaces:
        if id(space) in seen:
            continue
        seen.add(id(space))
        try:
            items = [(k, v) for k, v in list(space.items()) if id(v) in ids]
        except Exception:  # noqa: BLE001 - an exotic module dict
            continue
        for key, value in items:
            undo.append((space, key, value))
            space[key] = replacement
    try:
        yield
    finally:
        for space, key, value in reversed(undo):
            space[key] = value


@contextlib.contextmanager
def _watching_walk(current: list):
    """torch's ``_get_managed_modules``/``_get_managed_states`` report their
    first result inside the current recorded call (``current[0]``)."""
    originals = []
    for name in _INIT_MODULES:
        module = _mod(name)
        for attr in ("_get_managed_modules", "_get_managed_states"):
            if module is not None and hasattr(module, attr):
                originals.append((module, attr, getattr(module, attr)))

    def wrap(attr, fn):
        @functools.wraps(fn)
        def watched(*args, **kwargs):
            out = fn(*args, **kwargs)
            call = current[0]
            torch_own = kwargs.get("is_composable_fn") is None and (len(args) < 3 or args[2] is None)
            if call is not None and torch_own:
                if attr == "_get_managed_modules" and call.get("walk") is None:
                    call["walk"] = list(out)
                elif attr == "_get_managed_states" and call.get("states") is None:
                    call["states"] = (list(out[0]), list(out[1]))
            return out

        return watched

    try:
        for module, attr, fn in originals:
            setattr(module, attr, wrap(attr, fn))
        yield
    finally:
        for module, attr, fn in originals:
            setattr(module, attr, fn)


def _pristine(case):
    """A copy of the case's model (a fresh one from its factory where deepcopy fails)."""
    from .model import model_copy

    return model_copy(case.model, case)


def _param_groups(module) -> list:
    """The FSDP2 parameter groups ``module``'s state holds (none without one)."""
    registry = _mod("torch.distributed._composable_state")
    state = registry._get_module_state(module) if registry is not None else None
    groups = getattr(state, "_fsdp_param_groups", None)
    if groups is None:
        group = getattr(state, "_fsdp_param_group", None)
        groups = [group] if group is not None else []
    return list(groups)


def managed_parameters(model) -> frozenset:
    """Ids of the parameters (the sharded ones ``fully_shard`` registered)
    that some FSDP2 group of ``model`` holds, as it stands now."""
    found = set()
    for module in model.modules():
        for group in _param_groups(module):
            for fsdp_param in getattr(group, "fsdp_params", ()):
                param = getattr(fsdp_param, "sharded_param", None)
                if param is not None:
                    found.add(id(param))
    return frozenset(found)


def _sharded(module, names) -> list[str] | None:
    out = []
    for group in _param_groups(module):
        for fsdp_param in getattr(group, "fsdp_params", ()):
            info = fsdp_param._module_info
            prefix = names.get(id(info.module), "?")
            out.append(f"{prefix}.{info.param_name}" if prefix else info.param_name)
    return out


def record_plan(case) -> RecordedPlan:
    """Run ``case.plan`` on the case's model with ``fully_shard`` recorded."""
    from torch import nn

    if case.plan is None:
        raise ValueError(f"case {case.name!r} has no plan")
    originals = fully_shard_originals()
    if not originals:
        raise ImportError("this torch has no fully_shard")
    # the plan shards a copy: the case's own model stays as the factory made it
    pristine = case.model
    model = _pristine(case)
    names = names_of(model)
    calls: list[RecordedCall] = []
    current: list = [None]
    from torch.distributed._composable_state import _get_module_state  # noqa: F401 - present wherever fully_shard is

    def recorder(original, module, *args, **kwargs):
        if current[0] is not None:  # fully_shard calling itself: not the plan's call
            return original(module, *args, **kwargs)
        as_list = not isinstance(module, nn.Module)
        roots = (module,) if not as_list else tuple(module)
        ignored = kwargs.get("ignored_params")
        call = RecordedCall(
            index=len(calls),
            roots=tuple(names.get(id(m), f"<not in the model: {type(m).__name__}>") for m in roots),
            as_list=as_list,
            ignored=None if ignored is None else frozenset(names.get(id(p), "<not in the model>") for p in ignored),
            kwargs={k: v for k, v in kwargs.items() if k not in ("ignored_params",)},
            replicate=frozenset(names[i] for i in _incompatible(model) if i in names),
        )
        problem = rejected_arguments(original, module, args, kwargs, names)
        if problem is not None:
            raise RejectedCall(f"{call.label()} {problem}")
        seen = current[0] = {}
        try:
            result = original(module, *args, **kwargs)
        except Exception as exc:  # noqa: BLE001 - recorded and judged; the plan goes on
            call.error = exc
            result = module
        finally:
            current[0] = None
        if seen.get("walk") is not None:
            call.walk = [names.get(id(m), "?") for m in seen["walk"]]
        if seen.get("states") is not None:
            call.params = [names.get(id(p), "?") for p in seen["states"][0]]
            call.buffers = [names.get(id(b), "?") for b in seen["states"][1]]
        if call.error is None:
            call.sharded = _sharded(roots[0], names)
        calls.append(call)
        return result

    plan_error = None
    with mesh_of_this_world() as mesh, _watching_walk(current), _intercepted(originals, recorder, case.plan):
        for qualname in case.replicate:
            from ..impls.composable import mark_composable_api

            target = model.get_submodule(qualname)
            if id(target) not in _incompatible(model):
                mark_composable_api(target, "replicate")
        try:
            case.plan(model, mesh)
        except Exception as exc:  # noqa: BLE001 - reported by the checks
            plan_error = exc
    # the model the plan's step trains is this one, as the plan left it:
    # parameters it added after its fully_shard calls are judged too (PLN-3)
    return RecordedPlan(case, calls, pristine, model, plan_error, names, managed_parameters(model))
