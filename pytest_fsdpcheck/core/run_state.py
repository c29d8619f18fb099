"""The state one run of the suite keeps while it runs, in one object.

The known-bug judge's switch and record, the Hypothesis profile and its
overrides, the running test's example digest and feature tally, the xdist
stop file, the user cases probed: each belongs to one pytest session. The
plugin's :class:`~pytest_fsdpcheck.plugin.session.Session` owns a :class:`RunState`
(in the config's stash) and makes it the current one while its config is
configured (:func:`enter`, :func:`leave`), so a second session in the same
process (``pytester.runpytest_inprocess``) judges, counts and draws with its
own state and leaves the first one's as it was.

Code that runs inside a test and holds no pytest config (a conformance
check's judge, a generator noting its example) finds the state with
:func:`current`. Outside any fsdpcheck session (a user's own tests calling
:mod:`pytest_fsdpcheck.cases` directly, a reproducer script) that is the
process's standalone state.

Imports nothing of the package and nothing heavy: the lowest layer uses it.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class RunState:
    #: --fsdpcheck-no-known-bugs turns it off: no failure is explained
    known_bugs: bool = True
    #: known-bug id -> (examples explained, invariants of what it explained), for the running test
    explained: dict = field(default_factory=dict)
    #: the suite's Hypothesis profile (ci, dev, fuzz)
    profile: str = "ci"
    #: settings over the profile for the suite's properties (planted-bug runs skip shrinking)
    overrides: dict = field(default_factory=dict)
    #: under a time budget a property runs in rounds of its ci example count
    budgeted: bool = False
    #: a running digest of the examples built in the running test (hashlib object)
    digest: object = None
    #: the running test's features.Tally
    tally: object = None
    #: an xdist worker's stop file under -x/--maxfail (see fuzz.stop_watch)
    stop_path: str | None = None
    #: cases.checks: id(case) -> (case, its recorded plan)
    recorded_plans: dict = field(default_factory=dict)
    #: cases.checks: a factory configuration -> the user's mistake in it, probed once a run
    #: (a factory's name may stand for other code in the next session: a fresh import)
    probed_cases: dict = field(default_factory=dict)
    #: conformance/test_distributed.py: (world size, device, implementations, task) -> the ranks' run
    rank_runs: dict = field(default_factory=dict)
    #: under xdist, the controller's folder where the first worker to run a
    #: world leaves its ranks' results for the others (SuiteRun.world_results)
    worlds_dir: str | None = None


#: What runs outside any fsdpcheck session (direct calls, reproducer scripts).
_STANDALONE = RunState()

#: The states of the sessions configured now, innermost last: a session
#: started inside another's test (pytester in-process) is the current one
#: until it ends. This list holds no state of its own.
_ACTIVE: list[RunState] = []


def current() -> RunState:
    """The running session's state, else the standalone one."""
    return _ACTIVE[-1] if _ACTIVE else _STANDALONE


def enter(state: RunState) -> None:
    """Make ``state`` the current one (a session's configure)."""
    _ACTIVE.append(state)


def leave(state: RunState) -> None:
    """``state``'s session ends (its unconfigure): the one before is current again."""
    for k in range(len(_ACTIVE) - 1, -1, -1):
        if _ACTIVE[k] is state:
            del _ACTIVE[k]
            return
