"""The report as a page a person looks at: HTML drawn from the JSON report's
own content (``report.schema.json``), so the page, pytest-html's sections and
the JSON file can never tell different stories.

- :func:`run_page`: one run as a self-contained page (``--fsdpcheck-html``):
  no script, no external resource, every value escaped.
- :func:`run_sections`: the same sections as fragments for pytest-html's
  summary (``--html``), styled by :data:`STYLE`.
- :func:`grid_page`: the history tool's invariant x release grid.

Plain functions of dicts; no pytest, no torch.
"""

from __future__ import annotations

import re
from html import escape

from ..core.catalog import INVARIANTS, sort_key

#: a cell's outcome (as the JSON report writes it) -> (text shown, CSS class)
CELL = {
    "fail": ("FAIL", "v-fail"),
    "error": ("ERROR", "v-error"),
    "unexpected pass": ("XPASS", "v-xpass"),
    "divergence": ("declared", "v-declared"),
    "known": ("known", "v-known"),
    "pass": ("pass", "v-pass"),
    "skipped": ("skipped", "v-skipped"),
    "not provided": ("n/p", "v-np"),
}
#: failing tests shown per cell (all are in the JSON report)
FAILURES_SHOWN = 5
#: outcomes a row with nothing else is "clean" for (hidden by "problems only")
CLEAN = {"pass", "not provided", "skipped", None}

STYLE = """
.fsdpcheck { font-family: system-ui, sans-serif; font-size: 14px; color: #1b1b1b; }
.fsdpcheck h1 { font-size: 22px; } .fsdpcheck h2 { font-size: 18px; margin-top: 28px; }
.fsdpcheck table { border-collapse: collapse; margin: 8px 0; }
.fsdpcheck th, .fsdpcheck td { border: 1px solid #c8c8c8; padding: 3px 8px; text-align: left; vertical-align: top; }
.fsdpcheck th { background: #f0f0f0; }
.fsdpcheck td.cell { text-align: center; font-weight: 600; white-space: nowrap; }
.fsdpcheck td.statement { color: #555; font-size: 12px; }
.fsdpcheck .v-fail { background: #f8c9c4; color: #8a1208; }
.fsdpcheck .v-error { background: #fbd9a8; color: #7a3d00; }
.fsdpcheck .v-xpass { background: #e3ccf5; color: #4b1677; }
.fsdpcheck .v-declared { background: #cfe0f7; color: #123f7a; }
.fsdpcheck .v-known { background: #fbeaa5; color: #5e4a00; }
.fsdpcheck .v-pass { background: #cdeccd; color: #145214; }
.fsdpcheck .v-skipped, .fsdpcheck .v-np { background: #ececec; color: #555; }
.fsdpcheck td.cell a { color: inherit; }
.fsdpcheck pre { background: #f6f6f6; border: 1px solid #ddd; padding: 6px; font-size: 12px;
  white-space: pre-wrap; overflow-wrap: anywhere; }
.fsdpcheck section.finding:target { outline: 3px solid #d9822b; }
.fsdpcheck dl.header { display: grid; grid-template-columns: max-content auto; gap: 2px 12px; }
.fsdpcheck dl.header dt { font-weight: 600; } .fsdpcheck dl.header dd { margin: 0; }
.fsdpcheck #fsdpcheck-problems-only:checked ~ table tr.clean { display: none; }
.fsdpcheck .incomplete { color: #8a1208; font-weight: 600; }
"""


def _e(value) -> str:
    return escape(str(value), quote=True)


def _page(title: str, body: list[str]) -> str:
    return "\n".join([
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{_e(title)}</title>",
        f"<style>body {{ margin: 16px 24px; }}{STYLE}</style>",
        "</head><body>",
        '<div class="fsdpcheck">',
        f"<h1>{_e(title)}</h1>",
        *body,
        "</div></body></html>",
        "",
    ])


def _slug(text: str) -> str:
    """``text`` fit for a fragment id and its link, as is and unescaped."""
    return re.sub(r"[^A-Za-z0-9_.-]", "_", str(text))


