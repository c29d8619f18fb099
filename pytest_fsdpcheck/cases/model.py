"""A user's model as a check's input: :class:`ModelCase`, the factories that
make one, and how a factory is named, loaded, validated and drawn.

Nothing here imports torch at import time (the plugin imports this module
to validate its options; torch comes with the first model built).
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from typing import Any

ENTRY_POINT_GROUP = "pytest_fsdpcheck.models"
#: where :func:`model_factory` keeps a factory's keyword strategies
STRATEGIES_ATTR = "fsdpcheck_strategies"
EXAMPLES_ATTR = "fsdpcheck_examples"


class CaseError(Exception):
    """A model factory cannot be used; the message is one line naming what is wrong."""


@dataclass(frozen=True)
class ModelCase:
    """One model and how a framework shards it.

    - ``name``: shown in test ids and reports.
    - ``model``: the ``nn.Module``; checks that change it get their own copy
      (a fresh one from the factory where there is one).
    - ``example_inputs``: a tuple of positional arguments, and
      ``example_kwargs`` a dict of keyword arguments, for the forward:
      every check calls ``model(*example_inputs, **example_kwargs)``
      (:meth:`call`). A factory returning a tuple may give them as
      ``(model, args)`` or ``(model, args, kwargs)``.
    - ``plan``: ``plan(model, mesh)`` calls ``fully_shard`` exactly as the
      framework does (any import path of it), inner groups first, the root
      last; ``None``: no FSDP2 checks.
    - ``fsdp1_units``: qualified module names ("" is the root) that FSDP1
      wraps, each an FSDP unit of its own (the root is always one), or a
      tuple of names sharing one unit; or ``auto_wrap_policy``: a set of
      module classes, or FSDP1's ``policy(module, recurse, nonwrapped_numel)``.
    - ``replicate``: qualified names of modules owned by ``replicate``
      (FSDP1's traversal and FSDP2's walk never enter them).
    - ``bucket_cap_mb`` / ``first_bucket_cap_mb``: DDP's bucket caps for the
      DDPOptimizer checks; unset, a cap giving about four buckets is chosen
      so the split is exercised (DDP's 25 MiB default is one bucket for most
      test-sized models).
    - ``mesh_shape``: the mesh the framework trains the plan on, ``(shard,)``
      or ``(replicate, shard)`` (HSDP); the simulated tier (FS2-10) checks
      the plan on it, one rank's view at a time. Unset: a 1-D world of
      ``--fsdpcheck-world-size`` ranks (default 8). The real ranks (FS2-9)
      stay 2 on CPU whatever it says.
    - ``loss``: the framework's own loss, ``loss(output, *example_inputs,
      **example_kwargs)`` giving a scalar (next-token cross-entropy, say);
      FS2-9 takes its step with it, in the sharded step and the control
      alike. Unset: every floating tensor of the output squared and
      averaged.
    - ``unreduced``: trainable parameters the plan puts in ``ignored_params``
      on purpose (qualified names, or ``fnmatch`` patterns such as
      ``"*.lora_*"``): FSDP2 never reduces an ignored parameter, so each
      rank trains its own copy unless the framework reduces it itself.
      A trainable ignored parameter not named here is the plan's mistake
      (PLN-5), reported as the user's, never as the implementation's.
    - ``micro_batches``: how many micro-batches the framework accumulates
      gradients over before its optimizer steps. FS2-9 splits each rank's
      batch that many ways (every tensor input whose first dimension is the
      batch's, along it; it must divide the batch), divides each
      micro-batch's loss by their number, and tells the sharded model
      ``set_requires_gradient_sync(False)`` before every backward but the
      last, as FSDP2 documents accumulation; the control accumulates the
      same micro-batches unsharded.
    - ``optimizer``: the framework's ``optimizer(model)`` building its
      optimizer over the model's parameters (its parameter groups, weight
      decay and all). FS2-9 takes one step with it after the backward, on
      the sharded parameters, and the parameters after it must be those
      the same optimizer gives plain tensors holding the same gradients.
    """

    name: str
    model: Any
    example_inputs: tuple = ()
    plan: Callable | None = None
    fsdp1_units: tuple = ()
    auto_wrap_policy: Any = None
    replicate: tuple = ()
    bucket_cap_mb: float | None = None
    first_bucket_cap_mb: float | None = None
    mesh_shape: tuple | None = None
    example_kwargs: dict = field(default_factory=dict, compare=False)
    unreduced: tuple = ()
    loss: Callable | None = field(default=None, compare=False, repr=False)
    micro_batches: int = 1
    optimizer: Callable | None = field(default=None, compare=False, repr=False)
    #: how to rebuild it: the factory's ``module:attr`` and its keyword arguments
    #: (filled in by :func:`build_case`; shown in reproducers)
    factory_ref: str | None = field(default=None, compare=False)
    factory_kwargs: tuple = field(default=(), compare=False)
    factory: Callable | None = field(default=None, compare=False, repr=False)

    def call(self, model=None):
        """``model`` (default: the case's own) on the example inputs, positional and keyword."""
        return (self.model if model is None else model)(*self.example_inputs, **self.example_kwargs)

    def inputs_in_signature_order(self, model=None) -> list:
        """The example inputs as the forward's parameters list them, each
        keyword argument at its parameter's place and defaults filled in
        between: the values of the placeholders ``torch.fx`` traces. Positional
        inputs then keyword ones where the forward takes ``*args``/``**kwargs``."""
        import inspect

        forward = (self.model if model is None else model).forward
        try:
            signature = inspect.signature(forward)
            bound = signature.bind(*self.example_inputs, **self.example_kwargs)
        except (TypeError, ValueError):
            return [*self.example_inputs, *self.example_kwargs.values()]
        if any(p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in signature.parameters.values()):
            return [*self.example_inputs, *self.example_kwargs.values()]
        bound.apply_defaults()
        return list(bound.arguments.values())

    def copy_of(self, model=None):
        """An independent copy of ``model`` (default: the case's own): see :func:`model_copy`."""
        return model_copy(self.model if model is None else model, self)

    def rebuild(self) -> ModelCase:
        """A fresh case (a new model) from the factory, or ``self`` without one."""
        if self.factory is None:
            return self
        return build_case(self.factory, **dict(self.factory_kwargs))

    def reproducer_lines(self) -> list[str]:
        """Python lines that rebuild this case into ``case``, importing the
        user's factory (never the plugin's internals)."""
        kwargs = ", ".join(f"{k}={v!r}" for k, v in self.factory_kwargs)
        if self.factory_ref and ":" in self.factory_ref:
            module, _, attr = self.factory_ref.partition(":")
            head = attr.split(".")[0]
            return [
                "from pytest_fsdpcheck.cases import build_case",
                f"from {module} import {head}",
                f"case = build_case({attr}{', ' + kwargs if kwargs else ''})",
            ]
        return [f"case = ...  # the ModelCase {self.name!r} your test builds"]


def model_copy(model, case: ModelCase | None = None):
    """An independent copy of ``model`` (a case's model, or one equal to it).

    A deep copy whose parameters keep their ``_ddp_ignored`` marks
    (``Parameter.__deepcopy__`` builds a fresh Parameter and drops every
    attribute set on it; without the mark a DDP-ignored parameter would
    count in the bucket checks' spec like any other). A model that cannot
    be deep-copied (it holds a lock, an open file, a C handle) is built
    afresh by ``case``'s factory, ``model``'s parameter and buffer values
    copied in by name: the suite's own copying must never turn into a
    failure of the implementation. Where neither works the case is the
    user's: a one-line :class:`CaseError` naming the factory."""
    import copy

    memo: dict = {}
    try:
        copied = copy.deepcopy(model, memo)
    except Exception as exc:  # noqa: BLE001 - the model's own objects refuse: rebuild it
        return _rebuilt_copy(model, case, exc)
    for p in model.parameters():
        if hasattr(p, "_ddp_ignored") and id(p) in memo:
            memo[id(p)]._ddp_ignored = p._ddp_ignored
    return copied


def _rebuilt_copy(model, case: ModelCase | None, error: BaseException):
    import torch

    why = f"its model cannot be deep-copied ({_one_line(error)})"
    label = (f"model {case.factory_ref}" if case is not None and case.factory_ref
             else f"case {case.name!r}" if case is not None else "the model")
    if case is None or case.factory is None:
        raise CaseError(f"{label}: {why}, and there is no factory to build a fresh one: "
                        "give the checks a factory, or make the model copyable") from None
    fresh = case.rebuild().model
    mine = dict(_named_tensors(model))
    theirs = dict(_named_tensors(fresh))
    if mine.keys() != theirs.keys():
        extra = sorted(mine.keys() ^ theirs.keys())
        raise CaseError(f"{label}: {why}, and the factory builds a model with other parameters or buffers "
                        f"({extra[0]}): make the model copyable") from None
    with torch.no_grad():
        for name, tensor in theirs.items():
            if tensor.shape != mine[name].shape:
                raise CaseError(f"{label}: {why}, and the factory builds {name} with shape {tuple(tensor.shape)}, "
                                f"not {tuple(mine[name].shape)}: make the model copyable") from None
            tensor.copy_(mine[name])
    return fresh


def _named_tensors(model):
    yield from model.named_parameters(remove_duplicate=False)
    yield from model.named_buffers(remove_duplicate=False)


def model_factory(**strategies) -> Callable:
    """Declare a factory's keyword arguments and the Hypothesis strategy each
    is drawn from, so the suite draws configurations and shrinks a failure
    to the smallest one::

        @model_factory(depth=st.integers(1, 4), tied=st.booleans())
        def make(depth=2, tied=True):
            ...
            return model, (x,)
    """

    def mark(factory):
        params = inspect.signature(factory).parameters
        unknown = [k for k in strategies if k not in params and not any(
            p.kind is p.VAR_KEYWORD for p in params.values())]
        if unknown:
            raise CaseError(f"model_factory: {factory.__qualname__} takes no argument {unknown[0]!r}")
        setattr(factory, STRATEGIES_ATTR, dict(strategies))
        return factory

    return mark


def model_examples(*configurations: dict) -> Callable:
    """Declare configurations of a factory that every check always judges,
    before and beside the ones drawn from its strategies (Hypothesis'
    explicit examples: they count against no example budget, so FS2-9's one
    drawn world by default still runs each of them). A framework names its
    production configuration here, so the suite and
    ``parametrize_with_checks`` both judge it whatever they draw::

        @model_examples({"compile_layers": True, "checkpoint": True})
        @model_factory(compile_layers=st.booleans(), checkpoint=st.booleans())
        def make(compile_layers=True, checkpoint=True):
            ...
    """

    def mark(factory):
        declared = strategies_of(factory)
        for configuration in configurations:
            if not isinstance(configuration, dict):
                raise CaseError(f"model_examples: {factory.__qualname__}: a configuration is a dict of its "
                                f"keyword arguments, got {_describe(configuration)}")
            unknown = [k for k in configuration if k not in declared]
            if unknown:
                raise CaseError(f"model_examples: {factory.__qualname__}: {unknown[0]!r} is not an argument "
                                "@model_factory declares (apply @model_examples above it)")
        setattr(factory, EXAMPLES_ATTR, [*examples_of(factory), *(dict(c) for c in configurations)])
        return factory

    return mark


def strategies_of(factory) -> dict:
    return dict(getattr(factory, STRATEGIES_ATTR, None) or {})


def examples_of(factory) -> list[dict]:
    """The configurations :func:`model_examples` declares for ``factory``."""
    return list(getattr(factory, EXAMPLES_ATTR, None) or [])


def installed_models() -> dict[str, str]:
    return {ep.name: ep.value for ep in entry_points(group=ENTRY_POINT_GROUP)}


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}".rstrip(": ")


