"""Implementations that misbehave rather than compute wrong answers: they
raise, hang, or leave process-wide state changed."""

import logging

from pytest_fsdpcheck.contract import Implementation
from pytest_fsdpcheck.reference.traversal import ReferenceTraversal


def _lookup_owner(module):
    raise KeyError(f"no owner recorded for {type(module).__name__}")


class _RaisingTraversal(ReferenceTraversal):
    def states_with_modules(self, root):
        return _lookup_owner(root)


class Raises(Implementation):
    traversal = _RaisingTraversal()


class _HangingTraversal(ReferenceTraversal):
    def states_with_modules(self, root):
        while True:
            pass


class Hangs(Implementation):
    traversal = _HangingTraversal()


class _TracerPatchingTraversal(ReferenceTraversal):
    def states_with_modules(self, root):
        import torch.fx

        torch.fx.Tracer.call_module = lambda self, m, forward, args, kwargs: forward(*args, **kwargs)
        return super().states_with_modules(root)


class LeaksTracerPatch(Implementation):
    traversal = _TracerPatchingTraversal()


class _LoudTraversal(ReferenceTraversal):
    def states_with_modules(self, root):
        logging.getLogger("torch.distributed").setLevel(logging.DEBUG)
        return super().states_with_modules(root)


class LeaksLoggerLevel(Implementation):
    traversal = _LoudTraversal()


class _ProcessGroupTraversal(ReferenceTraversal):
    def states_with_modules(self, root):
        import torch.distributed as dist

        if not dist.is_initialized():
            dist.init_process_group("gloo", rank=0, world_size=1, store=dist.HashStore())
        return super().states_with_modules(root)


class LeaksProcessGroup(Implementation):
    traversal = _ProcessGroupTraversal()


class ProvidesNothing:
    """No area at all: the run must fail, never pass empty."""


class _ThreadingTraversal(ReferenceTraversal):
    def states_with_modules(self, root):
        import torch

        torch.set_num_threads(2)
        return super().states_with_modules(root)


class LeaksThreadCount(Implementation):
    traversal = _ThreadingTraversal()