class _Anchors:
    """Fragment ids for cells: implementation specs hold ':' and '.' and
    may hold anything else, so each is numbered by its column."""

    def __init__(self, impls: list[str]):
        self.column = {impl: n for n, impl in enumerate(impls)}

    def cell(self, kind: str, inv: str, impl: str) -> str:
        return f"{kind}-{_slug(inv)}-{self.column.get(impl, 'x')}"

    def bug(self, impl: str, bug_id: str) -> str:
        return f"known-{self.column.get(impl, 'x')}-{_slug(bug_id)}"


# --- one run --------------------------------------------------------------------------


def run_page(report: dict) -> str:
    """A run's report as one self-contained page."""
    return _page("pytest-fsdpcheck report", run_sections(report))


def run_sections(report: dict) -> list[str]:
    impls = columns(report)
    anchors = _Anchors(impls)
    known_numbers = _known_numbers(report)
    return [
        '<div class="fsdpcheck">',
        *_header(report),
        *_matrix(report, impls, anchors, known_numbers),
        *_model_rows(report, impls, anchors, known_numbers),
        *_failures(report, impls, anchors),
        *_known_bugs(report, anchors, known_numbers),
        *_not_provided(report, impls, anchors),
        *_models(report),
        *_declarations(report),
        f'<p class="statement">JSON report schema version {_e(report.get("schema_version", "?"))}</p>',
        "</div>",
    ]


def columns(report: dict) -> list[str]:
    """The matrix's implementations in the run's order (the JSON file sorts its keys)."""
    matrix = report.get("matrix", {})
    named = [impl for impl in report.get("header", {}).get("implementations", []) if impl in matrix]
    return named + [impl for impl in matrix if impl not in named]


def _header(report: dict) -> list[str]:
    header = report.get("header", {})
    seed = header.get("seed")
    rows = [
        ("torch", header.get("torch")),
        ("implementations", ", ".join(header.get("implementations", []))),
        ("devices", ", ".join(header.get("devices", []))),
        ("profile", header.get("profile")),
        ("seed", "derandomized" if seed is None else seed),
        ("divergence files", ", ".join(header.get("divergence_files", [])) or "none"),
    ]
    out = ['<dl class="header">', *(f"<dt>{_e(k)}</dt><dd>{_e(v)}</dd>" for k, v in rows), "</dl>"]
    if not header.get("complete", False):
        out.append('<p class="incomplete">This run did not complete (interrupted, stopped early, or nothing ran): '
                   "stale entries and unreproduced bugs were not judged.</p>")
    return out


def _known_numbers(report: dict) -> dict[tuple[str, str], int]:
    """(impl, bug id) -> the [n] its cells show, as the terminal's matrix numbers them."""
    return {(b["implementation"], b["id"]): b["number"] for b in report.get("known_bugs", []) if b.get("number")}


def _matrix(report: dict, impls: list[str], anchors: _Anchors, known_numbers: dict) -> list[str]:
    matrix = report.get("matrix", {})
    invariants = sorted({inv for cells in matrix.values() for inv in cells}, key=sort_key)
    out = ['<h2 id="matrix">Invariant &times; implementation</h2>']
    if not invariants:
        return [*out, "<p>No conformance tests ran.</p>"]
    out += ['<input type="checkbox" id="fsdpcheck-problems-only">',
            '<label for="fsdpcheck-problems-only">only rows with a FAIL, ERROR, XPASS, known or declared cell</label>',
            '<table class="matrix"><thead><tr><th>invariant</th>',
            *(f"<th>{_e(impl)}</th>" for impl in impls), "<th>statement</th></tr></thead><tbody>"]
    for inv in invariants:
        cells = [matrix[impl].get(inv, {}) for impl in impls]
        clean = all(c.get("outcome") in CLEAN for c in cells)
        row = [f'<tr class="{"clean" if clean else "problem"}" id="row-{_slug(inv)}"><th>{_e(inv)}</th>']
        for impl, cell in zip(impls, cells, strict=True):
            row.append(_cell(inv, impl, cell, anchors, known_numbers))
        row.append(f'<td class="statement">{_e(INVARIANTS.get(inv, ""))}</td></tr>')
        out.append("".join(row))
    out.append("</tbody></table>")
    return out


