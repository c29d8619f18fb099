"""Issue 58 item 2: each known bug is observed on every release of its range
that the history command ran, or says why that release cannot show it."""

import pytest

from pytest_fsdpcheck.commands.history import RELEASES
from pytest_fsdpcheck.core.bugs import KnownBug
from pytest_fsdpcheck.impls.torch_bugs import TORCH_BUGS
from pytest_fsdpcheck.known import observed

pytestmark = pytest.mark.unit


def _bug(**kw):
    return KnownBug(id="x", invariants=("FS2-9",), reason="r", predicate=lambda v: False, **kw)


def test_a_run_release_of_the_range_where_the_bug_explained_nothing_is_never_observed():
    record = observed.load('{"runs": {"2.7.1": {}, "2.8.0": {}, "2.9.1": {}}, "observed": {"x": ["2.7.1"]}}')
    assert observed.gaps(_bug(affects=">=2.7,<2.10"), record, RELEASES) == (["2.8.0", "2.9.1"], [])
    assert observed.gaps(_bug(affects=">=2.6,<2.9"), record, RELEASES) == (["2.8.0"], ["2.6.0"])
    said = _bug(affects=">=2.7,<2.9", unobservable={"2.8.0": "masked"})
    assert observed.gaps(said, record, RELEASES) == ([], [])
    masked = observed.load('{"runs": {"2.8.0": {}, "2.9.1": {}}, "observed": {"m": ["2.8.0"]}}')
    assert observed.gaps(_bug(affects=">=2.8,<2.10", masked_by=("m",)), masked, RELEASES) == (["2.9.1"], [])


def test_a_history_run_replaces_what_its_releases_observed_and_keeps_the_rest():
    record = observed.load('{"runs": {"2.7.1": {"commit": "a"}, "2.8.0": {"commit": "a"}}, '
                           '"observed": {"x": ["2.7.1", "2.8.0"], "y": ["2.8.0"]}}')
    results = [{"version": "2.8.0", "matrix": {}, "exit": 0, "known_bugs": [{"id": "x", "examples": 2},
                                                                           {"id": "z", "examples": 0}]},
               {"version": "2.9.1", "error": "torch install failed"}]
    after = observed.merged(record, results, "b", "2026-12-07")
    assert after["runs"] == {"2.7.1": {"commit": "a"}, "2.8.0": {"commit": "b", "date": "2026-12-07", "exit": 0}}
    assert after["observed"] == {"x": ["2.7.1", "2.8.0"]}  # y no longer seen on 2.8.0; z explained nothing
    assert observed.load(observed.dumps(after)) == after


def test_no_known_bug_is_declared_on_a_release_that_ran_without_it():
    """The package's record (known/observed.json, written by the history
    command's --record-observed): a bug whose range holds a release the
    history ran, where it explained nothing and does not say why it cannot
    show there, declares more than it is."""
    record = observed.load()
    assert record["runs"], "known/observed.json records no history run"
    wide = {bug.id: never for bug in TORCH_BUGS for never in [observed.gaps(bug, record, RELEASES)[0]] if never}
    assert not wide, f"never observed where declared (narrow the range, or say why in unobservable): {wide}"
    for bug in TORCH_BUGS:
        assert set(bug.unobservable) <= set(RELEASES) and all(bug.unobservable.values()), bug.id
        assert all(bug.applies_to_version(r) for r in bug.unobservable), f"{bug.id}: unobservable outside its range"


def test_strict_does_not_call_fixed_a_bug_the_suite_cannot_show_on_this_release():
    """fs2-unused-params-graphs-differ shows only on a user's plan of its
    shape: a default run on 2.13 meets FS2-9 without it, and strict must not
    call it fixed there (CI's command 1 did); a bug without such a reason
    still is, where its tests ran and it showed nothing."""
    import types

    from pytest_fsdpcheck.plugin.verdicts import _unobservable_on, _unreproduced

    by_id = {bug.id: bug for bug in TORCH_BUGS}
    assert _unobservable_on(by_id["fs2-unused-params-graphs-differ"], "2.13.0+cpu")
    assert not _unobservable_on(by_id["fs2-frozen-mp-latched"], "2.13.0+cpu")

    class Torch:
        known_bugs = (by_id["fs2-unused-params-graphs-differ"], by_id["fs2-frozen-mp-latched"])

    matrix = types.SimpleNamespace(outcome=lambda inv, spec: "pass", known_examples={})
    session = types.SimpleNamespace(known_bugs=True, impls={"torch": Torch()}, torch_version="2.13.0+cpu",
                                    matrix=matrix, deselected=set(), cannot_compile=lambda: False)
    assert {bug.id for _, bug in _unreproduced(session)} == {"fs2-frozen-mp-latched"}
