"""The ``reference`` implementation: the project's executable specification."""

from __future__ import annotations

from ..contract import Implementation


class ReferenceImplementation(Implementation):
    name = "reference"

    def __init__(self):
        from ..reference.annotation import ReferenceAnnotation
        from ..reference.traversal import ReferenceTraversal

        self.traversal = ReferenceTraversal()
        self.annotation = ReferenceAnnotation()
        self.splitting = _optional("splitting", "ReferenceSplitting")
        self.exec_order = _optional("exec_order", "ReferenceExecOrder")


def _optional(module: str, cls: str):
    # Areas land one by one; until one does, it is honestly "not provided".
    import importlib

    try:
        mod = importlib.import_module(f"pytest_fsdpcheck.reference.{module}")
    except ModuleNotFoundError:
        return None
    return getattr(mod, cls)()
