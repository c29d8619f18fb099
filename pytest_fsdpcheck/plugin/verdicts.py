"""From one suite test's outcome to its verdict: pass, FAIL, known (every
failing example explained by a known bug), declared (a divergence file says
so) or n/p; and, at the end of the run, the verdicts on the declarations
themselves (stale entries, unexpected passes, known bugs not reproduced).

Only suite items (tagged by :mod:`.collection`) are ever touched here.
"""

from __future__ import annotations

import contextlib
import gc
import os
import re
import time
from typing import NamedTuple

from ..core.budget import BUDGET_SKIP
from ..core.catalog import AREAS, area_of
from ..report.verdict import (
    DECLARED_PREFIX,
    EXIT_CASE_ERROR,
    EXIT_ENVIRONMENT,
    EXIT_FAIL,
    EXIT_PRECEDENCE,
    EXIT_STRICT,
    PROP_CALLS,
    PROP_CAUSE,
    PROP_DIGEST,
    PROP_EXAMPLES,
    PROP_IMPL,
    PROP_INVARIANTS,
    PROP_KNOWN,
    PROP_NOT_PROVIDED,
    PROP_RUN,
    PROP_SIGNATURES,
    PROP_VERDICT,
    PROP_VIOLATED,
    decide,
    verdict_record,
)

#: a property that rejects more of its examples than this passes on too few
VALID_SHARE_FLOOR = 0.5
#: on a "not provided" report whose reason is a user's case's own (no plan, a
#: graph break): it tells nothing of what the implementation provides
PROP_CASE_INPUT = "fsdpcheck_case_input"
#: the feature a "not provided" skip's release lacks (NotProvided.release_lacks)
PROP_RELEASE_LACKS = "fsdpcheck_release_lacks"


class TooFewValidExamples(AssertionError):
    """A property rejected most of the examples it drew: its pass says little."""


def _too_few_valid(item, tally) -> str | None:
    if not getattr(item.obj, "is_hypothesis_test", False) or tally.valid_share() >= VALID_SHARE_FLOOR:
        return None
    seen = tally.examples + tally.rejected
    return (f"fsdpcheck health check: the test rejected {tally.rejected} of the {seen} examples it drew, "
            f"leaving {tally.examples} valid ({tally.valid_share():.0%}, floor {VALID_SHARE_FLOOR:.0%}): "
            "a pass on so few says little; the generator no longer fits this check")


@contextlib.contextmanager
def observed_call(item, session):
    """Around a suite test's call: counts, the known-bug judge's record, and
    process-wide state an implementation must not leave changed."""
    from ..core import profiles
    from ..known import judge
    from .fuzz import start_tally
    from .isolation import (
        FirstImports,
        ImportHistory,
        InductorCompiles,
        global_state,
        leaks,
        restore,
        restore_verdict_state,
    )

    threads = _suite_threads()
    impl = item.callspec.params["fsdpcheck_impl"]
    if session.import_history is None:
        session.import_history = ImportHistory()
    imported = FirstImports(session.import_history, getattr(impl, "_fsdpcheck_own", None)).__enter__()
    before = global_state()
    compiles = InductorCompiles().__enter__()
    impl.start_test()
    profiles.reset_digest()
    tally = start_tally()
    judge.reset()
    # The cyclic collector rescans torch's and Dynamo's ~1M long-lived
    # objects again and again while a test allocates: a quarter of the
    # suite's time went there, half of a 100,000-module tree test. One
    # collection after the test instead; ci and dev budgets keep the
    # garbage of one test small, fuzz runs long and keeps the collector.
    pause_gc = session.profile != "fuzz" and gc.isenabled()
    if pause_gc:
        gc.disable()
    raised = True
    in_flight = None
    try:
        yield
        raised = False
    except BaseException as exc:
        in_flight = exc
        from .tracebacks import drop_own_explanations

        drop_own_explanations(exc)
        raise
    finally:
        imported.__exit__(None, None, None)
        compiles.__exit__(None, None, None)
        if pause_gc:
            gc.enable()
        _record(item, impl, tally)
        unhealthy = None if raised else _too_few_valid(item, tally)
        after = global_state()
        found = leaks(before, after, imported, compiles)
        if found:
            restore(before, imported)
        else:  # what a library's first import changed, excused but put back all the same
            restore_verdict_state(before, after)
        found = sorted(found + item.__dict__.pop("_fsdpcheck_generators_left", []))
        _user_threads(threads)
        if found:
            _charge_leak(item, found, in_flight, raised)
        if unhealthy:
            raise TooFewValidExamples(unhealthy)


