"""Planted implementations for the known-bug layer.

For every known torch bug: ``Only_<bug>`` has exactly that bug (the
reference with its switch) and declares it; ``Plus_<bug>`` has it, declares
it, and also has a second, different bug in the same area, which no known
bug explains. ``Claims_<bug>`` declares the bug but does not have it.
"""

from __future__ import annotations

import dataclasses
from contextlib import contextmanager

from pytest_fsdpcheck.impls.reference import ReferenceImplementation
from pytest_fsdpcheck.impls.torch_bugs import TORCH_BUGS
from pytest_fsdpcheck.known.reference_with import reference_with
from pytest_fsdpcheck.reference.fsdp2 import TORCH_DTENSOR_ERROR

# Bugs with a predicate signature are not a switch of the reference: their
# planted tests sit beside their check (fs2-gloo-grads-summed:
# tests/test_planted_distributed.py).
BUGS = {bug.id: bug for bug in TORCH_BUGS if bug.reference}

#: the tests where each bug shows (a -k expression)
TESTS = {
    "trv-root-states-walk-modules": "test_root_states",
    "trv-registry-created-on-read": "test_root_states",
    "spl-param-counted-per-node": "test_counted_once_cases",
    "spl-method-receiver-module-counted": "test_sizes_with_method_arguments or test_counted_once",
    "spl-bucket-closes-without-output": "test_split_plan",
    "spl-attr-read-taken-as-output": "test_split_plan",
    "spl-param-counted-per-use": "test_counted_once_cases",
    "spl-method-arg-receiver-not-str": "test_sizes_with_method_arguments",
    "spl-ddp-ignored-lost-on-fake": "test_golden_buckets and frozen_ignored",
    "spl-split-submodules-lose-dynamo-metadata": "test_split_cases",
    "spl-zero-byte-preamble-asserts": "test_split_cases",
    "spl-get-attr-module-raises": "test_split_cases",
    "spl-get-attr-module-split-crashes": "test_split_cases",
    # the area's second planted bug (a bucket's size) shows on the fixed split cases
    "spl-backward-compiles-with-last-bucket-fw-metadata": "test_split_inside_compile_cases or test_split_cases",
    # the fixed split cases too: the area's second planted bug shows there (no HOP in them)
    "spl-hop-body-metadata-clobbered": "test_higher_order_cases or test_split_cases",
    # the inside-compile cases that view by symbolic sizes; the fixed split cases show the area's second bug
    "spl-dynamic-bucket-fake-run-raises": "test_split_inside_compile_cases or test_split_cases",
    "exo-patch-tracer-leaves-bound-methods": "test_tracer_left_clean",
    "exo-param-keyword-unrecorded": "test_param_uses_by_keyword_and_in_lists and keyword",
    "exo-param-in-list-unrecorded": "test_param_uses_by_keyword_and_in_lists and list",
    "fs2-walk-recursive": "test_large_trees",
    "fs2-group-conflict-not-rejected": "test_fully_shard_conflicts",
    "fs2-reapply-assertion": "test_plan_conflicts",
    "fs2-scalar-param-accepted": "test_managed_states",
    "fs2-container-with-forward-rejected": "test_fully_shard_flags",
    "exo-method-target-taken-as-param": "test_real_forward_features and method",
}


def class_name(prefix: str, bug_id: str) -> str:
    return prefix + "_" + bug_id.replace("-", "_")


# --- second bugs, one per area: each breaks what the known bug's invariants state,
# --- in a way no switch of the reference reproduces


class _RootStatesDropLast:
    """TRV-7: the last root state is missing whenever there are two or more."""

    def __init__(self, inner):
        self._inner = inner

    def __getattr__(self, name):
        return getattr(self._inner, name)

    def root_states(self, root):
        roots = self._inner.root_states(root)
        return roots[:-1] if len(roots) > 1 else roots


