"""The recall table: every row of ``rows_*.py``, and applying one."""

from __future__ import annotations

import importlib
import pkgutil
from pathlib import Path

from benchmarks.recall.row import RealBug

_HERE = Path(__file__).parent

#: the MonkeyPatch of the row applied in this process: kept so the patch
#: lives as long as the interpreter (nothing undoes it)
_APPLIED = []


def rows() -> tuple[RealBug, ...]:
    """All rows, file by file (``rows_<area>.py``), in each file's order."""
    found: list[RealBug] = []
    for info in sorted(pkgutil.iter_modules([str(_HERE)]), key=lambda m: m.name):
        if info.name.startswith("rows_"):
            found.extend(importlib.import_module(f"benchmarks.recall.{info.name}").ROWS)
    ids = [row.id for row in found]
    duplicated = sorted({i for i in ids if ids.count(i) > 1})
    if duplicated:
        raise ValueError(f"recall rows named twice: {', '.join(duplicated)}")
    return tuple(found)


def row(row_id: str) -> RealBug:
    for candidate in rows():
        if candidate.id == row_id:
            return candidate
    raise KeyError(f"no recall row {row_id!r}")


def apply(row_id: str) -> None:
    """Put the row's old behaviour into this interpreter's torch."""
    from pytest import MonkeyPatch

    bug = row(row_id)
    if bug.patch is not None:
        patcher = MonkeyPatch()
        bug.patch(patcher)
        _APPLIED.append(patcher)