def _charge_leak(item, found: list[str], exc: BaseException | None, raised: bool) -> None:
    """A leak fails the test that made it, naming the test's invariants: a
    pass, a known bug, a skip (n/p) become FAIL; a failure keeps its own
    reason and names the leak too."""
    import pytest

    from .guard import LeakedGlobalState

    props = dict(item.user_properties)
    invariants = " ".join(f"{inv}:" for inv in props.get(PROP_INVARIANTS) or ())
    message = (f"{invariants} {props[PROP_IMPL]} left process-wide state changed: "
               f"{'; '.join(found)} (restored for the next tests)").lstrip()
    if not raised or isinstance(exc, (pytest.skip.Exception, pytest.xfail.Exception)):
        raise LeakedGlobalState(message) from exc
    if isinstance(exc, (Exception, pytest.fail.Exception)):
        # the failure stays the test's own (its invariants, its reproducer)
        exc.__notes__ = [*getattr(exc, "__notes__", ()), "LeakedGlobalState: " + message]


@contextlib.contextmanager
def observed_body(item):
    """Around a suite test's function itself: the global random generators
    it must leave as it found them (see :func:`.guard.generators`)."""
    from .guard import generator_leaks, generators

    before = generators()
    try:
        yield
    finally:
        item._fsdpcheck_generators_left = generator_leaks(before)


def _suite_threads() -> int:
    """One intra-op thread for the suite's test, and Dynamo imported: the
    user's value is returned, to be given back after the test."""
    import torch

    # Every tensor the suite makes has a few dozen elements: intra-op threads
    # only add hand-offs, and on a loaded 2-core CI runner (or under -n 2)
    # they made the numeric checks 6x slower.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    # Dynamo's config is compared before and after every test; imported
    # before the first snapshot, an implementation that is the first to
    # import Dynamo and changes its config is still caught.
    try:
        import torch._dynamo  # noqa: F401
    except Exception:  # noqa: BLE001 - a torch without a usable Dynamo: nothing to compare
        pass
    return threads


def warm_up() -> None:
    """The imports every suite test makes first (Dynamo: 1.3 s of the
    2-2.5 s a process's first test took, serial, quiet 2-core VM)."""
    import torch

    threads = _suite_threads()
    torch.set_num_threads(threads)


def _user_threads(threads: int) -> None:
    import torch

    torch.set_num_threads(threads)


def _record(item, impl, tally) -> None:
    from ..core import profiles
    from ..known import judge

    item.user_properties.append((PROP_CALLS, impl.calls))
    item.user_properties.append((PROP_DIGEST, profiles.digest()))
    if getattr(item.obj, "is_hypothesis_test", False):
        run = {"examples": tally.examples, "area": area_of(dict(item.user_properties)[PROP_INVARIANTS][0]),
               "worker": getattr(item.config, "workerinput", {}).get("workerid", "main"), **tally.to_json()}
        if hasattr(item, "_fsdpcheck_rounds"):
            run.update(rounds=item._fsdpcheck_rounds, ended=round(time.time(), 3))
        item.user_properties.append((PROP_RUN, run))
    if judge.explained():
        item.user_properties.append((PROP_KNOWN, judge.explained()))
        tagged = dict(item.user_properties)[PROP_INVARIANTS]
        hit = {i for e in judge.explained().values() for i in e["invariants"]} & set(tagged)
        # an explained exception stopped every check of the test
        item.user_properties.append((PROP_VIOLATED, sorted(hit or tagged)))


