"""Pages generated from the package, so nothing there is written twice.

- ``{fsdpcheck-options}``: the option table of ``pytest_fsdpcheck/plugin/options.py``
  (the one ``pytest --help`` and the ini keys are made from);
- ``{fsdpcheck-known-bugs}``: the known torch bugs of
  ``pytest_fsdpcheck/impls/torch_bugs.py`` with their releases, reasons,
  signatures, upstream issues/PRs (and which are not reported upstream) and
  reproducer commands;
- ``{fsdpcheck-invariants} PREFIX``: one family of the invariant catalog,
  ``catalog.py``'s one-line statement beside DESIGN.md's full one;
- ``{fsdpcheck-model-checks}``: the checks on users' models
  (``cases/checks.py``), by suite test and check name, with their invariants.

Each directive writes Markdown that MyST parses in place. A catalog ID that
DESIGN.md does not state (or the reverse), or a family no page shows, is a
warning, so the build (warnings as errors) fails when they drift apart.
None of this imports torch.
"""

from __future__ import annotations

import re
from pathlib import Path

from docutils import nodes
from docutils.statemachine import StringList
from sphinx.util import logging
from sphinx.util.docutils import SphinxDirective

REPO = Path(__file__).resolve().parents[2]
DESIGN = REPO / "DESIGN.md"
LOG = logging.getLogger(__name__)


#: a command-line flag in prose (``--html=PATH``): set as code, so Sphinx's
#: smart quotes do not turn its "--" into a dash that breaks it when copied
_FLAG = re.compile(r"(?<![`\w-])(--[a-z][\w-]*(?:=[\w./-]+)?)")


def _cell(text: str) -> str:
    return _FLAG.sub(r"`\1`", " ".join(str(text).split())).replace("|", "\\|")


def _code(text: str) -> str:
    return f"`` {text} ``" if "`" in text else f"`{text}`"


class _MarkdownDirective(SphinxDirective):
    """A directive whose output is Markdown, parsed where it stands."""

    def markdown(self) -> list[str]:
        raise NotImplementedError

    def run(self) -> list[nodes.Node]:
        container = nodes.container()
        self.state.nested_parse(StringList(self.markdown(), source=self.env.docname), self.content_offset, container)
        return container.children


class OptionsTable(_MarkdownDirective):
    def markdown(self) -> list[str]:
        from pytest_fsdpcheck.plugin.options import OPTIONS

        self.env.note_dependency(str(REPO / "pytest_fsdpcheck" / "options.py"))
        lines = ["| option | ini key | meaning |", "| --- | --- | --- |"]
        for option in OPTIONS:
            kwargs = dict(option.kwargs)
            flag = option.flag
            if "choices" in kwargs:
                flag += " {" + ",".join(kwargs["choices"]) + "}"
            elif kwargs.get("action") not in ("store_true",):
                flag += " " + kwargs.get("metavar", option.dest.upper())
            if kwargs.get("action") == "append":
                flag += " (repeatable)"
            if option.ini_type is None:
                ini = "—"
            elif option.ini_type == "bool":
                ini = _code(f"{option.dest} = true")
            elif option.ini_type == "linelist":
                ini = f"{_code(option.dest)} (one per line)"
            else:
                ini = _code(option.dest)
            lines.append(f"| {_code(flag)} | {ini} | {_cell(option.help)} |")
        return lines


class KnownBugs(_MarkdownDirective):
    def markdown(self) -> list[str]:
        from pytest_fsdpcheck.impls.torch_bugs import TORCH_BUGS

        self.env.note_dependency(str(REPO / "pytest_fsdpcheck" / "known" / "torch_bugs.py"))
        lines = ["| id | invariants | torch releases (measured) | upstream | reproducer |",
                 "| --- | --- | --- | --- | --- |"]
        for bug in TORCH_BUGS:
            releases = f"{bug.affects or 'every release'} ({bug.seen_range})"
            command = f"python -m pytest_fsdpcheck.known show {bug.id}"
            lines.append(f"| {_code(bug.id)} | {', '.join(bug.invariants)} | {_cell(releases)} | {_upstream(bug)} "
                         f"| {_code(command)} |")
        lines.append("")
        for bug in TORCH_BUGS:
            if bug.reference:
                signature = "the reference with " + "; ".join(
                    _code(f"{area}: " + ", ".join(f"{k}={v!r}" for k, v in switches.items()))
                    for area, switches in bug.reference.items()
                )
            else:
                signature = "a predicate over the violations"
            if bug.forms:
                signature += f" (graph forms: {', '.join(bug.forms)})"
            lines += [
                f"- {_code(bug.id)} ({', '.join(bug.invariants)}; torch {bug.affects or 'every release'}): "
                f"{_cell(bug.reason)} *Signature:* {signature}. *Upstream:* {_upstream(bug)}.",
            ]
        unreported = [bug for bug in TORCH_BUGS if not bug.upstream]
        if unreported:
            lines += ["", "**Not reported upstream**: no issue or pull request found in PyTorch's tracker reports "
                      "these (the suite found them); each `show` command above prints the reason and a torch-only "
                      "script to file one with: " + ", ".join(_code(bug.id) for bug in unreported) + "."]
        return lines


