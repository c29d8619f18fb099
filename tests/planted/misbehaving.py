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


class _AttachHangingTraversal(ReferenceTraversal):
    def attach_state(self, module, state):
        while True:
            pass


class HangsAttaching(Implementation):
    """Hangs in a call the suite makes while it builds a tree, among the
    calls contained as one run (plugin/guard.py's _Span)."""

    traversal = _AttachHangingTraversal()


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


# --- ending the process, or leaving it changed beyond torch ------------------------
# Each does its harm inside a correct traversal, so the only failure a run can
# show is the harm itself.


class _ExitingTraversal(ReferenceTraversal):
    def states_with_modules(self, root):
        import os

        os._exit(0)


class ExitsProcess(Implementation):
    traversal = _ExitingTraversal()


class _SysExitingTraversal(ReferenceTraversal):
    def states_with_modules(self, root):
        import sys

        sys.exit(0)


class CallsSysExit(Implementation):
    traversal = _SysExitingTraversal()


# once per process each: a started thread or child, then plain reference calls
_THREAD_STARTED = []
_CHILD_STARTED = []


class _ThreadLeavingTraversal(ReferenceTraversal):
    def states_with_modules(self, root):
        import threading

        if not _THREAD_STARTED:
            # non-daemon and never told to stop: it would hold the run open at exit
            stop = threading.Event()
            thread = threading.Thread(target=stop.wait, name="planted-prefetcher")
            thread.start()
            _THREAD_STARTED.append(thread)
        return super().states_with_modules(root)


class LeavesThread(Implementation):
    traversal = _ThreadLeavingTraversal()


class _ChildLeavingTraversal(ReferenceTraversal):
    def states_with_modules(self, root):
        import subprocess
        import sys

        if not _CHILD_STARTED:
            _CHILD_STARTED.append(subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"]))
        return super().states_with_modules(root)


class LeavesChildProcess(Implementation):
    traversal = _ChildLeavingTraversal()


class _EnvSettingTraversal(ReferenceTraversal):
    def states_with_modules(self, root):
        import os

        os.environ["FSDPCHECK_PLANTED"] = "1"
        return super().states_with_modules(root)


class SetsEnvironment(Implementation):
    traversal = _EnvSettingTraversal()


class _PathExtendingTraversal(ReferenceTraversal):
    def states_with_modules(self, root):
        import sys

        if "/planted/nowhere" not in sys.path:
            sys.path.append("/planted/nowhere")
        return super().states_with_modules(root)


class ExtendsImportPath(Implementation):
    traversal = _PathExtendingTraversal()


class _DirChangingTraversal(ReferenceTraversal):
    def states_with_modules(self, root):
        import os
        import tempfile

        os.chdir(tempfile.gettempdir())
        return super().states_with_modules(root)


class ChangesDirectory(Implementation):
    traversal = _DirChangingTraversal()


class _RandomReseedingTraversal(ReferenceTraversal):
    def states_with_modules(self, root):
        import random

        random.seed(1234)
        return super().states_with_modules(root)


class ReseedsRandom(Implementation):
    traversal = _RandomReseedingTraversal()


class _TorchReseedingTraversal(ReferenceTraversal):
    def states_with_modules(self, root):
        import torch

        torch.manual_seed(1234)
        return super().states_with_modules(root)


class ReseedsTorch(Implementation):
    traversal = _TorchReseedingTraversal()


class _RandomDrawingTraversal(ReferenceTraversal):
    def states_with_modules(self, root):
        import random

        random.random()
        return super().states_with_modules(root)


class DrawsRandom(Implementation):
    """Draws from the global generator in its own code: a change of its own."""

    traversal = _RandomDrawingTraversal()


#: A third-party library ImportsLazily's calls import: the source is
#: tests/planted/lazy_import_effects.py, installed by the test that uses it
#: outside this package (under this name, in a folder of its own on the path),
#: as a library is. A module of the implementation's own, or one imported
#: again, would be the implementation's doing (tests.planted.reimports).
LAZY_MODULE = "fsdpcheck_lazy_library"


class _LazilyImportingTraversal(ReferenceTraversal):
    def states_with_modules(self, root):
        import importlib

        # the first call imports it, as the first test to need a lazily
        # imported library does; later calls find it imported
        importlib.import_module(LAZY_MODULE)
        return super().states_with_modules(root)


class ImportsLazily(Implementation):
    """A correct implementation whose call first imports a library that
    draws from the global generators, sets an environment variable, extends
    the import path and raises the recursion limit as it is imported (as
    rich, Inductor, setuptools and others do): none of that is the
    implementation's behaviour."""

    traversal = _LazilyImportingTraversal()
