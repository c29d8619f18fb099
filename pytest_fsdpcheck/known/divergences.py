"""Declared divergences: known, accepted differences of an implementation.

A divergence file is TOML with one ``[[divergence]]`` table per entry::

    [[divergence]]
    match = "TRV-7"                 # an invariant ID, or a test id (suffix of the node id)
    implementation = "mine"         # optional: defaults to every implementation
    torch = ">=2.4,<2.6"            # optional: the torch versions it holds for (PEP 440)
    reason = "why this is accepted" # required

A check failing only on declared invariant IDs (or a declared test failing
for any reason) becomes xfail. An invariant-level entry masks every failure
of that invariant, including a new, different bug; a test id masks one test.
To declare one behaviour narrowly, model it as a known bug of the
implementation (:mod:`pytest_fsdpcheck.known`). An entry that matches no
collected test is *stale*; a declared invariant whose tests all ran and
passed is an *unexpected pass*. Both are reported, and fail the run under
``--fsdpcheck-strict``; neither is judged for tests that ``-k`` or a node id
deselected, nor after an interrupted run.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from pathlib import Path

from ..catalog import INVARIANTS

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib

_ID = re.compile(r"^[A-Z][A-Z0-9]*-\d+$")


class DivergenceFileError(Exception):
    """Malformed divergence file; the message is one line."""


@dataclass(frozen=True)
class Divergence:
    match: str
    reason: str
    implementation: str  # "*" for every implementation
    source: str  # "file:line-ish" for messages
    torch: str = ""  # PEP 440 specifier over torch's version; "" for every version

    @property
    def is_invariant(self) -> bool:
        return bool(_ID.match(self.match))

    def applies_to(self, impl: str) -> bool:
        return self.implementation in ("*", impl)

    def matches_test(self, nodeid: str) -> bool:
        return not self.is_invariant and (nodeid == self.match or nodeid.endswith("/" + self.match) or nodeid.endswith(self.match))


def load(path: str | Path, default_implementation: str = "*") -> list[Divergence]:
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise DivergenceFileError(f"divergence file {str(path)!r}: cannot read: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        raise DivergenceFileError(f"divergence file {str(path)!r}: not UTF-8 text (byte {exc.start})") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise DivergenceFileError(f"divergence file {str(path)!r}: not valid TOML: {exc}") from None
    unknown = set(data) - {"divergence"}
    if unknown:
        raise DivergenceFileError(
            f"divergence file {str(path)!r}: unknown top-level key(s) {sorted(unknown)}; expected [[divergence]] tables"
        )
    entries = data.get("divergence", [])
    if not isinstance(entries, list):
        raise DivergenceFileError(f"divergence file {str(path)!r}: 'divergence' must be an array of tables ([[divergence]])")
    out = []
    for n, entry in enumerate(entries, 1):
        where = f"{path.name} entry {n}"
        if not isinstance(entry, dict):
            raise DivergenceFileError(f"divergence file {str(path)!r}: entry {n} is not a table")
        extra = set(entry) - {"match", "reason", "implementation", "torch"}
        if extra:
            raise DivergenceFileError(f"divergence file {str(path)!r}: entry {n} has unknown key(s) {sorted(extra)}")
        match, reason = entry.get("match"), entry.get("reason")
        if not isinstance(match, str) or not match.strip():
            raise DivergenceFileError(f"divergence file {str(path)!r}: entry {n} needs a 'match' string")
        if not isinstance(reason, str) or not reason.strip():
            raise DivergenceFileError(f"divergence file {str(path)!r}: entry {n} ({match}) needs a 'reason'")
        if _ID.match(match) and match not in INVARIANTS:
            raise DivergenceFileError(f"divergence file {str(path)!r}: entry {n}: unknown invariant {match!r}")
        impl = entry.get("implementation", default_implementation)
        if not isinstance(impl, str):
            raise DivergenceFileError(f"divergence file {str(path)!r}: entry {n}: 'implementation' must be a string")
        torch_range = entry.get("torch", "")
        if not isinstance(torch_range, str) or not _valid_specifier(torch_range):
            raise DivergenceFileError(
                f"divergence file {str(path)!r}: entry {n}: 'torch' must be a version range such as \">=2.4,<2.6\", got {torch_range!r}"
            )
        out.append(Divergence(match.strip(), reason.strip(), impl, where, torch_range.strip()))
    return out


def _valid_specifier(text: str) -> bool:
    from packaging.specifiers import InvalidSpecifier, SpecifierSet

    try:
        SpecifierSet(text)
    except InvalidSpecifier:
        return False
    return True


def for_torch(entries: list[Divergence], torch_version: str) -> list[Divergence]:
    """The entries whose torch range holds the installed version."""
    from packaging.specifiers import SpecifierSet
    from packaging.version import Version

    version = Version(torch_version.split("+")[0])
    return [e for e in entries if not e.torch or version in SpecifierSet(e.torch)]


def matching(entries: list[Divergence], impl: str, nodeid: str, invariants: list[str]) -> list[Divergence]:
    """Entries that could declare a test (matched at collection, for staleness)."""
    return [e for e in entries if e.applies_to(impl) and (e.matches_test(nodeid) or e.match in invariants)]


def declared_reason(entries: list[Divergence], impl: str, nodeid: str, violated: list[str] | None) -> str | None:
    """Why a failed test is declared, or None when no entry covers it: a
    test-id entry covers any failure of its test; invariant entries cover a
    failure only when every violated invariant is declared."""
    declared = [e for e in entries if e.applies_to(impl)]
    by_test = [e for e in declared if e.matches_test(nodeid)]
    if by_test:
        return by_test[0].reason
    by_id = {e.match: e for e in declared if e.is_invariant}
    if violated and all(v in by_id for v in violated):
        return "; ".join(f"{v}: {by_id[v].reason}" for v in violated)
    return None
