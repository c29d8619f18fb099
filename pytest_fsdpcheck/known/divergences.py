"""Declared divergences: known, accepted differences of an implementation.

A divergence file is TOML with one ``[[divergence]]`` table per entry::

    [[divergence]]
    match = "TRV-7"                 # an invariant ID, or a test id (suffix of the node id)
    implementation = "mine"         # optional: defaults to every implementation
    torch = ">=2.4,<2.6"            # optional: the torch versions it holds for (PEP 440)
    test = "test_x.py::test_y[mine]"  # optional, with an invariant match: that test only
    example = "..."                 # optional, with test: that failure only (its signature)
    until = "2.16"                  # optional: the torch release it is expected to end in
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

A *baseline* (``--fsdpcheck-baseline``, written by
``--fsdpcheck-write-baseline``) is a divergence file held to the strict
reading on its own entries: one that excuses no failure (the test it names
passed) or whose ``until`` release is installed fails the run even without
``--fsdpcheck-strict``. ``until`` in a plain divergence file makes an
*expired* entry a strict finding. An expired entry masks nothing.

A baseline keys each entry by the failing example's *signature* as well
(``example``: :func:`example_signature` of the first violation of that
invariant the test reported: its counts, indices, ranks and names kept, its
times and addresses read as ``#``, its measured differences kept as bounds),
so the same test failing its invariant in another way, with another count or
a larger difference, is a new FAIL, not the recorded one. An example written
before counts were kept (every number read as ``#``) still holds what it held
(:func:`held_by_old_examples` names those that did, for a one-line note).
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from pathlib import Path

from ..core.catalog import INVARIANTS

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
    test: str = ""  # with an invariant match: the one test (a suffix of its node id) it covers
    until: str = ""  # the torch release it is expected to end in; "" for none
    #: with ``test``: the one failure it covers, by its signature (example_signature); "" for any
    example: str = ""
    baseline: bool = False  # read from --fsdpcheck-baseline: its findings fail the run

    @property
    def narrow(self) -> bool:
        """Judged entry by entry: it must excuse a failure, or it is fixed."""
        return self.baseline or bool(self.test)

    @property
    def is_invariant(self) -> bool:
        return bool(_ID.match(self.match))

    def applies_to(self, impl: str) -> bool:
        return self.implementation in ("*", impl)

    def matches_test(self, nodeid: str) -> bool:
        return not self.is_invariant and _is_test(nodeid, self.match)

    def in_scope(self, nodeid: str) -> bool:
        """An invariant entry's test narrowing admits this test."""
        return not self.test or _is_test(nodeid, self.test)

    def covers_example(self, invariant: str, signatures: dict[str, str] | None) -> bool:
        """An entry keyed by an example covers only a failure of that signature
        (:func:`example_holds`: its measured differences at most the recorded ones)."""
        return not self.example or example_holds(self.example, (signatures or {}).get(invariant))

    def describe(self) -> str:
        test = f" in {self.test}" if self.test else ""
        example = f" failing as {self.example!r}" if self.example else ""
        return f"{self.match} [{self.implementation}]{test}{example} ({self.source})"


#: a number as messages print one (``12``, ``0.41``, ``1.2e-04``, ``5.1e+03``)
_NUMBER = r"[-+]?(?:\d+(?:\.\d+)?|\.\d+)(?:[eE][-+]?\d+)?"
#: what names a measured difference the number after it gives: ``max abs
#: difference``, ``abs diff``, ``off by``, ``differs by``, ``differs from X by``
#: (never ``first difference``: a module's name may follow it)
_BOUND_HEAD = (r"(?i:\b(?:(?:max(?:imum)?\s+)?abs(?:olute)?\s+(?:difference|diff|error)|max\s+diff"
               r"|off\s+by|differs?\s+by|differs?\s+from\s+[^,;()\n]*?\s+by)\s*[:=]?\s*)")
