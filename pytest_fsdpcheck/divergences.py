"""Declared divergences: known, accepted differences of an implementation.

A divergence file is TOML with one ``[[divergence]]`` table per entry::

    [[divergence]]
    match = "TRV-7"                 # an invariant ID, or a test id (suffix of the node id)
    implementation = "torch"        # optional: defaults to the file's implementation, else all
    reason = "why this is accepted" # required

A check failing only on declared invariant IDs (or a declared test failing
for any reason) becomes xfail. An entry that matches no collected test is
*stale*; a declared invariant whose tests all passed is an *unexpected pass*.
Both are reported, and fail the run under ``--fsdpcheck-strict``.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from pathlib import Path

from .catalog import INVARIANTS

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib

_ID = re.compile(r"^(TRV|ANN|SPL|EXO)-\d+$")


class DivergenceFileError(Exception):
    """Malformed divergence file; the message is one line."""


@dataclass(frozen=True)
class Divergence:
    match: str
    reason: str
    implementation: str  # "*" for every implementation
    source: str  # "file:line-ish" for messages

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
        extra = set(entry) - {"match", "reason", "implementation"}
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
        out.append(Divergence(match.strip(), reason.strip(), impl, where))
    return out


def shipped_file_for(impl: str, version: tuple[int, int]) -> Path | None:
    """The divergence file this package ships for ``impl`` at ``version``."""
    from importlib.resources import files

    candidate = files("pytest_fsdpcheck.fixtures") / "divergences" / f"{impl}-{version[0]}.{version[1]}.toml"
    path = Path(str(candidate))
    return path if path.is_file() else None
