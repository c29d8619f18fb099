"""Planted annotation bugs (ANN-1..8).

Each implementation is the reference annotation with one realistic mistake;
``PLANTED`` maps its spec to the invariant that must catch it and the
conformance tests that are enough to show it.
"""

from __future__ import annotations

from pytest_fsdpcheck.contract import Implementation
from pytest_fsdpcheck.impls.torch_bugs import DYNAMO_RUNTIME_BUGS
from pytest_fsdpcheck.reference.annotation import ReferenceAnnotation
from pytest_fsdpcheck.reference.traversal import iter_children

MANAGED = "_is_fsdp_managed_module"
ORIG_PARAMS = "_fsdp_use_orig_params"


class _Walk(ReferenceAnnotation):
    """The reference walk with the per-module step overridable."""

    def _mark(self, module, ignored: bool, use_orig_params: bool):
        if not ignored:
            module._is_fsdp_managed_module = True
            module._fsdp_use_orig_params = use_orig_params

    def _enter(self, module, ignored: bool) -> bool:
        return True

    def annotate(self, root, ignored_modules, use_orig_params):
        ignored = {id(m) for m in ignored_modules}
        seen, stack = set(), [root]
        while stack:
            module = stack.pop()
            if id(module) in seen:
                continue
            seen.add(id(module))
            self._mark(module, id(module) in ignored, use_orig_params)
            if self._enter(module, id(module) in ignored):
                stack.extend(iter_children(module))


class _ChildrenOnly(_Walk):
    # ``root.children()`` where ``root.modules()`` was meant: the root and
    # everything below the first level stay unmarked.
    def annotate(self, root, ignored_modules, use_orig_params):
        ignored = {id(m) for m in ignored_modules}
        for child in iter_children(root):
            self._mark(child, id(child) in ignored, use_orig_params)


class _MarksIgnoredUnmanaged(_Walk):
    # Writes an explicit "not managed" onto ignored modules instead of leaving them alone.
    def _mark(self, module, ignored, use_orig_params):
        if ignored:
            module._is_fsdp_managed_module = False
        else:
            super()._mark(module, ignored, use_orig_params)


class _SkipsIgnoredSubtrees(_Walk):
    # Treats an ignored module as ignoring its whole subtree.
    def _enter(self, module, ignored):
        return not ignored


class _ExtraAttribute(_Walk):
    # Leaves a bookkeeping attribute behind on every module it marks.
    def _mark(self, module, ignored, use_orig_params):
        super()._mark(module, ignored, use_orig_params)
        if not ignored:
            module._fsdp_annotated = True


class _EvalMode(_Walk):
    # Flips managed modules to eval mode while marking them.
    def _mark(self, module, ignored, use_orig_params):
        super()._mark(module, ignored, use_orig_params)
        if not ignored:
            module.training = False


class _TogglesFlag(_Walk):
    # Toggles the flag instead of setting it: right once, wrong on re-annotation.
    def _mark(self, module, ignored, use_orig_params):
        if not ignored:
            module._is_fsdp_managed_module = True
            module._fsdp_use_orig_params = not module.__dict__.get(ORIG_PARAMS, not use_orig_params)


class _LastPathWins(_Walk):
    # Annotates per path, treating modules under an ignored one as unmanaged
    # on that path: a shared module gets whatever its last path says.
    def annotate(self, root, ignored_modules, use_orig_params):
        ignored = {id(m) for m in ignored_modules}
        done, stack = set(), [(root, False)]
        while stack:
            module, below_ignored = stack.pop()
            if (id(module), below_ignored) in done:
                continue
            done.add((id(module), below_ignored))
            if id(module) not in ignored:
                module._is_fsdp_managed_module = not below_ignored
                module._fsdp_use_orig_params = use_orig_params
            inherited = below_ignored or id(module) in ignored
            stack.extend((child, inherited) for child in iter_children(module))


class _NeverOrigParams(_Walk):
    # Always records use_orig_params=False, so Dynamo treats every module as
    # using flat parameters.
    def _mark(self, module, ignored, use_orig_params):
        super()._mark(module, ignored, False)