def _cell(inv: str, impl: str, cell: dict, anchors: _Anchors, known_numbers: dict) -> str:
    outcome = cell.get("outcome")
    if outcome is None:
        return '<td class="cell">-</td>'
    text, css = CELL.get(outcome, (outcome, ""))
    title = f"{cell.get('tests', 0)} test(s)"
    if outcome in ("fail", "error"):
        kind = "fail" if outcome == "fail" else "error"
        inner = f'<a href="#{anchors.cell(kind, inv, impl)}">{_e(text)}</a>'
    elif outcome in ("not provided", "skipped"):
        title = "; ".join(cell.get("reasons", [])) or title
        inner = f'<a href="#{anchors.cell("np", inv, impl)}">{_e(text)}</a>'
    elif outcome == "known":
        bugs = sorted(cell.get("known", []), key=lambda bug: known_numbers.get((impl, bug), 0))
        links = [f'<a href="#{anchors.bug(impl, bug)}">[{known_numbers.get((impl, bug), "?")}]</a>' for bug in bugs]
        inner = _e(text) + " " + ",".join(links)
    else:
        inner = _e(text)
    return f'<td class="cell {css}" title="{_e(title)}" data-outcome="{_e(outcome)}">{inner}</td>'


def _failures(report: dict, impls: list[str], anchors: _Anchors) -> list[str]:
    """Per FAIL or ERROR cell, its failing tests: the message and the
    reproducer the failure printed."""
    matrix, tests = report.get("matrix", {}), report.get("tests", {})
    out = []
    for impl in impls:
        for inv in sorted(matrix[impl], key=sort_key):
            outcome = matrix[impl][inv].get("outcome")
            if outcome not in ("fail", "error"):
                continue
            kind = "fail" if outcome == "fail" else "error"
            out.append(f'<section class="finding" id="{anchors.cell(kind, inv, impl)}">'
                       f"<h3>{_e(CELL[outcome][0])} {_e(inv)} [{_e(impl)}]</h3>")
            found = [(nodeid, t) for nodeid, t in tests.items() if _charged(t, inv, impl, outcome)]
            if not found:
                out.append("<p>No test's message was recorded for this cell (a teardown or a crashed worker): "
                           "see the run's log.</p>")
            if len(found) > FAILURES_SHOWN:
                out.append(f"<p>{len(found)} tests failed here; the first {FAILURES_SHOWN} are shown "
                           "(every one is in the JSON report's <code>tests</code>).</p>")
            for nodeid, test in found[:FAILURES_SHOWN]:
                out.append(f"<h4><code>{_e(nodeid)}</code></h4>")
                if outcome == "error":
                    out.append(f"<pre>{_e(test.get('environment', ''))}</pre>")
                    continue
                failure = test.get("failure", {})
                out.append(f'<pre class="message">{_e(failure.get("message", ""))}</pre>')
                if failure.get("reproducer"):
                    out.append('<p>Reproducer (a self-contained script):</p>'
                               f'<pre class="reproducer">{_e(failure["reproducer"])}</pre>')
            out.append("</section>")
    return ['<h2 id="failures">Failures and errors</h2>', *out] if out else []


def _charged(test: dict, inv: str, impl: str, outcome: str) -> bool:
    if test.get("implementation") != impl:
        return False
    if outcome == "error":
        return bool(test.get("environment")) and inv in test.get("invariants", [])
    failure = test.get("failure")
    return failure is not None and inv in failure.get("invariants", [])


