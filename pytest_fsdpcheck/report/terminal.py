"""What a run prints: its header lines, the matrix and findings at its end,
and the same sections for pytest-html's page.
"""

from __future__ import annotations

import contextlib
import os

from .content import (
    _header_json,
    _html_page,
    _junit,
    json_text,
    payload,
    render_exploration,
    run_payload,
    write_atomically,
)
from .matrix import Matrix

# --- what the run prints and writes -------------------------------------------------


def header_lines(session) -> list[str]:
    from ..contract import provided_areas
    from ..core.bugs import active_bugs

    if session.awaiting_workers():
        return _controller_header(session)
    impl_lines = [
        f"  {spec}: {', '.join(provided_areas(obj)) or 'no areas'}" for spec, obj in session.impls.items()
    ]
    known = [
        f"  {spec}: {', '.join(b.id for b in active_bugs(obj, session.torch_version))}"
        for spec, obj in session.impls.items()
        if active_bugs(obj, session.torch_version)
    ]
    return [
        *_common_header(session),
        *(
            ["fsdpcheck: known bugs modelled (python -m pytest_fsdpcheck.known):", *known]
            if known and session.known_bugs
            else ["fsdpcheck: known bugs: " + ("none for these implementations" if session.known_bugs else "off")]
        ),
        "fsdpcheck: implementations (areas provided):",
        *impl_lines,
    ]


def _common_header(session) -> list[str]:
    seed = (
        "derandomized (ci profile)"
        if session.seed is None
        else f"{session.seed} (replay with --fsdpcheck-seed={session.seed})"
    )
    devices = ", ".join(session.devices) or "each xdist worker's (auto)"
    return [
        f"fsdpcheck: torch {session.torch_version}; devices: {devices}; profile: {session.profile}; seed: {seed}",
        *_plan_header(session),
        *_world_size_header(session),
        "fsdpcheck: divergence files: " + (", ".join(session.divergence_files) or "none"),
        *(["fsdpcheck: your models: " + ", ".join(session.models)] if session.models else []),
    ]


def _world_size_header(session) -> list[str]:
    """One line where --fsdpcheck-world-size asks for more ranks than are
    started on this host (the simulated tier takes the whole size)."""
    from ..core.ranks import spawned_ranks_note

    note = spawned_ranks_note(getattr(session, "world_size", None))
    return [f"fsdpcheck: {note}"] if note else []


def _controller_header(session) -> list[str]:
    return [
        *_common_header(session),
        "fsdpcheck: implementations: " + ", ".join(session.impls)
        + " (each xdist worker loads them: their areas and known bugs are listed with the matrix)",
    ]


def _plan_header(session) -> list[str]:
    plan = session.plan
    if plan is None:
        return []
    first = plan.stream(0) + 1
    streams = f"stream {first}" if plan.workers == 1 else f"streams {first}-{first + plan.workers - 1}"
    parts = [f"machine {plan.machine + 1}/{plan.machines} x {plan.workers} worker(s): {streams} of {plan.streams}"]
    if plan.budget_s is not None:
        parts.append(f"fuzz time {plan.budget_s:g} s, every property in rounds until its share is spent")
    parts.append(f"example database: {session.database}")
    return ["fsdpcheck: " + "; ".join(parts)]


def start_report(session) -> None:
    """A report that says "incomplete" from the start, replaced at the end: a
    run that dies before its summary (a process exit the suite could not
    intercept) leaves that, never a previous run's green report (or page)."""
    if not session.report_path and not session.html_path and not session.junit_path:
        return
    content = payload({**_header_json(session), "complete": False}, Matrix(), {})
    for path, text in ((session.report_path, lambda: json_text(content)),
                       (session.html_path, lambda: _html_page(content)),
                       (session.junit_path, lambda: _junit(content))):
        if path:
            with contextlib.suppress(OSError):  # the end of the run reports a failing write
                write_atomically(path, text())


