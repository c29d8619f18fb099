"""The real-bug recall benchmark: does the suite flag the bugs torch really
had?  ``python -m benchmarks.recall.run`` (from the repository root, with
the project installed) takes every row of ``rows_*.py`` (see ``row.py``):

1. the witness, in a fresh process: the row's input under the installed
   torch, then with the old behaviour patched in; a row whose patch changes
   nothing on its witness is reported as such, never counted;
2. the suite, in a fresh process with the row patched in (``inject/`` on
   the ``PYTHONPATH``, so spawned ranks run the old torch too):
   ``pytest --fsdpcheck --fsdpcheck-impl torch --fsdpcheck-profile ci -x
   -k AREA`` with a JSON report, and the same selection once unpatched per
   area as the baseline;
3. the verdict, from torch's column of the two reports: *flagged* where a
   cell FAILs that passed unpatched, or a known bug is met that the
   unpatched run did not meet; *error* where the run could not judge
   (the patch did not apply, no report, only environment errors); else
   *missed*.

Results go to ``--results`` (JSON, one entry per row, with the torch
release and the times) and, with ``--write-docs``, into the table of
``docs/recall.md`` between its markers.  Nothing here asserts a figure:
this is a measurement, like the rest of ``benchmarks/``.

The open table (``open_rows.py``): ``--open`` runs, instead of the rows
above (unless ``--only`` names some), the torch-only script of every report
of the last twelve months that is open in the current release, under the
installed torch, and records reproduced or not and the suite's verdict read
from its catalog of known bugs (``open_run.py``); ``--write-docs`` without
``--only`` runs them too, and writes that table, below the first, between
its own markers (``--open --write-docs`` writes that table only).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.recall.row import RealBug
from benchmarks.recall.table import rows

ROOT = Path(__file__).resolve().parents[2]
INJECT = Path(__file__).resolve().parent / "inject"

#: the ``-k`` selection of each area's conformance checks (the mutation
#: run's, with FS2-9's world for the runtime rows)
AREA_SELECTION = {
    "traversal": "traversal",
    "annotation": "annotation",
    "splitting": "splitting or test_compiled_ddp_matches_plan_and_eager",
    "exec_order": "exec_order",
    "fsdp2": "fsdp2 and not test_fully_shard_end_to_end",
    "fsdp2_runtime": "test_fully_shard_end_to_end",
    "ddp_runtime": "test_compiled_ddp_matches_plan_and_eager",
}

#: how long one suite run may take before it is called an error
SUITE_LIMIT_S = 1200


def _env(row_id: str | None) -> dict:
    env = dict(os.environ)
    env.pop("FSDPCHECK_RECALL_ROW", None)
    if row_id is not None:
        env["FSDPCHECK_RECALL_ROW"] = row_id
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(INJECT), str(ROOT), env.get("PYTHONPATH")]))
    return env


def witness(bug: RealBug) -> dict:
    done = subprocess.run([sys.executable, "-m", "benchmarks.recall.witness", bug.id], cwd=ROOT,
                          capture_output=True, text=True, timeout=300, env=_env(None) | {"PYTHONPATH": str(ROOT)})
    if done.returncode != 0:
        return {"error": (done.stderr.strip().splitlines() or ["no output"])[-1]}
    return json.loads(done.stdout.strip().splitlines()[-1])


def suite(area: str, row_id: str | None, workdir: Path) -> dict:
    """torch's column of one suite run: ``{invariant: cell}``, or an error."""
    report = workdir / f"{row_id or 'unpatched'}-{area}.json"
    command = [sys.executable, "-m", "pytest", "--fsdpcheck", "--fsdpcheck-impl", "torch",
               "--fsdpcheck-profile", "ci", "-p", "no:randomly", "-p", "no:cacheprovider", "-x", "-q",
               "-k", AREA_SELECTION[area], f"--fsdpcheck-report={report}"]
    start = time.perf_counter()
    try:
        done = subprocess.run(command, cwd=workdir, capture_output=True, text=True,
                              timeout=SUITE_LIMIT_S, env=_env(row_id))
    except subprocess.TimeoutExpired:
        return {"error": f"the suite ran past {SUITE_LIMIT_S} s", "seconds": SUITE_LIMIT_S}
    seconds = round(time.perf_counter() - start, 1)
    if done.returncode == 97:
        return {"error": done.stderr.strip().splitlines()[-1], "seconds": seconds}
    if not report.exists():
        tail = (done.stdout + done.stderr).strip().splitlines()[-1:] or ["no output"]
        return {"error": f"no report (exit {done.returncode}): {tail[0]}", "seconds": seconds}
    matrix = json.loads(report.read_text())["matrix"].get("torch", {})
    return {"cells": matrix, "exit": done.returncode, "seconds": seconds}


