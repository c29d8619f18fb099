"""Where each known bug was really observed: the history command's record.

``observed.json`` beside this module is written by
``python -m pytest_fsdpcheck.commands.history ... --record-observed``
(never by hand): per release the suite ran on (``runs``: the commit and the
date of that run) the known bugs whose signature explained an example there
(``observed``). A bug whose declared range holds a release that was run and
where it explained nothing was never observed there: either its range is
wider than the bug, or the release cannot show it, which the bug says
(:attr:`~pytest_fsdpcheck.core.bugs.KnownBug.unobservable`). A release of
the range that was not run yet is listed apart, as not run.
"""

from __future__ import annotations

import json
from importlib.resources import files

RECORD = "observed.json"


def load(text: str | None = None) -> dict:
    """The record (``{"runs": {release: {...}}, "observed": {bug id: [releases]}}``)."""
    if text is None:
        source = files("pytest_fsdpcheck.known") / RECORD
        text = source.read_text(encoding="utf-8") if source.is_file() else "{}"
    data = json.loads(text)
    return {"runs": dict(data.get("runs", {})), "observed": {k: list(v) for k, v in data.get("observed", {}).items()}}


def gaps(bug, record: dict, releases) -> tuple[list[str], list[str]]:
    """``(never observed, not run)``: the releases of ``releases`` in the
    bug's declared range that were run without the bug explaining anything
    there (and that the bug does not say it cannot show on, nor a bug
    masking it, ``masked_by``, was observed on), and those not run yet."""
    seen = set(record["observed"].get(bug.id, ()))
    # where a bug that fails its step first (masked_by) was observed, this one could not show
    masked = {r for other in bug.masked_by for r in record["observed"].get(other, ())}
    inside = [r for r in releases if bug.applies_to_version(r)]
    never = [r for r in inside if r in record["runs"] and r not in seen | masked and r not in bug.unobservable]
    not_run = [r for r in inside if r not in record["runs"] and r not in bug.unobservable]
    return never, not_run


def merged(record: dict, results: list[dict], commit: str, date: str) -> dict:
    """``record`` with the history results' releases replaced by what these
    runs observed (a release whose run did not finish is left as it was)."""
    runs = dict(record["runs"])
    observed = {k: set(v) for k, v in record["observed"].items()}
    for result in results:
        if "matrix" not in result:
            continue
        release = result["version"]
        runs[release] = {"commit": commit, "date": date, "exit": result.get("exit")}
        for ids in observed.values():
            ids.discard(release)
        for bug in result.get("known_bugs", []):
            if bug.get("examples"):
                observed.setdefault(bug["id"], set()).add(release)
    from ..core.provided import RELEASES

    order = {r: i for i, r in enumerate(RELEASES)}
    key = lambda r: (order.get(r, len(order)), r)  # noqa: E731
    return {"runs": {r: runs[r] for r in sorted(runs, key=key)},
            "observed": {k: sorted(v, key=key) for k, v in sorted(observed.items()) if v}}


def dumps(record: dict) -> str:
    return json.dumps(record, indent=1, sort_keys=False) + "\n"
