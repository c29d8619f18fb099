"""Checkers on hand-made results: each wrong answer gets the right invariant ID."""

from __future__ import annotations

import pytest

from pytest_fsdpcheck.checks import ConformanceFailure, Violation, assert_conforms
from pytest_fsdpcheck.checks import annotation as ann
from pytest_fsdpcheck.checks import traversal as trv
from pytest_fsdpcheck.generators.trees import TreeSpec, build_tree
from pytest_fsdpcheck.reference.traversal import ReferenceTraversal

pytestmark = pytest.mark.unit

# root m0 -> m1 -> m3, root m0 -> m2; m1 owns s0, m3 and m2 share s1.
# DFS pre-order visits m0 m1 m3 m2: states [s0, s1], first owners [m1, m3].
SPEC = TreeSpec(
    children=((1, 2), (3,), (), ()),
    states=(None, 0, 1, 1),
    root_states=frozenset({1}),
    handled_states=frozenset({0, 1}),
)


def ids(violations) -> list[str]:
    return sorted({v.invariant for v in violations})


@pytest.fixture
def tree():
    return build_tree(SPEC, ReferenceTraversal())


def test_right_answers_pass(tree):
    s, m, h = tree.states, tree.modules, tree.handles
    assert trv.check_states_with_modules(tree, [s[0], s[1]], [m[1], m[3]]) == []
    assert trv.check_handles(tree, [h[0], h[1]]) == []
    assert trv.check_root_states(tree, [s[1]]) == []


@pytest.mark.parametrize(
    "states, modules, expected",
    [
        ([0, 1, 1], [1, 3, 2], ["TRV-1", "TRV-2"]),  # the shared state listed once per owner
        ([0, 1], [1], ["TRV-2"]),  # lengths differ
        ([0, 1], [2, 3], ["TRV-2", "TRV-5"]),  # m2 does not own s0
        ([0, 1], [1, 2], ["TRV-2", "TRV-5"]),  # s1 paired with its later owner
        ([1, 0], [3, 1], ["TRV-3", "TRV-5"]),  # order is not DFS pre-order
        ([0], [1], ["TRV-4", "TRV-5"]),  # s1 missing
        ([], [], ["TRV-4", "TRV-5"]),
    ],
    ids=["duplicate", "lengths", "non-owner", "later-owner", "order", "missing", "empty"],
)
def test_wrong_states_with_modules(tree, states, modules, expected):
    got = trv.check_states_with_modules(tree, [tree.states[i] for i in states], [tree.modules[i] for i in modules])
    assert ids(got) == expected, got
    assert all(str(v).startswith(v.invariant + ": ") for v in got)


def test_unexpected_state_from_a_replicate_subtree():
    # m1 is marked replicate: s0 and everything under m1 is pruned, so s1's
    # first owner becomes m2.
    spec = TreeSpec(SPEC.children, SPEC.states, SPEC.root_states, SPEC.handled_states, replicate=frozenset({1}))
    tree = build_tree(spec, ReferenceTraversal())
    s, m = tree.states, tree.modules
    assert trv.check_states_with_modules(tree, [s[1]], [m[2]]) == []
    assert ids(trv.check_states_with_modules(tree, [s[0], s[1]], [m[1], m[2]])) == ["TRV-4"]
    assert ids(trv.check_states_with_modules(tree, [s[1]], [m[3]])) == ["TRV-2"]
    # TRV-5 speaks only of trees without incompatible marks.
    assert "TRV-5" not in ids(trv.check_states_with_modules(tree, [s[1]], [m[3]]))


def test_wrong_handles(tree):
    h = tree.handles
    assert ids(trv.check_handles(tree, [h[1], h[0]])) == ["TRV-6"]
    assert ids(trv.check_handles(tree, [h[0]])) == ["TRV-6"]
    assert ids(trv.check_handles(tree, [h[0], h[1], h[1]])) == ["TRV-6"]


