"""Tracebacks trimmed to what the reader needs: the implementation's and
torch's frames, not the suite's machinery or the test runner's."""

from __future__ import annotations

import os
from pathlib import Path

_OWN = Path(__file__).resolve().parent.parent  # the package, above plugin/
# The suite's machinery; reference/ and impls/ are implementations, so theirs stay.
_MACHINERY = tuple(str(_OWN / p) for p in (
    "checks", "generators", "known", "core/bugs.py", "cases/exposure.py", "plugin/__init__.py",
    "plugin/isolation.py", "plugin/guard.py", "plugin/tracebacks.py", "plugin/options.py", "plugin/session.py",
    "plugin/collection.py", "plugin/verdicts.py", "report/__init__.py",
    "core/profiles.py", "contract.py"))
_NOISE = ("_pytest", "pluggy", "hypothesis", "_hypothesis_pytestplugin")


def is_machinery(entry) -> bool:
    """Whether a traceback entry is the suite's or the test runner's own frame."""
    path = str(entry.path)
    if path.startswith(_MACHINERY):
        return True
    return any(f"{os.sep}{n}{os.sep}" in path or path.endswith(f"{os.sep}{n}.py") for n in _NOISE)


def drop_own_explanations(exc: BaseException) -> None:
    """Hypothesis' explanation lines ("Explanation: These lines were always
    and only run by failing examples: <file>:<line> ...", one note per line)
    limited to the user's and torch's frames: those in the plugin's own
    files (``pytest_fsdpcheck/``, but for the reference and the adapters,
    which are implementations) say nothing about the bug and pushed the
    failure off the screen. An explanation left with no line is dropped."""
    for inner in getattr(exc, "exceptions", ()) or ():
        drop_own_explanations(inner)
    notes = list(getattr(exc, "__notes__", None) or ())
    if "Explanation:" not in notes:
        return
    kept: list = []
    i = 0
    while i < len(notes):
        if notes[i] != "Explanation:":
            kept.append(notes[i])
            i += 1
            continue
        block = [notes[i]]
        i += 1
        while i < len(notes) and notes[i].startswith("    "):  # its heading and its locations
            block.append(notes[i])
            i += 1
        heading = [n for n in block[1:] if not n.startswith("        ")]
        lines = [n for n in block[1:] if n.startswith("        ")]
        located = [n for n in lines if not n.strip().startswith("(") and not _own_file(n.strip().rpartition(":")[0])]
        if located:
            kept += [block[0], *heading, *located, *(n for n in lines if n.strip().startswith("("))]
    exc.__notes__ = kept


def _own_file(path: str) -> bool:
    own = _OWN
    try:
        relative = Path(path).resolve().relative_to(own)
    except (ValueError, OSError):
        return False
    return relative.parts[:1] not in (("reference",), ("impls",))
