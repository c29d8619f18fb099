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
from pytest_fsdpcheck.known.reference_with import reference_with
from pytest_fsdpcheck.known.torch_bugs import TORCH_BUGS

BUGS = {bug.id: bug for bug in TORCH_BUGS}

#: the tests where each bug shows (a -k expression)
TESTS = {
    "trv-root-states-walk-modules": "test_root_states",
    "trv-registry-created-on-read": "test_root_states",
    "spl-param-counted-per-node": "test_counted_once_cases",
    "spl-method-receiver-module-counted": "test_sizes_with_method_arguments or test_counted_once",
    "spl-bucket-closes-without-output": "test_split_plan",
    "spl-param-counted-per-use": "test_counted_once_cases",
    "spl-method-arg-receiver-not-str": "test_sizes_with_method_arguments",
    "spl-ddp-ignored-lost-on-fake": "test_golden_buckets and frozen_ignored",
    "exo-patch-tracer-leaves-bound-methods": "test_tracer_left_clean",
    "exo-param-keyword-unrecorded": "test_param_uses_by_keyword_and_in_lists and keyword",
    "exo-param-in-list-unrecorded": "test_param_uses_by_keyword_and_in_lists and list",
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
            sizes = {id(t): t.untyped_storage().nbytes() for t in [*gm.parameters(), *example_inputs]}
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


SECOND_BUG = {"traversal": _RootStatesDropLast, "splitting": _SplitInflated, "exec_order": _ExecOrderMangled}


#: bugs of torch's module-form code paths: the planted splitting takes module-form graphs
MODULE_FORM = {"spl-param-counted-per-node", "spl-method-receiver-module-counted", "spl-bucket-closes-without-output"}


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


for _bug in TORCH_BUGS:
    for _prefix, _build in (("Only", _only), ("Plus", _plus), ("Claims", _claims)):
        globals()[class_name(_prefix, _bug.id)] = _class(class_name(_prefix, _bug.id), _build, _bug)
