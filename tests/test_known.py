"""The known-bug catalog: consistent, runnable, and its reproducers agree with
it on the installed torch (exit 1 where a bug is in range, 0 where it is not)."""

import os

import pytest

from pytest_fsdpcheck.commands.known import main, reproducer_path
from pytest_fsdpcheck.impls.torch_bugs import TORCH_BUGS
from pytest_fsdpcheck.known.reference_with import reference_with

pytestmark = pytest.mark.unit

IDS = [bug.id for bug in TORCH_BUGS]


def test_ids_are_unique_and_every_bug_is_complete():
    assert len(IDS) == len(set(IDS))
    for bug in TORCH_BUGS:
        assert bug.reason and bug.seen and bug.affects, bug.id
        assert reproducer_path(bug).is_file(), bug.id
        reference_with([bug])  # its switches exist on the reference


@pytest.mark.e2e
@pytest.mark.parametrize("bug", TORCH_BUGS, ids=IDS)
def test_reproducer_agrees_with_the_catalog_on_this_torch(bug, run_script, tmp_path):
    import torch

    done = run_script(reproducer_path(bug), cwd=tmp_path, env=dict(os.environ), timeout=120)
    # in range: the bug shows; out of range: fixed, or not reachable on this torch (n/a)
    expected = {1: "BUG: "} if bug.applies_to_version(torch.__version__) else {0: "fixed: ", 2: "n/a: "}
    assert done.returncode in expected, (done.returncode, done.stdout, done.stderr[-2000:])
    assert done.stdout.startswith(expected[done.returncode]), done.stdout


def test_cli_lists_and_shows(capsys):
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    assert all(bug_id in out for bug_id in IDS)
    assert main(["show", IDS[0]]) == 0
    shown = capsys.readouterr().out
    assert "import torch" in shown and "pytest_fsdpcheck" not in shown.split("\n", 2)[2]
    assert main(["show", "no-such-bug"]) == 2
    assert "unknown known-bug id" in capsys.readouterr().err


def test_an_error_the_plain_reference_also_raises_is_never_explained():
    """A body that raises whatever the implementation (the test's own
    machinery, or torch outside the area) is explained by no bug, even one
    whose replay raises the same."""
    import tests.planted.known as planted
    from pytest_fsdpcheck.known import judge
    from tests.planted.known import class_name

    impl = getattr(planted, class_name("Only", "trv-root-states-walk-modules"))()

    def body(_impl):
        raise RuntimeError("the harness failed before any implementation ran")

    outcome = judge._outcome(body, impl)
    judge.configure(enabled=True)
    assert judge.explain(impl, outcome, body) is None


def test_raised_outcomes_compare_by_type_and_first_line():
    """fx's interpreter puts the failing node on the first line of what it
    re-raises and a traceback after it: the first line identifies the error."""
    from pytest_fsdpcheck.known.judge import Raised

    crash = Raised(AssertionError("While executing %submod_1 : [num_users=0]\nOriginal traceback:\n  File a.py"))
    assert crash == Raised(AssertionError("While executing %submod_1 : [num_users=0]\nOriginal traceback:\nNone"))
    assert crash != Raised(AssertionError("While executing %submod_2 : [num_users=0]\nOriginal traceback:\nNone"))
    assert crash != Raised(IndexError("While executing %submod_1 : [num_users=0]"))
    assert crash != []


def test_a_bug_needing_torch_compile_is_not_called_fixed_where_nothing_can_compile(monkeypatch):
    """Strict's "not reproduced — fixed?" skips a bug whose checks compile
    only where torch.compile cannot run at all (torch 2.0 under Python
    3.11); wherever it runs, an unshown bug is reported as before."""
    import dataclasses
    import importlib
    from types import SimpleNamespace

    from pytest_fsdpcheck.core.bugs import KnownBug
    from pytest_fsdpcheck.plugin import verdicts
    from pytest_fsdpcheck.plugin.session import Session

    compiled = KnownBug(id="needs-compile", invariants=("SPL-10",), reason="r", predicate=lambda v: False,
                        needs_compile=True)
    plain = dataclasses.replace(compiled, id="plain", needs_compile=False)
    matrix = SimpleNamespace(outcome=lambda inv, spec: "pass", known_examples={})
    session = SimpleNamespace(known_bugs=True, impls={"torch": SimpleNamespace(known_bugs=(compiled, plain))},
                              deselected=set(), matrix=matrix, torch_version="2.0.1", deferred=False,
                              compile_reason=None)
    session.cannot_compile = lambda: Session.cannot_compile(session)
    # the module Session.cannot_compile imports, through sys.modules: the
    # package's attribute can be an older copy, left there by an in-process
    # pytester run that forgot the module it imported first
    torch_support = importlib.import_module("pytest_fsdpcheck.core.torch_support")
    monkeypatch.setattr(torch_support, "compile_unsupported", lambda: "torch.compile refuses this Python")
    assert [bug.id for _, bug in verdicts._unreproduced(session)] == ["plain"]
    monkeypatch.setattr(torch_support, "compile_unsupported", lambda: None)
    assert [bug.id for _, bug in verdicts._unreproduced(session)] == ["needs-compile", "plain"]
    # the xdist controller: as its workers told it, torch never asked
    monkeypatch.setattr(torch_support, "compile_unsupported", lambda: pytest.fail("the controller asked torch"))
    session.deferred, session.compile_reason = True, "torch.compile refuses this Python"
    assert [bug.id for _, bug in verdicts._unreproduced(session)] == ["plain"]
    session.compile_reason = ""
    assert [bug.id for _, bug in verdicts._unreproduced(session)] == ["needs-compile", "plain"]
