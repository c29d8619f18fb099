"""A suite test's verdict per invariant, read from its pytest report.

Each conformance test carries the IDs it checks and its implementation in
``user_properties`` (they survive pytest-xdist), and a failing check adds the
IDs it actually violated, so a failure is charged to exactly those cells.
Also the exit statuses a run ends with, and what each means.
"""

from __future__ import annotations

from typing import NamedTuple

PROP_INVARIANTS = "fsdpcheck_invariants"
PROP_IMPL = "fsdpcheck_impl"
PROP_VIOLATED = "fsdpcheck_violated"
#: a failing check's example signature per violated invariant (known.divergences.example_signature)
PROP_SIGNATURES = "fsdpcheck_signatures"
#: a not-provided test's reason (core.not_provided.NotProvided, or the area or form it lacks)
PROP_NOT_PROVIDED = "fsdpcheck_not_provided"
PROP_CALLS = "fsdpcheck_calls"
PROP_EXAMPLES = "fsdpcheck_examples"
PROP_DIGEST = "fsdpcheck_examples_digest"
PROP_RUN = "fsdpcheck_run"  # a property's examples, area, worker and generator features
PROP_KNOWN = "fsdpcheck_known"  # {known-bug id: examples it explained}
#: why a distributed check could not judge the implementation (the world or its control failed)
PROP_ENVIRONMENT = "fsdpcheck_environment"
#: a user's model case that is the user's mistake: {"model": spec, "error": one line}
PROP_CASE_ERROR = "fsdpcheck_case_error"
#: the user's model factory a suite test checks (its ``--fsdpcheck-model`` spec), on
#: the tests parametrized by one: the matrix keeps that model's cells apart too
PROP_MODEL = "fsdpcheck_model"
#: what ended a failed suite test's call (one of FAILURE_CAUSES; plugin.verdicts.judge_report)
PROP_CAUSE = "fsdpcheck_cause"
#: a failure's cause, as its report records it (``failure.cause``): "violation",
#: a check's ConformanceFailure (its ``invariants`` are the ones it found
#: violated); "leak", process-wide state left changed (LeakedGlobalState);
#: "timeout", a call past the per-call limit; "crash", anything else that
#: ended the test (an exception escaping the check, a failed setup, a worker
#: that died). Only a "violation" says a check judged an invariant broken:
#: the others name every invariant of the test, none of them judged.
FAILURE_CAUSES = ("violation", "leak", "timeout", "crash")
#: a suite test phase's verdict, written once where it is decided
#: (plugin.verdicts.judge_report) and read unchanged by the matrix, the JSON
#: report and the strict findings: {"cells": {invariant: a kind of RANK},
#: "reason": an n/p's or a skip's reason, or None}
PROP_VERDICT = "fsdpcheck_verdict"
#: what pytest prints for a failure a divergence entry declares (report.wasxfail);
#: for the reader only: the verdict is PROP_VERDICT's
DECLARED_PREFIX = "declared divergence: "
#: a failure's message in the report is cut to this many characters
MESSAGE_LIMIT = 4000
#: what a failure's message says where the reproducer is its own section (checks.ConformanceFailure)
REPRODUCER_BELOW = "\n(reproducer: see the 'fsdpcheck reproducer' section below)"

# Worst first: a cell shows the worst outcome among its tests. An
# environment error is below a FAIL (a real failure elsewhere in the cell
# still shows) and above everything else (nothing was judged).
RANK = ["fail", "error", "unexpected pass", "divergence", "known", "pass", "skipped", "not provided"]
SYMBOL = {
    "fail": "FAIL",
    "error": "ERROR",
    "unexpected pass": "XPASS",
    "divergence": "declared",
    "known": "known",
    "pass": "pass",
    "skipped": "skipped",
    "not provided": "n/p",
}


#: The run's exit statuses, each saying whose fault (README, "Exit statuses"):
#: pytest's own 0-6 (2 interrupted, 3 internal error, 4 usage error, 5 no
#: tests collected, 6 too many warnings) are left as pytest sets them; a run
#: that ran its tests exits with the first of these that applies, in this
#: order (a conformance FAIL outranks the rest: retrying the machine cannot
#: fix it, nor the case; a case error outranks an ERROR for the same reason).
EXIT_FAIL = 1  # pytest's TESTS_FAILED: a conformance FAIL, or any other test that failed
EXIT_CASE_ERROR = 11  # a user's model or plan the suite cannot check (--fsdpcheck-model)
EXIT_ENVIRONMENT = 10  # ERROR: the machine (a world's self-test, joining, a time-out; a missing device; a report not written)
EXIT_STRICT = 12  # --fsdpcheck-strict's findings: stale or unexpectedly passing declarations, n/p where provided
EXIT_PRECEDENCE = (EXIT_FAIL, EXIT_CASE_ERROR, EXIT_ENVIRONMENT, EXIT_STRICT, 0)
EXIT_MEANING = {
    EXIT_FAIL: "conformance FAIL (the implementation's code: page its owner)",
    EXIT_CASE_ERROR: "case error (your model or plan cannot be checked: fix it)",
    EXIT_ENVIRONMENT: "environment ERROR (the machine could not judge: retry it, or another)",
    EXIT_STRICT: "strict findings (your declarations are stale or expected what did not happen: update them)",
}
#: whose fault a failed test report is: the user's case (a model or plan
#: that cannot be checked), the environment (a world that could not judge:
#: the self-test, joining, a time-out), or a conformance failure (anything
#: else that failed, a test outside the suite included)
FAILURE_KINDS = ("fail", "case error", "environment")


