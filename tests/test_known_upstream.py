"""Known bugs cite the upstream issue or pull request that reports or fixed
them (issue 40 item 4, issue 42 item 8): ``KnownBug.upstream`` holds
``owner/repo#number`` references, refused when malformed, and every place a
known bug is shown gives them as links (or says "not reported upstream"):
``python -m pytest_fsdpcheck.known list/show``, the JSON report, its HTML
page and the history grid. The docs page is checked by tests/test_docs.py's
site build."""

from __future__ import annotations

import dataclasses
import re
from types import SimpleNamespace

import pytest

from pytest_fsdpcheck.commands.known import main
from pytest_fsdpcheck.core.bugs import UPSTREAM_REF, KnownBug, upstream_url
from pytest_fsdpcheck.impls.torch_bugs import TORCH_BUGS

pytestmark = pytest.mark.unit

CITED = [bug for bug in TORCH_BUGS if bug.upstream]
UNCITED = [bug for bug in TORCH_BUGS if not bug.upstream]
HOSTILE = '<script>alert("x")</script>'


def _bug(**changes) -> KnownBug:
    return KnownBug(**{"id": "planted", "invariants": ("TRV-7",), "reason": "r", "predicate": lambda v: False,
                       **changes})


def test_every_citation_is_owner_repo_number():
    assert CITED and UNCITED  # both kinds are shown below
    for bug in TORCH_BUGS:
        assert isinstance(bug.upstream, tuple), bug.id
        assert all(UPSTREAM_REF.fullmatch(ref) for ref in bug.upstream), (bug.id, bug.upstream)
    assert upstream_url("pytorch/pytorch#162338") == "https://github.com/pytorch/pytorch/issues/162338"
    assert upstream_url("pytorch/torchtitan#2817") == "https://github.com/pytorch/torchtitan/issues/2817"


@pytest.mark.parametrize("bad", ["#162338", "pytorch#162338", "pytorch/pytorch#", "pytorch/pytorch#0",
                                 "https://github.com/pytorch/pytorch/issues/162338", "pytorch/pytorch 162338",
                                 "pytorch/pytorch#12a", "-torch/pytorch#1", " pytorch/pytorch#1", ""])
def test_a_malformed_citation_is_refused(bad):
    with pytest.raises(ValueError, match="owner/repo#number"):
        _bug(upstream=(bad,))
    with pytest.raises(ValueError, match="owner/repo#number"):
        upstream_url(bad)


def test_a_citation_given_as_a_bare_string_is_refused():
    # a str is iterable: without the check it would be read one character at a time
    with pytest.raises(ValueError, match="owner/repo#number"):
        _bug(upstream="pytorch/pytorch#162338")
    assert _bug(upstream=("pytorch/pytorch#162338",)).upstream == ("pytorch/pytorch#162338",)


def test_list_and_show_give_each_citation(capsys):
    assert main(["list"]) == 0
    lines = {line.split()[0]: line for line in capsys.readouterr().out.splitlines() if line.strip()}
    for bug in TORCH_BUGS:
        if bug.upstream:
            assert all(ref in lines[bug.id] for ref in bug.upstream), lines[bug.id]
            assert "not reported upstream" not in lines[bug.id]
        else:
            assert "not reported upstream" in lines[bug.id], lines[bug.id]
    for bug in (CITED[0], UNCITED[0]):
        assert main(["show", bug.id]) == 0
        header = "\n".join(capsys.readouterr().out.splitlines()[:2])
        if bug.upstream:
            assert all(f"{ref} <{upstream_url(ref)}>" in header for ref in bug.upstream), header
        else:
            assert "not reported upstream" in header, header


def _json_entries() -> list[dict]:
    """``_known_json`` over every torch bug, each made active on any torch."""
    from pytest_fsdpcheck.report.content import _known_json

    impl = SimpleNamespace(known_bugs=tuple(dataclasses.replace(bug, affects="") for bug in TORCH_BUGS))
    session = SimpleNamespace(impls={"torch": impl}, torch_version="2.13.0",
                              matrix=SimpleNamespace(known_examples={}, known_order=[]))
    return _known_json(session, [])


