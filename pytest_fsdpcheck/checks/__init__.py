"""Invariant checkers: pure functions over an implementation's outputs that
return the violations they found. Users can call them from their own tests
(like scikit-learn's estimator checks); the conformance suite does too."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Violation:
    invariant: str  # catalog ID, e.g. "TRV-3"
    message: str  # one sentence: what was expected, what happened
    #: what the implementation said (an internal error's type and text): shown,
    #: but not part of the violation's identity, so a known bug matches on what
    #: went wrong in the spec's terms, whatever each release's internals print
    detail: str = field(default="", compare=False)
    #: ``(type name, first line of its message)`` of the implementation's
    #: exception, where the violation is about one. Not compared either (each
    #: release words its internal errors its own way), but the judge never
    #: lets a known bug explain it unless the bug declares that type and a
    #: pattern its message matches (``KnownBug.raises``), or a replay with
    #: the bug's switch raised the same type with the same message pattern.
    error: tuple[str, str] | tuple[()] = field(default=(), compare=False)
    #: what the message shortens, in full (every parameter a bucket lists
    #: wrongly, say): not shown, but part of the violation's identity, so a
    #: known bug explains it only when the whole of it is the same
    evidence: tuple = field(default=(), repr=False)

    def __str__(self) -> str:
        return f"{self.invariant}: {self.message}" + (f" ({self.detail})" if self.detail else "")


class ConformanceFailure(AssertionError):
    """Raised by :func:`assert_conforms`; carries the violated IDs so the
    report can attribute the failure to exactly those invariants."""

    def __init__(self, violations: list[Violation], example: str | None = None):
        self.violations = list(violations)
        self.example = example
        #: set by the plugin, which prints the reproducer as its own section
        #: (without pytest's "E" prefixes, so it can be pasted as is)
        self.example_in_section = False
        super().__init__(self.render())

    def __str__(self) -> str:
        return self.render()

    @property
    def invariants(self) -> list[str]:
        return sorted({v.invariant for v in self.violations})

    def render(self) -> str:
        lines = [str(v) for v in self.violations]
        if self.example and self.example_in_section:
            lines += ["(reproducer: see the 'fsdpcheck reproducer' section below)"]
        elif self.example:
            lines += ["", "Reproducer:", self.example]
        return "\n".join(lines)


class EnvironmentFault(Exception):
    """The check could not judge the implementation: the world it ran in
    could not start (a rank could not join the process group) or failed its
    own self-test (:mod:`pytest_fsdpcheck.runs.selftest`: plain collectives
    on known tensors, the ranks' agreement on their inputs, the control's
    all-reduce of real gradients), before any implementation ran. Nothing
    else: a violation in a world that passed its self-test is a FAIL, even
    one the control or torch's own runtime shares. Not a conformance
    failure: the matrix shows an error naming the environment and the
    self-test's reason. The message starts with
    ``environment (<backend> on <device>, world size N, host(s), GPUs)``."""


def error_of(exc: BaseException) -> tuple[str, str]:
    """What :attr:`Violation.error` holds for ``exc``."""
    return type(exc).__name__, (str(exc).splitlines() or [""])[0]


def assert_conforms(violations: list[Violation], example: str | None = None) -> None:
    if violations:
        raise ConformanceFailure(violations, example)


def short(items, limit: int = 12) -> str:
    """A list rendered for a one-sentence message, elided when long."""
    items = list(items)
    if len(items) <= limit:
        return "[" + ", ".join(map(str, items)) + "]"
    head = ", ".join(map(str, items[: limit - 2]))
    return f"[{head}, ... ({len(items) - limit + 2} more), {items[-1]}]"


def difference(expected, got, limit: int = 8) -> str:
    """What a message says of two collections of names that should be equal:
    the difference, never both in full (a 45-module model printed two
    45-name lists): what is missing and what is extra, each elided past
    ``limit``; for the same names in another order (or repeated), the first
    position they differ at. The full collections belong in the
    violation's ``evidence``."""
    expected, got = list(expected), list(got)
    missing = [x for x in expected if x not in got]
    extra = [x for x in got if x not in expected]
    parts = [f"missing {short(missing, limit)}"] * bool(missing) + [f"extra {short(extra, limit)}"] * bool(extra)
    if not parts:
        return first_difference(expected, got)
    return "; ".join(parts) + f" ({len(got)} given, {len(expected)} expected)"


def one_line(text, limit: int = 200) -> str:
    """An implementation's text (an error, a repr) for a message: its first
    line, cut at ``limit`` characters, saying how much was left out (a
    ``ModuleDict``'s repr is 40 lines)."""
    lines = str(text).splitlines() or [""]
    first = lines[0].rstrip()
    cut = first if len(first) <= limit else first[: limit - 3] + "..."
    more = sum(1 for line in lines[1:] if line.strip())
    return cut + (f" [{more} more line{'s' * (more != 1)}]" if more else "")


def by_rank(violations: list[Violation]) -> list[Violation]:
    """Violations that every rank reports alike, once: ``rank 0: X`` and
    ``rank 1: X`` become ``ranks 0, 1: X`` (``rank N, <mode>: X`` likewise,
    per mode), in the order first met; the messages merged stay in the
    evidence."""
    import re

    merged: dict = {}
    for v in violations:
        match = re.match(r"rank (\S+?)(, [^:]+)?: (.*)", v.message, re.S)
        key = (v.invariant, match.group(2), match.group(3), v.detail) if match else (id(v),)
        merged.setdefault(key, []).append((match.group(1) if match else None, v))
    out = []
    for key, found in merged.items():
        if len(found) == 1:
            out.append(found[0][1])
            continue
        _, mode, text, _ = key
        first = found[0][1]
        ranks = ", ".join(rank for rank, _ in found)
        out.append(Violation(first.invariant, f"ranks {ranks}{mode or ''}: {text}", first.detail, first.error,
                             tuple(e for _, v in found for e in (v.evidence or (v.message,)))))
    return out


def first_difference(expected: list, got: list) -> str:
    for i, (e, g) in enumerate(zip(expected, got, strict=False)):
        if e != g:
            return f"first difference at position {i}: expected {e}, got {g}"
    return f"lengths differ: expected {len(expected)}, got {len(got)}"
