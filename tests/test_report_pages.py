"""The HTML pages as text: every value the report holds is escaped, and
each page stands alone (the browser's view is tests/test_report_run.py)."""

from __future__ import annotations

import re

import pytest

from pytest_fsdpcheck.report import SCHEMA_VERSION
from pytest_fsdpcheck.report.html import grid_page, run_page

pytestmark = pytest.mark.unit

HOSTILE = '<script>alert("x")</script><img src=x onerror=alert(1)>&"\''
IMPL = f"evil.module:Impl{HOSTILE}"


def _report() -> dict:
    failure = {"invariants": ["SPL-3"], "message": f"SPL-3: {HOSTILE}", "reproducer": f"print({HOSTILE!r})"}
    return {
        "schema_version": SCHEMA_VERSION,
        "header": {"torch": f"2.13.0{HOSTILE}", "implementations": [IMPL], "devices": ["cpu"], "profile": "ci",
                   "seed": None, "divergence_files": [HOSTILE], "complete": True},
        "matrix": {IMPL: {
            "SPL-3": {"outcome": "fail", "tests": 1},
            "SPL-4": {"outcome": "not provided", "tests": 1, "reasons": [HOSTILE]},
            "SPL-5": {"outcome": "known", "tests": 1, "known": [f"bug{HOSTILE}"]},
            "FS2-9": {"outcome": "error", "tests": 1},
        }},
        "tests": {
            f"t.py::test[{HOSTILE}]": {"outcome": "failed", "implementation": IMPL, "invariants": ["SPL-3"],
                                       "failure": failure},
            f"t.py::dist[{HOSTILE}]": {"outcome": "failed", "implementation": IMPL, "invariants": ["FS2-9"],
                                       "environment": f"environment (gloo) {HOSTILE}"},
        },
        "known_bugs": [{"id": f"bug{HOSTILE}", "implementation": IMPL, "invariants": ["SPL-5"], "affects": HOSTILE,
                        "seen": [], "examples": 2, "not_reproduced": False, "number": 1, "reason": HOSTILE,
                        "reproducer": HOSTILE, "reproducer_command": HOSTILE}],
        "stale_divergences": [{"match": HOSTILE, "implementation": IMPL}],
        "unexpected_passes": [{"invariant": "SPL-2", "implementation": IMPL}],
        "not_provided_but_expected": [{"invariant": "SPL-4", "implementation": "torch", "reason": HOSTILE}],
        "case_errors": {f"m:{HOSTILE}": HOSTILE},
        "models": {f"m:{HOSTILE}": {IMPL: {"FS2-9": {"outcome": "error", "tests": 1}}}},
        "exposure": {f"m:{HOSTILE}": [{"bug": HOSTILE, "area": "splitting", "differs": HOSTILE, "releases": HOSTILE,
                                        "affects": "", "seen": "", "how": "replayed", "form": HOSTILE,
                                        "exposed": True}],
                     "m:other": {"error": HOSTILE}},
    }


def _assert_escaped(page: str) -> None:
    # no tag and no quote of the values survives: they can open no element and close no attribute
    assert "<script" not in page and "<img" not in page and 'alert("x")' not in page
    assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;" in page


def test_every_value_of_a_run_is_escaped():
    page = run_page(_report())
    _assert_escaped(page)
    # each section the report's data asks for is there
    for anchor in ("matrix", "model-matrix", "failures", "known", "not-provided", "case-errors", "exposure",
                   "declarations"):
        assert f'id="{anchor}"' in page, anchor


def test_each_model_has_rows_of_its_own():
    """Issue 56 item 4: the page shows each user's model's cells, as the
    terminal matrix and JUnit do, linking to the failure that explains them."""
    page = run_page(_report())
    row = re.search(r'<tr class="problem"><th>FS2-9</th><td><code>m:[^<]*</code></td><td class="cell [^"]*"[^>]*>'
                    r'<a href="#error-FS2-9-0">ERROR</a></td></tr>', page)
    assert row, page[page.index('id="model-matrix"'):][:1500]
    assert 'id="model-matrix"' not in run_page({**_report(), "models": {}})


def test_cells_link_to_what_explains_them():
    page = run_page(_report())
    for kind, inv in (("fail", "SPL-3"), ("np", "SPL-4"), ("error", "FS2-9")):
        anchor = f"{kind}-{inv}-0"
        assert f'href="#{anchor}"' in page and f'id="{anchor}"' in page, anchor
    anchor = "known-0-bug_script_alert__x____script__img_src_x_onerror_alert_1_____"
    assert page.count(f'id="{anchor}"') == 1 and f'href="#{anchor}"' in page


def test_the_grid_escapes_and_letters_its_bugs():
    results = [
        {"version": "2.12.0", "torch": f"2.12.0{HOSTILE}", "exit": 0, "summary": HOSTILE, "install_s": 1, "suite_s": 2,
         "matrix": {"SPL-3": {"outcome": "known", "known": [f"b{HOSTILE}"]}, "SPL-4": {"outcome": "pass"}},
         "known_bugs": [{"id": f"b{HOSTILE}", "examples": 3}]},
        {"version": "2.13.0", "error": f"torch install failed: {HOSTILE}"},
    ]
    page = grid_page(results)
    _assert_escaped(page)
    assert "known A" in page and "seen in 2.12.0 &hellip; 2.12.0 (1 of 1 releases run)" in page


def test_pages_stand_alone():
    for page in (run_page(_report()), grid_page([])):
        assert page.startswith("<!DOCTYPE html>") and '<meta charset="utf-8">' in page
        assert not re.search(r"<(script|link|img|iframe)\b", page) and "url(" not in page
