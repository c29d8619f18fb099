"""The JSON report: its schema, its content assembled from a run, written
atomically; the exploration figures of a run's properties.
"""

from __future__ import annotations

import contextlib
import json
import os

from .matrix import Matrix

#: the JSON report's format (``report.schema.json`` beside this module). Raised
#: when a field is removed, renamed or changes meaning; a field added keeps it.
SCHEMA_VERSION = 1


def schema() -> dict:
    """The JSON report's published schema (JSON Schema 2020-12)."""
    from importlib.resources import files

    return json.loads((files("pytest_fsdpcheck.report") / "report.schema.json").read_text(encoding="utf-8"))


def payload(header: dict, matrix: Matrix, extra: dict) -> dict:
    """The JSON report's content (``report.schema.json``); the HTML pages are
    drawn from it too."""
    return {"schema_version": SCHEMA_VERSION, "header": header, "matrix": matrix.to_json(),
            "models": {spec: sub.to_json() for spec, sub in sorted(matrix.models.items())},
            "tests": matrix.per_test, **extra}


def json_text(content: dict) -> str:
    return json.dumps(content, indent=2, sort_keys=True) + "\n"


def write_atomically(path: str, text: str) -> None:
    """``path`` holds either its old content or all of ``text``, never a part:
    a full disk or a killed run leaves the previous report in place. The file
    gets the mode a plain ``open(path, "w")`` gives it: the existing file's,
    else 0666 less the umask (``tempfile.mkstemp`` would leave 0600)."""
    import secrets

    folder = os.path.dirname(os.path.abspath(path))
    # a folder named for the report is made, as --junitxml makes its own
    # (options.py checked that it can be: under a writable folder)
    os.makedirs(folder, exist_ok=True)
    temp = os.path.join(folder, f".fsdpcheck-{os.getpid()}-{secrets.token_hex(6)}.tmp")
    # the kernel applies the umask to the mode asked for here
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with contextlib.suppress(FileNotFoundError):
            os.chmod(temp, os.stat(path).st_mode & 0o777)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(temp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temp)
        raise


def exploration(per_test: dict, wall_s: float) -> dict:
    """Examples and examples/s per area, property and worker, and generator
    feature coverage, from the tests' ``run`` records."""
    from ..core.budget import SHARD_ID
    from ..core.features import coverage

    tables: dict[str, dict] = {"areas": {}, "properties": {}, "workers": {}}
    runs = []
    for nodeid, test in per_test.items():
        run = test.get("run")
        if not run:
            continue
        runs.append(run)
        name = SHARD_ID.sub("", nodeid.rpartition("::")[2]).replace("[]", "")
        for table, key in (("areas", run["area"]), ("properties", name), ("workers", run["worker"])):
            row = tables[table].setdefault(key, {"examples": 0, "seconds": 0.0, "tests": 0})
            row["examples"] += run["examples"]
            row["seconds"] += test.get("seconds", 0.0)
            row["tests"] += 1
            if "rounds" in run:
                row["rounds"] = row.get("rounds", 0) + run["rounds"]
    for table in tables.values():
        for row in table.values():
            row["seconds"] = round(row["seconds"], 3)
            row["examples_per_s"] = round(row["examples"] / row["seconds"], 2) if row["seconds"] else None
    examples = sum(r["examples"] for r in runs)
    return {
        "examples": examples,
        "wall_s": round(wall_s, 2),
        "examples_per_s": round(examples / wall_s, 2) if wall_s > 0 else None,
        **tables,
        "coverage": coverage(runs),
    }


def render_exploration(explored: dict) -> list[str]:
    lines = [f"{explored['examples']} examples in {explored['wall_s']:.1f} s of wall time "
             f"({explored['examples_per_s']} examples/s)"]

    def rate(row):
        return "-" if row["examples_per_s"] is None else f"{row['examples_per_s']:.1f}/s"

    for title, table in (("area", "areas"), ("worker", "workers"), ("property", "properties")):
        rows = explored[table]
        width = max((len(k) for k in rows), default=8)
        lines.append(f"per {title}:")
        for key, row in sorted(rows.items()):
            rounds = f"  {row['rounds']} rounds" if "rounds" in row else ""
            lines.append(f"  {key:<{width}}  {row['examples']:>8} examples  {rate(row):>10}{rounds}")
    cov = explored["coverage"]
    if cov["features"]:
        width = max(len(k) for k in cov["features"])
        lines.append("generator features (examples that had each):")
        for name, n in cov["features"].items():
            flag = "  <- NO EXAMPLE HAD THIS FEATURE" if n == 0 else ""
            lines.append(f"  {name:<{width}}  {n:>8}{flag}")
        reached = sum(1 for n in cov["features"].values() if n)
        lines.append(f"features reached: {reached} of {len(cov['features'])} that the generators of this run offer")
        if cov["missing"]:
            lines.append(f"features no example had: {', '.join(cov['missing'])}")
    return lines


