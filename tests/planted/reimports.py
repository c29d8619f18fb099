"""torch's implementation, with calls that re-import a module of their own
(``sys.modules.pop`` then import) whose import-time code changes process
state deciding other tests' verdicts. Such an import is the
implementation's own doing, not a library's first import: its change is a
leak, charged to the call's test and undone before the next one.

- DisablesDynamoOnReimport: ``annotate`` turns Dynamo off (ANN-7 then sees
  nothing compiled; kept, it read n/p in every later ANN-7 test, torch's too).
- RaisesRecursionLimitOnReimport: ``root_states`` raises the recursion limit
  (torch's recursive walks then pass the deep trees of TRV-8 and FS2-6 that
  are its known bugs; kept, the next tests' verdicts hung on test order)."""

import importlib
import sys

from pytest_fsdpcheck.impls.torch_impl import TorchAnnotation, TorchImplementation, TorchTraversal

DYNAMO_OFF = "tests.planted.reimported_dynamo_off"
DEEP_STACK = "tests.planted.reimported_deep_stack"


def _reimport(name: str) -> None:
    # forgotten first, so the import runs the module's code again
    sys.modules.pop(name, None)
    importlib.import_module(name)


class _DynamoOffAnnotation(TorchAnnotation):
    def annotate(self, root, ignored_modules, use_orig_params):
        _reimport(DYNAMO_OFF)
        return super().annotate(root, ignored_modules, use_orig_params)


class _DeepStackTraversal(TorchTraversal):
    def root_states(self, root):
        _reimport(DEEP_STACK)
        return super().root_states(root)


class DisablesDynamoOnReimport(TorchImplementation):
    def __init__(self):
        super().__init__()
        self.annotation = _DynamoOffAnnotation()


class RaisesRecursionLimitOnReimport(TorchImplementation):
    def __init__(self):
        super().__init__()
        self.traversal = _DeepStackTraversal()


#: spec -> (invariant it must fail, -k expression selecting the tests that show it):
#: Dynamo off, ANN-7's check finds nothing compiled (its violation, the leak a note)
PLANTED = {
    "tests.planted.reimports:DisablesDynamoOnReimport": ("ANN-7", "test_dynamo_effect"),
}
#: spec -> (invariant whose cell its leak alone FAILs, -k expression): the
#: raised limit breaks no check (torch's walk then passes the deep tree), so
#: it kills no invariant; the leak is the run's FAIL all the same
LEAK_ONLY = {
    "tests.planted.reimports:RaisesRecursionLimitOnReimport": ("TRV-8", "test_large_trees and deep and root_states"),
}

#: spec -> the leak its failure must name, charged to the test that made it
LEAKS = {
    "tests.planted.reimports:DisablesDynamoOnReimport": "left process-wide state changed: dynamo.config (disable)",
    "tests.planted.reimports:RaisesRecursionLimitOnReimport": "left process-wide state changed: recursion_limit (",
}
