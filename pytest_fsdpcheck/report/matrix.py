"""The invariant x implementation matrix: every suite test's verdicts, the
worst outcome per cell.
"""

from __future__ import annotations

from collections import defaultdict

from ..core.catalog import INVARIANTS, sort_key
from .verdict import (
    PROP_CALLS,
    PROP_CASE_ERROR,
    PROP_CAUSE,
    PROP_DIGEST,
    PROP_ENVIRONMENT,
    PROP_EXAMPLES,
    PROP_IMPL,
    PROP_INVARIANTS,
    PROP_KNOWN,
    PROP_MODEL,
    PROP_RUN,
    PROP_SIGNATURES,
    PROP_VIOLATED,
    RANK,
    SYMBOL,
    _props,
    classify,
    failure_kind,
    failure_of,
)


class Matrix:
    """The run's cells, each the worst outcome of every test charged to it,
    and, per user's model (:data:`PROP_MODEL`), a ``Matrix`` of that model's
    tests alone (``models``): the same reports, so a model's cell is the
    part of the run's cell its tests make."""

    def __init__(self, model: str | None = None):
        #: the model whose tests alone this matrix holds; None: the run's, every test
        self.model = model
        #: model spec -> the cells of its tests alone (no unexpected passes: a declaration's are the run's cells')
        self.models: dict[str, Matrix] = {}
        self.cells: dict[tuple[str, str], set[str]] = defaultdict(set)
        self.tests: dict[tuple[str, str], int] = defaultdict(int)
        self.impls: list[str] = []
        self.per_test: dict[str, dict] = {}
        #: (impl, known-bug id) -> examples explained; (invariant, impl) -> bug ids seen there
        self.known_examples: dict[tuple[str, str], int] = defaultdict(int)
        self.known_in_cell: dict[tuple[str, str], set[str]] = defaultdict(set)
        self.known_met: set[tuple[str, str]] = set()  # (impl, bug id) some example was explained by
        #: model spec -> its one-line case error (no implementation's cell)
        self.case_errors: dict[str, str] = {}
        #: (invariant, impl) -> {"not provided" or "skipped": the reasons its tests gave}
        self.reasons: dict[tuple[str, str], dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))
        #: whose fault each failed test report of the run was (FAILURE_KINDS), counted: the exit
        #: status is drawn from it (verdicts.exit_status), on the xdist controller from every worker's
        self.failures: dict[str, int] = defaultdict(int)
        #: (node id, impl, violated invariants or None, {invariant: example
        #: signature} or None) of the tests that failed in their call, and of
        #: those a divergence entry declared: what a baseline records, and
        #: which entries still excuse a failure
        self.failed_tests: list[tuple[str, str, list[str] | None, dict | None]] = []
        self.declared_tests: list[tuple[str, str, list[str] | None, dict | None]] = []

    def add_impl(self, name: str) -> None:
        if name not in self.impls:
            self.impls.append(name)

    def record(self, report) -> None:
        props = _props(report)
        if report.failed and not hasattr(report, "wasxfail"):  # pytest's own xfail flag
            self.failures[failure_kind(props)] += 1
        case_error = props.get(PROP_CASE_ERROR)
        if case_error is not None:
            if report.failed:
                self.case_errors[case_error["model"]] = case_error["error"]
                self.per_test[report.nodeid] = {"outcome": "error", "case_error": case_error["error"]}
            return
        invariants = props.get(PROP_INVARIANTS)
        impl = props.get(PROP_IMPL)
        if not invariants or impl is None:
            return
        model = props.get(PROP_MODEL)
        if model is not None and self.model is None:
            self.models.setdefault(model, Matrix(model)).record(report)
        # a crashed xdist worker's report says when="???": it died during the call
        when = report.when if report.when in ("setup", "teardown") else "call"
        test = self.per_test.setdefault(report.nodeid, {"outcome": None, "implementation": impl,
                                                         "invariants": list(invariants),
                                                         **({"model": model} if model is not None else {})})
        judged = when == "call" or (when == "setup" and not report.passed)
        verdicts = classify(report, invariants, props) if judged else {}
        if when == "call" or not report.passed:
            excused = any(v.kind in ("known", "divergence") for v in verdicts.values())
            test["outcome"] = "xfail" if excused else report.outcome
        if when == "call":
            test["seconds"] = round(report.duration, 4)
        for key, prop in (("calls", PROP_CALLS), ("examples", PROP_EXAMPLES), ("digest", PROP_DIGEST), ("known", PROP_KNOWN),
                          ("run", PROP_RUN), ("environment", PROP_ENVIRONMENT)):
            if prop in props:
                test[key] = props[prop]
        if judged:
            self.add_impl(impl)
            if report.failed and not props.get(PROP_ENVIRONMENT):
                test["failure"] = failure_of(report, props.get(PROP_VIOLATED) or invariants,
                                             props.get(PROP_CAUSE, "crash"))
            for inv, verdict in verdicts.items():
                self.cells[(inv, impl)].add(verdict.kind)
                self.tests[(inv, impl)] += 1
                if verdict.reason is not None:
                    test["reason"] = verdict.reason
                    self.reasons[(inv, impl)][verdict.kind].add(verdict.reason)
            if when == "call":
                self._record_known(impl, invariants, props.get(PROP_KNOWN) or {})
                if report.failed:
                    self.failed_tests.append((report.nodeid, impl, props.get(PROP_VIOLATED), props.get(PROP_SIGNATURES)))
                elif any(v.kind == "divergence" for v in verdicts.values()):
                    self.declared_tests.append((report.nodeid, impl, props.get(PROP_VIOLATED), props.get(PROP_SIGNATURES)))
        elif when == "teardown" and report.failed:
            for inv in invariants:
                self.cells[(inv, impl)].add("fail")

    def _record_known(self, impl: str, invariants: list[str], known: dict) -> None:
        for bug_id, seen in known.items():
            self.known_met.add((impl, bug_id))
            self.known_examples[(impl, bug_id)] += seen["examples"]
            hit = [inv for inv in seen["invariants"] if inv in invariants] or invariants
            for inv in hit:
                if "known" in self.cells.get((inv, impl), ()):
                    self.known_in_cell[(inv, impl)].add(bug_id)

    @property
    def known_order(self) -> list[tuple[str, str]]:
        """(impl, bug id) as the matrix numbers them from 1: by column, then
        by the catalog's order (``impls.torch_bugs``; another
        implementation's own bugs after, by id), never by which test met
        them first, which differs between a serial run and ``-n N``."""
        from ..impls.torch_bugs import TORCH_BUGS

        catalog = {bug.id: i for i, bug in enumerate(TORCH_BUGS)}
        columns = {impl: i for i, impl in enumerate(self.impls)}
        return sorted(self.known_met, key=lambda met: (columns.get(met[0], len(columns)), met[0],
                                                       catalog.get(met[1], len(catalog)), met[1]))

    def cell_text(self, inv: str, impl: str, known_order: list[tuple[str, str]] | None = None) -> str:
        """``known_order``: the run's numbering of known bugs, for a model's cell."""
        outcome = self.outcome(inv, impl)
        if outcome == "known":
            order = self.known_order if known_order is None else known_order
            numbers = sorted(order.index((impl, b)) + 1 for b in self.known_in_cell[(inv, impl)])
            return "known " + ",".join(f"[{n}]" for n in numbers)
        return SYMBOL.get(outcome, "-")

    def outcome(self, inv: str, impl: str) -> str | None:
        seen = self.cells.get((inv, impl))
        if not seen:
            return None
        return min(seen, key=RANK.index)

    def invariants(self) -> list[str]:
        return sorted({inv for inv, _ in self.cells}, key=sort_key)

    def mark_unexpected_passes(self, declared: dict[str, set[str]]) -> list[tuple[str, str]]:
        """Declared invariants (impl -> IDs) whose tests all passed."""
        found = []
        for impl, ids in declared.items():
            for inv in ids:
                if self.outcome(inv, impl) == "pass":
                    self.cells[(inv, impl)].add("unexpected pass")
                    found.append((inv, impl))
        return found

    def render(self) -> list[str]:
        invs = self.invariants()
        if not invs:
            return ["no conformance tests ran"]
        order = self.known_order
        models = [(f"{inv} [{spec}]", [sub.cell_text(inv, impl, order) for impl in self.impls])
                  for spec, sub in sorted(self.models.items()) for inv in sub.invariants()]
        width = max(8, *(len(i) for i in self.impls), *(len(self.cell_text(inv, i)) for inv in invs for i in self.impls),
                    *(len(text) for _, row in models for text in row))
        lines = ["invariant  " + "  ".join(f"{i:<{width}}" for i in self.impls) + "  statement"]
        for inv in invs:
            row = [self.cell_text(inv, impl) for impl in self.impls]
            lines.append(f"{inv:<9}  " + "  ".join(f"{c:<{width}}" for c in row) + f"  {INVARIANTS.get(inv, '')}")
        totals = defaultdict(int)
        for inv in invs:
            for impl in self.impls:
                totals[SYMBOL.get(self.outcome(inv, impl), "-")] += 1
        lines.append("cells: " + ", ".join(f"{n} {k}" for k, n in sorted(totals.items())))
        if models:
            # each model's own rows: the part of the cells above its tests make
            label = max(len("invariant [model]"), *(len(name) for name, _ in models))
            lines.append("your models, each its own tests' cells (the rows above hold every test, theirs included):")
            lines.append(f"{'invariant [model]':<{label}}  " + "  ".join(f"{i:<{width}}" for i in self.impls).rstrip())
            lines.extend(f"{name:<{label}}  " + "  ".join(f"{c:<{width}}" for c in row).rstrip() for name, row in models)
        return lines

    def to_json(self) -> dict:
        return {
            impl: {
                inv: {
                    "outcome": self.outcome(inv, impl),
                    "tests": self.tests.get((inv, impl), 0),
                    **({"known": sorted(self.known_in_cell[(inv, impl)])} if self.outcome(inv, impl) == "known" else {}),
                    **({"reasons": sorted(self.reasons[(inv, impl)][self.outcome(inv, impl)])}
                       if self.outcome(inv, impl) in ("not provided", "skipped") else {}),
                }
                for inv in self.invariants()
                if self.outcome(inv, impl) is not None
            }
            for impl in self.impls
        }