def resolve(spec: str) -> str:
    """The ``module:attr`` behind an entry-point name, or the spec itself."""
    eps = installed_models()
    if spec in eps:
        return eps[spec]
    if ":" in spec:
        return spec
    known = ", ".join(sorted(eps)) or "none installed"
    raise CaseError(f"model {spec!r}: not an installed model (entry points: {known}) nor package.module:factory")


def load_factory(spec: str) -> Callable:
    """The factory named ``pkg.module:factory`` or by an entry point of group
    ``pytest_fsdpcheck.models``; a one-line :class:`CaseError` otherwise."""
    target = resolve(spec)
    module_name, _, attr = target.partition(":")
    if not module_name or not attr:
        raise CaseError(f"model {spec!r}: expected package.module:factory")
    try:
        obj = importlib.import_module(module_name)
    except (Exception, SystemExit) as exc:  # noqa: BLE001 - a training script's sys.exit() too
        raise CaseError(f"model {spec!r}: cannot import {module_name!r}: {_one_line(exc)}") from None
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise CaseError(f"model {spec!r}: {module_name!r} has no attribute {attr!r}") from None
    if not callable(obj):
        raise CaseError(f"model {spec!r}: {attr!r} is a {type(obj).__name__}, not a factory")
    obj_ref = getattr(obj, "__fsdpcheck_ref__", None)
    if obj_ref is None:
        try:
            obj.__fsdpcheck_ref__ = target
        except (AttributeError, TypeError):
            pass
    return obj