def prepare_failure(item, call):
    """The conformance failure of a suite test's call, set to print its
    reproducer as a report section of its own (pasteable as is)."""
    from ..checks import ConformanceFailure

    failure = call.excinfo.value if call.excinfo is not None else None
    if isinstance(failure, ConformanceFailure) and failure.example:
        failure.example_in_section = True
        return failure
    return None


def judge_report(item, call, report, session, failure) -> None:
    """Turn a suite test's report into its verdict, in place."""
    if failure is not None:
        report.sections.append(("fsdpcheck reproducer", failure.example + "\n"))
    if report.failed and call.when == "call" and hasattr(item, "_fsdpcheck_replay"):
        at_round = getattr(item, "_fsdpcheck_round", None)
        report.sections.append(
            ("fsdpcheck replay", item._fsdpcheck_replay + ("" if at_round is None else f"; failed in round {at_round + 1}") + "\n")
        )
    hung = item.callspec.params.get("fsdpcheck_impl")
    if report.failed and getattr(hung, "hung", None):
        # Hypothesis replays a hang as "flaky" (the replay fails fast): say what happened.
        report.longrepr = f"ImplementationTimeout: {hung.hung}"
    if call.when == "teardown" and hasattr(item, "hypothesis_statistics"):
        report.user_properties = [*report.user_properties, (PROP_EXAMPLES, count_examples(item.hypothesis_statistics))]
    excused = _judge_call(item, call, report, session, hung) if call.when == "call" else None
    if call.when == "call" or (call.when == "setup" and not report.passed):
        # the verdict is written here, where it is decided, and read unchanged by the report
        props = dict(report.user_properties)
        invariants = props.get(PROP_INVARIANTS)
        if invariants:
            verdicts = decide(report, invariants, props, excused)
            report.user_properties = [*report.user_properties, (PROP_VERDICT, verdict_record(verdicts))]


def _judge_call(item, call, report, session, hung) -> str | None:
    """The call's failure turned into what the run's known bugs and
    divergence entries make of it, in place: "known", "divergence", or None
    where it stands as it ran."""
    from ..core.not_provided import NotProvided

    not_provided = call.excinfo.value if report.skipped and call.excinfo is not None else None
    if isinstance(not_provided, NotProvided):
        # the verdict is read from the exception here, never decoded from its message later
        report.user_properties = [*report.user_properties, (PROP_NOT_PROVIDED, not_provided.reason),
                                  *([(PROP_CASE_INPUT, True)] if not_provided.case_input else ()),
                                  *([(PROP_RELEASE_LACKS, not_provided.release_lacks)]
                                    if not_provided.release_lacks else ())]
    props = dict(item.user_properties)
    impl_id = props[PROP_IMPL]
    violated = signatures = None
    failures = conformance_failures(call.excinfo.value) if report.failed and call.excinfo is not None else []
    if failures:
        from ..known.divergences import example_signature

        violated = sorted({inv for failure in failures for inv in failure.invariants})
        # each invariant's first violation, as a baseline keys the failure
        signatures = {v.invariant: example_signature(v.message)
                      for failure in reversed(failures) for v in reversed(failure.violations)}
        report.user_properties = [*report.user_properties, (PROP_VIOLATED, violated), (PROP_SIGNATURES, signatures)]
    if report.failed:
        exc = call.excinfo.value if call.excinfo is not None else None
        report.user_properties = [*report.user_properties, (PROP_CAUSE, failure_cause(exc, bool(getattr(hung, "hung", None))))]
    known = props.get(PROP_KNOWN)
    if report.passed and known:
        # Every failing example met was explained: the property is "known", not "pass".
        report.outcome = "skipped"
        report.wasxfail = "known: " + ", ".join(f"{bug} ({e['examples']} examples)" for bug, e in known.items()) + (
            " — python -m pytest_fsdpcheck.known show ID"
        )
        return "known"
    if not report.failed:
        return None
    from ..known.divergences import declared_reason

    reason = declared_reason(session.divergences, impl_id, item.nodeid, violated, signatures)
    if reason is None:
        return None
    report.outcome = "skipped"
    report.wasxfail = DECLARED_PREFIX + reason
    return "divergence"