def test_wrong_root_states(tree):
    s = tree.states
    assert ids(trv.check_root_states(tree, [s[0], s[1]])) == ["TRV-7"]
    assert ids(trv.check_root_states(tree, [])) == ["TRV-7"]


def test_mutation_is_seen(tree):
    before = trv.snapshot(tree)
    assert trv.check_unmutated(tree, before) == []
    tree.modules[2]._visited = True
    assert ids(trv.check_unmutated(tree, before)) == ["TRV-9"]


def test_registry_and_state_mutations_are_seen(tree):
    from torch import nn

    before = trv.snapshot(tree)
    tree.modules[3].add_module("extra", nn.Module())
    assert ids(trv.check_unmutated(tree, before)) == ["TRV-9"]

    fresh = build_tree(SPEC, ReferenceTraversal())
    before = trv.snapshot(fresh)
    fresh.states[0]._is_root = True
    assert ids(trv.check_unmutated(fresh, before)) == ["TRV-9"]


def test_diff_against_reference_names_the_difference(tree):
    class Reordered(ReferenceTraversal):
        def states_with_modules(self, root):
            states, modules = super().states_with_modules(root)
            return states[::-1], modules[::-1]

    reference = ReferenceTraversal()
    ref_tree = build_tree(SPEC, reference)
    same = ReferenceTraversal()
    assert trv.diff_against_reference(ref_tree, reference, build_tree(SPEC, same), same) == []
    impl = Reordered()
    got = trv.diff_against_reference(ref_tree, reference, build_tree(SPEC, impl), impl)
    # Handles follow the (reordered) states; one root state keeps TRV-7 right.
    assert ids(got) == ["TRV-3", "TRV-6"], got


# --- annotation ------------------------------------------------------------------

# root m0 -> m1 (ignored) -> m2 ; root -> m3 -> m2 (m2 shared, also below m1).
ANN_SPEC = TreeSpec(children=((1, 3), (2,), (), (2,)), ignored=frozenset({1}))


def _annotate(tree, flag, skip=()):
    for i, module in enumerate(tree.modules):
        if i not in tree.spec.ignored and i not in skip:
            module._is_fsdp_managed_module = True
            module._fsdp_use_orig_params = flag


@pytest.fixture
def atree():
    return build_tree(ANN_SPEC)


def test_annotation_right_answer(atree):
    before = ann.snapshot(atree)
    _annotate(atree, True)
    assert ann.check_annotated(atree, before, True) == []


def test_annotation_missing_everywhere(atree):
    before = ann.snapshot(atree)
    # m2 is below the ignored m1 (ANN-3) and shared (ANN-6); m0 and m3 plain ANN-1.
    assert ids(ann.check_annotated(atree, before, True)) == ["ANN-1", "ANN-3", "ANN-6"]


def test_annotation_wrong_flag(atree):
    before = ann.snapshot(atree)
    _annotate(atree, False, skip={2})
    atree.modules[2]._is_fsdp_managed_module = True
    atree.modules[2]._fsdp_use_orig_params = True
    assert ids(ann.check_annotated(atree, before, True)) == ["ANN-1"]


def test_annotation_touching_ignored(atree):
    before = ann.snapshot(atree)
    _annotate(atree, True)
    atree.modules[1]._is_fsdp_managed_module = False
    assert ids(ann.check_annotated(atree, before, True)) == ["ANN-2"]


@pytest.mark.parametrize("change", ["attribute", "training", "parameter"])
def test_annotation_other_changes(atree, change):
    import torch
    from torch import nn

    before = ann.snapshot(atree)
    _annotate(atree, True)
    target = atree.modules[3]
    if change == "attribute":
        target._fsdp_extra = 1
    elif change == "training":
        target.training = False
    else:
        target.register_parameter("w", nn.Parameter(torch.zeros(1)))
    assert ids(ann.check_annotated(atree, before, True)) == ["ANN-4"]


