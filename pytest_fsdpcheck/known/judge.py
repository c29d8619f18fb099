"""Deciding whether a failing example is explained by a known bug.

A conformance check is a *body*: a function of an implementation that runs
one example and returns the violations found. :func:`conform` runs it on the
implementation under test; when it violates anything, the body is replayed
on the reference with the switches of each candidate known bug (then with
those of all candidates together, for examples that meet two bugs at once).
Only when some replay shows exactly the same violations is the example
explained: it passes, so Hypothesis keeps searching for an unexplained one,
and the explanation is counted for the report. Anything else fails.
"""

from __future__ import annotations

from collections import Counter

from ..catalog import area_of
from ..checks import ConformanceFailure

_explained: Counter = Counter()
_explained_invariants: dict[str, set] = {}
_torch_version: str | None = None
_enabled = True


def configure(enabled: bool) -> None:
    """``enabled=False`` (``--fsdpcheck-no-known-bugs``): nothing is explained."""
    global _enabled
    _enabled = enabled


def reset() -> None:
    _explained.clear()
    _explained_invariants.clear()


def explained() -> dict[str, dict]:
    """Per known-bug id, since :func:`reset`: the examples it explained and
    the invariants of the violations it explained there."""
    return {
        bug: {"examples": n, "invariants": sorted(_explained_invariants[bug])} for bug, n in _explained.items()
    }


def _installed_torch() -> str:
    global _torch_version
    if _torch_version is None:
        import torch

        _torch_version = torch.__version__
    return _torch_version


def conform(impl, body, example: str | None = None) -> None:
    """Run ``body(impl)``; raise :class:`ConformanceFailure` unless it found
    nothing or every violation is explained by one of ``impl``'s known bugs.

    ``body`` may also be the violations themselves, for checks that cannot
    be replayed (timings): only predicate signatures can explain those."""
    if callable(body):
        violations = body(impl)
    else:
        violations, body = list(body), None
    if not violations:
        return
    bug_ids = explain(impl, violations, body)
    if bug_ids is None:
        raise ConformanceFailure(violations, example)
    _explained.update(bug_ids)
    for bug in bug_ids:
        _explained_invariants.setdefault(bug, set()).update(v.invariant for v in violations)


def explain(impl, violations, body) -> list[str] | None:
    """The ids of the known bugs that together explain ``violations``, or None."""
    from .bugs import active_bugs

    if not _enabled:
        return None
    # Candidates by area, not by invariant: a bug shows wherever its output
    # is checked (a miscounted bucket also breaks the plan's byte total).
    # What keeps it narrow is the signature, not this filter.
    hit = {area_of(v.invariant) for v in violations}
    candidates = [b for b in active_bugs(impl, _installed_torch()) if hit & {area_of(i) for i in b.invariants}]
    switched = []
    for bug in candidates:
        if bug.predicate is not None:
            if bug.predicate(violations):
                return [bug.id]
            continue
        if body is None:
            continue
        switched.append(bug)
        if _replay(impl, body, [bug]) == violations:
            return [bug.id]
    if len(switched) > 1 and _replay(impl, body, switched) == violations:
        return [b.id for b in switched]
    return None


def _replay(impl, body, bugs):
    from .reference_with import reference_with

    try:
        return body(reference_with(bugs, like=impl))
    except Exception:  # noqa: BLE001 - a replay that breaks explains nothing
        return None
