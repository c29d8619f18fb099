"""The implementation contract: how the suite talks to an implementation.

An *implementation* is any object with up to five *area* attributes,
``traversal``, ``annotation``, ``splitting``, ``exec_order`` and ``fsdp2``. An area that
is missing or ``None`` is *not provided*: its invariants are reported as such,
never as passed. Every value crossing the contract is a plain ``nn.Module``,
``fx.GraphModule``, list, dict or one of the small dataclasses below, so an
implementation for any torch version (or a framework's own re-implementation)
can be adapted without the suite knowing its private types.

This module imports no torch: the plugin reads it when it validates an
implementation given on the command line.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from .core.catalog import AREAS


@runtime_checkable
class TraversalArea(Protocol):
    """Collects FSDP states of a module tree (seed ``_traversal_utils``).

    The first three methods put a generated tree's states and marks on modules
    the way this implementation stores them; the suite never touches an
    implementation's storage directly.
    """

    def new_state(self, handle: object | None, is_root: bool) -> object:
        """A fresh FSDP state holding ``handle`` (or none) with ``_is_root`` set."""

    def attach_state(self, module: Any, state: object) -> None:
        """Make ``state`` the FSDP state of ``module`` (states may be shared)."""

    def mark_incompatible(self, module: Any, api: str) -> None:
        """Record that the composable API ``api`` (e.g. ``"replicate"``) owns ``module``."""

    def states_with_modules(self, root: Any) -> tuple[list, list]:
        """``(states, owning modules)`` in traversal order."""

    def handles(self, root: Any) -> list:
        """All handles of the states, flattened in state order."""

    def root_states(self, root: Any) -> list:
        """The states whose ``_is_root`` is true."""


@runtime_checkable
class AnnotationArea(Protocol):
    """Marks managed submodules for Dynamo (seed ``_dynamo_utils``)."""

    def annotate(self, root: Any, ignored_modules: set, use_orig_params: bool) -> None:
        """Set ``_is_fsdp_managed_module``/``_fsdp_use_orig_params`` on the tree."""


@dataclass
class BucketInfo:
    """One bucket of a split plan, in implementation-neutral form.

    ``nodes`` are node names of the input graph in graph order; ``params`` the
    names the implementation gives the counted parameters; ``param_ids`` their
    ``id()``. ``extra_ops``/``extra_bytes`` report how far the bucket was
    extended past its cap to reach an external output (SPL-7).
    """

    nodes: list[str]
    size: int
    params: list[str] = field(default_factory=list)
    param_ids: list[int] = field(default_factory=list)
    extra_ops: int = 0
    extra_bytes: int = 0


@dataclass
class SplitResult:
    """What a splitting implementation produced for one graph."""

    buckets: list[BucketInfo]  # in graph order (earliest nodes first)
    compiled: Callable[..., Any]  # the callable the backend returns to Dynamo
    table: list[str] = field(default_factory=list)  # logged bucket-table lines


@runtime_checkable
class SplittingArea(Protocol):
    """Cuts a Dynamo FX graph into DDP buckets (seed ``DDPOptimizer``)."""

    #: ``"dynamo"`` (parameters lifted to placeholders, torch >= 2.4) or
    #: ``"module"`` (``call_module``/``get_attr``, seed era): the form this
    #: implementation's own Dynamo produces. An optional ``graph_forms``
    #: tuple lists every form it accepts (a fork or a direct caller may hand
    #: it the other one); the suite checks each, see :func:`accepted_forms`.
    #: An optional ``lazy_compile = True`` says ``split`` also takes
    #: ``lazy_compile=True``: each submodule may then be handed to the backend
    #: at the split module's first call instead of during the split.
    #: An optional ``logs_bucket_count = False`` says the log gives the
    #: number of buckets only in its bucket table (torch 2.0, whose table
    #: needs ``tabulate``): where that table cannot be printed, the log is
    #: not asked for the count (SPL-13); it still must state the cap.
    #: An optional ``compiler_configs = True`` says ``split`` also takes
    #: ``compiler_configs={...}``: keyword arguments the split was asked to
    #: compile with (torch: what Dynamo passes ``compile_fn``, such as an
    #: inductor ``config_patches``), handed on to every backend call (SPL-19).
    #: An optional ``defers_saved_tensors_hooks = False`` says the caller's
    #: saved-tensors hooks may fire while ``split`` compiles (torch before
    #: 2.7): that part of SPL-18 is then n/p, the rest still holds.
    graph_form: str

    def split(
        self,
        gm: Any,
        example_inputs: Sequence[Any],
        *,
        bucket_bytes_cap: int,
        first_bucket_cap: int | None,
        backend: Callable[[Any, Sequence[Any]], Callable[..., Any]],
    ) -> SplitResult:
        """Plan, split and compile ``gm``; raise ``ValueError``/``AssertionError``
        for invalid caps and ``NotImplementedError`` for unsupported graphs."""


GRAPH_FORMS = ("dynamo", "module")


def accepted_forms(splitting) -> tuple[str, ...]:
    """The graph forms a splitting area accepts: its ``graph_forms`` when
    given, else only its ``graph_form``."""
    forms = getattr(splitting, "graph_forms", None)
    return tuple(forms) if forms else (splitting.graph_form,)


@dataclass
class ExecInfo:
    """Exec-order recording, filled while the patched tracer traces.

    ``module_to_param_usage_infos`` maps each called module to a list of
    ``(module, [(name, param), ...])`` in execution order.
    """

    module_forward_order: list = field(default_factory=list)
    module_to_param_usage_infos: dict = field(default_factory=dict)
    param_forward_order: list = field(default_factory=list)
    visited_params: set = field(default_factory=set)


@runtime_checkable
class ExecOrderArea(Protocol):
    """Records module and parameter order during FX tracing (seed ``_trace_utils``)."""

    def patch_tracer(self, tracer: Any, root: Any) -> AbstractContextManager[ExecInfo]:
        """Patch ``tracer`` for the ``with`` block; yields the ``ExecInfo`` it fills."""


@runtime_checkable
class Fsdp2Area(Protocol):
    """FSDP2's walk of the managed modules and the states it collects
    (``torch.distributed.fsdp._fully_shard._fsdp_init``), and the Dynamo flags
    a real ``fully_shard`` sets on them.

    ``roots`` is a tuple of modules, as given to ``fully_shard`` (one module or
    a list forming one group); ``ignored_params`` a set of parameters or
    ``None`` (``fully_shard``'s default, which skips the ignore rule).

    An area whose ``fully_shard`` predates a feature says so, and the checks
    that need it are not provided: ``several_roots = False`` (one module per
    group), ``takes_ignored_params = False`` (no ``ignored_params``). Both
    default to true when absent.

    Optional (FS2-10, the simulated worlds): ``sharded_groups(modules)``,
    after ``annotate`` calls on a mesh of N ranks, returns this rank's view
    of the groups those calls made as :class:`ShardedGroup` lists (each
    group once, in any order; ``modules`` are every module of the model, so
    the groups can be found on them). The suite calls ``annotate`` with a
    ``DeviceMesh`` on a fake process group, one rank's view at a time: a 1-D
    mesh of N ranks, or a 2-D ``("replicate", "shard")`` mesh (HSDP) whose
    last dimension shards. An area without it has FS2-10 not provided.
    """

    def mark_own_group(self, module: Any) -> None:
        """Give ``module`` its own FSDP2 state, as an earlier ``fully_shard`` would."""

    def mark_incompatible(self, module: Any, api: str) -> None:
        """Record that the composable API ``api`` (e.g. ``"replicate"``) owns ``module``."""

    def managed_modules(self, roots: tuple, ignored_params: set | None) -> list:
        """The modules ``fully_shard(roots)`` manages, in walk order."""

    def managed_states(self, modules: list, ignored_params: set | None) -> tuple[list, list]:
        """``(params, buffers)`` of ``modules``; ``ValueError`` for a scalar parameter
        that is not ignored (an ignored one is never touched)."""

    def annotate(self, roots: tuple, mesh: Any, ignored_params: set | None) -> None:
        """Apply a real ``fully_shard`` to the group ``roots`` on ``mesh`` (a
        one-dimensional ``DeviceMesh`` the suite set up, world size 1)."""


@dataclass
class ShardedParam:
    """One parameter of a ``fully_shard`` group as one rank holds it:
    ``module`` and ``name`` register it (the first module the group found
    it on), ``local`` is this rank's rows of dim 0 (a plain tensor, without
    padding), ``padded_rows`` the rows this rank's storage holds for it,
    padding included."""

    module: Any
    name: str
    local: Any
    padded_rows: int


@dataclass
class ShardedGroup:
    """One ``fully_shard`` group on one rank: the modules given to the call
    (``roots``) and its parameters in the group's order."""

    roots: list
    params: list[ShardedParam] = field(default_factory=list)