class _DoesNothing(_Walk):
    # An annotate that returns without marking anything: since Dynamo inlines
    # nn modules it lifts every parameter anyway, so only where Dynamo sources
    # them from tells this apart from a real annotation.
    def annotate(self, root, ignored_modules, use_orig_params):
        return None


class _StopsAtWrappedBlocks(_Walk):
    # A framework's walker that takes a wrapped block (``torch.compile(block)``,
    # ``checkpoint_wrapper(block)``) for a leaf: the wrapper is marked, and
    # torch reads the wrapper's flags from it, but the block's own
    # submodules, which Dynamo traces, stay unmarked.
    def _enter(self, module, ignored: bool) -> bool:
        return not any(c.__name__ in ("OptimizedModule", "CheckpointWrapper") for c in type(module).__mro__)


def break_graph(module, args):
    """A forward pre-hook Dynamo cannot trace (as a profiling or logging
    hook a framework adds): the graph breaks at every module it runs on."""
    import torch._dynamo

    torch._dynamo.graph_break()


class _HooksEveryModule(_Walk):
    # Marks each module as the reference does and also registers a forward
    # pre-hook Dynamo cannot trace: compiled, the annotated model breaks into
    # a graph per module where the plain model compiles one.
    def _mark(self, module, ignored, use_orig_params):
        super()._mark(module, ignored, use_orig_params)
        module.register_forward_pre_hook(break_graph)


def _impl(annotation_cls, known_bugs=()):
    class Planted(Implementation):
        name = annotation_cls.__name__.lstrip("_")

        def __init__(self):
            self.annotation = annotation_cls()

    Planted.known_bugs = tuple(known_bugs)
    Planted.__name__ = Planted.__qualname__ = Planted.name
    return Planted


ChildrenOnly = _impl(_ChildrenOnly)
MarksIgnoredUnmanaged = _impl(_MarksIgnoredUnmanaged)
SkipsIgnoredSubtrees = _impl(_SkipsIgnoredSubtrees)
ExtraAttribute = _impl(_ExtraAttribute)
EvalMode = _impl(_EvalMode)
TogglesFlag = _impl(_TogglesFlag)
LastPathWins = _impl(_LastPathWins)
NeverOrigParams = _impl(_NeverOrigParams)
DoesNothing = _impl(_DoesNothing)
StopsAtWrappedBlocks = _impl(_StopsAtWrappedBlocks)
# declares Dynamo's known bug as the reference does: what Dynamo does to any
# marked module is excused, the graph breaks its own hook makes are not
HooksEveryModule = _impl(_HooksEveryModule, known_bugs=DYNAMO_RUNTIME_BUGS)

#: spec -> (invariant it must fail, -k expression selecting the tests that show it)
PLANTED = {
    "tests.planted.annotation:ChildrenOnly": ("ANN-1", "test_annotate"),
    "tests.planted.annotation:MarksIgnoredUnmanaged": ("ANN-2", "test_annotate"),
    "tests.planted.annotation:SkipsIgnoredSubtrees": ("ANN-3", "test_annotate"),
    "tests.planted.annotation:ExtraAttribute": ("ANN-4", "test_annotate"),
    "tests.planted.annotation:EvalMode": ("ANN-4", "test_annotate"),
    "tests.planted.annotation:TogglesFlag": ("ANN-5", "test_idempotent"),
    "tests.planted.annotation:LastPathWins": ("ANN-6", "test_shared_submodules"),
    "tests.planted.annotation:NeverOrigParams": ("ANN-7", "test_dynamo_effect"),
    "tests.planted.annotation:DoesNothing": ("ANN-7", "test_dynamo_effect"),
}

#: ANN-8, beside Dynamo's known ``ann-fsdp-int-attr-symbolic`` that the
#: reference (the control) declares: its ANN-8 cell reads known where the bug
#: applies, never a FAIL, and the planted implementation's own graph breaks
#: are no part of the bug's signature
PLANTED_BESIDE_DYNAMO = {
    "tests.planted.annotation:HooksEveryModule": ("ANN-8", "test_dynamo_specialisation"),
}