#: a number standing alone: not inside a name (``m3``, ``bf16``, ``layers.0``)
_ALONE = r"(?<![\w.])"
_AFTER = r"(?!\w|\.\w)"
#: the new signature's parts, left to right: what differs between two runs of
#: one failure (a path under a temporary folder, an address, a process id, a
#: port, a measured time or a ratio of two, read as ``#``) and a measured
#: difference (kept as the bound ``<=VALUE``); every other number is kept
_PARTS = re.compile(
    r"(?P<tmp>(?:/private)?(?:/tmp|/var/folders|/dev/shm)/[^\s'\"),;\]]*)"
    r"|(?P<addr>(?<!\w)0x[0-9a-fA-F]+)"
    r"|(?P<pid>(?i:\bpid)\s*[=:]?\s*)\d+"
    r"|(?P<port>(?<![A-Za-z])(?i:port)\s*[=:]?\s*|(?:\blocalhost|(?<![\w.])\d{1,3}(?:\.\d{1,3}){3}|\]):)\d+"
    rf"|{_ALONE}{_NUMBER}(?P<unit>\s*x the time\b|\s?(?:s|ms|us|\u00b5s|ns|sec|secs|seconds?|minutes?){_AFTER})"
    rf"|(?P<head>{_BOUND_HEAD})(?P<bound>{_NUMBER}|nan|inf){_AFTER}"
)
#: a bound in a signature: a measured difference at most VALUE
_BOUND = re.compile(rf"(?P<head>{_BOUND_HEAD})<=(?P<bound>{_NUMBER}|nan|inf){_AFTER}")
#: the signature before this release: every number standing alone and every address read as ``#``
_OLD_VARYING = re.compile(r"(?<!\w)(?:0x[0-9a-fA-F]+|\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)(?![A-Za-z_])")
#: a signature is cut to this many characters (a bound's value counted as none)
SIGNATURE_LIMIT = 240


def example_signature(message: str) -> str:
    """A violation's message as a baseline keys it: its first line, with the
    counts, indices, ranks, sizes and names (``layers.7.weight``) kept as they
    are, what differs between two runs of one failure (a measured time or a
    ratio of times, an address, a process id, a port, a temporary path) read
    as ``#``, and a measured difference (``max abs difference 1.2e-04``, ``off
    by``, ``differs ... by``) kept as the bound ``<=1.2e-04``: the entry then
    holds that failure again with a difference at most that large
    (:func:`example_holds`), and the same test failing with another count or a
    larger difference reads FAIL."""
    first = (message.strip().splitlines() or [""])[0].strip()
    bounds: list[str] = []

    def part(m: re.Match) -> str:
        if m.group("bound") is not None:
            bounds.append(m.group("bound"))
            return m.group("head") + "\0"
        for keep in ("pid", "port"):
            if m.group(keep) is not None:
                return m.group(keep) + "#"
        return "#" + (m.group("unit") or "")

    # cut at the limit before the bounds' values go in: a longer value cuts no text
    text = _PARTS.sub(part, first.replace("\0", ""))[:SIGNATURE_LIMIT]
    values = iter(bounds)
    return re.sub("\0", lambda _: "<=" + next(values), text)


def _bounded(signature: str) -> tuple[str, list[str]]:
    values: list[str] = []

    def take(m: re.Match) -> str:
        values.append(m.group("bound"))
        return m.group("head") + "<="

    return _BOUND.sub(take, signature), values


def _within(value: str, bound: str) -> bool:
    have, most = float(value), float(bound)
    return have <= most or (have != have and most != most)  # NaN holds NaN only


def is_old_example(example: str) -> bool:
    """An example written before counts and names were kept: a ``#`` and no
    number standing alone, no bound. (One of this release with only times or
    addresses in it reads the same: the old reading gives it the same answer.)"""
    return "#" in example and not _BOUND.search(example) and not _OLD_VARYING.search(example)


def old_signature(signature: str) -> str:
    """A signature read as before this release: every number standing alone as ``#``."""
    return _OLD_VARYING.sub("#", signature.replace("<=", ""))[:SIGNATURE_LIMIT]