class _SplitInflated:
    """SPL-3/SPL-4: the plan's last bucket claims its first parameter twice."""

    def __init__(self, inner):
        self._inner = inner
        self.graph_form = inner.graph_form

    def split(self, gm, example_inputs, **kwargs):
        result = self._inner.split(gm, example_inputs, **kwargs)
        last = result.buckets[-1] if result.buckets else None
        if last is not None and last.param_ids:
            sizes = {id(t): t.untyped_storage().nbytes() for t in [*gm.parameters(), *example_inputs]
                     if hasattr(t, "untyped_storage")}  # not the sizes Dynamo hands as SymInts
            last.size += sizes.get(last.param_ids[0], 4)
            last.param_ids.append(last.param_ids[0])
            last.params.append(last.params[0])
        return result


class _ExecOrderMangled:
    """EXO-1/3/4: leaves a marker on the tracer, and forgets the last parameter used."""

    def __init__(self, inner):
        self._inner = inner

    @contextmanager
    def patch_tracer(self, tracer, root):
        with self._inner.patch_tracer(tracer, root) as info:
            yield info
        tracer.exec_info_was_here = True
        if len(info.param_forward_order) > 1:
            info.visited_params.discard(info.param_forward_order.pop())


class _Fsdp2Mangled:
    """FS2-1/FS2-4/FS2-7/FS2-8: the walk and the states forget their last item;
    fully_shard leaves the first root's ``_fsdp_use_orig_params`` off, and
    turns an internal error (the DTensor one, or the contract's on a root
    given twice) into a ValueError that names nothing."""

    def __init__(self, inner):
        self._inner = inner

    def __getattr__(self, name):
        return getattr(self._inner, name)

    def managed_modules(self, roots, ignored_params):
        modules = self._inner.managed_modules(roots, ignored_params)
        return modules[:-1] if len(modules) > 1 else modules

    def managed_states(self, modules, ignored_params):
        params, buffers = self._inner.managed_states(modules, ignored_params)
        return (params[:-1] if len(params) > 1 else params), buffers

    def annotate(self, roots, mesh, ignored_params):
        try:
            self._inner.annotate(roots, mesh, ignored_params)
        except (TypeError, AssertionError):
            raise ValueError("fully_shard: bad group") from None
        roots[0]._fsdp_use_orig_params = False


SECOND_BUG = {
    "traversal": _RootStatesDropLast,
    "splitting": _SplitInflated,
    "exec_order": _ExecOrderMangled,
    "fsdp2": _Fsdp2Mangled,
}


#: bugs of torch's module-form code paths: the planted splitting takes module-form graphs
MODULE_FORM = {
    "spl-param-counted-per-node", "spl-method-receiver-module-counted", "spl-bucket-closes-without-output",
    "spl-attr-read-taken-as-output",
}


def _only(bug):
    impl = reference_with([bug])
    forms = bug.forms or (("module",) if bug.id in MODULE_FORM else ())
    if forms:  # the planted implementation accepts only the forms the bug is declared for
        impl.splitting.graph_form = forms[0]
        impl.splitting.graph_forms = forms
    # declared for every torch: the planted implementation has the bug on any
    bug = dataclasses.replace(bug, affects="")
    impl.known_bugs = (bug,)
    return impl


def _plus(bug):
    impl = _only(bug)
    for area in bug.reference:
        setattr(impl, area, SECOND_BUG[area](getattr(impl, area)))
    return impl


def _claims(bug):
    impl = ReferenceImplementation()
    impl.known_bugs = (dataclasses.replace(bug, affects=""),)
    return impl


def _class(name, build, bug):
    # --fsdpcheck-impl instantiates classes only: each planted variant is one
    def __init__(self):
        vars(self).update(vars(build(bug)))

    return type(name, (), {"__init__": __init__})


for _bug in BUGS.values():
    for _prefix, _build in (("Only", _only), ("Plus", _plus), ("Claims", _claims)):
        globals()[class_name(_prefix, _bug.id)] = _class(class_name(_prefix, _bug.id), _build, _bug)