def verdict(baseline: dict, patched: dict) -> dict:
    """Flagged, missed or error, with the cells that say so."""
    if "error" in patched:
        return {"verdict": "error", "why": patched["error"]}
    if "error" in baseline:
        return {"verdict": "error", "why": f"unpatched run: {baseline['error']}"}
    before, after = baseline["cells"], patched["cells"]
    failed = sorted(inv for inv, cell in after.items()
                    if cell["outcome"] == "fail" and before.get(inv, {}).get("outcome") != "fail")
    known = sorted({bug for inv, cell in after.items() for bug in cell.get("known", ())}
                   - {bug for cell in before.values() for bug in cell.get("known", ())})
    if failed or known:
        return {"verdict": "flagged", "failed": failed, "known": known}
    errors = sorted(inv for inv, cell in after.items()
                    if cell["outcome"] == "error" and before.get(inv, {}).get("outcome") != "error")
    if errors:
        return {"verdict": "error", "why": f"environment errors only: {', '.join(errors)}"}
    return {"verdict": "missed"}


def _only_row(bug: RealBug, run: dict) -> dict:
    """A run's cells as far as they speak of ``bug``: its known bug met, or
    its invariants failed (other known bugs of the release are not it)."""
    if "error" in run:
        return run
    cells = {}
    for inv, cell in run["cells"].items():
        if bug.known in cell.get("known", ()):
            cells[inv] = {**cell, "known": [bug.known]}
        elif inv in bug.invariants and cell["outcome"] == "fail":
            cells[inv] = cell
    return {**run, "cells": cells}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", action="append", help="a row's id (repeatable; default: every row)")
    parser.add_argument("--results", type=Path, default=None,
                        help="the JSON results file (default: benchmarks/recall/results-torch<version>.json); "
                             "rows run now replace their entries, the others are kept")
    parser.add_argument("--write-docs", action="store_true",
                        help="rewrite docs/recall.md's tables from the results (without --only, also runs the "
                             "open table's scripts)")
    parser.add_argument("--open", action="store_true",
                        help="run the open table's scripts (open_rows.py) under the installed torch; the rows "
                             "above run only where --only names them")
    args = parser.parse_args(argv)

    import torch

    version = torch.__version__.split("+")[0]
    results_path = args.results or Path(__file__).parent / f"results-torch{version}.json"
    results = json.loads(results_path.read_text()) if results_path.exists() else {"torch": version, "rows": {}}
    if results.get("torch") != version:
        parser.error(f"{results_path} holds results for torch {results.get('torch')}, this is {version}")
    chosen = [bug for bug in rows() if not args.only or bug.id in args.only] if not args.open or args.only else []
    unknown = set(args.only or ()) - {bug.id for bug in chosen}
    if unknown:
        parser.error(f"no such row: {', '.join(sorted(unknown))}")

    baselines: dict[str, dict] = {}
    with tempfile.TemporaryDirectory(prefix="fsdpcheck-recall-") as tmp:
        workdir = Path(tmp)
        for bug in chosen:
            if bug.area not in baselines:
                baselines[bug.area] = suite(bug.area, None, workdir)
                print(f"unpatched {bug.area}: {_summary(baselines[bug.area])}", flush=True)
            seen = witness(bug)
            if bug.patch is None:
                # the installed release has the bug: the unpatched run is its run,
                # judged by the row's own known bug and invariants only
                patched = baselines[bug.area]
                judged = verdict({"cells": {}}, _only_row(bug, patched))
            else:
                patched = suite(bug.area, bug.id, workdir)
                judged = verdict(baselines[bug.area], patched)
            entry = {"witness": seen, **judged, "seconds": patched.get("seconds")}
            if seen.get("differs") is False:
                entry = {**entry, "verdict": "no-op", "why": "the patch changes nothing on its witness"}
            results["rows"][bug.id] = entry
            print(f"{bug.id}: {entry['verdict']} {_detail(entry)} ({entry['seconds']} s)", flush=True)
            results_path.write_text(json.dumps(results, indent=2, sort_keys=True) + "\n")
    if args.open or (args.write_docs and not args.only):
        from benchmarks.recall.open_rows import open_rows
        from benchmarks.recall.open_run import run_open

        results["open"] = run_open(open_rows(), version)
        results_path.write_text(json.dumps(results, indent=2, sort_keys=True) + "\n")
    if args.write_docs:
        from benchmarks.recall.docs import write, write_open

        if not args.open or args.only:  # --open alone ran no row of the first table: leave it as it is
            write(results)
        if "open" in results:
            write_open(results)
    return 0


def _summary(run: dict) -> str:
    if "error" in run:
        return f"error: {run['error']}"
    outcomes = [cell["outcome"] for cell in run["cells"].values()]
    return ", ".join(f"{outcomes.count(o)} {o}" for o in sorted(set(outcomes))) + f" ({run['seconds']} s)"


def _detail(entry: dict) -> str:
    if entry["verdict"] == "flagged":
        return "; ".join(filter(None, [entry["failed"] and "FAIL " + ", ".join(entry["failed"]),
                                       entry["known"] and "known " + ", ".join(entry["known"])]))
    return entry.get("why", "")


if __name__ == "__main__":
    sys.exit(main())
