"""Deciding whether a failing example is explained by a known bug.

A conformance check is a *body*: a function of an implementation that runs
one example and returns the violations found. :func:`conform` runs it on the
implementation under test; when it violates anything, the body is replayed
on the reference with the switches of each candidate known bug (then with
those of all candidates together, cut down to the bugs the example needs).
Only when some replay shows exactly the same violations, or raises the same
exception, is the example explained: it passes, so Hypothesis keeps
searching for an unexplained one, and the explanation is counted for the
report. Anything else fails.
"""

from __future__ import annotations

import re

from ..checks import ConformanceFailure
from ..core.catalog import area_of
from ..core.run_state import current

# The switch and the record are the running session's (run_state.RunState:
# known_bugs, explained), so an inner session in the same process judges alone.


def configure(enabled: bool) -> None:
    """``enabled=False`` (``--fsdpcheck-no-known-bugs``): nothing is explained."""
    current().known_bugs = enabled


def reset() -> None:
    current().explained.clear()


def explained() -> dict[str, dict]:
    """Per known-bug id, since :func:`reset`: the examples it explained and
    the invariants of the violations it explained there."""
    return {bug: {"examples": n, "invariants": sorted(hit)} for bug, (n, hit) in current().explained.items()}


def _installed_torch() -> str:
    # not run state: a process imports one torch, whichever session asks
    import torch

    return torch.__version__


def conform(impl, body, example: str | None = None, form: str | None = None) -> None:
    """Run ``body(impl)``; raise :class:`ConformanceFailure` unless it found
    nothing or every violation is explained by one of ``impl``'s known bugs
    (for a splitting example, ``form`` is its graph form: only bugs of that
    form's code path can explain it).

    ``body`` may also be the violations themselves, for checks that cannot
    be replayed (timings): only predicate signatures can explain those."""
    if not callable(body):
        outcome, body = list(body), None
    else:
        outcome = _outcome(body, impl)
    if not outcome:
        return
    bugs = explain(impl, outcome, body, form)
    if bugs is None:
        hint = _torchs_bug_hint(impl, outcome, body, form)
        if isinstance(outcome, Raised):
            if hint:
                outcome.exception.add_note(hint)
            raise outcome.exception
        failure = ConformanceFailure(outcome, example)
        if hint:
            failure.add_note(hint)
        raise failure
    record = current().explained
    for bug in bugs:
        n, hit = record.get(bug.id, (0, set()))
        hit.update(bug.invariants if isinstance(outcome, Raised) else {v.invariant for v in outcome})
        record[bug.id] = (n + 1, hit)


def _final_example() -> bool:
    """Whether this is the failure the user will read: Hypothesis' last run
    of the shrunk example, or a check outside Hypothesis (the hint's replays
    are not paid on every example tried while shrinking)."""
    try:
        from hypothesis.control import current_build_context

        return current_build_context().is_final
    except Exception:  # noqa: BLE001 - no Hypothesis test is running
        return True


class _DeclaringTorchBugs:
    """``impl`` as if it declared ``bugs``, torch's (for the hint only)."""

    def __init__(self, impl, bugs):
        self._impl = impl
        self.known_bugs = bugs

    def __getattr__(self, attr):
        return getattr(self._impl, attr)


def _torchs_bug_hint(impl, outcome, body, form) -> str | None:
    """For an implementation that does not declare torch's known bugs: if
    one of them explains the failure exactly, how to say so. The failure
    stays a failure: only the implementation's own declaration excuses."""
    from ..core.bugs import known_bugs_of
    from ..impls.torch_bugs import DYNAMO_RUNTIME_BUGS, FULLY_SHARD_RUNTIME_BUGS, TORCH_BUGS

    if not current().known_bugs or not _final_example() or set(map(id, known_bugs_of(impl))) >= set(map(id, TORCH_BUGS)):
        return None
    # Only torch's bugs that show in one of the violated invariants: the hint
    # names a bug as the failure's cause, and each candidate costs a replay
    # of the example on every failure the user reads (a third of a planted
    # splitting run's time when every one of torch's bugs was replayed).
    violated = None if isinstance(outcome, Raised) else {v.invariant for v in outcome}
    alike = tuple(b for b in TORCH_BUGS if violated is None or violated & set(b.invariants))
    bugs = explain(_DeclaringTorchBugs(impl, alike), outcome, body, form) if alike else None
    if not bugs:
        return None
    ids = ", ".join(bug.id for bug in bugs)
    if all(bug in FULLY_SHARD_RUNTIME_BUGS for bug in bugs):
        # in fully_shard's runtime, which the FSDP2 steps drive with any walk:
        # whose walk it is does not matter, and torch's other bugs are not its own
        return (f"fsdpcheck: this is exactly what torch's known bug {ids} gives, in fully_shard's runtime, which "
                f"the FSDP2 steps (FS2-9, FS2-12 … FS2-14) drive with this walk as with torch's; an implementation "
                f"meets it there too and can declare "
                f"it: known_bugs = FULLY_SHARD_RUNTIME_BUGS (from pytest_fsdpcheck.impls.torch_bugs) "
                f"(python -m pytest_fsdpcheck.known show {bugs[0].id})")
    if all(bug in DYNAMO_RUNTIME_BUGS for bug in bugs):
        # in Dynamo, which compiles what the implementation is judged beside
        # (a module it marked, ANN-8; DDP in SPL-16's world) as for torch's
        return (f"fsdpcheck: this is exactly what torch's known bug {ids} gives, in Dynamo, which compiles what "
                f"this implementation is judged beside (a module it marked, DDP in SPL-16's world) as it does for "
                f"torch's; an implementation meets it there too and can declare it: known_bugs = DYNAMO_RUNTIME_BUGS (from "
                f"pytest_fsdpcheck.impls.torch_bugs) (python -m pytest_fsdpcheck.known show {bugs[0].id})")
    return (f"fsdpcheck: this is exactly what torch's known bug {ids} gives; an implementation that runs "
            f"torch's own code has it too and can declare it: known_bugs = \"torch\" "
            f"(python -m pytest_fsdpcheck.known show {bugs[0].id})")


