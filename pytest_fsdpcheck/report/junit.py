"""The run's verdicts as JUnit XML, as CI systems read it: one
``<testcase>`` per invariant x implementation (``FS2-9[torch]``, classname
``fsdpcheck.<area>``), the matrix's cell (every test of it), and one per
invariant x implementation x user's model (``FS2-9[torch][pkg.mod:make]``),
that model's tests alone (the report's ``models``), so a model's FAIL shows
in its own case as well as in the invariant's; drawn from the JSON report's
content alone (no pytest, no torch), like the HTML page.

- FAIL: ``<failure>`` with the one-line reason, the command that re-runs
  the failing test and its reproducer script;
- ERROR (the distributed world's): ``<error>``;
- known: ``<skipped type="known">`` naming the bug(s) and their reproducer
  command; declared, n/p and skipped: ``<skipped>`` of that type with the
  reasons; XPASS (declared, yet every check passed): ``<failure>``;
- pass: an empty testcase.

The run's header is one property, as JSON. Hypothesis' statistics are not
carried: they are in the JSON report.
"""

from __future__ import annotations

import json
import shlex
from xml.sax.saxutils import escape, quoteattr

from ..core.catalog import area_of, sort_key

#: a FAIL's message attribute: its first line, cut
_ONE_LINE = 300


def _first_line(text: str) -> str:
    line = next((part for part in str(text).splitlines() if part.strip()), "")
    return line if len(line) <= _ONE_LINE else line[: _ONE_LINE - 1] + "…"


#: _failing_tests' model for every test of a cell, a model's or not
_ANY = object()


def _failing_tests(content: dict, inv: str, impl: str, model=_ANY) -> list[tuple[str, dict]]:
    """The tests failing ``inv`` for ``impl``; ``model``: only that model's."""
    return [(nodeid, test) for nodeid, test in sorted(content.get("tests", {}).items())
            if test.get("implementation") == impl and inv in (test.get("failure") or {}).get("invariants", ())
            and (model is _ANY or test.get("model") == model)]


def rerun_command(nodeid: str, impl: str, model: str | None = None, world_size: int | None = None) -> str:
    """The command that runs one suite test again (its id as printed): with
    the user's model it checks (``--fsdpcheck-model``; without it the
    model's tests are not collected) and the run's ``--fsdpcheck-world-size``
    where one was given."""
    options = [f"--fsdpcheck-impl {shlex.quote(impl)}"]
    if model is not None:
        options.append(f"--fsdpcheck-model {shlex.quote(model)}")
    if world_size is not None:
        options.append(f"--fsdpcheck-world-size {world_size}")
    return f'pytest --fsdpcheck {" ".join(options)} "{nodeid.rpartition("/")[2]}"'


def rerun_of(content: dict, nodeid: str, test: dict) -> str:
    """:func:`rerun_command` for one test of the report's ``tests``."""
    return rerun_command(nodeid, test["implementation"], test.get("model"),
                         content.get("header", {}).get("world_size"))


def _body(content: dict, inv: str, impl: str, cell: dict, model=_ANY) -> str:
    outcome = cell["outcome"]
    reasons = "; ".join(cell.get("reasons", []))
    if outcome == "fail":
        failing = _failing_tests(content, inv, impl, model)
        if not failing:
            return f'<failure message={quoteattr(f"{inv} failed for {impl}")} type="FAIL"/>'
        parts = []
        for nodeid, test in failing:
            failure = test["failure"]
            parts.append(f"{nodeid}\n{failure.get('message', '')}\n\nre-run: {rerun_of(content, nodeid, test)}")
            if failure.get("reproducer"):
                parts.append("reproducer:\n" + failure["reproducer"])
        message = _first_line(failing[0][1]["failure"].get("message", "")) or f"{inv} failed for {impl}"
        return f'<failure message={quoteattr(message)} type="FAIL">{escape(chr(10).join(parts))}</failure>'
    if outcome == "error":
        return f'<error message={quoteattr(f"{inv}: the distributed world failed its own self-test; nothing judged")} type="ERROR"/>'
    if outcome == "unexpected pass":
        return f'<failure message={quoteattr(f"{inv} is declared divergent for {impl}, but every check passed")} type="XPASS"/>'
    if outcome == "known":
        bugs = cell.get("known", [])
        text = ", ".join(f"{bug} (python -m pytest_fsdpcheck.known show {bug})" for bug in bugs) or "a known bug"
        return f'<skipped type="known" message={quoteattr("known bug " + text)}/>'
    if outcome in ("divergence", "not provided", "skipped"):
        kind = {"divergence": "declared", "not provided": "n/p"}.get(outcome, "skipped")
        return f'<skipped type={quoteattr(kind)} message={quoteattr(reasons or kind)}/>'
    return ""


def junit_xml(content: dict) -> str:
    """``content``: the JSON report's (``report.run_payload``)."""
    cases, counts = [], {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    # the matrix's cells, then each model's own (its tests alone), in the run's order of implementations
    tables = [(None, content.get("matrix", {})),
              *((model, content["models"][model]) for model in sorted(content.get("models", {})))]
    for model, matrix in tables:
        for impl, cells in matrix.items():
            for inv in sorted(cells, key=sort_key):
                body = _body(content, inv, impl, cells[inv], _ANY if model is None else model)
                counts["tests"] += 1
                counts["failures"] += body.startswith("<failure")
                counts["errors"] += body.startswith("<error")
                counts["skipped"] += body.startswith("<skipped")
                name = f"{inv}[{impl}]" + ("" if model is None else f"[{model}]")
                opening = f"    <testcase classname={quoteattr(f'fsdpcheck.{area_of(inv)}')} name={quoteattr(name)}"
                cases.append(f"{opening}>{body}</testcase>" if body else f"{opening}/>")
    for model, error in sorted(content.get("case_errors", {}).items()):
        counts["tests"] += 1
        counts["errors"] += 1
        cases.append(f"    <testcase classname=\"fsdpcheck.models\" name={quoteattr(model)}>"
                     f"<error message={quoteattr(_first_line(error))} type=\"case error\"/></testcase>")
    header = json.dumps(content.get("header", {}), sort_keys=True)
    attrs = " ".join(f'{key}="{value}"' for key, value in counts.items())
    return "\n".join([
        '<?xml version="1.0" encoding="utf-8"?>',
        "<testsuites>",
        f'  <testsuite name="fsdpcheck" {attrs}>',
        f'    <properties><property name="fsdpcheck" value={quoteattr(header)}/></properties>',
        *cases,
        "  </testsuite>",
        "</testsuites>",
        "",
    ])


def github_annotations(content: dict) -> list[str]:
    """One GitHub Actions ``::error`` line per FAIL cell (shown on the run's
    summary and the pull request)."""
    lines = []
    for impl, cells in content.get("matrix", {}).items():
        for inv in sorted(cells, key=sort_key):
            if cells[inv]["outcome"] != "fail":
                continue
            failing = _failing_tests(content, inv, impl)
            message = _first_line(failing[0][1]["failure"].get("message", "")) if failing else f"{inv} failed"
            rerun = f" (re-run: {rerun_of(content, *failing[0])})" if failing else ""
            # the workflow command's data ends at a newline; % and newlines are escaped as GitHub says
            data = (message + rerun).replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")
            lines.append(f"::error title=fsdpcheck {inv} [{impl}]::{data}")
    return lines