AREA_PROTOCOLS = {
    "traversal": TraversalArea,
    "annotation": AnnotationArea,
    "splitting": SplittingArea,
    "exec_order": ExecOrderArea,
    "fsdp2": Fsdp2Area,
}


class Implementation:
    """Convenience base: subclass it and set the areas you provide.

    Any object with the area attributes works; this class only documents them.
    """

    name: str = "unnamed"
    traversal: TraversalArea | None = None
    annotation: AnnotationArea | None = None
    splitting: SplittingArea | None = None
    exec_order: ExecOrderArea | None = None
    fsdp2: Fsdp2Area | None = None


def provided_areas(impl: object) -> list[str]:
    return [area for area in AREAS if getattr(impl, area, None) is not None]


def contract_problems(impl: object) -> list[str]:
    """Why ``impl`` does not satisfy the contract (empty when it does)."""
    areas = provided_areas(impl)
    if not areas:
        return ["it provides none of the areas " + ", ".join(AREAS)]
    problems = []
    for area in areas:
        obj = getattr(impl, area)
        if isinstance(obj, type):
            problems.append(f"its {area} area is the class {obj.__name__}, not an instance ({area} = {obj.__name__}())")
            continue
        protocol = AREA_PROTOCOLS[area]
        missing = [
            name
            for name in _protocol_members(protocol)
            if not hasattr(obj, name) or (name != "graph_form" and not callable(getattr(obj, name)))
        ]
        if missing:
            problems.append(f"its {area} area lacks {', '.join(missing)}")
    return problems


