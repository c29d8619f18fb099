"""Executable specification of the four seed components: iterative, linear,
written from DESIGN.md and the seeds rather than from torch's code.

:class:`ReferenceImplementation` puts the areas together as one
implementation (loaded as ``reference``; see :mod:`pytest_fsdpcheck.impls`)."""

from __future__ import annotations

from ..contract import Implementation


class ReferenceImplementation(Implementation):
    name = "reference"

    def __init__(self, switches=None):
        """``switches`` (area -> keyword flags) turn on modelled known bugs;
        see :mod:`pytest_fsdpcheck.known`. Without them: the specification."""
        from .annotation import ReferenceAnnotation
        from .exec_order import ReferenceExecOrder
        from .fsdp2 import ReferenceFsdp2
        from .splitting import ReferenceSplitting
        from .traversal import ReferenceTraversal

        switches = switches or {}
        self.traversal = ReferenceTraversal(**switches.get("traversal", {}))
        self.annotation = ReferenceAnnotation(**switches.get("annotation", {}))
        self.splitting = ReferenceSplitting(**switches.get("splitting", {}))
        self.exec_order = ReferenceExecOrder(**switches.get("exec_order", {}))
        self.fsdp2 = ReferenceFsdp2(**switches.get("fsdp2", {}))