def _known_bugs(report: dict, anchors: _Anchors, known_numbers: dict) -> list[str]:
    bugs = [b for b in report.get("known_bugs", []) if b.get("examples") or b.get("not_reproduced")]
    # in the matrix's [n] order; the unnumbered (not reproduced) after them
    bugs.sort(key=lambda b: (known_numbers.get((b["implementation"], b["id"])) is None,
                             known_numbers.get((b["implementation"], b["id"])) or 0))
    if not bugs:
        return []
    out = ['<h2 id="known">Known bugs met</h2>']
    for bug in bugs:
        number = known_numbers.get((bug["implementation"], bug["id"]))
        label = f"[{number}] " if number else ""
        out.append(f'<section class="finding" id="{anchors.bug(bug["implementation"], bug["id"])}">'
                   f"<h3>{_e(label)}{_e(bug['id'])} [{_e(bug['implementation'])}]</h3>")
        if bug.get("not_reproduced"):
            out.append(f"<p><strong>Not reproduced on this torch</strong> (declared for {_e(bug.get('affects') or 'every version')})"
                       " &mdash; fixed?</p>")
        else:
            out.append(f"<p>Explained {_e(bug['examples'])} example(s) of {_e(', '.join(bug.get('invariants', [])))}; "
                       f"affects torch {_e(bug.get('affects') or 'every version')}.</p>")
        if bug.get("reason"):
            out.append(f"<p>{_e(bug['reason'])}</p>")
        if "upstream" in bug:  # reports written before the field existed have none
            out.append(f"<p>Upstream: {_upstream_links(bug['upstream'])}</p>")
        if bug.get("reproducer_command"):
            out.append(f"<p>Reproducer: <code>{_e(bug['reproducer_command'])}</code></p>")
        if bug.get("reproducer"):
            out.append(f'<details><summary>torch-only reproducer script</summary><pre class="reproducer">'
                       f"{_e(bug['reproducer'])}</pre></details>")
        out.append("</section>")
    return out


def _upstream_links(refs: list) -> str:
    """A known bug's upstream issues/PRs as links to their GitHub pages; a
    reference not of the form owner/repo#number is shown, escaped, unlinked."""
    from ..core.bugs import UPSTREAM_REF, upstream_url

    if not refs:
        return "not reported upstream"
    return ", ".join(f'<a href="{_e(upstream_url(ref))}">{_e(ref)}</a>'
                     if isinstance(ref, str) and UPSTREAM_REF.fullmatch(ref) else _e(ref) for ref in refs)


def _not_provided(report: dict, impls: list[str], anchors: _Anchors) -> list[str]:
    matrix = report.get("matrix", {})
    rows = []
    for impl in impls:
        for inv in sorted(matrix[impl], key=sort_key):
            cell = matrix[impl][inv]
            if cell.get("outcome") not in ("not provided", "skipped"):
                continue
            reasons = cell.get("reasons") or ["(no reason recorded)"]
            rows.append(f'<tr id="{anchors.cell("np", inv, impl)}"><th>{_e(inv)}</th><td>{_e(impl)}</td>'
                        f"<td>{_e(CELL[cell['outcome']][0])}</td>"
                        f"<td>{'<br>'.join(_e(r) for r in reasons)}</td></tr>")
    if not rows:
        return []
    return ['<h2 id="not-provided">Not provided, and why</h2>',
            "<table><thead><tr><th>invariant</th><th>implementation</th><th></th><th>reason</th></tr></thead><tbody>",
            *rows, "</tbody></table>"]


def _model_rows(report: dict, impls: list[str], anchors: _Anchors, known_numbers: dict) -> list[str]:
    """Each user's model's own cells (the JSON's ``models``: spec ->
    implementation -> invariant -> cell), one row per invariant and model,
    below the matrix whose rows hold every test."""
    models = report.get("models") or {}
    rows = [(inv, spec, {impl: cells.get(impl, {}).get(inv, {}) for impl in impls})
            for spec, cells in sorted(models.items())
            for inv in sorted({inv for by_inv in cells.values() for inv in by_inv}, key=sort_key)]
    if not rows:
        return []
    out = ['<h2 id="model-matrix">Your models, each its own tests\' cells</h2>',
           "<p>The rows above hold every test, these models' included.</p>",
           '<table class="matrix models"><thead><tr><th>invariant</th><th>model</th>',
           *(f"<th>{_e(impl)}</th>" for impl in impls), "</tr></thead><tbody>"]
    for inv, spec, cells in rows:
        clean = all(c.get("outcome") in CLEAN for c in cells.values() if c)
        row = [f'<tr class="{"clean" if clean else "problem"}"><th>{_e(inv)}</th><td><code>{_e(spec)}</code></td>']
        row += [_cell(inv, impl, cells[impl], anchors, known_numbers) for impl in impls]
        out.append("".join(row) + "</tr>")
    out.append("</tbody></table>")
    return out


