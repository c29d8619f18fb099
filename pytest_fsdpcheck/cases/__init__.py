"""Users' own models and FSDP2 plans as check inputs (DESIGN.md "Users' own
models and plans").

A model factory takes no arguments (or keyword arguments declared with
:func:`model_factory`) and returns ``(model, example_inputs)`` or a
:class:`ModelCase`. :func:`parametrize_with_checks` puts every check on
every case into a framework's own test suite, without ``--fsdpcheck``.
Importing this package does not import torch.
"""

from .model import (
    ENTRY_POINT_GROUP,
    CaseError,
    ModelCase,
    build_case,
    case_problems,
    case_strategy,
    installed_models,
    load_factory,
    model_examples,
    model_factory,
    strategies_of,
    validate_case_spec,
)


def parametrize_with_checks(cases_or_factories, impl=None, max_examples: int = 10):
    from .checks import parametrize_with_checks as parametrize

    return parametrize(cases_or_factories, impl, max_examples)


def record_plan(case):
    from .recording import record_plan as record

    return record(case)


__all__ = [
    "ENTRY_POINT_GROUP",
    "CaseError",
    "ModelCase",
    "build_case",
    "case_problems",
    "case_strategy",
    "installed_models",
    "load_factory",
    "model_examples",
    "model_factory",
    "parametrize_with_checks",
    "record_plan",
    "strategies_of",
    "validate_case_spec",
]