def _factory_ref(factory) -> str | None:
    ref = getattr(factory, "__fsdpcheck_ref__", None)
    if ref:
        return ref
    module, qualname = getattr(factory, "__module__", None), getattr(factory, "__qualname__", "")
    if module and qualname and "<" not in qualname and module != "__main__":
        return f"{module}:{qualname}"
    return None


def build_case(factory, **kwargs) -> ModelCase:
    """Call ``factory(**kwargs)``: ``(model, example_inputs)`` or a
    :class:`ModelCase`; anything else is a one-line :class:`CaseError`."""
    from torch import nn

    # named as the user names it (package.module:factory), so the one line says whose it is
    label = _factory_ref(factory) or getattr(factory, "__qualname__", repr(factory))
    missing = _required_arguments(factory, kwargs)
    if missing:
        raise CaseError(
            f"model factory {label} takes a required argument {missing[0]!r} the suite cannot give: give it a "
            f"default, or declare its strategy with @pytest_fsdpcheck.cases.model_factory({missing[0]}=<strategy>)"
        )
    try:
        made = factory(**kwargs)
    except CaseError:
        raise
    except Exception as exc:  # noqa: BLE001 - the user's factory, reported in one line
        raise CaseError(f"model factory {label}({_kwargs(kwargs)}) raised {_one_line(exc)}") from exc
    if isinstance(made, ModelCase):
        case = made
    elif (isinstance(made, tuple) and len(made) in (2, 3) and isinstance(made[0], nn.Module)
          and (len(made) == 2 or isinstance(made[2], dict))):
        inputs = made[1] if isinstance(made[1], tuple) else (made[1],)
        case = ModelCase(name=getattr(factory, "__name__", "model"), model=made[0], example_inputs=inputs,
                         example_kwargs=made[2] if len(made) == 3 else {})
    else:
        raise CaseError(
            f"model factory {label} returned {_describe(made)}; expected (model, example_inputs), "
            "(model, example_inputs, example_kwargs) or a ModelCase"
        )
    if not isinstance(case.model, nn.Module):
        raise CaseError(f"model factory {label}: the case's model is {_describe(case.model)}, not an nn.Module")
    if not isinstance(case.example_inputs, tuple):
        case = dataclasses.replace(case, example_inputs=(case.example_inputs,))
    kwargs_given = case.example_kwargs
    if not isinstance(kwargs_given, dict) or not all(isinstance(k, str) for k in kwargs_given):
        bad = next((repr(k) for k in kwargs_given if not isinstance(k, str)), None) if isinstance(kwargs_given, dict) else None
        raise CaseError(f"model factory {label}: example_kwargs must map the forward's keyword argument names to "
                        f"values, got {f'a dict with the key {bad}' if bad else _describe(kwargs_given)}")
    name = case.name
    if kwargs:
        name = f"{name}[{_kwargs(kwargs)}]"
    return dataclasses.replace(
        case, name=name, factory=factory, factory_ref=_factory_ref(factory),
        factory_kwargs=tuple(sorted(kwargs.items())),
    )