def example_holds(example: str, signature: str | None, old: bool = True) -> bool:
    """Whether a failure of ``signature`` is the one an entry's ``example``
    recorded: the same text, each measured difference at most the recorded
    one. An example in the old form (:func:`is_old_example`) holds, with
    ``old``, every failure whose old reading is it (its numbers unchecked)."""
    if signature is None:
        return False
    if signature == example:
        return True
    text, values = _bounded(signature)
    recorded_text, bounds = _bounded(example)
    if values and text == recorded_text and all(map(_within, values, bounds)):
        return True
    return old and is_old_example(example) and old_signature(signature) == example


def _is_test(nodeid: str, test: str) -> bool:
    return nodeid == test or nodeid.endswith("/" + test) or nodeid.endswith(test)


def load(path: str | Path, default_implementation: str = "*", baseline: bool = False) -> list[Divergence]:
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
        extra = set(entry) - {"match", "reason", "implementation", "torch", "test", "until", "example"}
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
        test = entry.get("test", "")
        if not isinstance(test, str) or (test and not _ID.match(match)):
            raise DivergenceFileError(
                f"divergence file {str(path)!r}: entry {n}: 'test' narrows an invariant match to one test id (a string)")
        example = entry.get("example", "")
        if not isinstance(example, str) or (example and not test):
            raise DivergenceFileError(
                f"divergence file {str(path)!r}: entry {n}: 'example' narrows an entry with 'test' to one failure's signature (a string)")
        until = entry.get("until", "")
        if not isinstance(until, str) or (until and not _valid_version(until)):
            raise DivergenceFileError(
                f"divergence file {str(path)!r}: entry {n}: 'until' must be a torch release such as \"2.16\", got {until!r}")
        out.append(Divergence(match.strip(), reason.strip(), impl, where, torch_range.strip(), test.strip(), until.strip(),
                              example.strip(), baseline))
    return out


def _valid_version(text: str) -> bool:
    from packaging.version import InvalidVersion, Version

    try:
        Version(text)
    except InvalidVersion:
        return False
    return True


def _valid_specifier(text: str) -> bool:
    from packaging.specifiers import InvalidSpecifier, SpecifierSet

    try:
        SpecifierSet(text)
    except InvalidSpecifier:
        return False
    return True


def for_torch(entries: list[Divergence], torch_version: str) -> list[Divergence]:
    """The entries whose torch range holds the installed version, and that
    have not expired on it."""
    from packaging.specifiers import SpecifierSet
    from packaging.version import Version

    version = Version(torch_version.split("+")[0])
    expired_now = expired(entries, torch_version)
    return [e for e in entries if (not e.torch or version in SpecifierSet(e.torch)) and e not in expired_now]


def expired(entries: list[Divergence], torch_version: str) -> list[Divergence]:
    """Entries whose ``until`` release is the installed one or older (a
    local or pre-release build of that release counts as it), among those
    whose torch range holds the installed version."""
    from packaging.specifiers import SpecifierSet
    from packaging.version import Version

    version = Version(torch_version.split("+")[0])
    return [e for e in entries if e.until and version.release >= Version(e.until).release
            and (not e.torch or version in SpecifierSet(e.torch, prereleases=True))]


def matching(entries: list[Divergence], impl: str, nodeid: str, invariants: list[str]) -> list[Divergence]:
    """Entries that could declare a test (matched at collection, for staleness)."""
    return [e for e in entries if e.applies_to(impl)
            and (e.matches_test(nodeid) or (e.match in invariants and e.in_scope(nodeid)))]