class Raised(list):
    """A body that raised, compared by exception type and the first line of
    its message: an exception is explained only by a replay that raises the
    same one. (Wrappers such as fx's interpreter add the failing node on the
    first line and tracebacks after it; those differ from run to run.)"""

    def __init__(self, exception: Exception):
        super().__init__()
        self.exception = exception
        self.signature = (type(exception).__name__, (str(exception).splitlines() or [""])[0])

    def __bool__(self):
        return True

    def __eq__(self, other):
        return isinstance(other, Raised) and other.signature == self.signature

    def __ne__(self, other):
        # list's own __ne__ would be inherited and called for ``[] != raised``:
        # an empty list, equal to this (empty) one, so a replay finding nothing
        # "explained" any exception.
        return not self == other

    __hash__ = None


def _outcome(body, impl):
    try:
        return list(body(impl))
    except Exception as exc:  # noqa: BLE001 - judged like any other outcome
        return Raised(exc)


def explain(impl, outcome, body, form: str | None = None) -> list | None:
    """The known bugs that together explain ``outcome`` (the violations, or
    what was raised), or None."""
    from ..core.bugs import active_bugs

    if not current().known_bugs:
        return None
    active = active_bugs(impl, _installed_torch(), form)
    if isinstance(outcome, Raised):
        candidates = list(active)
    else:
        # Candidates by area, not by invariant: a bug shows wherever its
        # output is checked (a miscounted bucket also breaks the plan's byte
        # total). What keeps it narrow is the signature, not this filter.
        hit = {area_of(v.invariant) for v in outcome}
        candidates = [b for b in active if hit & {area_of(i) for i in b.invariants}]
    if not candidates:
        return None  # nothing could explain it: no replay needed to say so
    bugs = _explaining(impl, outcome, body, candidates)
    if bugs and body is not None and _same(outcome, _replay(impl, body, []), ()):
        # The spec's own implementation does the same (an error of the test's
        # machinery or of torch outside the area): no bug of the area explains
        # it. Asked last: an example no candidate explains needs no answer.
        return None
    return bugs


def _explaining(impl, outcome, body, candidates) -> list | None:
    """The candidates whose switches on the reference give ``outcome``: one
    alone, else all together cut down to those the example needs."""
    switched = []
    for bug in candidates:
        if bug.predicate is not None:
            if not isinstance(outcome, Raised) and bug.predicate(list(outcome)) and _errors_explained(outcome, None, [bug]):
                return [bug]
            continue
        if body is None:
            continue
        switched.append(bug)
        if _same(outcome, _replay(impl, body, [bug]), [bug]):
            return [bug]
    if len(switched) < 2 or not _same(outcome, _replay(impl, body, switched), switched):
        return None
    # Several bugs together explain it: keep only those it needs, so the
    # report charges the example to the bugs that made it.
    needed = list(switched)
    for bug in switched:
        rest = [b for b in needed if b is not bug]
        if rest and _same(outcome, _replay(impl, body, rest), rest):
            needed = rest
    return needed


def _same(outcome, replay, bugs) -> bool:
    """``replay`` (the reference with ``bugs``' switches) departs from the
    spec exactly as ``outcome`` does: the same violations, and where one is
    about an exception, one of the same kind."""
    return replay == outcome and (isinstance(outcome, Raised) or _errors_explained(outcome, replay, bugs))


#: what differs from run to run inside an error message: addresses, then any number
_VOLATILE = ((re.compile(r"0x[0-9a-fA-F]+"), "0x?"), (re.compile(r"\d+"), "N"))


def message_pattern(text: str) -> str:
    for volatile, stand_in in _VOLATILE:
        text = volatile.sub(stand_in, text)
    return text


def _errors_explained(outcome, replay, bugs) -> bool:
    """Every violation about an exception was raised the way ``bugs`` raise:
    its type and a pattern its message matches are declared by one of them
    (``KnownBug.raises``), or, for bugs that declare none, the replay's
    violation carries the same type and message pattern. The message of a
    violation names no exception type: without this, any exception at all
    (a ``KeyError`` on a shared module) read like the bug's."""
    for k, violation in enumerate(outcome):
        error = getattr(violation, "error", ())
        if not error:
            continue
        declared = [b for b in bugs if b.raises]
        if declared:
            if not any(b.raised_this(error) for b in declared):
                return False
            continue
        theirs = getattr(replay[k], "error", ()) if replay is not None and k < len(replay) else ()
        if not theirs or theirs[0] != error[0] or message_pattern(theirs[1]) != message_pattern(error[1]):
            return False
    return True


def _replay(impl, body, bugs):
    from .reference_with import reference_with

    return _outcome(body, reference_with(bugs, like=impl))