def _upstream(bug) -> str:
    """A known bug's upstream issues/PRs as links (GitHub redirects a PR's
    issues/ address to the PR), or that it is not reported upstream."""
    from pytest_fsdpcheck.core.bugs import upstream_url

    return ", ".join(f"[{ref}]({upstream_url(ref)})" for ref in bug.upstream) or "not reported upstream"


class ModelChecks(_MarkdownDirective):
    """The checks every user's model goes through (``cases/checks.py``'s
    CHECKS), each as the suite's test and as ``parametrize_with_checks``
    names it; a check without its test in ``conformance/test_models.py`` is a
    warning."""

    def markdown(self) -> list[str]:
        from pytest_fsdpcheck.cases.checks import CHECKS

        suite = REPO / "conformance" / "test_models.py"
        self.env.note_dependency(str(suite))
        self.env.note_dependency(str(REPO / "pytest_fsdpcheck" / "cases" / "checks.py"))
        source = suite.read_text(encoding="utf-8") if suite.is_file() else ""
        tests = set(re.findall(r"^def (test_model_\w+)\(", source, re.M))
        lines = ["| suite test | `parametrize_with_checks` check | invariants |", "| --- | --- | --- |"]
        for name, (_fn, invariants) in CHECKS.items():
            test = "test_model_" + name.removeprefix("check_")
            if test not in tests:
                LOG.warning(f"fsdpcheck-model-checks: {suite.name} has no {test} for {name}", location=self.get_location())
            lines.append(f"| {_code(test)} | {_code(name)} | {', '.join(invariants) or 'the case itself'} |")
        return lines


def design_statements() -> dict[str, str]:
    """DESIGN.md's statement of each invariant: its ``- ID text`` lines."""
    found = {}
    for line in DESIGN.read_text(encoding="utf-8").splitlines():
        match = re.fullmatch(r"- ([A-Z0-9]+-\d+) (.+)", line)
        if match:
            found[match[1]] = match[2]
    return found


class Invariants(_MarkdownDirective):
    required_arguments = 1

    def markdown(self) -> list[str]:
        from pytest_fsdpcheck.core.catalog import INVARIANTS
        from pytest_fsdpcheck.impls.torch_bugs import TORCH_BUGS

        self.env.note_dependency(str(DESIGN))
        self.env.note_dependency(str(REPO / "pytest_fsdpcheck" / "catalog.py"))
        prefix = self.arguments[0]
        shown = getattr(self.env, "fsdpcheck_families", set())
        shown.add(prefix)
        self.env.fsdpcheck_families = shown
        design = design_statements()
        ids = [i for i in INVARIANTS if i.split("-")[0] == prefix]
        if not ids:
            LOG.warning(f"fsdpcheck-invariants: no invariant of family {prefix!r} in catalog.py", location=self.get_location())
        stray = [i for i in design if i.split("-")[0] == prefix and i not in INVARIANTS]
        if stray:
            LOG.warning(f"DESIGN.md states {', '.join(stray)}, which catalog.py lacks", location=self.get_location())
        lines = ["| ID | in short (catalog.py) | stated (DESIGN.md) | known torch bugs |", "| --- | --- | --- | --- |"]
        for invariant in ids:
            if invariant not in design:
                LOG.warning(f"DESIGN.md does not state {invariant}", location=self.get_location())
            bugs = ", ".join(_code(b.id) for b in TORCH_BUGS if invariant in b.invariants)
            lines.append(f"| {invariant} | {_cell(INVARIANTS[invariant])} | {_cell(design.get(invariant, ''))} | {bugs} |")
        return lines


def _every_family_shown(app, env) -> None:
    from pytest_fsdpcheck.core.catalog import INVARIANTS

    families = {i.split("-")[0] for i in INVARIANTS}
    missing = sorted(families - getattr(env, "fsdpcheck_families", set()))
    if missing:
        LOG.warning(f"the invariant catalog page shows no family {', '.join(missing)}")


def _merge_families(app, env, docnames, other) -> None:
    env.fsdpcheck_families = getattr(env, "fsdpcheck_families", set()) | getattr(other, "fsdpcheck_families", set())


def _purge_families(app, env, docname) -> None:
    # families are re-added as their page is read again
    if docname == "catalog":
        env.fsdpcheck_families = set()


def _optional_pages(app, docname, source) -> None:
    """Pages other contributors add (the HTML report, mutation testing)
    join the index's toctree once their file exists; until then a toctree
    entry naming them would be a warning."""
    if docname != "index":
        return
    srcdir = Path(app.srcdir)
    kept = [line for line in source[0].splitlines(keepends=True)
            if not (line.startswith("optional:") and not (srcdir / f"{line.split(':', 1)[1].strip()}.md").exists())]
    source[0] = "".join(line.split(":", 1)[1].lstrip() if line.startswith("optional:") else line for line in kept)


def setup(app):
    app.add_directive("fsdpcheck-options", OptionsTable)
    app.add_directive("fsdpcheck-known-bugs", KnownBugs)
    app.add_directive("fsdpcheck-invariants", Invariants)
    app.add_directive("fsdpcheck-model-checks", ModelChecks)
    app.connect("source-read", _optional_pages)
    app.connect("env-purge-doc", _purge_families)
    app.connect("env-merge-info", _merge_families)
    app.connect("env-check-consistency", _every_family_shown)
    return {"parallel_read_safe": True, "parallel_write_safe": True, "version": "1"}