def _required_arguments(factory, kwargs) -> list[str]:
    """The factory's parameters without a default that ``kwargs`` does not
    give (the suite calls it with keyword arguments only)."""
    try:
        params = inspect.signature(factory).parameters.values()
    except (TypeError, ValueError):  # a builtin or extension callable: its call says
        return []
    return [p.name for p in params if p.default is p.empty and p.name not in kwargs
            and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]


def _kwargs(kwargs) -> str:
    return ", ".join(f"{k}={v!r}" for k, v in sorted(kwargs.items()))


def _describe(obj) -> str:
    if isinstance(obj, tuple):
        return f"a tuple of {len(obj)} ({', '.join(type(o).__name__ for o in obj[:4])})"
    return f"a {type(obj).__name__}"


def case_strategy(factory):
    """A Hypothesis strategy of :class:`ModelCase`: the factory's declared
    keyword strategies drawn (shrinking towards their simplest values), the
    case built from them. A factory without strategies gives one case."""
    from hypothesis import strategies as st

    drawn = strategies_of(factory)
    return st.fixed_dictionaries(drawn).map(lambda kwargs: build_case(factory, **kwargs))


def unit_names(case: ModelCase) -> list[tuple[str, ...]]:
    """FSDP1 units as tuples of qualified names (the root's unit first),
    from ``fsdp1_units`` or ``auto_wrap_policy``."""
    units: list[tuple[str, ...]] = []
    for unit in case.fsdp1_units:
        units.append((unit,) if isinstance(unit, str) else tuple(unit))
    policy = case.auto_wrap_policy
    if policy is not None:
        for name, module in case.model.named_modules():
            if not name:
                continue
            if isinstance(policy, (set, frozenset, tuple, list)):
                wrap = isinstance(module, tuple(policy))
            else:
                numel = sum(p.numel() for p in module.parameters())
                wrap = bool(policy(module=module, recurse=False, nonwrapped_numel=numel))
            if wrap and (name,) not in units:
                units.append((name,))
    if ("",) not in units:
        units.insert(0, ("",))
    return units


