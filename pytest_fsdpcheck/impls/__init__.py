"""Finding implementations by name: built-ins, ``package.module:attr``, and
the ``pytest_fsdpcheck.implementations`` entry-point group."""

from __future__ import annotations

import importlib
import importlib.util
from importlib.metadata import entry_points

from ..contract import contract_problems

ENTRY_POINT_GROUP = "pytest_fsdpcheck.implementations"
ENV_VAR = "FSDPCHECK_IMPL"
BUILTIN = {
    "torch": "pytest_fsdpcheck.impls.torch_impl:TorchImplementation",
    "reference": "pytest_fsdpcheck.impls.reference:ReferenceImplementation",
}


class ImplementationError(Exception):
    """A named implementation cannot be used; the message is one line."""


def installed_entry_points() -> dict[str, str]:
    return {ep.name: ep.value for ep in entry_points(group=ENTRY_POINT_GROUP)}


def resolve_target(spec: str) -> str:
    """The ``module:attr`` target behind a name (or the spec itself)."""
    if spec in BUILTIN:
        return BUILTIN[spec]
    eps = installed_entry_points()
    if spec in eps:
        return eps[spec]
    if ":" in spec:
        return spec
    known = ", ".join(sorted(set(BUILTIN) | set(eps)))
    raise ImplementationError(
        f"unknown implementation {spec!r}: use one of {known} or package.module:attr"
    )


def check_importable(spec: str) -> None:
    """What can be told about ``spec`` without importing its module, as the
    xdist controller does (it runs no test, so it never imports torch): a
    known name or ``module:attr``, whose module exists (its parent packages
    are imported to find it). The rest (the attribute, its construction, the
    contract) is for :func:`load_implementation` on each worker."""
    module_name = resolve_target(spec).partition(":")[0]
    try:
        found = importlib.util.find_spec(module_name)
    except (Exception, SystemExit) as exc:  # noqa: BLE001 - a parent package that raises or exits
        raise ImplementationError(f"implementation {spec!r}: cannot import {module_name!r}: {_one_line(exc)}") from None
    if found is None:
        raise ImplementationError(
            f"implementation {spec!r}: cannot import {module_name!r}: ModuleNotFoundError: No module named {module_name!r}"
        )


def load_implementation(spec: str):
    """The implementation named by ``spec``: an object with area attributes,
    or a class, instantiated without arguments. Nothing else is called, and
    nothing it does while loading (an import that exits, a property that
    raises) escapes as anything but a one-line :class:`ImplementationError`."""
    target = resolve_target(spec)
    module_name, _, attr = target.partition(":")
    try:
        obj = importlib.import_module(module_name)
    except (Exception, SystemExit) as exc:  # noqa: BLE001 - a training script's sys.exit() too
        raise ImplementationError(
            f"implementation {spec!r}: cannot import {module_name!r}: {_one_line(exc)}"
        ) from None
    for part in attr.split(".") if attr else []:
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise ImplementationError(
                f"implementation {spec!r}: {module_name!r} has no attribute {attr!r}"
            ) from None
        except (Exception, SystemExit) as exc:  # noqa: BLE001
            raise ImplementationError(f"implementation {spec!r}: reading {attr!r} raised {_one_line(exc)}") from None
    if isinstance(obj, type):
        try:
            obj = obj()
        except (Exception, SystemExit) as exc:  # noqa: BLE001
            raise ImplementationError(
                f"implementation {spec!r}: constructing it raised {_one_line(exc)}"
            ) from None
    elif callable(obj) and not _has_area_attributes(obj):
        raise ImplementationError(
            f"implementation {spec!r} is a {type(obj).__name__}, not an implementation: give an object "
            "with area attributes, or a class (it is instantiated without arguments); nothing else is called"
        )
    declared = getattr(obj, "known_bugs", None)
    if isinstance(declared, str) and declared != INHERITS_TORCH_BUGS:
        raise ImplementationError(
            f"implementation {spec!r}: known_bugs = {declared!r}; give a sequence of KnownBug, or "
            f"{INHERITS_TORCH_BUGS!r} for an implementation that runs torch's own code and so has torch's known bugs"
        )
    try:
        loaded = Loaded(obj)
    except (Exception, SystemExit) as exc:  # noqa: BLE001 - an area property that raises
        raise ImplementationError(f"implementation {spec!r}: reading its areas raised {_one_line(exc)}") from None
    problems = contract_problems(loaded)
    if problems:
        raise ImplementationError(
            f"implementation {spec!r} does not satisfy the contract: " + "; ".join(problems)
        )
    return loaded


class Loaded:
    """An implementation with its areas (and known bugs) read once, at load:
    a property that changes or raises later cannot change what is checked."""

    def __init__(self, impl):
        from ..core.catalog import AREAS

        self._fsdpcheck_inner = impl
        for area in AREAS:
            setattr(self, area, getattr(impl, area, None))
        self.known_bugs = declared_bugs(impl)

    def __getattr__(self, attr):
        return getattr(self._fsdpcheck_inner, attr)


#: ``known_bugs = "torch"``: an implementation wrapping torch's own functions
#: declares torch's known bugs as its own (they are its bugs too)
INHERITS_TORCH_BUGS = "torch"


def declared_bugs(impl) -> tuple:
    """The known bugs ``impl`` declares, ``"torch"`` read as torch's."""
    bugs = getattr(impl, "known_bugs", None) or ()
    if bugs == INHERITS_TORCH_BUGS:
        from .torch_bugs import TORCH_BUGS

        return tuple(TORCH_BUGS)
    return tuple(bugs)


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}".rstrip(": ")


def _has_area_attributes(obj) -> bool:
    from ..core.catalog import AREAS

    return any(getattr(obj, area, None) is not None for area in AREAS)