def conformance_failures(exc: BaseException | None) -> list:
    """The check's ConformanceFailures ``exc`` is: itself, or every leaf of
    an exception group made of them alone (Hypothesis' FlakyFailure, where
    a bug shows on some calls only: still the check's violation). A group
    holding anything else (a leak, a crash) is none."""
    from ..checks import ConformanceFailure

    if isinstance(exc, ConformanceFailure):
        return [exc]
    inner_exceptions = getattr(exc, "exceptions", None)  # an exception group (the backport's on Python 3.10)
    if isinstance(inner_exceptions, (tuple, list)):
        leaves = [found for inner in inner_exceptions for found in conformance_failures(inner) or [None]]
        return leaves if leaves and None not in leaves else []
    return []


def failure_cause(exc: BaseException | None, hung: bool) -> str:
    """What ended a failed call (``report.FAILURE_CAUSES``): only a check's
    ConformanceFailure is a "violation"; a leak, a time-out and any other
    exception name every invariant of the test without judging one. A
    violation that also leaked stays a violation (the leak is its note)."""
    from .guard import ImplementationTimeout, LeakedGlobalState

    if hung or isinstance(exc, ImplementationTimeout):
        return "timeout"  # its report says so, whatever Hypothesis replayed (judge_report)
    if conformance_failures(exc):
        return "violation"
    if isinstance(exc, LeakedGlobalState):
        return "leak"
    return "crash"


def count_examples(statistics: str) -> int:
    # Hypothesis only exposes per-test statistics as text; count the valid
    # cases it ran (passing and failing) over all phases: an invalid one
    # checked nothing.
    return sum(int(p) + int(f) for p, f, _ in re.findall(r"(\d+) passing, (\d+) failing, and (\d+) invalid", statistics))


def trim_traceback(item, excinfo):
    # Show the conformance test's line and the implementation's frames; the
    # suite's own machinery (checkers, generators, plugin) is noise to a user.
    from .tracebacks import is_machinery

    default = type(item)._traceback_filter(item, excinfo)
    trimmed = default.filter(lambda entry: not is_machinery(entry))
    return trimmed if len(trimmed) else default


class Findings(NamedTuple):
    """The verdicts on the run's declarations, drawn once the run is over."""

    stale: list  # divergence entries that matched no test
    unexpected: list  # (invariant, implementation) declared divergent, all checks passed
    unreproduced: list  # (implementation, KnownBug) not seen on a release it claims
    unprovided: list  # (invariant, reason) the installed torch provides, reported n/p for it
    #: divergence entries whose `until` torch release is installed (they masked nothing)
    expired: list = []
    #: narrow entries (a baseline's, or narrowed to a test) whose test passed: no longer failing
    fixed: list = []


def findings(session) -> Findings:
    """All empty after an interrupted run or one that stopped early (-x)."""
    cached = getattr(session, "_findings", None)
    if cached is None:
        if session.incomplete:
            cached = session._findings = Findings([], [], [], [])
            return cached
        # An entry for an implementation not under test cannot be judged stale.
        stale = [
            e
            for e in session.divergences
            if e not in session.matched_entries and (e.implementation == "*" or e.implementation in session.impls)
        ]
        declared: dict[str, set[str]] = {}
        for e in session.divergences:
            # a narrow entry is judged by its own tests (fixed), not by its whole cell
            if e.is_invariant and e in session.matched_entries and not e.narrow:
                for impl in session.impls if e.implementation == "*" else [e.implementation]:
                    if (impl, e.match) not in session.deselected:
                        declared.setdefault(impl, set()).add(e.match)
        unexpected = session.matrix.mark_unexpected_passes(declared)
        cached = session._findings = Findings(stale, unexpected, _unreproduced(session), _unprovided(session),
                                              list(session.expired_entries), _fixed(session))
    return cached


