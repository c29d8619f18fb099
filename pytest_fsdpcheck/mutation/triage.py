"""Survivors declared equivalent (``equivalent.json``), matched by what the
mutant changes, never by its position in a session."""

from __future__ import annotations

import json
from dataclasses import dataclass
from importlib.resources import files


@dataclass(frozen=True)
class Change:
    file: str  # relative to the torch package
    operator: str
    before: str
    after: str


def change_of(diff: str, operator: str) -> Change | None:
    """The one changed line of a Cosmic Ray diff (``a/torch/...`` paths)."""
    file, before, after = None, [], []
    for line in diff.splitlines():
        if line.startswith("--- a/"):
            file = line[len("--- a/"):].removeprefix("torch/")
        elif line.startswith("-") and not line.startswith("---"):
            before.append(line[1:].strip())
        elif line.startswith("+") and not line.startswith("+++"):
            after.append(line[1:].strip())
    if file is None:
        return None
    return Change(file, operator, " / ".join(before), " / ".join(after))


def load(path=None) -> list[dict]:
    text = (open(path, encoding="utf-8").read() if path
            else files("pytest_fsdpcheck.mutation").joinpath("equivalent.json").read_text(encoding="utf-8"))
    return json.loads(text)["equivalent"]


def reason_for(area: str, change: Change | None, entries: list[dict]) -> str | None:
    if change is None:
        return None
    for entry in entries:
        if (entry["area"], entry["file"], entry["operator"], entry["before"], entry["after"]) == (
                area, change.file, change.operator, change.before, change.after):
            return entry["reason"]
    return None
