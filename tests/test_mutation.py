"""``python -m pytest_fsdpcheck.mutation``: mutants are made from the right
lines, never in the installed torch (also when the run is killed mid-way),
the session resumes, and a mutant counts as killed only when the area's
checks failed on it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pytest_fsdpcheck.mutation.areas import AREAS
from pytest_fsdpcheck.mutation.scope import scope, unevaluated_annotations, within
from pytest_fsdpcheck.mutation.session import (
    MutationError,
    build_overlay,
    check_overlay_paths,
    sha256,
    targets,
    torch_root,
)

pytestmark = pytest.mark.unit

SOURCE = '''\
import functools

class Helper:
    def run(self):
        return 1

class Walker:
    def walk(self, x):
        if isinstance(x, Helper):
            return self._step(x)
        return functools.partial(self._other, x)

    def _step(self, x):
        return leaf(x)

    def _other(self, x):
        return Helper()

    def unrelated(self):
        return 2

def leaf(x):
    return x

def unused():
    return leaf(0)
'''


def test_scope_is_the_seeds_and_what_they_reach():
    reached = scope(SOURCE, ("Walker.walk",))
    # a method passed by reference counts as called; a class named only in
    # isinstance does not, one instantiated does
    assert set(reached) == {"Walker.walk", "Walker._step", "Walker._other", "leaf", "Helper"}
    assert reached["leaf"] == (22, 23)
    with pytest.raises(KeyError, match="missing"):
        scope(SOURCE, ("missing",))


def test_only_function_local_annotations_are_unevaluated():
    source = ("x: int | None = 1\n"          # module: evaluated
              "def f(a: int | None):\n"      # a signature: evaluated
              "    y: int | None = 2\n"      # local: never evaluated
              "    self.z: int | None = 3\n" # an attribute, in a function: never evaluated
              "    class C:\n"
              "        w: int | None = 4\n") # a class body: evaluated
    spans = unevaluated_annotations(source)
    assert sorted(spans) == [((3, 7), (3, 17)), ((4, 12), (4, 22))]
    assert within((3, 11), spans) and not within((3, 18), spans) and not within((1, 7), spans)


def test_every_area_has_its_seeds_in_the_installed_torch():
    for area in AREAS.values():
        found, notes = targets(area, torch_root())
        assert found, f"{area.name}: {notes}"


def test_a_seed_an_older_release_lacks_leaves_the_others_mutated(tmp_path):
    from pytest_fsdpcheck.mutation.areas import Area, Source

    (tmp_path / "old.py").write_text(SOURCE)
    area = Area("traversal", "traversal", (Source(("new.py", "old.py"), ("Walker", "gone")), Source(("old.py",), ("gone",))))
    found, notes = targets(area, tmp_path)
    assert [t.path for t in found] == ["old.py"] and "Walker" in found[0].ranges
    assert notes == ["old.py: no gone in this torch (mutating Walker)", "old.py: no gone in this torch"]


def test_overlay_never_names_the_installed_torch(tmp_path):
    root = torch_root()
    with pytest.raises(MutationError, match="inside the installed torch"):
        build_overlay(root / "distributed", [], root)
    for path in ("../elsewhere.py", "/etc/passwd", str(root / "__init__.py")):
        with pytest.raises(MutationError, match="not a copy"):
            check_overlay_paths(tmp_path, [path], root)
    (tmp_path / "torch").symlink_to(root)  # a link into torch is torch
    with pytest.raises(MutationError, match="not a copy"):
        check_overlay_paths(tmp_path, ["torch/__init__.py"], root)


def test_only_a_failing_check_kills():
    pytest.importorskip("cosmic_ray")
    from cosmic_ray.work_item import MutationSpec, TestOutcome, WorkerOutcome, WorkItem, WorkResult

    from pytest_fsdpcheck.mutation.report import figures

    def item(job):
        return WorkItem.single(job, MutationSpec("torch/distributed/fsdp/x.py", "core/AddNot", 0, (3, 0), (3, 1)))

    diff = "--- a/torch/distributed/fsdp/x.py\n+++ b/torch/distributed/fsdp/x.py\n-    if a:\n+    if not a:\n"
    ran = "fsdpcheck-mutation: pytest exit {} in 2.0 s; from the overlay: torch.distributed.fsdp.x"
    results = {
        "failed": WorkResult(WorkerOutcome.NORMAL, ran.format(1), TestOutcome.KILLED, diff),
        # pytest stopped before any check (a module the mutant broke at import)
        "usage": WorkResult(WorkerOutcome.NORMAL, ran.format(4), TestOutcome.KILLED, diff),
        # exits non-zero with no line from the test process: the harness
        # broke, which says nothing about the mutant
        "broken": WorkResult(WorkerOutcome.NORMAL, "Traceback ...", TestOutcome.KILLED, diff),
        "slow": WorkResult(WorkerOutcome.NORMAL, "timeout", TestOutcome.KILLED, diff),
        "passed": WorkResult(WorkerOutcome.NORMAL, ran.format(0), TestOutcome.SURVIVED, diff),
        "skipped": WorkResult(WorkerOutcome.SKIPPED, "outside"),
    }
    items = [item(job) for job in [*results, "pending"]]
    plain = figures("traversal", items, results, [])
    assert (plain.mutants, plain.killed, plain.at_startup, plain.timed_out, plain.survived, len(plain.errors),
            plain.pending) == (6, 2, 1, 1, 1, 1, 1)
    assert "if not a:" in plain.survivors[0][1]
    assert plain.survivor_jobs == ["passed"]  # what --rejudge-survivors runs again
    entry = {"area": "traversal", "file": "distributed/fsdp/x.py", "operator": "core/AddNot",
             "before": "if a:", "after": "if not a:", "reason": "why"}
    triaged = figures("traversal", items, results, [entry])
    assert (triaged.survived, triaged.equivalent) == (0, [(triaged.equivalent[0][0], "why")])
    assert triaged.survivor_jobs == []  # an equivalent mutant is never run again
    assert figures("annotation", items, results, [entry]).survived == 1  # another area's entry


def _installed_hashes() -> dict[str, str]:
    root = torch_root()
    return {t.path: sha256(root / t.path) for area in AREAS.values() for t in targets(area, root)[0]}


def _processes_in(folder: Path) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if Path(os.readlink(entry / "cwd")).is_relative_to(folder):
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


@pytest.mark.process
@pytest.mark.skipif(not Path("/proc/self/cwd").exists(), reason="reads processes' folders from /proc")
def test_killed_run_resumes_and_torch_stays_byte_identical(tmp_path):
    pytest.importorskip("cosmic_ray")
    before = _installed_hashes()
    # one cheap check of the area keeps this test near a minute
    command = [sys.executable, "-m", "pytest_fsdpcheck.mutation", "--area", "annotation",
               "--checks", "test_annotate", "--session-dir", str(tmp_path), "--limit", "1"]
    run = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    copy = None
    installed = torch_root() / "distributed/fsdp/_dynamo_utils.py"
    deadline = time.monotonic() + 240
    # kill it while a mutant is in place: once the unmutated run has passed
    # and Cosmic Ray has written a mutant into the copy
    while time.monotonic() < deadline and run.poll() is None:
        copies = list(tmp_path.glob("*/annotation/overlay/torch/distributed/fsdp/_dynamo_utils.py"))
        if copies and copies[0].read_bytes() != installed.read_bytes():
            copy = copies[0]
            break
        time.sleep(0.1)
    assert copy is not None, f"no mutant was ever applied:\n{run.communicate()[0] if run.poll() is not None else ''}"
    run.send_signal(signal.SIGKILL)
    run.wait()
    assert _installed_hashes() == before
    overlay = copy.parents[3]
    # the mutant's test process stops with the run that started it
    deadline = time.monotonic() + 15
    while _processes_in(overlay) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not _processes_in(overlay)

    resumed = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert _installed_hashes() == before
    # the baseline was kept; the mutant cut short runs again, on a fresh copy
    assert "unmutated checks pass" in resumed.stdout and "3 pending" in resumed.stdout
    assert "| annotation | 3 | 1 | 0 | 0 | 0 | 0 | 0 | 2 |" in resumed.stdout, resumed.stdout
    assert copy.read_bytes() == installed.read_bytes()


def test_rejudging_keeps_kills_only_under_checks_that_include_the_old_ones(tmp_path, monkeypatch):
    pytest.importorskip("cosmic_ray")
    from pytest_fsdpcheck.mutation.session import AreaSession

    # what each -k expression selects, as collection would say
    selections = {"annotate": {"t.py::a"}, "annotate or plan": {"t.py::a", "t.py::p"}, "plan": {"t.py::p"}}
    monkeypatch.setattr(AreaSession, "selected", lambda self, checks: selections[checks])
    folder = tmp_path / "annotation"
    first = AreaSession(folder, AREAS["annotation"], "annotate")
    first.open()  # a new session: Cosmic Ray's database over the area's file, nothing run

    wider = AreaSession(folder, AREAS["annotation"], "annotate or plan")
    with pytest.raises(MutationError, match="--fresh"):
        wider.open()  # other checks, no rejudging asked for: refused as before
    state = wider.open(widen=True)
    assert state["fingerprint"]["checks"] == "annotate or plan"
    assert state["widened"] == [{"from": "annotate", "to": "annotate or plan", "tests": [1, 2]}]

    # a selection leaving out a test the kills were judged with keeps nothing
    narrower = AreaSession(folder, AREAS["annotation"], "plan")
    with pytest.raises(MutationError, match=r"leave out 1 test\(s\).*t\.py::a"):
        narrower.open(widen=True)
    assert wider.load_state()["fingerprint"]["checks"] == "annotate or plan"


@pytest.mark.process
def test_the_checks_subprocesses_import_the_mutant_too(tmp_path):
    """SPL-16 and FS2-9 run their ranks in processes of their own: those must
    import the overlay's copy as well, or the area's end-to-end checks never
    see a mutant."""
    (tmp_path / "fsdpcheck_probe_module.py").write_text("WHERE = 'overlay copy'\n")
    (tmp_path / "test_probe.py").write_text(
        "import subprocess, sys\n"
        "def test_rank_process_sees_the_copy():\n"
        "    out = subprocess.run([sys.executable, '-c', 'import fsdpcheck_probe_module as m; print(m.WHERE)'],\n"
        "                         capture_output=True, text=True, cwd='/')\n"
        "    assert out.stdout.strip() == 'overlay copy', out.stderr\n")
    run = subprocess.run([sys.executable, "-m", "pytest_fsdpcheck.mutation.child",
                          "fsdpcheck_probe_module=fsdpcheck_probe_module.py", "--", "-q", "-p", "no:randomly",
                          "-p", "no:cacheprovider", "test_probe.py"],
                         cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert "fsdpcheck-mutation: pytest exit 0" in run.stdout, run.stdout[-2000:]


def test_an_interrupt_is_one_line_and_the_session_resumes(tmp_path, monkeypatch, capsys):
    """Ctrl-C during a run: one line saying the session keeps what was
    judged, exit status 130, no traceback."""
    pytest.importorskip("cosmic_ray")
    from pytest_fsdpcheck.mutation import __main__ as cli
    from pytest_fsdpcheck.mutation.session import AreaSession

    monkeypatch.setattr(AreaSession, "selected", lambda self, checks: {"t.py::a"})
    monkeypatch.setattr(AreaSession, "baseline", lambda self, state: {"seconds": 1.0})

    def interrupted(self, *args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(AreaSession, "execute", interrupted)
    assert cli.main(["--area", "annotation", "--session-dir", str(tmp_path)]) == 130
    err = capsys.readouterr().err
    assert err.strip().splitlines() == [
        "interrupted: the annotation session keeps every mutant judged so far; the same command resumes it"]


def test_each_mutant_is_compiled_from_its_source_never_a_cached_one(tmp_path):
    """Two mutants of one file may have the same size and modification
    second, all a ``.pyc`` is checked by: a bytecode cache of the first
    (written wherever PYTHONDONTWRITEBYTECODE is unset, Python's default)
    would run in place of the second. The overlay compiles from source."""
    import importlib.machinery
    import importlib.util
    import os
    import sys

    from pytest_fsdpcheck.mutation.child import OverlayFinder

    source = tmp_path / "mutant_module.py"

    def load(spec):
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module.VALUE

    def mutate(text):
        source.write_text(text)
        os.utime(source, (1_700_000_000, 1_700_000_000))  # the same second for both mutants

    writes = sys.dont_write_bytecode
    sys.dont_write_bytecode = False
    try:
        mutate("VALUE = 1 < 2\n")
        cached = importlib.util.spec_from_file_location("mutant_module", source)
        assert load(cached) is True
        mutate("VALUE = 1 > 2\n")  # same size, same second
        # what the harness guards against: the plain loader runs the first mutant's cache
        assert load(importlib.util.spec_from_file_location("mutant_module", source)) is True
        assert load(OverlayFinder({"mutant_module": str(source)}).find_spec("mutant_module")) is False
    finally:
        sys.dont_write_bytecode = writes