def test_the_json_report_carries_each_citation_and_the_schema_takes_it():
    entries = {entry["id"]: entry for entry in _json_entries()}
    assert {bug.id: entry["upstream"] for bug in TORCH_BUGS for entry in [entries[bug.id]]} == {
        bug.id: list(bug.upstream) for bug in TORCH_BUGS}
    jsonschema = pytest.importorskip("jsonschema")
    from pytest_fsdpcheck.report import schema

    known_bug = {"$defs": schema()["$defs"], "$ref": "#/$defs/known_bug"}
    for entry in entries.values():
        jsonschema.validate(entry, known_bug)
    # an older report, written before the field existed, is still valid
    jsonschema.validate({k: v for k, v in entries[CITED[0].id].items() if k != "upstream"}, known_bug)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({**entries[CITED[0].id], "upstream": ["#162338"]}, known_bug)


def _met(entries: list[dict]) -> dict:
    return {"known_bugs": [entry | {"examples": 1, "number": n} for n, entry in enumerate(entries, 1)]}


def test_the_html_page_links_each_citation():
    from pytest_fsdpcheck.report.html import _Anchors, _known_bugs

    report = _met(_json_entries())
    numbers = {("torch", b["id"]): b["number"] for b in report["known_bugs"]}
    html = "".join(_known_bugs(report, _Anchors(["torch"]), numbers))
    sections = dict(re.findall(r'<h3>\[\d+\] ([\w-]+) \[torch\]</h3>(.*?)</section>', html, re.S))
    assert set(sections) == {bug.id for bug in TORCH_BUGS}
    for bug in TORCH_BUGS:
        if bug.upstream:
            for ref in bug.upstream:
                assert f'<a href="{upstream_url(ref)}">{ref}</a>' in sections[bug.id], bug.id
        else:
            assert "<p>Upstream: not reported upstream</p>" in sections[bug.id], bug.id


def test_the_html_escapes_a_citation_it_cannot_read_and_skips_an_absent_one():
    from pytest_fsdpcheck.report.html import _Anchors, _known_bugs

    entry = {"id": "b", "implementation": "torch", "invariants": ["TRV-7"], "reason": "r"}
    report = _met([entry | {"upstream": [HOSTILE, "pytorch/pytorch#1"]}, entry | {"id": "old"}])
    html = "".join(_known_bugs(report, _Anchors(["torch"]), {("torch", "b"): 1, ("torch", "old"): 2}))
    assert "<script" not in html and "&lt;script&gt;" in html
    assert '<a href="https://github.com/pytorch/pytorch/issues/1">pytorch/pytorch#1</a>' in html
    old = html[html.index("old [torch]"):]
    assert "Upstream" not in old


def test_the_history_grid_links_each_citation():
    from pytest_fsdpcheck.report.html import grid_page

    cited, uncited = CITED[0], UNCITED[0]
    entries = [{"id": cited.id, "examples": 1, "upstream": list(cited.upstream)},
               {"id": uncited.id, "examples": 1, "upstream": []}]
    page = grid_page([{"version": "2.8.0", "exit": 0, "known_bugs": entries,
                       "matrix": {"FS2-9": {"outcome": "known", "known": [cited.id, uncited.id]}}}])
    bugs = page[page.index('id="bugs"'):]
    cited_item = bugs[bugs.index(f'id="bug-{cited.id}"'):]
    assert all(f'<a href="{upstream_url(ref)}">{ref}</a>' in cited_item.split("</li>")[0] for ref in cited.upstream)
    uncited_item = bugs[bugs.index(f'id="bug-{uncited.id}"'):].split("</li>")[0]
    assert "upstream: not reported upstream" in uncited_item
