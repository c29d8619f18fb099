"""Per-area figures and survivors from a session's results."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from .child import MARKER
from .session import UNEVALUATED
from .triage import change_of, reason_for

_CHILD = re.compile(re.escape(MARKER) + r" pytest exit (\d+) in ([\d.]+) s")


@dataclass
class Figures:
    area: str
    mutants: int = 0  # in the area's functions
    pending: int = 0
    killed: int = 0
    #: of the killed, those where pytest stopped before any check ran (its
    #: exit status 2-4: collection, internal or usage error), such as a
    #: mutant that makes torch's module fail at import
    at_startup: int = 0
    survived: int = 0  # not equivalent
    timed_out: int = 0
    equivalent: list = field(default_factory=list)  # (mutant, reason)
    errors: list = field(default_factory=list)  # (mutant, why): harness or worker failures, not counted as killed
    error_jobs: list = field(default_factory=list)  # their Cosmic Ray job ids (--retry-errors runs them again)
    survivors: list = field(default_factory=list)  # (mutant, diff)
    survivor_jobs: list = field(default_factory=list)  # their job ids (--rejudge-survivors runs them again)
    seconds: list = field(default_factory=list)  # the test process's time per judged mutant

    @property
    def score(self) -> float | None:
        judged = self.killed + self.timed_out + self.survived
        return None if not judged else (self.killed + self.timed_out) / judged


def _name(item) -> str:
    m = item.mutations[0]
    where = m.definition_name or "?"
    return f"{m.module_path.as_posix().removeprefix('torch/')}:{m.start_pos[0]} {where} {m.operator_name} #{m.occurrence}"


def figures(area: str, work_items, results: dict, triage: list[dict]) -> Figures:
    from cosmic_ray.work_item import TestOutcome, WorkerOutcome

    fig = Figures(area)
    for item in work_items:
        result = results.get(item.job_id)
        if result is not None and result.worker_outcome == WorkerOutcome.SKIPPED:
            if result.output == UNEVALUATED:
                fig.mutants += 1
                fig.equivalent.append((_name(item), UNEVALUATED.removeprefix("equivalent: ")))
            continue
        fig.mutants += 1
        if result is None:
            fig.pending += 1
            continue
        output = result.output or ""
        if result.worker_outcome != WorkerOutcome.NORMAL:
            fig.errors.append((_name(item), f"worker {result.worker_outcome.value}: {output.strip()[-200:]}"))
            fig.error_jobs.append(item.job_id)
            continue
        if result.test_outcome == TestOutcome.KILLED and output == "timeout":
            fig.timed_out += 1
            continue
        found = _CHILD.search(output)
        if found is None:
            # no line from the test process: it died before or after pytest
            # (a harness error, or a mutant that breaks the interpreter's exit)
            why = next((line for line in output.splitlines() if MARKER in line), output.strip()[-200:])
            fig.errors.append((_name(item), why))
            fig.error_jobs.append(item.job_id)
            continue
        fig.seconds.append(float(found.group(2)))
        if result.test_outcome == TestOutcome.KILLED:
            fig.killed += 1
            fig.at_startup += found.group(1) in ("2", "3", "4")
            continue
        change = change_of(result.diff or "", item.mutations[0].operator_name)
        reason = reason_for(area, change, triage)
        if reason:
            fig.equivalent.append((_name(item), reason))
        else:
            fig.survived += 1
            fig.survivors.append((_name(item), result.diff or ""))
            fig.survivor_jobs.append(item.job_id)
    return fig


def table(rows: list[Figures]) -> str:
    head = ("| area | mutants | killed | of which before any check | survived | timed out | equivalent | errors "
            "| pending | killed of non-equivalent | s per mutant (median) |")
    lines = [head, "|" + " --- |" * 11]
    for fig in rows:
        score = "-" if fig.score is None else f"{fig.score:.0%}"
        median = "-" if not fig.seconds else f"{sorted(fig.seconds)[len(fig.seconds) // 2]:.1f}"
        lines.append(f"| {fig.area} | {fig.mutants} | {fig.killed} | {fig.at_startup} | {fig.survived} | {fig.timed_out} "
                     f"| {len(fig.equivalent)} | {len(fig.errors)} | {fig.pending} | {score} | {median} |")
    return "\n".join(lines)


def details(fig: Figures) -> str:
    out = []
    for name, reason in fig.equivalent:
        out.append(f"equivalent  {name}: {reason}")
    for name, why in fig.errors:
        out.append(f"error       {name}: {why}")
    for name, diff in fig.survivors:
        out.append(f"survived    {name}")
        out.extend("    " + line for line in diff.splitlines() if not line.startswith("--- mutation diff"))
    return "\n".join(out)
