"""One area's mutation session on the installed torch: an overlay of copies,
a Cosmic Ray sqlite session restricted to the area's functions, a baseline,
and the execution of pending mutants (sequentially here, or over Cosmic
Ray's HTTP workers, each in an overlay of its own).

The installed torch is only ever read. Cosmic Ray mutates the file a work
item names, relative to the working directory; every work item names a copy
under the session folder, and every execution runs in an overlay folder
rebuilt from the installed files first (a killed run may leave a copy
mutated; the next one copies again).
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import json
import os
import shlex
import shutil
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path

from .areas import Area
from .child import MARKER, PARENT
from .scope import inside, scope, unevaluated_annotations, within

SESSION_DB = "session.sqlite"
#: the output of a mutant judged equivalent without running it
UNEVALUATED = "equivalent: inside a local variable's annotation, which Python never evaluates (PEP 526)"
STATE = "state.json"
OVERLAY_MARK = ".fsdpcheck-overlay"


class MutationError(Exception):
    """A one-line reason the command cannot go on."""


def torch_root() -> Path:
    """The installed torch package's folder, found without importing torch."""
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        raise MutationError("torch is not installed in this environment")
    return Path(list(spec.submodule_search_locations)[0]).resolve()


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@dataclass(frozen=True)
class Target:
    """One torch file of an area: where it is inside torch, and the lines
    its mutants may change."""

    path: str  # relative to the torch package, e.g. distributed/fsdp/_dynamo_utils.py
    ranges: dict[str, tuple[int, int]]

    @property
    def copy_path(self) -> str:
        """The path work items name, relative to an overlay folder."""
        return f"torch/{self.path}"

    @property
    def module(self) -> str:
        return "torch." + self.path[: -len(".py")].replace("/", ".")


def targets(area: Area, root: Path) -> tuple[list[Target], list[str]]:
    """The area's files on this torch, and notes on what it lacks."""
    found, notes = [], []
    for source in area.sources:
        path = next((p for p in source.paths if (root / p).is_file()), None)
        if path is None:
            notes.append(f"{' / '.join(source.paths)}: not in this torch")
            continue
        text = (root / path).read_text(encoding="utf-8")
        try:
            ranges = scope(text, source.seeds)
        except KeyError as missing:
            # an older release lacks a seed the file's others still call:
            # those are mutated, and the note says what this torch lacks
            absent = missing.args[0].split(", ")
            present = tuple(seed for seed in source.seeds if seed not in absent)
            notes.append(f"{path}: no {missing.args[0]} in this torch"
                         + (f" (mutating {', '.join(present)})" if present else ""))
            if not present:
                continue
            ranges = scope(text, present)
        found.append(Target(path, ranges))
    return found, notes


def build_overlay(folder: Path, files: list[Target], root: Path) -> None:
    """Fresh copies of the targets' installed files under ``folder/torch/``."""
    if folder.resolve().is_relative_to(root):
        raise MutationError(f"overlay {folder} is inside the installed torch")
    folder.mkdir(parents=True, exist_ok=True)
    (folder / OVERLAY_MARK).write_text("copies of installed torch files that Cosmic Ray may mutate\n")
    for target in files:
        copy = folder / target.copy_path
        copy.parent.mkdir(parents=True, exist_ok=True)
        if copy.is_symlink():
            copy.unlink()
        check_overlay_paths(folder, [target.copy_path], root)  # no folder on the way links into torch
        shutil.copyfile(root / target.path, copy)


def check_overlay_paths(folder: Path, paths, root: Path) -> None:
    """Every path a work item names must resolve to a copy in ``folder``."""
    base = folder.resolve()
    for path in paths:
        real = (base / path).resolve()
        if Path(path).is_absolute() or not real.is_relative_to(base) or real.is_relative_to(root):
            raise MutationError(f"work item names {path}, which is not a copy in {folder}")


def test_command(area: Area, files: list[Target], checks: str | None) -> str:
    pairs = [f"{t.module}={t.copy_path}" for t in files]
    pytest_args = ["--fsdpcheck", "--fsdpcheck-impl", "torch", "--fsdpcheck-profile", "ci",
                   "-p", "no:randomly", "-p", "no:cacheprovider", "-x", "-q", "-k", checks or area.checks]
    return shlex.join([sys.executable, "-m", "pytest_fsdpcheck.mutation.child", *pairs, "--", *pytest_args])


@contextlib.contextmanager
def working_directory(folder: Path):
    previous = os.getcwd()
    os.chdir(folder)
    try:
        yield
    finally:
        os.chdir(previous)