def terminal_summary(tr, session, findings, exposures=None) -> bool:
    """``findings``: (stale entries, unexpected passes, known bugs not reproduced);
    ``exposures``: per user model, its known-bug exposure (or why none was
    worked out). False when the JSON or HTML report was asked for and could not be written."""
    stale, unexpected, unreproduced, unprovided, expired, fixed = findings
    exposures = exposures or {}
    tr.section("fsdpcheck conformance matrix")
    if session.deferred and not session.awaiting_workers():
        # the header the workers' loading completes (the controller's was partial)
        for line in header_lines(session):
            tr.write_line(line)
    for line in session.matrix.render():
        tr.write_line(line)
    for line in _known_lines(session, unreproduced):
        tr.write_line(line)
    for error in session.matrix.case_errors.values():
        tr.write_line(f"case error (yours, no implementation judged on it): {error}", red=True)
    for entry in stale:
        tr.write_line(f"stale divergence ({entry.source}): {entry.match} [{entry.implementation}] matched no test")
    for inv, impl in unexpected:
        tr.write_line(f"unexpected pass: {inv} is declared divergent for {impl} but all its checks passed")
    for entry in expired:
        tr.write_line(f"expired divergence: {entry.describe()} was expected to end in torch {entry.until}, "
                      f"this is {session.torch_version}: fixed? drop your workaround and the entry")
    for entry in fixed:
        tr.write_line(f"no longer fails: {entry.describe()} excused no failure, its test passed: delete the entry")
    from ..known.divergences import held_by_old_examples

    loose = held_by_old_examples(session.divergences, session.matrix.declared_tests)
    if loose:
        tr.write_line(f"note: {len(loose)} {'entry' if len(loose) == 1 else 'entries'} ({', '.join(e.source for e in loose[:3])}"
                      f"{', ...' if len(loose) > 3 else ''}) held a failure by an example of the old form, every number read"
                      " as #, so another count or a larger difference passed too: write the baseline again"
                      " (--fsdpcheck-write-baseline) to hold only the failure recorded")
    if session.baseline_written:
        tr.write_line(session.baseline_written)
    for inv, reason in unprovided:
        tr.write_line(f"not provided although expected: {inv} [torch] was n/p in every check, but {reason}"
                      " (--fsdpcheck-strict fails on this)")
    if exposures:
        from ..cases.exposure import render

        tr.section("fsdpcheck known-bug exposure of your models")
        for spec, found in exposures.items():
            lines = render(found, spec) if isinstance(found, list) else [f"known-bug exposure of {spec}: not worked out ({found})"]
            for line in lines:
                tr.write_line(line)
    if session.budget_skipped:
        tr.write_line(f"fsdpcheck: {len(session.budget_skipped)} suite tests not run within the fuzz time "
                      f"({session.plan.budget_s:g} s, counted from the first test): skipped; a larger "
                      "--fsdpcheck-fuzz-time runs them", yellow=True)
    content = run_payload(session, findings, exposures)
    explored = content["exploration"]
    if session.profile != "ci" and explored["examples"]:
        tr.section("fsdpcheck exploration")
        for line in render_exploration(explored):
            tr.write_line(line)
    if os.environ.get("GITHUB_ACTIONS") == "true":
        from .junit import github_annotations

        for line in github_annotations(content):
            tr.write_line(line)
    written = True
    for what, path, text in (("JSON report", session.report_path, lambda: json_text(content)),
                             ("HTML report", session.html_path, lambda: _html_page(content)),
                             ("JUnit report", session.junit_path, lambda: _junit(content))):
        if not path:
            continue
        try:
            write_atomically(path, text())
        except OSError as exc:
            tr.write_line(f"fsdpcheck: ERROR: cannot write the {what} {path}: {exc.strerror or exc}"
                          " (the run fails; the previous report, if any, is left as it was)", red=True)
            written = False
        else:
            tr.write_line(f"fsdpcheck: {what} written to {path}")
    return written


def html_sections(session, findings, exposures) -> list[str]:
    """The suite's sections as HTML fragments, for pytest-html's summary."""
    from .html import STYLE, run_sections

    return [f"<style>{STYLE}</style>", '<h2 class="fsdpcheck" id="fsdpcheck">pytest-fsdpcheck</h2>',
            *run_sections(run_payload(session, findings, exposures))]


def _known_lines(session, unreproduced) -> list[str]:
    lines = []
    for number, (spec, bug_id) in enumerate(session.matrix.known_order, 1):
        n = session.matrix.known_examples[(spec, bug_id)]
        lines.append(f"[{number}] known bug {bug_id} [{spec}]: explained {n} examples; "
                     f"reproducer: python -m pytest_fsdpcheck.known show {bug_id}")
    for spec, bug in unreproduced:
        lines.append(f"known bug {bug.id} [{spec}]: not reproduced on torch {session.torch_version} "
                     f"(declared for {bug.affects or 'every version'}, seen {bug.seen_range}) — fixed?")
    return lines