def _header_json(session) -> dict:
    return {
        "torch": session.torch_version,
        "implementations": list(session.impls),
        "devices": session.devices,
        "profile": session.profile,
        "seed": session.seed,
        "divergence_files": session.divergence_files,
        # False: interrupted, stopped early (-x, --maxfail), ended by a crash
        # before the summary, or nothing ran; stale entries and unreproduced
        # bugs are then not judged
        "complete": not session.incomplete,
        # --fsdpcheck-world-size as given (None: the device's default); a re-run command passes it on
        "world_size": getattr(session, "world_size", None),
        **_plan_json(session),
    }


def _entry_json(entry) -> dict:
    return {"match": entry.match, "implementation": entry.implementation, "test": entry.test, "until": entry.until,
            "source": entry.source, "baseline": entry.baseline}


def run_payload(session, findings, exposures) -> dict:
    """The run's report as the JSON file holds it: what the HTML pages and
    pytest-html's sections are drawn from too."""
    import time

    stale, unexpected, unreproduced, unprovided, expired, fixed = findings
    return payload(
        _header_json(session),
        session.matrix,
        {
            "stale_divergences": [{"match": e.match, "implementation": e.implementation} for e in stale],
            "unexpected_passes": [{"invariant": i, "implementation": m} for i, m in unexpected],
            **({"baseline": {"expired": [_entry_json(e) for e in expired], "fixed": [_entry_json(e) for e in fixed]}}
               if expired or fixed else {}),
            "not_provided_but_expected": [{"invariant": i, "implementation": "torch", "reason": r}
                                          for i, r in unprovided],
            "known_bugs": _known_json(session, unreproduced),
            "case_errors": dict(session.matrix.case_errors),
            **({"exposure": _exposure_json(exposures)} if exposures else {}),
            "exploration": exploration(session.matrix.per_test, time.time() - session.started),
        },
    )


def _junit(content: dict) -> str:
    from .junit import junit_xml

    return junit_xml(content)


def _html_page(content: dict) -> str:
    from .html import run_page

    return run_page(content)


def _exposure_json(exposures) -> dict:
    from ..cases.exposure import to_json

    return {spec: to_json(found) if isinstance(found, list) else {"error": found} for spec, found in exposures.items()}


def _plan_json(session) -> dict:
    plan = session.plan
    if plan is None:
        return {}
    return {"shard": f"{plan.machine + 1}/{plan.machines}", "workers": plan.workers,
            "fuzz_time_s": plan.budget_s, "deadline": plan.deadline, "database": session.database,
            "not_run_in_budget": list(session.budget_skipped)}


def _known_json(session, unreproduced) -> list[dict]:
    from ..core.bugs import active_bugs

    missing = {(spec, bug.id) for spec, bug in unreproduced}
    return [
        {
            "id": bug.id,
            "implementation": spec,
            "invariants": list(bug.invariants),
            "affects": bug.affects,
            "seen": list(bug.seen),
            "examples": session.matrix.known_examples.get((spec, bug.id), 0),
            "not_reproduced": (spec, bug.id) in missing,
            # the [n] its cells show in the matrix (numbered as the bugs were met)
            "number": (session.matrix.known_order.index((spec, bug.id)) + 1
                       if (spec, bug.id) in session.matrix.known_order else None),
            "reason": bug.reason,
            "reproducer": _reproducer_text(bug),
            "reproducer_command": f"python -m pytest_fsdpcheck.known show {bug.id}",
            # its upstream issue or PR, "owner/repo#number" (empty: not reported upstream)
            "upstream": list(bug.upstream),
        }
        for spec, impl in session.impls.items()
        for bug in active_bugs(impl, session.torch_version)
    ]


def _reproducer_text(bug) -> str | None:
    """The bug's torch-only reproducer script, as ``known show`` prints it."""
    if not bug.reproducer:
        return None
    from importlib.resources import files

    try:
        return (files("pytest_fsdpcheck.known") / "reproducers" / bug.reproducer).read_text(encoding="utf-8")
    except OSError:
        return None