def test_annotation_shared_module_only(atree):
    before = ann.snapshot(atree)
    _annotate(atree, True, skip={2})
    assert ids(ann.check_annotated(atree, before, True)) == ["ANN-3", "ANN-6"]


def test_idempotence_checker(atree):
    _annotate(atree, True)
    once = ann.snapshot(atree)
    twice = ann.snapshot(atree)
    _annotate(atree, False)
    assert ann.check_idempotent(atree, once, twice, ann.snapshot(atree), True) == []

    fresh = build_tree(ANN_SPEC)
    _annotate(fresh, True)
    once = ann.snapshot(fresh)
    _annotate(fresh, False)  # a second call with the same flag flipped it
    twice = ann.snapshot(fresh)
    assert ids(ann.check_idempotent(fresh, once, twice, ann.snapshot(fresh), True)) == ["ANN-5"]

    stale = build_tree(ANN_SPEC)
    _annotate(stale, True)
    once = ann.snapshot(stale)
    got = ann.check_idempotent(stale, once, once, ann.snapshot(stale), True)  # flag never updated
    assert ids(got) == ["ANN-5"] and "update the flag" in got[0].message


def test_annotation_diff_against_reference(atree):
    ref = build_tree(ANN_SPEC)
    _annotate(ref, True)
    _annotate(atree, True, skip={2})
    atree.modules[1]._is_fsdp_managed_module = True
    assert ids(ann.diff_against_reference(ref, atree)) == ["ANN-2", "ANN-3"]


# --- failures ------------------------------------------------------------------


def test_conformance_failure_message_starts_with_the_ids():
    violations = [Violation("TRV-3", "expected a, got b"), Violation("TRV-1", "expected c, got d")]
    with pytest.raises(ConformanceFailure) as info:
        assert_conforms(violations, "print('repro')")
    assert info.value.invariants == ["TRV-1", "TRV-3"]
    message = str(info.value)
    assert message.splitlines()[0] == "TRV-3: expected a, got b"
    assert "Reproducer:" in message and message.rstrip().endswith("print('repro')")
    assert_conforms([])


def test_a_violation_outside_the_tests_tags_fails_its_own_cell():
    from types import SimpleNamespace

    from pytest_fsdpcheck.report.verdict import PROP_VIOLATED, Verdict, classify

    failed = SimpleNamespace(skipped=False, failed=True, passed=False, longrepr="")
    cells = classify(failed, ["FS2-8"], {PROP_VIOLATED: ["FS2-7"]})
    assert cells == {"FS2-8": Verdict("pass"), "FS2-7": Verdict("fail")}


def test_the_matrix_reads_the_verdict_the_plugin_recorded_not_the_reports_text():
    """A known bug's or a declaration's verdict is written once, where it is
    decided, and read unchanged: whatever pytest's xfail text says."""
    from types import SimpleNamespace

    from pytest_fsdpcheck.report.matrix import Matrix
    from pytest_fsdpcheck.report.verdict import (
        PROP_IMPL,
        PROP_INVARIANTS,
        PROP_VERDICT,
        PROP_VIOLATED,
        Verdict,
        classify,
        decide,
        verdict_record,
    )

    def report(cells, wasxfail):
        props = [(PROP_INVARIANTS, ["FS2-8", "FS2-9"]), (PROP_IMPL, "torch"), (PROP_VIOLATED, ["FS2-9"])]
        excused = SimpleNamespace(skipped=True, failed=False, passed=False, longrepr="", when="call", duration=0.1,
                                  nodeid=f"t::{wasxfail}", sections=[], wasxfail=wasxfail,
                                  user_properties=props)
        props.append((PROP_VERDICT, verdict_record(decide(excused, ["FS2-8", "FS2-9"], dict(props), cells))))
        return excused

    declared = report("divergence", "known: not what it says")
    known = report("known", "declared divergence: not what it says either")
    assert classify(declared, ["FS2-8", "FS2-9"], dict(declared.user_properties)) == {
        "FS2-8": Verdict("pass"), "FS2-9": Verdict("divergence")}
    matrix = Matrix()
    matrix.record(declared)
    matrix.record(known)
    assert matrix.cells[("FS2-9", "torch")] == {"divergence", "known"}
    # only the declared one is a declaration's (a stale entry is judged from these)
    assert [test[0] for test in matrix.declared_tests] == ["t::known: not what it says"]