class _SplitCrashes:
    """An internal error on every graph: no switch of the reference raises it."""

    def __init__(self, inner):
        self._inner = inner
        self.graph_form = inner.graph_form

    def split(self, gm, example_inputs, **kwargs):
        raise RuntimeError("planted: the splitter crashed")


class CrashesNextToKnownBugs:
    """Declares two splitting bugs it has, and crashes as well: the crash is
    a new failure, whatever the declared bugs' replays find (nothing here)."""

    def __init__(self):
        bugs = [BUGS["spl-param-counted-per-use"], BUGS["spl-method-arg-receiver-not-str"]]
        impl = reference_with(bugs)
        impl.splitting = _SplitCrashes(impl.splitting)
        impl.known_bugs = tuple(dataclasses.replace(b, affects="") for b in bugs)
        vars(self).update(vars(impl))


# --- wider than the bug: each declares a known bug and departs from the spec in a
# --- way the old signatures took for it; every one must FAIL, never be "known"


class _TrainingOff:
    """TRV-9: besides the registry the bug adds, every module below the root
    is switched to eval mode (old TRV-9 messages named only added keys of
    the first changed module, so this read as the registry alone)."""

    def __init__(self, inner):
        self._inner = inner

    def __getattr__(self, name):
        return getattr(self._inner, name)

    def _off(self, root, result):
        for module in root.modules():
            module.training = False
        return result

    def states_with_modules(self, root):
        return self._off(root, self._inner.states_with_modules(root))

    def handles(self, root):
        return self._off(root, self._inner.handles(root))

    def root_states(self, root):
        return self._off(root, self._inner.root_states(root))


class _ConflictKeyError:
    """FS2-8: where torch's bug fails inside the DTensor code, a KeyError
    instead (the old identity held the exception type only in ``detail``)."""

    def __init__(self, inner):
        self._inner = inner

    def __getattr__(self, name):
        return getattr(self._inner, name)

    def annotate(self, roots, mesh, ignored_params):
        try:
            self._inner.annotate(roots, mesh, ignored_params)
        except TypeError:
            raise KeyError("sharded_param") from None


class _ReapplyKeyError:
    """FS2-8: where torch's contract fails on a root given twice, a KeyError
    instead: an internal error all the same, but not the one the bug raises."""

    def __init__(self, inner):
        self._inner = inner

    def __getattr__(self, name):
        return getattr(self._inner, name)

    def annotate(self, roots, mesh, ignored_params):
        try:
            self._inner.annotate(roots, mesh, ignored_params)
        except AssertionError:
            raise KeyError("fully_shard") from None


class _NeverRestored:
    """EXO-1: leaves its recording functions on the tracer (old messages
    listed only the names, which the bound-method leftover shares)."""

    def __init__(self, inner):
        self._inner = inner

    def __getattr__(self, name):
        return getattr(self._inner, name)

    @contextmanager
    def patch_tracer(self, tracer, root):
        patched = {}
        try:
            with self._inner.patch_tracer(tracer, root) as info:
                patched.update((name, tracer.__dict__[name]) for name in ("call_module", "create_proxy"))
                yield info
        finally:
            tracer.__dict__.update(patched)


def _metadata_and_tuple_lost(_inner):
    """SPL-10: the submodules lose the captured graph's metadata as torch's
    bug does, and besides a one-output submodule is handed over returning its
    value, not a tuple (torch wraps it on every release: not the bug)."""
    from tests.planted.splitting_compiled import _BackendGets

    class _LosesMetadataAndTuple(_BackendGets):
        graph_forms = ("dynamo", "module")
        handed = {"wrap": "never", "meta": False, "sources": False}

    return _LosesMetadataAndTuple()


#: bug id -> (area, wrapper, what the switch-free implementation lacks: True keeps the bug's switch on)
WIDER = {
    "trv-registry-created-on-read": ("traversal", _TrainingOff, True),
    "fs2-group-conflict-not-rejected": ("fsdp2", _ConflictKeyError, True),
    "fs2-reapply-assertion": ("fsdp2", _ReapplyKeyError, True),
    "exo-patch-tracer-leaves-bound-methods": ("exec_order", _NeverRestored, False),
    "spl-split-submodules-lose-dynamo-metadata": ("splitting", _metadata_and_tuple_lost, False),
}


