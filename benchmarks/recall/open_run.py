"""Runs the open table's scripts (``open_rows.py``) under the installed
torch, each in a fresh process, and reads the suite's verdict from its
catalog of known bugs. Used by ``run.py --open`` (and ``--write-docs``)."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from benchmarks.recall.open_rows import OpenBug

#: how long one script may take before it is called an error (each is
#: written to finish in under a minute on CPU)
SCRIPT_LIMIT_S = 300

#: the script's exit status -> the outcome it states
OUTCOMES = {1: "reproduced", 0: "not reproduced"}


def run_script(bug: OpenBug) -> dict:
    """The script's outcome under this interpreter's torch: ``reproduced``,
    ``not reproduced`` or ``error``, with its last line and the time."""
    env = dict(os.environ)
    env.pop("FSDPCHECK_RECALL_ROW", None)
    start = time.perf_counter()
    try:
        done = subprocess.run([sys.executable, str(bug.script)], capture_output=True, text=True,
                              timeout=SCRIPT_LIMIT_S, env=env, cwd=bug.script.parent)
    except subprocess.TimeoutExpired:
        return {"outcome": "error", "line": f"ran past {SCRIPT_LIMIT_S} s", "seconds": SCRIPT_LIMIT_S}
    seconds = round(time.perf_counter() - start, 1)
    lines = [line for line in done.stdout.strip().splitlines() if line.strip()]
    line = lines[-1] if lines else (done.stderr.strip().splitlines() or ["no output"])[-1]
    outcome = OUTCOMES.get(done.returncode, "error")
    expected = {"reproduced": "REPRODUCED:", "not reproduced": "NOT REPRODUCED:"}.get(outcome)
    if expected is not None and not line.startswith(expected):
        outcome = "error"
        line = f"exit {done.returncode} without a {expected} line: {line}"
    return {"outcome": outcome, "exit": done.returncode, "line": line, "seconds": seconds}


def suite_verdict(bug: OpenBug, outcome: str, version: str) -> str:
    """The suite's verdict on a reproduced open bug, from its catalog:
    ``flagged (known <id>)`` where the row's known bug is declared for this
    release, else ``missed``. A bug that did not reproduce has nothing to
    flag; a script that could not run is not judged."""
    if outcome == "not reproduced":
        return "nothing to flag (not reproduced)"
    if outcome != "reproduced":
        return "not judged (the script could not run)"
    if bug.known is not None:
        from pytest_fsdpcheck.impls.torch_bugs import TORCH_BUGS

        known = {b.id: b for b in TORCH_BUGS}.get(bug.known)
        if known is not None and known.applies_to_version(version):
            return f"flagged (known {bug.known})"
    return "missed"


def run_open(bugs, version: str) -> dict:
    """``{row id: entry}`` for ``bugs``, printing one line per row."""
    entries = {}
    for bug in bugs:
        entry = run_script(bug)
        entry["verdict"] = suite_verdict(bug, entry["outcome"], version)
        entries[bug.id] = entry
        print(f"open {bug.id}: {entry['outcome']}, {entry['verdict']} ({entry['seconds']} s): {entry['line']}",
              flush=True)
    return entries
