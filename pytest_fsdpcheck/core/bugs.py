"""A known bug: an executable model of one way an implementation departs
from the spec, narrow enough that it can never hide a different bug.

Its *signature* decides, example by example, whether a failing check is
explained by it. The preferred signature is the reference implementation
with one switch that reproduces the bug: an example is explained when the
implementation's violations are exactly the ones that buggy reference shows
on the same example (the checkers describe outputs in the spec's own terms,
so equal violations mean the outputs depart from the spec in the same way).
Where no switch fits, a predicate over the violations decides.

This module imports no torch.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from .catalog import INVARIANTS, area_of

#: an upstream reference, ``owner/repo#number``, as GitHub names an issue or pull request
UPSTREAM_REF = re.compile(
    r"(?P<owner>[A-Za-z0-9][A-Za-z0-9-]{0,38})/(?P<repo>[A-Za-z0-9._-]{1,100})#(?P<number>[1-9][0-9]*)"
)


def upstream_url(ref: str) -> str:
    """The GitHub page of ``owner/repo#number`` (its issues/ address: GitHub
    redirects a pull request's number there to the pull request)."""
    match = UPSTREAM_REF.fullmatch(ref)
    if match is None:
        raise ValueError(f"not an upstream reference (owner/repo#number): {ref!r}")
    return f"https://github.com/{match['owner']}/{match['repo']}/issues/{match['number']}"


@dataclass(frozen=True)
class KnownBug:
    #: stable, readable id, e.g. ``"spl-param-counted-per-use"``
    id: str
    #: the invariant IDs it breaks
    invariants: tuple[str, ...]
    #: why, naming the implementation's code
    reason: str
    #: PEP 440 specifier over the installed torch's version ("" = every version)
    affects: str = ""
    #: (first, last) release it was measured on, for reports; () if not measured
    seen: tuple[str, ...] = ()
    #: area -> keyword switches of that reference area that reproduce the bug
    reference: Mapping[str, Mapping[str, object]] = field(default_factory=dict)
    #: alternative signature: violations -> explained?
    predicate: Callable[[list], bool] | None = None
    #: a standalone script that imports only torch and exits 1 while the bug is there
    reproducer: str | None = None
    #: splitting only: the graph forms ("dynamo", "module") whose code path has the bug; () = every form
    forms: tuple[str, ...] = ()
    #: ``(exception type name, regex)`` for each internal error the bug makes
    #: the implementation raise (a release may word it differently): a
    #: violation carrying an exception is explained only when its type is
    #: one of these and the first line of its message matches the pattern
    raises: tuple[tuple[str, str], ...] = ()
    #: the upstream report of this very behaviour, or the pull request that
    #: fixed (or introduced) it, each as ``"owner/repo#number"`` (e.g.
    #: ``"pytorch/pytorch#162338"``); () = not reported upstream that we know of
    upstream: tuple[str, ...] = ()
    #: shows only where ``torch.compile`` runs (its checks compile): where
    #: this Python and build cannot compile at all (torch 2.0 under Python
    #: 3.11), no run can show it, and strict does not call it fixed
    needs_compile: bool = False
    #: ids of known bugs that, where they apply too, fail this bug's only
    #: step first (another error at the same step): where one of them
    #: explained examples in the run, this one cannot show, and strict does
    #: not call it fixed
    masked_by: tuple[str, ...] = ()
    #: release -> why the suite cannot observe the bug there though its
    #: range holds it (``known.observed``: a run of that release where it
    #: explained nothing is otherwise a range wider than the bug)
    unobservable: Mapping[str, str] = field(default_factory=dict)

    def raised_this(self, error) -> bool:
        """Whether ``error`` (:attr:`Violation.error`) is one this bug raises."""
        return any(error[0] == kind and re.search(pattern, error[1]) for kind, pattern in self.raises)

    def __post_init__(self):
        unknown = [i for i in self.invariants if i not in INVARIANTS]
        if unknown or not self.invariants:
            raise ValueError(f"known bug {self.id!r}: unknown or missing invariants {unknown}")
        if bool(self.reference) == (self.predicate is not None):
            raise ValueError(f"known bug {self.id!r}: give exactly one signature, reference switches or a predicate")
        for area in self.reference:
            if area not in {area_of(i) for i in self.invariants}:
                raise ValueError(f"known bug {self.id!r}: switches for area {area!r} but no invariant of it")
        for kind, pattern in self.raises:
            if not kind.isidentifier():
                raise ValueError(f"known bug {self.id!r}: {kind!r} is not an exception type name")
            re.compile(pattern)
        bad = [ref for ref in self.upstream if not isinstance(ref, str) or not UPSTREAM_REF.fullmatch(ref)]
        if bad or isinstance(self.upstream, str):
            raise ValueError(f"known bug {self.id!r}: upstream references must be a tuple of 'owner/repo#number', "
                             f"not {bad or self.upstream!r}")
        object.__setattr__(self, "reference", MappingProxyType({a: dict(s) for a, s in self.reference.items()}))

    def applies_to_version(self, version: str) -> bool:
        if not self.affects:
            return True
        from packaging.specifiers import SpecifierSet
        from packaging.version import Version

        return Version(version.split("+")[0]) in SpecifierSet(self.affects)

    @property
    def seen_range(self) -> str:
        if not self.seen:
            return "not measured"
        first, last = self.seen[0], self.seen[-1]
        return first if first == last else f"{first} … {last}"


def known_bugs_of(impl) -> tuple[KnownBug, ...]:
    """The bugs an implementation declares about itself (``known_bugs``)."""
    bugs = getattr(impl, "known_bugs", None) or ()
    return tuple(b for b in bugs if isinstance(b, KnownBug))


def active_bugs(impl, torch_version: str, form: str | None = None) -> tuple[KnownBug, ...]:
    """``form``: the graph form of the example being judged (splitting), if any."""
    return tuple(
        b
        for b in known_bugs_of(impl)
        if b.applies_to_version(torch_version) and (form is None or not b.forms or form in b.forms)
    )