def _wider(bug):
    area, wrapper, keeps_bug = WIDER[bug.id]
    impl = reference_with([bug] if keeps_bug else [])
    setattr(impl, area, wrapper(getattr(impl, area)))
    impl.known_bugs = (dataclasses.replace(bug, affects=""),)
    return impl


for _bug_id in WIDER:
    globals()[class_name("Wider", _bug_id)] = _class(class_name("Wider", _bug_id), _wider, BUGS[_bug_id])


class _FSDP2Wrapper:
    """The reference's fsdp2 area with one method changed by a subclass."""

    def __init__(self, inner):
        self._inner = inner

    def __getattr__(self, name):
        return getattr(self._inner, name)


class _AddressNamesNothing(_FSDP2Wrapper):
    """FS2-8: rejects a shared module with a RuntimeError that names only a
    mesh object's address (a two-character module name such as ``c4`` can
    occur inside it)."""

    def annotate(self, roots, mesh, ignored_params):
        try:
            self._inner.annotate(roots, mesh, ignored_params)
        except ValueError:
            raise RuntimeError("fully_shard: <torch.distributed.device_mesh.DeviceMesh object at 0x7f1c4e2a9d10>") from None


class AddressInConflictError:
    def __init__(self):
        impl = ReferenceImplementation()
        impl.fsdp2 = _AddressNamesNothing(impl.fsdp2)
        vars(self).update(vars(impl))


# --- issue 27: what the group-conflict bug does once torch's new parameter objects
# --- are modelled; each declares the bug and must FAIL, never be "known"


class _IgnoredShardedRaises(_FSDP2Wrapper):
    """FS2-8: a managed module holding a parameter an earlier call sharded
    fails with torch's TypeError even where this call ignores it (what the
    torch-mode reference did before it modelled torch's new parameters;
    torch accepts it)."""

    def annotate(self, roots, mesh, ignored_params):
        inner = self._inner
        for module in inner.managed_modules(roots, ignored_params):
            if any(id(p) in inner._sharded for p in module._parameters.values()):
                raise TypeError(TORCH_DTENSOR_ERROR)
        inner.annotate(roots, mesh, ignored_params)


class _AliasRaises(_FSDP2Wrapper):
    """FS2-8: an alias outside an earlier group, which still holds the
    original parameter, fails with torch's TypeError as if it were the
    sharded one (torch accepts it and manages it twice)."""

    def annotate(self, roots, mesh, ignored_params):
        inner = self._inner
        params, _ = inner.managed_states(inner.managed_modules(roots, ignored_params), ignored_params)
        if any(id(p) in inner._group_params for p in params):
            raise TypeError(TORCH_DTENSOR_ERROR)
        inner.annotate(roots, mesh, ignored_params)


def _conflict_variant(wrapper):
    def build(bug):
        impl = reference_with([bug])
        impl.fsdp2 = wrapper(impl.fsdp2)
        impl.known_bugs = (dataclasses.replace(bug, affects=""),)
        return impl

    return build


IgnoredShardedRaises = _class("IgnoredShardedRaises", _conflict_variant(_IgnoredShardedRaises),
                              BUGS["fs2-group-conflict-not-rejected"])
AliasRaises = _class("AliasRaises", _conflict_variant(_AliasRaises), BUGS["fs2-group-conflict-not-rejected"])


class WrapsTorch:
    """A framework's adapter that runs torch's own functions (as one wrapping
    torch's walk does) and declares nothing: torch's known bugs are its
    failures, each naming how to declare them."""

    def __init__(self):
        from pytest_fsdpcheck.core.catalog import AREAS
        from pytest_fsdpcheck.impls.torch_impl import TorchImplementation

        runs = TorchImplementation()
        for area in AREAS:
            setattr(self, area, getattr(runs, area))


