"""Finding implementations by name: built-ins, ``package.module:attr``, and
the ``pytest_fsdpcheck.implementations`` entry-point group."""

from __future__ import annotations

import importlib
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


def load_implementation(spec: str):
    target = resolve_target(spec)
    module_name, _, attr = target.partition(":")
    try:
        obj = importlib.import_module(module_name)
    except Exception as exc:  # noqa: BLE001 - any import failure is the user's to see in one line
        raise ImplementationError(
            f"implementation {spec!r}: cannot import {module_name!r}: {type(exc).__name__}: {exc}"
        ) from None
    for part in attr.split(".") if attr else []:
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise ImplementationError(
                f"implementation {spec!r}: {module_name!r} has no attribute {attr!r}"
            ) from None
    if isinstance(obj, type) or (callable(obj) and not _looks_like_impl(obj)):
        try:
            obj = obj()
        except Exception as exc:  # noqa: BLE001
            raise ImplementationError(
                f"implementation {spec!r}: constructing it raised {type(exc).__name__}: {exc}"
            ) from None
    problems = contract_problems(obj)
    if problems:
        raise ImplementationError(
            f"implementation {spec!r} does not satisfy the contract: " + "; ".join(problems)
        )
    return obj


def _looks_like_impl(obj) -> bool:
    from ..catalog import AREAS

    return any(getattr(obj, area, None) is not None for area in AREAS)