# --- the exec-order oracle ------------------------------------------------------------


class _SlicedParam:
    """A module whose only read of ``p`` is through a slice (``p[:1]``)."""

    @staticmethod
    def build():
        import torch

        class Sliced(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.p = torch.nn.Parameter(torch.ones(3))
                self.unused = torch.nn.Parameter(torch.ones(3))

            def forward(self, x):
                return x + self.p[:1].sum() + self.p[1]

        return Sliced()


@pytest.mark.parametrize("watch_getitem", [False, True], ids=["torch-function-mode", "patched-getitem"])
def test_oracle_sees_a_parameter_read_through_a_slice(monkeypatch, watch_getitem):
    """torch 2.0 and 2.1 index by int/slice without consulting modes; the
    oracle then watches Tensor.__getitem__ itself. Either way: each read
    seen exactly once, and Tensor.__getitem__ left as it was."""
    import torch

    from pytest_fsdpcheck.checks import exec_oracle

    if watch_getitem:
        monkeypatch.setattr(exec_oracle, "_getitem_escapes_modes", lambda: True)
    elif exec_oracle._getitem_escapes_modes():
        pytest.skip(f"torch {torch.__version__}'s TorchFunctionMode does not see int/slice indexing")
    before = vars(torch.Tensor).get("__getitem__")
    root = _SlicedParam.build()
    observed = exec_oracle.observe_eager(root, (torch.zeros(3),), torch.fx.Tracer())
    assert [p is root.p for p in observed.param_first_use] == [True]
    assert [[name for name, _ in named] for _, named in observed.usage[root]] == [["p"], ["p"]]
    assert vars(torch.Tensor).get("__getitem__") is before


def test_best_time_repeats_short_runs_and_stops_at_a_long_one(monkeypatch):
    from pytest_fsdpcheck.checks import growth

    durations = iter([0.5, 0.2, 0.3, 2.0, 9.0])
    monkeypatch.setattr(growth, "timed", lambda fn, clock, at_least: (next(durations), None))
    assert growth.best_time(lambda: None) == 0.2  # three short runs, the best
    assert growth.best_time(lambda: None) == 2.0  # one long run is enough
    assert growth.best_time(lambda: None, first=1.5) == 1.5  # a long first run: nothing more
    assert growth.best_time(lambda: None, first=0.1, good_enough=0.1) == 0.1
    assert next(durations) == 9.0


def test_growth_times_times_the_small_side_again_after_the_large_one(monkeypatch):
    """A small side timed while the other hardware thread was busy (0.2 s,
    its cost twice over) counts at its best after the large one (0.1 s): the
    quadratic's 1.6 s is 16x again, where alone it read 8x and passed."""
    from pytest_fsdpcheck.checks import growth

    calls = []

    def fake_best_time(fn, good_enough=0.0, first=None):
        calls.append(fn)
        return {"small": [0.2, 0.1][calls.count("small") - 1], "large": 1.6}[fn]

    monkeypatch.setattr(growth, "best_time", fake_best_time)
    t_small, t_large = growth.growth_times("small", "large", 10)
    assert calls == ["small", "large", "small"] and (t_small, t_large) == (0.1, 1.6)
    assert growth.check_linear_growth("EXO-8", t_small, t_large, 4, 10, "parameters")
    assert not growth.check_linear_growth("EXO-8", 0.2, 1.6, 4, 10, "parameters")