def _models(report: dict) -> list[str]:
    out = []
    errors = report.get("case_errors", {})
    if errors:
        out += ['<h2 id="case-errors">Case errors (yours, no implementation judged on them)</h2>', "<ul>",
                *(f"<li><code>{_e(spec)}</code>: {_e(error)}</li>" for spec, error in errors.items()), "</ul>"]
    exposure = report.get("exposure", {})
    if exposure:
        out.append('<h2 id="exposure">Known-bug exposure of your models</h2>')
        for spec, found in exposure.items():
            out.append(f"<h3><code>{_e(spec)}</code></h3>")
            if isinstance(found, dict):
                out.append(f"<p>Not worked out: {_e(found.get('error', ''))}</p>")
                continue
            if not found:
                out.append("<p>No modelled torch bug changes this model's outcome.</p>")
                continue
            out += ["<table><thead><tr><th>known bug</th><th>area</th><th>what differs</th><th>torch releases</th>"
                    "<th>how known</th></tr></thead><tbody>"]
            for e in found:
                area = e.get("area", "") + (f" ({e['form']}-form graph)" if e.get("form") else "")
                if e.get("configs"):
                    area += " in " + "; ".join(e["configs"])
                out.append(f"<tr><td>{_e(e.get('bug', ''))}</td><td>{_e(area)}</td><td>{_e(e.get('differs', ''))}</td>"
                           f"<td>{_e(e.get('releases', ''))}</td><td>{_e(e.get('how', ''))}</td></tr>")
            out.append("</tbody></table>")
    return out


def _declarations(report: dict) -> list[str]:
    items = [
        *(f"stale divergence: <code>{_e(e['match'])}</code> [{_e(e['implementation'])}] matched no test"
          for e in report.get("stale_divergences", [])),
        *(f"unexpected pass: {_e(e['invariant'])} is declared divergent for {_e(e['implementation'])} "
          "but all its checks passed" for e in report.get("unexpected_passes", [])),
        *(f"not provided although expected: {_e(e['invariant'])} [{_e(e['implementation'])}]: {_e(e['reason'])}"
          for e in report.get("not_provided_but_expected", [])),
    ]
    if not items:
        return []
    return ['<h2 id="declarations">Declarations (--fsdpcheck-strict fails on these)</h2>', "<ul>",
            *(f"<li>{i}</li>" for i in items), "</ul>"]


# --- the history tool's grid -----------------------------------------------------------


def _failure_anchor(column: int, invariant: str) -> str:
    return f"fail-{column}-{_slug(invariant)}"