class WrapsTorchDeclaring(WrapsTorch):
    """The same adapter declaring that it has torch's known bugs."""

    known_bugs = "torch"


class DeclaresUnknownName(WrapsTorch):
    known_bugs = "pytorch"


# --- issue 37 item 5: trv-registry-created-on-read is as wide as torch 2.0/2.1's
# --- _get_registry: a module marked by a composable API (replicate) holds its
# --- registry already, so only unmarked visited modules get an empty one


class _RegistryOnMarkedToo:
    """TRV-9: also puts a registry on a module marked ``replicate`` that holds
    none of its own (the reference keeps marks beside the modules): what the
    known bug's model did before it was narrowed; torch never does it."""

    def __init__(self, inner):
        self._inner = inner

    def __getattr__(self, name):
        return getattr(self._inner, name)

    def _also_marked(self, root, result):
        import collections

        from torch.distributed._composable.contract import REGISTRY_KEY

        for module in root.modules():
            if module in self._inner._marks:
                module.__dict__.setdefault(REGISTRY_KEY, collections.OrderedDict())
        return result

    def states_with_modules(self, root):
        return self._also_marked(root, self._inner.states_with_modules(root))

    def handles(self, root):
        return self._also_marked(root, self._inner.handles(root))


def _traversal_variant(wrapper):
    def build(bug):
        impl = reference_with([bug])
        impl.traversal = wrapper(impl.traversal)
        impl.known_bugs = (dataclasses.replace(bug, affects=""),)
        return impl

    return build


RegistryOnMarkedToo = _class("RegistryOnMarkedToo", _traversal_variant(_RegistryOnMarkedToo),
                             BUGS["trv-registry-created-on-read"])


@contextmanager
def _torch_composable(composable):
    """The installed torch's FSDP traversal with its ``_composable`` check
    replaced for the duration of one call."""
    import torch.distributed.fsdp._traversal_utils as utils

    saved = utils._composable
    utils._composable = composable
    try:
        yield
    finally:
        utils._composable = saved


def _registry_of(module):
    """torch 2.0.1's ``contract._get_registry``: the registry, stored empty on
    a module that has none."""
    import collections

    from torch.distributed._composable.contract import REGISTRY_KEY

    return module.__dict__.setdefault(REGISTRY_KEY, collections.OrderedDict())


def _composable_2_0(module):
    # torch 2.0.1 and 2.1.2's _traversal_utils._composable
    return "replicate" not in _registry_of(module)


def _composable_reading_children(module):
    # a wider bug: the check also reads (and so creates) the registries of
    # the module's children, those below a replicate-marked module included
    for child in module.children():
        _registry_of(child)
    return _composable_2_0(module)


class _TorchTraversalWith:
    """The installed torch's traversal, its ``_composable`` check swapped."""

    def __init__(self, composable):
        from pytest_fsdpcheck.impls.torch_impl import TorchTraversal

        self._inner = TorchTraversal()
        self._composable = composable

    def __getattr__(self, name):
        return getattr(self._inner, name)

    def states_with_modules(self, root):
        with _torch_composable(self._composable):
            return self._inner.states_with_modules(root)

    def handles(self, root):
        with _torch_composable(self._composable):
            return self._inner.handles(root)


def _torch_with(composable):
    def build(bug):
        from pytest_fsdpcheck.impls.torch_impl import TorchImplementation

        impl = TorchImplementation()
        impl.traversal = _TorchTraversalWith(composable)
        impl.known_bugs = (dataclasses.replace(bug, affects=""),)
        return impl

    return build


#: torch's column with 2.0's registry bug planted back: known
TorchRegistryOnRead = _class("TorchRegistryOnRead", _torch_with(_composable_2_0), BUGS["trv-registry-created-on-read"])
#: and with a wider one that also writes below a replicate-marked module: FAIL
TorchRegistryOnChildren = _class("TorchRegistryOnChildren", _torch_with(_composable_reading_children),
                                 BUGS["trv-registry-created-on-read"])
