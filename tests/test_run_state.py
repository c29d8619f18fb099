"""Two pytest sessions in one process keep their own run state (issue 39
item 1): a session started inside another's test (``pytester``, in process)
judges known bugs, draws its examples and keeps its record with its own
state, and leaves the outer session's as it found it. Before, the judge's
switch and record, the profile and its overrides were module globals: an
inner run changed the outer one's, and the outer's reached the inner's
verdicts."""

from __future__ import annotations

import copy
import importlib
import json
from types import SimpleNamespace

import pytest
from hypothesis import Phase

from pytest_fsdpcheck.checks import Violation
from pytest_fsdpcheck.core import profiles
from pytest_fsdpcheck.core.bugs import KnownBug
from pytest_fsdpcheck.known import judge

pytestmark = pytest.mark.plugin

#: declares and has torch's TRV-7 known bug (trv-root-states-walk-modules)
IMPL = "tests.planted.known:Only_trv_root_states_walk_modules"

#: a known bug only the outer session's implementation declares
OUTER_BUG = KnownBug(id="outer-session-bug", invariants=("TRV-7",), reason="the outer session's own",
                     predicate=lambda violations: True)


@pytest.fixture(scope="module", autouse=True)
def _torch_imported_first():
    """torch and Dynamo imported before any pytester (and Hypothesis and the
    package's modules, at the top): pytester drops every module imported
    while it ran when it ends; torch cannot be imported twice in one process
    (the second import crashes it), and a module imported again is another
    module (two Hypothesis ``Phase`` classes)."""
    from pytest_fsdpcheck.plugin.verdicts import warm_up

    warm_up()


@pytest.fixture
def outer_state():
    """Whatever this test does to the state it runs under is undone after it."""
    from pytest_fsdpcheck.core.run_state import current

    state = current()
    saved = {name: copy.copy(value) if isinstance(value, (dict, list, set)) else value
             for name, value in vars(state).items()}
    yield state
    for name, value in saved.items():
        setattr(state, name, value)


def _outer_explains() -> None:
    """One example of the outer session explained by its own known bug."""
    judge.reset()
    judge.conform(SimpleNamespace(known_bugs=(OUTER_BUG,)), [Violation("TRV-7", "outer example")])


def _inner(pytester, *args) -> tuple[object, str]:
    """The suite's TRV-7 test on IMPL in an inner session in this process;
    its run result and TRV-7's verdict in its report."""
    result = pytester.runpytest_inprocess(
        "-p", "no:randomly", "--fsdpcheck", "--fsdpcheck-impl", IMPL, "-k", "test_root_states",
        "--fsdpcheck-report", "report.json", *args)
    report = json.loads((pytester.path / "report.json").read_text())
    return result, report["matrix"].get(IMPL, {}).get("TRV-7", {}).get("outcome")


@pytest.mark.parametrize(("outer_judges", "inner_args", "inner_verdict"), [
    # the outer session judges nothing and draws only explicit examples (none):
    # the inner one, run as given, finds the bug and judges it known
    (False, (), "known"),
    # the outer session judges; the inner one runs --fsdpcheck-no-known-bugs,
    # another profile and a planted-run override of its own: a failure
    (True, ("--fsdpcheck-no-known-bugs", "--fsdpcheck-profile", "dev", "--fsdpcheck-seed", "1",
            "-p", "tests.planted.noshrink"), "fail"),
], ids=["outer-judges-nothing", "inner-judges-nothing"])
def test_an_inner_session_has_its_own_state_and_leaves_the_outers(pytester, monkeypatch, outer_state,
                                                                  outer_judges, inner_args, inner_verdict):
    monkeypatch.delenv("FSDPCHECK_IMPL", raising=False)
    judge.configure(enabled=True)
    _outer_explains()
    judge.configure(enabled=outer_judges)
    profiles.activate("ci")
    profiles.override(phases=[Phase.explicit])
    outer_explained = judge.explained()
    assert outer_explained == {"outer-session-bug": {"examples": 1, "invariants": ["TRV-7"]}}

    result, verdict = _inner(pytester, *inner_args)

    # the inner session's verdict is its own: neither the outer's switch nor
    # its override (no example drawn) decided it
    assert verdict == inner_verdict, result.stdout.str()[-3000:]
    assert result.ret == (pytest.ExitCode.OK if inner_verdict == "known" else pytest.ExitCode.TESTS_FAILED)
    # and the outer session's state is as it was
    assert judge.explained() == outer_explained
    assert profiles.active() == "ci"
    assert profiles.current().phases == (Phase.explicit,)
    if outer_judges:
        _outer_explains()
        assert judge.explained() == outer_explained
    else:
        from pytest_fsdpcheck.checks import ConformanceFailure

        with pytest.raises(ConformanceFailure, match="outer example"):
            _outer_explains()


def test_a_suite_module_another_session_imported_runs_with_this_sessions_settings(pytester, monkeypatch,
                                                                                 outer_state):
    """A suite module is imported once a process, and its properties carry
    the settings of the session that imported it: the outer one imported it
    under an override that draws no example; the inner session's run of its
    property still draws its own, and the outer's are put back after."""
    monkeypatch.delenv("FSDPCHECK_IMPL", raising=False)
    names = []

    class ModuleNames:
        def pytest_collection_finish(self, session):
            names.extend(item.module.__name__ for item in session.items)

    listed = pytester.runpytest_inprocess("-p", "no:randomly", "--fsdpcheck", "--fsdpcheck-impl", IMPL,
                                          "-k", "test_root_states", "--co", plugins=[ModuleNames()])
    assert listed.ret == pytest.ExitCode.OK and len(set(names)) == 1, names
    profiles.override(phases=[Phase.explicit])
    prop = importlib.import_module(names[0]).test_root_states
    assert prop._hypothesis_internal_use_settings.phases == (Phase.explicit,)

    result, verdict = _inner(pytester)

    assert verdict == "known", result.stdout.str()[-3000:]
    assert prop._hypothesis_internal_use_settings.phases == (Phase.explicit,)


def test_an_inner_session_that_fails_to_start_leaves_the_outers(pytester, outer_state):
    """A usage error found after the session was built (the example
    database of a dev run is a file): the outer session's judge still judges."""
    from pytest_fsdpcheck.core.run_state import current

    judge.configure(enabled=True)
    (pytester.path / "db").write_text("")
    result = pytester.runpytest_inprocess(
        "-p", "no:randomly", "--fsdpcheck", "--fsdpcheck-impl", "reference", "--fsdpcheck-no-known-bugs",
        "--fsdpcheck-profile", "dev", "--fsdpcheck-database", "db")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "is a file" in result.stderr.str()
    assert current() is outer_state
    _outer_explains()
    assert list(judge.explained()) == ["outer-session-bug"]