def failure_kind(props: dict) -> str:
    if props.get(PROP_CASE_ERROR) is not None:
        return "case error"
    if props.get(PROP_ENVIRONMENT):
        return "environment"
    return "fail"


def model_id(spec: str) -> str:
    """A user's model ``pkg.models:make`` as its test ids name it."""
    # "pkg.models.make" reads better in a test id without the colon
    return spec.replace(":", ".")


def model_test_suffixes(models) -> dict[str, str]:
    """How a test id checking a user's model ends (``[pkg.mod.make]``,
    ``-pkg.mod.make]``) -> the model's spec."""
    return {f"{sep}{model_id(spec)}]": spec for spec in models for sep in ("[", "-")}


def _props(report) -> dict:
    return {k: v for k, v in getattr(report, "user_properties", ())}


def skip_reason(report, props: dict) -> str:
    """Why a test was skipped: a not-provided check's reason as it raised it
    (:data:`PROP_NOT_PROVIDED`), else what the skip said, without pytest's
    "Skipped: "."""
    not_provided = props.get(PROP_NOT_PROVIDED)
    if isinstance(not_provided, str):
        return not_provided
    longrepr = report.longrepr
    text = longrepr[2] if isinstance(longrepr, tuple) and len(longrepr) == 3 else str(longrepr or "")
    return text.removeprefix("Skipped: ").strip()


def failure_of(report, invariants: list[str], cause: str = "crash") -> dict:
    """A failing test's invariants, its message, its reproducer (the
    section the plugin prints it in), as the reports show them, and its
    cause (:data:`FAILURE_CAUSES`)."""
    crash = getattr(report.longrepr, "reprcrash", None)
    message = crash.message if crash is not None else str(report.longrepr or "")
    reproducer = next((text for title, text in report.sections if title == "fsdpcheck reproducer"), None)
    if reproducer is not None:
        # the reproducer is a field of its own, and rebuilds the example Hypothesis prints
        message = message.split("\nFailing test case:", 1)[0].replace(REPRODUCER_BELOW, "").rstrip()
    if len(message) > MESSAGE_LIMIT:
        message = message[:MESSAGE_LIMIT] + f"\n... ({len(message) - MESSAGE_LIMIT} more characters in the test's log)"
    return {"invariants": sorted(invariants), "message": message, "reproducer": reproducer, "cause": cause}


class Verdict(NamedTuple):
    """One test's verdict on one invariant: its kind (an outcome of
    :data:`RANK`) and, for an n/p or a skip, why."""

    kind: str
    reason: str | None = None


def decide(report, invariants: list[str], props: dict, excused: str | None = None) -> dict[str, Verdict]:
    """The verdict per invariant of one setup/call report, from its outcome
    and the properties the plugin wrote: its tagged invariants, and any other
    a failing check found violated. ``excused`` is "known" or "divergence"
    where the plugin turned the failure into one (judge_report knows which:
    it made the decision)."""
    violated = props.get(PROP_VIOLATED)
    if excused is not None:
        hit = violated or invariants
        return {inv: Verdict(excused if inv in hit else "pass") for inv in invariants}
    if report.skipped:
        # Not provided: the area or form is missing (collection), or the check
        # raised NotProvided (the plugin put its reason in the report's properties).
        kind = "not provided" if props.get(PROP_NOT_PROVIDED) else "skipped"
        return dict.fromkeys(invariants, Verdict(kind, skip_reason(report, props)))
    if report.failed:
        if props.get(PROP_ENVIRONMENT):
            return dict.fromkeys(invariants, Verdict("error"))
        if violated:
            # a check may find a violation of an invariant its test is not
            # tagged with: that cell fails too, or the failure would be
            # hidden behind the tagged ones' "pass"
            return {**{inv: Verdict("pass") for inv in invariants}, **dict.fromkeys(violated, Verdict("fail"))}
        return dict.fromkeys(invariants, Verdict("fail"))
    return dict.fromkeys(invariants, Verdict("pass"))


def verdict_record(verdicts: dict[str, Verdict]) -> dict:
    """:data:`PROP_VERDICT`'s value for ``verdicts`` (JSON, so it survives
    pytest-xdist)."""
    reason = next((v.reason for v in verdicts.values() if v.reason is not None), None)
    return {"cells": {inv: v.kind for inv, v in verdicts.items()}, "reason": reason}


def classify(report, invariants: list[str], props: dict) -> dict[str, Verdict]:
    """The verdict per invariant of one setup/call report, as the plugin
    recorded it (:data:`PROP_VERDICT`), unchanged. A report without one was
    never judged by the plugin (xdist's report for a worker that died in
    the test): its outcome is all there is."""
    record = props.get(PROP_VERDICT)
    if record is None:
        return decide(report, invariants, props)
    return {inv: Verdict(kind, record["reason"] if kind in ("not provided", "skipped") else None)
            for inv, kind in record["cells"].items()}