class AreaSession:
    """The session folder of one area on one torch release."""

    def __init__(self, folder: Path, area: Area, checks: str | None = None):
        self.folder = folder
        self.area = area
        self.root = torch_root()
        self.torch_version = version("torch")
        self.files, self.notes = targets(area, self.root)
        self.checks = checks
        self.db_path = folder / SESSION_DB
        self.state_path = folder / STATE
        self._done = 0  # mutants the current execution has judged

    # -- state ------------------------------------------------------------
    def _fingerprint(self) -> dict:
        return {"torch": self.torch_version, "area": self.area.name, "checks": self.checks or self.area.checks,
                "files": {t.path: sha256(self.root / t.path) for t in self.files}}

    def load_state(self) -> dict | None:
        if not self.state_path.exists():
            return None
        return json.loads(self.state_path.read_text(encoding="utf-8"))

    def save_state(self, state: dict) -> None:
        tmp = self.state_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(state, indent=1), encoding="utf-8")
        os.replace(tmp, self.state_path)

    # -- init -------------------------------------------------------------
    def open(self, fresh: bool = False, widen: bool = False) -> dict:
        """The session's state, creating the session unless one for the same
        torch files, area and checks exists (then it resumes). With
        ``widen``, a session judged with checks that the current ones
        include (every test they select, the current ones select too) is
        resumed: its kills still stand, and its survivors are for the caller
        to judge again."""
        if not self.files:
            raise MutationError(f"{self.area.name}: nothing to mutate on torch {self.torch_version} "
                                f"({'; '.join(self.notes)})")
        fingerprint = self._fingerprint()
        state = self.load_state()
        if state is not None and not fresh:
            if widen and state["fingerprint"] != fingerprint:
                self._widen(state, fingerprint)
            if state["fingerprint"] != fingerprint:
                raise MutationError(f"{self.folder} holds a session for other torch files or checks "
                                    f"(torch {state['fingerprint']['torch']}); pass --fresh to start over")
            self.mark_unevaluated()  # sessions made before this rule existed
            return state
        self.folder.mkdir(parents=True, exist_ok=True)
        for stale in (self.db_path, self.state_path):
            stale.unlink(missing_ok=True)
        self._init_db()
        state = {"fingerprint": fingerprint, "ranges": {t.path: t.ranges for t in self.files},
                 "notes": self.notes, "baseline": None, "runs": []}
        self.save_state(state)
        return state

    def _widen(self, state: dict, fingerprint: dict) -> None:
        before = state["fingerprint"]
        if {**before, "checks": fingerprint["checks"]} != fingerprint:
            return  # other torch files: nothing judged before carries over
        old, new = self.selected(before["checks"]), self.selected(fingerprint["checks"])
        if not old <= new:
            raise MutationError(f"{self.area.name}: the checks '{fingerprint['checks']}' leave out "
                                f"{len(old - new)} test(s) the session's kills were judged with "
                                f"(e.g. {sorted(old - new)[0]}); pass --fresh to start over")
        state.setdefault("widened", []).append({"from": before["checks"], "to": fingerprint["checks"],
                                                "tests": [len(old), len(new)]})
        state["fingerprint"] = fingerprint
        self.save_state(state)

    def selected(self, checks: str) -> set[str]:
        """The test ids a -k expression selects on the unmutated torch (the
        command's own -q is the one that lists them by id)."""
        args = shlex.split(test_command(self.area, [], checks))
        args = args[args.index("--") + 1:]
        run = subprocess.run([sys.executable, "-m", "pytest", *args, "--collect-only"],
                             capture_output=True, text=True, cwd=self.folder)
        ids = {line for line in run.stdout.splitlines() if "::" in line}
        if run.returncode != 0 or not ids:
            raise MutationError(f"{self.area.name}: cannot collect the checks '{checks}': "
                                f"{(run.stdout + run.stderr).strip().splitlines()[-1:]}")
        return ids

    def _init_db(self) -> None:
        import cosmic_ray.commands
        from cosmic_ray.work_db import use_db
        from cosmic_ray.work_item import WorkerOutcome, WorkResult

        overlay = self.folder / "overlay"
        build_overlay(overlay, self.files, self.root)
        with working_directory(overlay), use_db(str(self.db_path.resolve())) as db:
            cosmic_ray.commands.init([Path(t.copy_path) for t in self.files], db, {})
            ranges = {t.copy_path: list(t.ranges.values()) for t in self.files}
            outside = [item.job_id for item in db.pending_work_items
                       if not all(inside(m.start_pos[0], ranges[str(m.module_path)]) for m in item.mutations)]
            # Cosmic Ray's own way to leave work out (its line filter does
            # the same): a skipped result, never executed or counted
            if outside:
                db.set_multiple_results(outside, WorkResult(output="outside the area's functions",
                                                            worker_outcome=WorkerOutcome.SKIPPED))
        self.mark_unevaluated()

    def mark_unevaluated(self) -> None:
        """Pending mutants inside code Python never runs are equivalent by
        construction: recorded so, with the reason, and not executed."""
        from cosmic_ray.work_db import use_db
        from cosmic_ray.work_item import TestOutcome, WorkerOutcome, WorkResult

        spans = {t.copy_path: unevaluated_annotations((self.root / t.path).read_text(encoding="utf-8"))
                 for t in self.files}
        with use_db(str(self.db_path.resolve())) as db:
            # a survivor that ran before this rule existed is marked too, so
            # the figures never depend on the order the mutants ran in
            results = dict(db.results)
            unevaluated = [item.job_id for item in db.work_items
                           if (item.job_id not in results or results[item.job_id].test_outcome == TestOutcome.SURVIVED)
                           and all(within(m.start_pos, spans.get(str(m.module_path), ())) for m in item.mutations)]
            if unevaluated:
                db.set_multiple_results(unevaluated, WorkResult(output=UNEVALUATED,
                                                                worker_outcome=WorkerOutcome.SKIPPED))

    # -- runs -------------------------------------------------------------
    def command(self) -> str:
        return test_command(self.area, self.files, self.checks)

    def baseline(self, state: dict) -> dict:
        """The area's checks on the unmutated copies through the same
        harness: they must pass, or no mutant's failure means anything."""
        if state["baseline"]:
            return state["baseline"]
        from cosmic_ray.testing import run_tests
        from cosmic_ray.work_item import TestOutcome

        overlay = self.folder / "overlay"
        build_overlay(overlay, self.files, self.root)
        start = time.monotonic()
        with working_directory(overlay):
            outcome, output = run_tests(self.command(), 3600)
        seconds = time.monotonic() - start
        if outcome != TestOutcome.SURVIVED:
            tail = " | ".join(output.strip().splitlines()[-3:])
            raise MutationError(f"{self.area.name}: the checks fail on unmutated torch, so mutants cannot be judged: {tail}")
        if MARKER not in output:
            raise MutationError(f"{self.area.name}: the test process did not report its overlay: {output[-300:]}")
        state["baseline"] = {"seconds": round(seconds, 1)}
        self.save_state(state)
        return state["baseline"]

    def forget(self, job_ids) -> None:
        """Drops these mutants' results: they are pending again."""
        import sqlite3

        with contextlib.closing(sqlite3.connect(self.db_path)) as db, db:
            db.executemany("DELETE FROM work_results WHERE job_id = ?", [(job,) for job in job_ids])

    def pending(self) -> list:
        from cosmic_ray.work_db import use_db

        with use_db(str(self.db_path.resolve())) as db:
            return sorted(db.pending_work_items,
                          key=lambda item: [(str(m.module_path), m.start_pos, m.operator_name, m.occurrence)
                                            for m in item.mutations])

    def execute(self, state: dict, timeout: float, workers: int = 1, limit: int | None = None,
                progress=None) -> int:
        """Runs pending mutants (at most ``limit``); returns how many ran."""
        todo = self.pending()[:limit] if limit is not None else self.pending()
        if not todo:
            return 0
        paths = {str(m.module_path) for item in todo for m in item.mutations}
        os.environ[PARENT] = str(os.getpid())  # Cosmic Ray passes its environment on
        start = time.monotonic()
        self._done = 0
        try:
            self._run(todo, paths, timeout, workers, progress)
        finally:
            # a stopped run's time is recorded too: its results are kept
            state["runs"].append({"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                                  "mutants": self._done, "workers": workers,
                                  "seconds": round(time.monotonic() - start, 1)})
            self.save_state(state)
        return self._done

    def _run(self, todo, paths, timeout, workers, progress) -> None:
        from cosmic_ray.plugins import get_distributor
        from cosmic_ray.work_db import use_db

        with use_db(str(self.db_path.resolve())) as db:
            def on_task_complete(job_id, result):
                db.set_result(job_id, result)
                self._done += 1
                if progress:
                    progress(self._done, len(todo), result)

            if workers <= 1:
                overlay = self.folder / "overlay"
                build_overlay(overlay, self.files, self.root)
                check_overlay_paths(overlay, paths, self.root)
                with working_directory(overlay):
                    get_distributor("local")(todo, self.command(), timeout, {}, on_task_complete=on_task_complete)
            else:
                with http_workers(self, workers, paths) as urls:
                    get_distributor("http")(todo, self.command(), timeout, {"worker-urls": urls},
                                            on_task_complete=on_task_complete)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _wait_listening(port: int, proc: subprocess.Popen, seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise MutationError(f"HTTP worker on port {port} exited with {proc.returncode}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
            return
        time.sleep(0.2)
    raise MutationError(f"HTTP worker on port {port} did not start listening")


@contextlib.contextmanager
def http_workers(session: AreaSession, count: int, paths):
    """``count`` Cosmic Ray HTTP workers on localhost, each mutating copies in
    its own overlay folder; yields their URLs."""
    procs = []
    try:
        urls = []
        for index in range(count):
            overlay = session.folder / "workers" / str(index)
            build_overlay(overlay, session.files, session.root)
            check_overlay_paths(overlay, paths, session.root)
            port = _free_port()
            proc = subprocess.Popen([sys.executable, "-m", "pytest_fsdpcheck.mutation.worker", "--port", str(port)],
                                    cwd=overlay, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            procs.append(proc)
            _wait_listening(port, proc)
            urls.append(f"http://127.0.0.1:{port}")
        yield urls
    finally:
        # a worker busy with a mutant answers no signal until the mutant is
        # done (its server loop is blocked), and holds nothing worth saving:
        # its overlay is rebuilt, its test process exits with it
        for proc in procs:
            proc.kill()
        for proc in procs:
            proc.wait()