#: the most ranks a case's ``mesh_shape`` may hold: --fsdpcheck-world-size's
#: own limit (``options.MAX_WORLD_SIZE``, a layer above this one)
MAX_MESH_RANKS = 4096


def case_problems(case: ModelCase) -> list[str]:
    """One line per module name the case gives that its model does not have."""
    names = {name for name, _ in case.model.named_modules()}
    out = []
    for unit in case.fsdp1_units:
        for name in (unit,) if isinstance(unit, str) else unit:
            if name not in names:
                out.append(f"case {case.name!r}: FSDP1 unit {name!r} is not a module of the model")
    for name in case.replicate:
        if name not in names:
            out.append(f"case {case.name!r}: replicate module {name!r} is not a module of the model")
    if case.plan is not None and not callable(case.plan):
        out.append(f"case {case.name!r}: plan is a {type(case.plan).__name__}, not a callable plan(model, mesh)")
    if case.mesh_shape is not None:
        shape = case.mesh_shape
        ranks = 1
        for n in shape if isinstance(shape, tuple) else ():
            ranks *= n if isinstance(n, int) and not isinstance(n, bool) else 0
        if not (isinstance(shape, tuple) and len(shape) in (1, 2) and ranks >= 1 and all(n >= 1 for n in shape)
                and ranks <= MAX_MESH_RANKS):
            out.append(f"case {case.name!r}: mesh_shape must be (shard,) or (replicate, shard), whole numbers of "
                       f"ranks, at most {MAX_MESH_RANKS} in all, got {shape!r}")
    for what in ("bucket_cap_mb", "first_bucket_cap_mb"):
        value = getattr(case, what)
        if value is not None and not (isinstance(value, (int, float)) and value > 0):
            out.append(f"case {case.name!r}: {what} must be a positive number, got {value!r}")
    if case.loss is not None and not callable(case.loss):
        out.append(f"case {case.name!r}: loss is a {type(case.loss).__name__}, not a callable loss(output, *inputs)")
    if not (isinstance(case.micro_batches, int) and not isinstance(case.micro_batches, bool)
            and case.micro_batches >= 1):
        out.append(f"case {case.name!r}: micro_batches must be a whole number of at least 1, "
                   f"got {case.micro_batches!r}")
    if case.optimizer is not None and not callable(case.optimizer):
        out.append(f"case {case.name!r}: optimizer is a {type(case.optimizer).__name__}, "
                   "not a callable optimizer(model)")
    if not (isinstance(case.unreduced, (tuple, list, frozenset, set))
            and all(isinstance(n, str) for n in case.unreduced)):
        out.append(f"case {case.name!r}: unreduced must be a tuple of parameter names or patterns, "
                   f"got {case.unreduced!r}")
    return out


def validate_case_spec(spec: str) -> list[str]:
    """Load ``spec`` and build its case once (with each strategy's simplest
    value where the factory declares strategies). Raises :class:`CaseError`
    for a factory that cannot be loaded or called or returns the wrong
    type; returns one-line problems of the case (module names the model
    does not have), empty when it is usable."""
    case = simplest_case(spec)
    return [f"model {spec!r}: {p}" for p in case_problems(case)]


def simplest_case(spec: str) -> ModelCase:
    """The case the factory ``spec`` names builds with each declared
    strategy's simplest value (Hypothesis' ``find``): what the plugin
    validates at start and what the command-line tools describe."""
    factory = load_factory(spec)
    kwargs = {}
    for name, strategy in strategies_of(factory).items():
        try:
            from hypothesis import find

            kwargs[name] = find(strategy, lambda _value: True)
        except Exception as exc:  # noqa: BLE001 - a strategy that cannot draw
            raise CaseError(f"model {spec!r}: the strategy for {name!r} cannot draw: {_one_line(exc)}") from None
    return build_case(factory, **kwargs)