def covering(entries: list[Divergence], impl: str, nodeid: str, violated: list[str] | None,
             signatures: dict[str, str] | None = None) -> list[Divergence]:
    """The entries that declare a failed test, or [] when none does: a
    test-id entry covers any failure of its test; invariant entries (in
    scope of their test narrowing and, keyed by an example, of that
    signature in ``signatures``: invariant -> signature) cover a failure
    only when every violated invariant is declared."""
    declared = [e for e in entries if e.applies_to(impl)]
    by_test = [e for e in declared if e.matches_test(nodeid)]
    if by_test:
        return by_test[:1]
    by_id = {}
    for e in declared:
        if e.is_invariant and e.in_scope(nodeid) and e.covers_example(e.match, signatures):
            by_id.setdefault(e.match, e)
    if violated and all(v in by_id for v in violated):
        return [by_id[v] for v in violated]
    return []


def excusing(entries: list[Divergence], impl: str, nodeid: str, violated: list[str] | None,
             signatures: dict[str, str] | None = None) -> list[Divergence]:
    """Every entry that takes part in declaring a declared test's failure
    (each one that would cover it, not only the one whose reason is shown):
    these still excuse a failure, none of them is fixed."""
    return [e for e in entries if e.applies_to(impl) and (
        e.matches_test(nodeid) or (e.is_invariant and e.in_scope(nodeid) and e.match in (violated or ())
                                   and e.covers_example(e.match, signatures)))]


def held_by_old_examples(entries: list[Divergence], declared) -> list[Divergence]:
    """The entries whose example is in the old form (:func:`is_old_example`)
    and held a failure of ``declared`` (``(node id, implementation, violated,
    {invariant: signature})``) only by its old reading, numbers unchecked."""
    out = []
    for e in entries:
        if not (e.example and is_old_example(e.example)):
            continue
        for nodeid, impl, violated, signatures in declared:
            if (excusing([e], impl, nodeid, violated, signatures)
                    and not example_holds(e.example, (signatures or {}).get(e.match), old=False)):
                out.append(e)
                break
    return out


def declared_reason(entries: list[Divergence], impl: str, nodeid: str, violated: list[str] | None,
                    signatures: dict[str, str] | None = None) -> str | None:
    """Why a failed test is declared, or None when no entry covers it."""
    found = covering(entries, impl, nodeid, violated, signatures)
    if not found:
        return None
    if not found[0].is_invariant:
        return found[0].reason
    return "; ".join(f"{e.match}: {e.reason}" for e in found)


def baseline_text(failures, torch_version: str) -> str:
    """A baseline file recording today's failures (``(node id, implementation,
    violated invariants or None, {invariant: signature} or None)``): one
    entry per failed test, violated invariant and example signature (a
    test-id entry where the failure named no invariant), sorted, so the file
    is the same serially and under xdist."""
    head = [
        "# pytest-fsdpcheck baseline: today's FAIL cells, one entry per test, invariant and failing example.",
        f"# Written on torch {torch_version}. Run with --fsdpcheck-baseline THIS_FILE: a new FAIL",
        "# (another test, invariant, or way of failing it), an entry that no longer fails, and an",
        "# entry whose `until` release is installed all fail the run. Add `until = \"X.Y\"` where a",
        "# fix is expected in torch X.Y.",
        "",
    ]
    rows = set()
    for nodeid, impl, violated, signatures in failures:
        signatures = signatures or {}
        for inv in violated or [None]:
            rows.add((nodeid, impl, inv or "", signatures.get(inv, "") if inv else ""))
    lines = list(head)
    for nodeid, impl, inv, example in sorted(rows):
        lines.append("[[divergence]]")
        if inv:
            lines += [f"match = {_toml_str(inv)}", f"test = {_toml_str(nodeid)}"]
            if example:
                lines.append(f"example = {_toml_str(example)}")
        else:
            lines.append(f"match = {_toml_str(nodeid)}")
        lines += [f"implementation = {_toml_str(impl)}",
                  f"reason = {_toml_str(f'failing on torch {torch_version} when the baseline was written')}", ""]
    return "\n".join(lines)


def _toml_str(text: str) -> str:
    import json

    # a JSON string of printable text is a TOML basic string
    return json.dumps(text, ensure_ascii=True)
