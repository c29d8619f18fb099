"""Golden-output checker: an implementation's rendering of a corpus model
against the spec's answer in ``fixtures/golden``. Pure: it compares lines.

A difference is charged to the invariant the differing lines are about (see
``LINE_INVARIANTS``); the first violation carries the unified diff.
"""

from __future__ import annotations

import difflib
import re

from . import Violation
from .golden_files import REGENERATE

LINE_INVARIANTS = {
    "traversal": {"states:": "TRV-3", "handles:": "TRV-6", "root states:": "TRV-7"},
    "exec order": {"modules:": "EXO-2", "params:": "EXO-3"},
    "fsdp2": {"fully_shard(": "FS2-1", "  params:": "FS2-4", "  buffers:": "FS2-4"},
}
_BUCKET = re.compile(r"^bucket \d+: (\d+) bytes: (.*?)(?: \| (extended .*))?$")


def unified_diff(expected: list[str], got: list[str], name: str) -> str:
    return "\n".join(
        difflib.unified_diff(expected, got, f"{name} (expected)", f"{name} (got)", lineterm="", n=2)
    )


def check_golden(section: str, expected: list[str] | None, got: list[str], name: str) -> list[Violation]:
    """``expected`` is ``None`` when the golden file has no such section."""
    fallback = {"buckets": "SPL-5", "traversal": "TRV-3", "exec order": "EXO-2", "fsdp2": "FS2-1"}[section]
    if expected is None:
        return [Violation(fallback, f"expected a golden [{section}] section in {name}, found none; "
                          f"a maintainer renders it from the reference with `{REGENERATE}`")]
    if expected == got:
        return []
    ids = _bucket_invariants(expected, got) if section == "buckets" else _line_invariants(section, expected, got)
    diff = unified_diff(expected, got, name)
    violations = []
    for i, invariant in enumerate(ids or [fallback]):
        message = f"expected the golden [{section}] of {name} (the spec's answer), got a different rendering"
        if i == 0:
            message += (" (diff: - expected, + got; a deliberate change to the spec's answer is rendered from the "
                        f"reference with `{REGENERATE}`):\n" + diff)
        violations.append(Violation(invariant, message))
    return violations


def _line_invariants(section: str, expected: list[str], got: list[str]) -> list[str]:
    ids = []
    for prefix, invariant in LINE_INVARIANTS[section].items():
        want = [line for line in expected if line.startswith(prefix)]
        have = [line for line in got if line.startswith(prefix)]
        if want != have:
            ids.append(invariant)
    return ids


def _parse(lines: list[str]):
    buckets = []
    for line in lines:
        match = _BUCKET.match(line)
        if match:
            buckets.append((int(match[1]), match[2].split(), match[3]))
    return buckets


def _bucket_invariants(expected: list[str], got: list[str]) -> list[str]:
    want, have = _parse(expected), _parse(got)
    names = [n for _, params, _ in have for n in params if n != "-"]
    if len(names) != len(set(names)):
        return ["SPL-4"]
    expected_names = {n for _, params, _ in want for n in params if n != "-"}
    if expected_names != set(names):
        return ["SPL-3"]  # a parameter counted that must not be, or the reverse
    if [p for _, p, _ in want] != [p for _, p, _ in have]:
        return ["SPL-5"]
    if [s for s, _, _ in want] != [s for s, _, _ in have]:
        return ["SPL-3"]
    if [e for _, _, e in want] != [e for _, _, e in have]:
        return ["SPL-7"]
    return []