def _fixed(session) -> list:
    """Narrow entries that excused no failure although a test they cover
    ran and passed: the failure they recorded is gone, the entry must go."""
    from ..known.divergences import excusing, matching

    narrow = [e for e in session.divergences if e.narrow]
    if not narrow:
        return []
    used = set()
    for nodeid, impl, violated, signatures in session.matrix.declared_tests:
        used.update(excusing(session.divergences, impl, nodeid, violated, signatures))
    passed = [(nodeid, t["implementation"], t["invariants"]) for nodeid, t in sorted(session.matrix.per_test.items())
              if t.get("outcome") == "passed" and "implementation" in t]
    return [e for e in narrow if e not in used
            and any(matching([e], impl, nodeid, invariants) for nodeid, impl, invariants in passed)]


def baseline_findings(found: Findings) -> list:
    """The findings that fail a run without --fsdpcheck-strict: a baseline's
    own entries that are stale, fixed or expired."""
    return [e for e in (*found.stale, *found.fixed, *found.expired) if e.baseline]


def write_baseline(session) -> str:
    """Write the run's failures as a baseline file; the line the summary prints."""
    from ..known.divergences import baseline_text, excusing

    if session.incomplete:
        return f"baseline not written to {session.write_baseline}: the run was interrupted or stopped early"
    # a rewritten baseline keeps what the old one still excuses (a divergence file's own stay there)
    held = [(nodeid, impl, violated, signatures) for nodeid, impl, violated, signatures in session.matrix.declared_tests
            if any(e.baseline for e in excusing(session.divergences, impl, nodeid, violated, signatures))]
    text = baseline_text([*session.matrix.failed_tests, *held], session.torch_version)
    folder = os.path.dirname(os.path.abspath(session.write_baseline))
    os.makedirs(folder, exist_ok=True)
    with open(session.write_baseline, "w", encoding="utf-8") as out:
        out.write(text)
    entries = text.count("[[divergence]]")
    return (f"baseline written to {session.write_baseline}: {entries} {'entry' if entries == 1 else 'entries'}"
            " (run with --fsdpcheck-baseline to hold it)")


def _unprovided(session) -> list[tuple[str, str]]:
    """Invariants whose every check was n/p for the installed torch although
    its release provides their area: a renamed or moved function, a probe
    gone wrong, never a reason to pass quietly."""
    if "torch" not in session.impls:
        return []
    from ..core.provided import INVARIANT_FEATURE, invariant_provided

    found = []
    for inv in session.matrix.invariants():
        # the cell is n/p only if every check of it that ran was
        if session.matrix.outcome(inv, "torch") != "not provided":
            continue
        # a narrowed run (-k test_model) where only a model's checks ran, n/p
        # for the model's own reasons (no plan): nothing that ran could tell
        if getattr(session, "case_inputs", {}).get((inv, "torch")):
            continue
        area = area_of(inv)
        if invariant_provided(inv, area, session.torch_version) and not _probed_away(inv):
            what = INVARIANT_FEATURE.get(inv, f"the {area} area")
            found.append((inv, f"torch {session.torch_version} provides {what}"))
    return found