def _protocol_members(protocol: type) -> list[str]:
    names = [n for n in vars(protocol) if not n.startswith("_")]
    names += list(getattr(protocol, "__annotations__", {}))
    return sorted(set(names))


class ContractViolation(AssertionError):
    """An implementation returned something the contract does not allow."""


def _sequence(value) -> bool:
    return isinstance(value, (list, tuple))


def _pair_of_sequences(value) -> bool:
    return _sequence(value) and len(value) == 2 and all(_sequence(v) for v in value)


def _split_result(value) -> bool:
    return _sequence(getattr(value, "buckets", None)) and callable(getattr(value, "compiled", None))


def _context_manager(value) -> bool:
    return hasattr(value, "__enter__") and hasattr(value, "__exit__")


#: (area, method) -> (check of the returned value, what the contract expects)
RETURNS = {
    ("traversal", "states_with_modules"): (_pair_of_sequences, "a (states, modules) pair of lists"),
    ("traversal", "handles"): (_sequence, "a list of handles"),
    ("traversal", "root_states"): (_sequence, "a list of states"),
    ("splitting", "split"): (_split_result, "a SplitResult (buckets list, compiled callable)"),
    ("exec_order", "patch_tracer"): (_context_manager, "a context manager yielding an ExecInfo"),
}


def check_return(area: str, method: str, value) -> None:
    """Raise :class:`ContractViolation` naming the area and method when
    ``value`` is not what the contract says the method returns."""
    rule = RETURNS.get((area, method))
    if rule is not None and not rule[0](value):
        raise ContractViolation(
            f"{area}.{method} returned {type(value).__name__}; the contract expects {rule[1]}"
        )
