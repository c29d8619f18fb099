"""A user's recorded FSDP2 plan replayed call by call on a model: each call's
roots and ignored parameters on that model, and the spec's oracle placed at
the call, the earlier calls' groups in place.

Every check and exposure that walks a plan goes through :class:`PlanReplay`
(over ``checks.plan.placed``), so what "the model as the earlier calls leave
it" means is written once.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from .recording import RecordedCall, RecordedPlan


def calls_on(record: RecordedPlan, model) -> list[tuple[tuple, set | None]]:
    """The recorded calls as ``(roots, ignored)`` objects of ``model`` (a copy
    of the pristine one, found by qualified name)."""
    params = dict(model.named_parameters())
    out = []
    for call in record.calls:
        roots = tuple(model.get_submodule(r) for r in call.roots)
        ignored = None if call.ignored is None else {params[n] for n in call.ignored if n in params}
        out.append((roots, ignored))
    return out


def replicate_on(record: RecordedPlan, model) -> list:
    """The modules another composable API (``replicate``) owns on ``model``:
    the case's own and those recorded at any call."""
    names = set(record.case.replicate)
    for call in record.calls:
        names |= set(call.replicate)
    return [model.get_submodule(n) for n in sorted(names)]


@dataclass
class PlanStep:
    call: RecordedCall
    roots: tuple  # the call's roots, modules of the replayed model
    ignored: set | None  # its ignored parameters there, or None
    oracle: object  # checks.plan.OracleInput, placed at this call

    @property
    def effective(self) -> list:
        """The roots that take a group of their own at this call, modules of the replayed model."""
        from ..checks.plan import effective_modules

        return effective_modules(self.oracle)


class PlanReplay:
    """The recorded calls replayed on ``model``: iterating gives one
    :class:`PlanStep` per call, in the plan's order.

    ``oracle`` (``checks.plan.OracleInput`` over ``model``) exists before the
    first step and stays after the last. When the consumer asks for the next
    step, this one's effective roots become earlier groups for the oracle
    and, where ``area`` (an implementation's fsdp2 area) is given and
    ``mark_groups`` holds, are marked through it as holding one;
    ``replicate``'s modules are marked through ``area`` before the first. A
    consumer that stops (a call raised) leaves the model as that call found it.
    """

    def __init__(self, record: RecordedPlan, model, area=None, *, mark_groups: bool = True):
        from ..checks.plan import OracleInput

        self.record, self.model, self.area, self.mark_groups = record, model, area, mark_groups
        replicate = replicate_on(record, model)
        if area is not None:
            for module in replicate:
                area.mark_incompatible(module, "replicate")
        self.oracle = OracleInput(model, replicate)

    def __iter__(self) -> Iterator[PlanStep]:
        from ..checks.plan import placed

        on_group = self.area.mark_own_group if self.area is not None and self.mark_groups else None
        steps = placed(self.oracle, calls_on(self.record, self.model), on_group)
        for (roots, ignored), call in zip(steps, self.record.calls, strict=True):
            yield PlanStep(call, roots, ignored, self.oracle)