class CaseInputRecorder:
    """Registered for the run (the xdist controller's reports too): per
    (invariant, implementation), whether every "not provided" report it got
    was for a reason that says nothing against the invariant (a user's
    case's own, :data:`PROP_CASE_INPUT`, or a feature of one check the
    release lacks, :data:`PROP_RELEASE_LACKS`), kept in
    ``session.case_inputs`` for the strict verdict."""

    def __init__(self, session):
        self.session = session
        session.case_inputs = {}

    def pytest_runtest_logreport(self, report):
        props = dict(getattr(report, "user_properties", ()))
        impl = props.get(PROP_IMPL)
        verdict = props.get(PROP_VERDICT)
        if impl is None or verdict is None or "not provided" not in verdict["cells"].values():
            return
        ours = bool(props.get(PROP_CASE_INPUT) or props.get(PROP_RELEASE_LACKS))
        for inv in props.get(PROP_INVARIANTS) or ():
            self.session.case_inputs[(inv, impl)] = self.session.case_inputs.get((inv, impl), True) and ours


#: invariants whose checks need torch.compile to run here (this Python, this build)
# SPL-20 and EXO-9 read the records of SPL-16's world, which compiles
_NEEDS_COMPILE = {"ANN-7", "ANN-8", "SPL-16", "FS2-9", "FS2-15", "SPL-20", "EXO-9"}


def _probed_away(inv: str) -> str | None:
    """A reason, found by probing this torch on the suite's own input before
    any implementation ran, why the check cannot run here at all."""
    from ..core.torch_support import compile_unsupported

    # Only the environment: whether this torch's Dynamo shows ANN-7 at all is
    # the release's (provided.py), and a probe failing where the release has
    # it is a finding, never a reason.
    return compile_unsupported() if inv in _NEEDS_COMPILE else None


def _unobservable_on(bug, torch_version: str) -> bool:
    """Whether ``bug`` says the suite cannot observe it on this torch's
    minor release (:attr:`KnownBug.unobservable`, keyed by the releases the
    history command runs, the latest patch of each minor)."""
    minor = tuple(torch_version.split("+")[0].split(".")[:2])
    return any(tuple(release.split(".")[:2]) == minor for release in bug.unobservable)


def _unreproduced(session) -> list[tuple[str, object]]:
    """Known bugs whose range covers this torch, whose tests all ran, and that
    no example showed."""
    if not session.known_bugs:
        return []
    from ..core.bugs import active_bugs

    # only the environment: where torch.compile runs, a bug that needs it and
    # was not shown is still reported (asked only for such a bug: the xdist
    # controller has the answer from its workers, never from torch)
    found = []
    for spec, impl in session.impls.items():
        for bug in active_bugs(impl, session.torch_version):
            if bug.needs_compile and session.cannot_compile():
                continue
            if _unobservable_on(bug, session.torch_version):
                continue  # the suite cannot show it on this release (a user's plan of one shape shows it): never "fixed?"
            cells = [(inv, spec) for inv in bug.invariants]
            if any((spec, inv) in session.deselected for inv in bug.invariants):
                continue
            # an environment error judged nothing: it cannot tell a bug gone
            ran = any(session.matrix.outcome(*cell) not in (None, "not provided", "skipped", "error") for cell in cells)
            # a bug that fails the same step first, seen in this run, leaves this one nothing to show
            masked = any(session.matrix.known_examples.get((spec, other)) for other in bug.masked_by)
            if ran and not masked and not session.matrix.known_examples.get((spec, bug.id)):
                found.append((spec, bug))
    return found


def exposures(session) -> dict:
    """For each user model: the modelled torch bugs it meets (replayed
    through the reference with each bug's switch), or why that could not be
    worked out. Only with known bugs on, and only for the installed torch's
    bugs: a user's own implementation declares its own."""
    if not session.models or not session.known_bugs:
        return {}
    cached = getattr(session, "_exposures", None)
    if cached is not None:  # pytest-html's summary asks before the terminal's
        return cached
    from ..cases import exposure as ex

    found = {}
    judged = _models_judged(session)
    for spec in session.models:
        if spec in session.matrix.case_errors:
            continue  # reported once, as the case's error
        if spec not in judged:
            continue  # no check of it ran (--collect-only, -k, a usage error): its replay would cost a minute for nothing
        try:
            found[spec] = ex.model_exposure(spec)
        except Exception as exc:  # noqa: BLE001 - one model's replay failing must not hide the others'
            found[spec] = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"
    session._exposures = found
    return found