def grid_page(results: list[dict]) -> str:
    """Invariant x torch release, from the history tool's per-release results
    (each a report's ``matrix.torch`` and ``known_bugs``, or an ``error``)."""
    ran = [r for r in results if "matrix" in r]
    invariants = sorted({inv for r in ran for inv in r["matrix"]}, key=sort_key)
    bugs: list[str] = []  # lettered A, B, ... in the order the text table letters them
    for inv in invariants:
        for r in ran:
            for bug in r["matrix"].get(inv, {}).get("known", []):
                if bug not in bugs:
                    bugs.append(bug)
    letter = {bug: chr(ord("A") + n) if n < 26 else f"Z{n - 25}" for n, bug in enumerate(bugs)}
    body = ['<h2 id="grid">Invariant &times; torch release</h2>']
    if not invariants:
        body.append("<p>No release ran the suite.</p>")
    else:
        body += ['<input type="checkbox" id="fsdpcheck-problems-only">',
                 '<label for="fsdpcheck-problems-only">only rows that are not pass or n/p on every release</label>',
                 '<table class="matrix grid"><thead><tr><th>invariant</th>',
                 *(f"<th>{_e(r.get('column', r['version']))}</th>" for r in ran), "<th>statement</th></tr></thead><tbody>"]
        for inv in invariants:
            cells = [r["matrix"].get(inv, {}) for r in ran]
            clean = all(c.get("outcome") in CLEAN for c in cells)
            row = [f'<tr class="{"clean" if clean else "problem"}"><th>{_e(inv)}</th>']
            for column, cell in enumerate(cells):
                outcome = cell.get("outcome")
                text, css = CELL.get(outcome, (outcome or "-", ""))
                if outcome == "known":
                    text += " " + ",".join(letter[b] for b in cell.get("known", []))
                    inner = f'<a href="#bug-{_slug(cell.get("known", [""])[0])}">{_e(text)}</a>'
                elif ran[column].get("failures", {}).get(inv):
                    inner = f'<a href="#{_failure_anchor(column, inv)}">{_e(text)}</a>'
                else:
                    inner = _e(text)
                title = "; ".join(cell.get("reasons", []))
                row.append(f'<td class="cell {css}" title="{_e(title)}">{inner}</td>')
            row.append(f'<td class="statement">{_e(INVARIANTS.get(inv, ""))}</td></tr>')
            body.append("".join(row))
        body.append("</tbody></table>")
    if bugs:
        seen: dict[str, list[str]] = {}
        upstream: dict[str, list] = {}
        for r in ran:
            for bug in r.get("known_bugs", []):
                if bug.get("examples"):
                    seen.setdefault(bug["id"], []).append(r.get("column", r["version"]))
                if "upstream" in bug:
                    upstream.setdefault(bug["id"], bug["upstream"])
        body.append('<h2 id="bugs">Known bugs</h2><ul>')
        for bug in bugs:
            versions = seen.get(bug, [])
            where = f"seen in {versions[0]} &hellip; {versions[-1]}" if versions else "seen in no release run"
            body.append(f'<li id="bug-{_slug(bug)}"><strong>{_e(letter[bug])}</strong> = {_e(bug)}: '
                        f"{where} ({len(versions)} of {len(ran)} releases run); reproducer: "
                        f"<code>python -m pytest_fsdpcheck.known show {_e(bug)}</code>"
                        + (f"; upstream: {_upstream_links(upstream[bug])}" if bug in upstream else "") + "</li>")
        body.append("</ul>")
    failed = [(column, r, inv) for column, r in enumerate(ran) for inv in invariants if r.get("failures", {}).get(inv)]
    if failed:
        body.append('<h2 id="failures">Failures</h2>')
        for column, r, inv in failed:
            body.append(f'<details id="{_failure_anchor(column, inv)}"><summary>{_e(inv)} &mdash; '
                        f'{_e(r.get("column", r["version"]))} ({len(r["failures"][inv])} failing test(s))</summary><ul>')
            for failure in r["failures"][inv]:
                reproducer = (f"<pre>{_e(failure['reproducer'])}</pre>" if failure.get("reproducer")
                              else "<p>no reproducer (the failure's own message says why)</p>")
                body.append(f"<li><code>{_e(failure['test'])}</code><pre>{_e(failure['message'])}</pre>{reproducer}</li>")
            body.append("</ul></details>")
    body.append('<h2 id="releases">Releases</h2><ul>')
    for r in results:
        if "matrix" in r and not r.get("first_of_report", True):
            continue  # a report's other implementations: its line is under its first column
        if "matrix" in r:
            body.append(f"<li>torch {_e(r.get('torch') or r['version'])}: exit {_e(r.get('exit'))}, install "
                        f"{_e(r.get('install_s'))} s, suite {_e(r.get('suite_s'))} s &mdash; {_e(r.get('summary', ''))}</li>")
        else:
            body.append(f"<li>torch {_e(r['version'])}: {_e(r.get('error', ''))}</li>")
    body.append("</ul>")
    return _page("pytest-fsdpcheck conformance history", body)
