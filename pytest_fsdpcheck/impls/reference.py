"""The ``reference`` implementation: the project's executable specification
(defined with it, in :mod:`pytest_fsdpcheck.reference`)."""

from ..reference import ReferenceImplementation

__all__ = ["ReferenceImplementation"]