def _models_judged(session) -> set[str]:
    """The users' models some implementation's check ran on in this run
    (their test ids end in the model's id)."""
    from ..report.verdict import model_test_suffixes

    suffixes = model_test_suffixes(session.models)
    return {spec for nodeid in session.matrix.per_test for suffix, spec in suffixes.items() if nodeid.endswith(suffix)}


#: the statuses of a run that ran its tests; others are pytest's, kept
_RAN = (0, 1)


def worse_status(current: int, new: int) -> int:
    """The status to exit with where ``current`` stands and ``new`` also
    applies: pytest's own statuses other than 0 and 1 stand; otherwise the
    first of the two in :data:`EXIT_PRECEDENCE`."""
    if current not in EXIT_PRECEDENCE:
        return current
    return min(current, new, key=EXIT_PRECEDENCE.index)


def exit_status(session, pytest_status: int, failed_reports: int) -> int:
    """The run's exit status from its merged results (on the xdist
    controller, every worker's reports): ``pytest_status`` as pytest drew
    it, ``failed_reports`` the failures pytest counted (collection errors
    included, which the matrix never sees)."""
    if pytest_status not in _RAN:
        return pytest_status
    kinds = session.matrix.failures
    status = 0
    # a failure the matrix did not classify (a collection error) is a FAIL
    if kinds.get("fail") or failed_reports > sum(kinds.values()):
        status = EXIT_FAIL
    if not any(session.matrix.cells) and session.pytest_session is not None \
            and session.pytest_session.testscollected and not _areas_provided(session):
        status = EXIT_FAIL  # an implementation that provides no area at all
    if kinds.get("case error"):
        status = worse_status(status, EXIT_CASE_ERROR)
    if kinds.get("environment"):
        status = worse_status(status, EXIT_ENVIRONMENT)
    found = findings(session)
    # a baseline's own stale, fixed or expired entries fail the run without
    # --fsdpcheck-strict: they are the same kind of finding (a declaration the run no longer bears out)
    if session.strict and any(found) or baseline_findings(found):
        status = worse_status(status, EXIT_STRICT)
    return status


def finish(session, pytest_session, exitstatus):
    """The run's exit status, given the declarations' verdicts and whose
    fault each failure was (:func:`exit_status`). Drawn from pytest's own
    status, kept from the first call (pytest-html's hook asks first)."""
    import pytest

    if session.pytest_status is None:
        session.pytest_status = int(exitstatus)
    # Interrupted, stopped early (-x), or nothing ran: no entry can be judged stale or fixed.
    session.incomplete = (
        session.pytest_status == pytest.ExitCode.INTERRUPTED
        or bool(pytest_session.shouldstop or pytest_session.shouldfail)
        or not any(session.matrix.cells)
    )
    pytest_session.exitstatus = exit_status(session, session.pytest_status, pytest_session.testsfailed)
    if session.write_baseline:
        session.baseline_written = write_baseline(session)


def _areas_provided(session) -> bool:
    return any(getattr(impl, area, None) is not None for impl in session.impls.values() for area in AREAS)


class MatrixRecorder:
    """Registered as a plugin for the run: every test report goes to the matrix."""

    def __init__(self, session):
        self.session = session
        for spec in session.impls:
            session.matrix.add_impl(spec)

    def pytest_runtest_logreport(self, report):
        self.session.matrix.record(report)
        plan = self.session.plan
        if plan is not None and plan.budget_s is not None:
            if plan.deadline is None:
                # the xdist controller runs no test: its clock is its workers' first test's
                from ..core.budget import read_start

                started = read_start(plan.clock_path) or getattr(report, "start", None)
                if started:
                    plan.deadline = started + plan.budget_s
            if report.skipped and BUDGET_SKIP in str(report.longrepr):
                self.session.budget_skipped.append(report.nodeid)
