"""The ``reference`` implementation: the project's executable specification."""

from __future__ import annotations

from ..contract import Implementation


class ReferenceImplementation(Implementation):
    name = "reference"

    def __init__(self, switches=None):
        """``switches`` (area -> keyword flags) turn on modelled known bugs;
        see :mod:`pytest_fsdpcheck.known`. Without them: the specification."""
        from ..reference.annotation import ReferenceAnnotation
        from ..reference.exec_order import ReferenceExecOrder
        from ..reference.fsdp2 import ReferenceFsdp2
        from ..reference.splitting import ReferenceSplitting
        from ..reference.traversal import ReferenceTraversal

        switches = switches or {}
        self.traversal = ReferenceTraversal(**switches.get("traversal", {}))
        self.annotation = ReferenceAnnotation(**switches.get("annotation", {}))
        self.splitting = ReferenceSplitting(**switches.get("splitting", {}))
        self.exec_order = ReferenceExecOrder(**switches.get("exec_order", {}))
        self.fsdp2 = ReferenceFsdp2(**switches.get("fsdp2", {}))
