"""The invariant x implementation matrix, assembled from test reports.

Each conformance test carries the IDs it checks and its implementation in
``user_properties`` (they survive pytest-xdist), and a failing check adds the
IDs it actually violated, so a failure is charged to exactly those cells.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections import defaultdict
from typing import NamedTuple

from ..core.budget import BUDGET_SKIP
from ..core.catalog import INVARIANTS, sort_key

PROP_INVARIANTS = "fsdpcheck_invariants"
PROP_IMPL = "fsdpcheck_impl"
PROP_VIOLATED = "fsdpcheck_violated"
#: a failing check's example signature per violated invariant (known.divergences.example_signature)
PROP_SIGNATURES = "fsdpcheck_signatures"
#: a not-provided test's reason (core.not_provided.NotProvided, or the area or form it lacks)
PROP_NOT_PROVIDED = "fsdpcheck_not_provided"
PROP_CALLS = "fsdpcheck_calls"
PROP_EXAMPLES = "fsdpcheck_examples"
PROP_DIGEST = "fsdpcheck_examples_digest"
PROP_RUN = "fsdpcheck_run"  # a property's examples, area, worker and generator features
PROP_KNOWN = "fsdpcheck_known"  # {known-bug id: examples it explained}
#: why a distributed check could not judge the implementation (the world or its control failed)
PROP_ENVIRONMENT = "fsdpcheck_environment"
#: a user's model case that is the user's mistake: {"model": spec, "error": one line}
PROP_CASE_ERROR = "fsdpcheck_case_error"
#: the user's model factory a suite test checks (its ``--fsdpcheck-model`` spec), on
#: the tests parametrized by one: the matrix keeps that model's cells apart too
PROP_MODEL = "fsdpcheck_model"
#: what ended a failed suite test's call (one of FAILURE_CAUSES; plugin.verdicts.judge_report)
PROP_CAUSE = "fsdpcheck_cause"
#: a failure's cause, as its report records it (``failure.cause``): "violation",
#: a check's ConformanceFailure (its ``invariants`` are the ones it found
#: violated); "leak", process-wide state left changed (LeakedGlobalState);
#: "timeout", a call past the per-call limit; "crash", anything else that
#: ended the test (an exception escaping the check, a failed setup, a worker
#: that died). Only a "violation" says a check judged an invariant broken:
#: the others name every invariant of the test, none of them judged.
FAILURE_CAUSES = ("violation", "leak", "timeout", "crash")
#: how a failure a divergence entry declares is marked (report.wasxfail)
DECLARED_PREFIX = "declared divergence: "

#: the JSON report's format (``report.schema.json`` beside this module). Raised
#: when a field is removed, renamed or changes meaning; a field added keeps it.
SCHEMA_VERSION = 1
#: a failure's message in the report is cut to this many characters
MESSAGE_LIMIT = 4000
#: what a failure's message says where the reproducer is its own section (checks.ConformanceFailure)
REPRODUCER_BELOW = "\n(reproducer: see the 'fsdpcheck reproducer' section below)"

# Worst first: a cell shows the worst outcome among its tests. An
# environment error is below a FAIL (a real failure elsewhere in the cell
# still shows) and above everything else (nothing was judged).
RANK = ["fail", "error", "unexpected pass", "divergence", "known", "pass", "skipped", "not provided"]
SYMBOL = {
    "fail": "FAIL",
    "error": "ERROR",
    "unexpected pass": "XPASS",
    "divergence": "declared",
    "known": "known",
    "pass": "pass",
    "skipped": "skipped",
    "not provided": "n/p",
}


#: The run's exit statuses, each saying whose fault (README, "Exit statuses"):
#: pytest's own 0-6 (2 interrupted, 3 internal error, 4 usage error, 5 no
#: tests collected, 6 too many warnings) are left as pytest sets them; a run
#: that ran its tests exits with the first of these that applies, in this
#: order (a conformance FAIL outranks the rest: retrying the machine cannot
#: fix it, nor the case; a case error outranks an ERROR for the same reason).
EXIT_FAIL = 1  # pytest's TESTS_FAILED: a conformance FAIL, or any other test that failed
EXIT_CASE_ERROR = 11  # a user's model or plan the suite cannot check (--fsdpcheck-model)
EXIT_ENVIRONMENT = 10  # ERROR: the machine (a world's self-test, joining, a time-out; a missing device; a report not written)
EXIT_STRICT = 12  # --fsdpcheck-strict's findings: stale or unexpectedly passing declarations, n/p where provided
EXIT_PRECEDENCE = (EXIT_FAIL, EXIT_CASE_ERROR, EXIT_ENVIRONMENT, EXIT_STRICT, 0)
EXIT_MEANING = {
    EXIT_FAIL: "conformance FAIL (the implementation's code: page its owner)",
    EXIT_CASE_ERROR: "case error (your model or plan cannot be checked: fix it)",
    EXIT_ENVIRONMENT: "environment ERROR (the machine could not judge: retry it, or another)",
    EXIT_STRICT: "strict findings (your declarations are stale or expected what did not happen: update them)",
}
#: whose fault a failed test report is: the user's case (a model or plan
#: that cannot be checked), the environment (a world that could not judge:
#: the self-test, joining, a time-out), or a conformance failure (anything
#: else that failed, a test outside the suite included)
FAILURE_KINDS = ("fail", "case error", "environment")


def failure_kind(props: dict) -> str:
    if props.get(PROP_CASE_ERROR) is not None:
        return "case error"
    if props.get(PROP_ENVIRONMENT):
        return "environment"
    return "fail"


def model_id(spec: str) -> str:
    """A user's model ``pkg.models:make`` as its test ids name it."""
    # "pkg.models.make" reads better in a test id without the colon
    return spec.replace(":", ".")


def model_test_suffixes(models) -> dict[str, str]:
    """How a test id checking a user's model ends (``[pkg.mod.make]``,
    ``-pkg.mod.make]``) -> the model's spec."""
    return {f"{sep}{model_id(spec)}]": spec for spec in models for sep in ("[", "-")}


def _props(report) -> dict:
    return {k: v for k, v in getattr(report, "user_properties", ())}


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
        if report.failed and not hasattr(report, "wasxfail"):
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
        if when == "call" or not report.passed:
            test["outcome"] = "xfail" if hasattr(report, "wasxfail") else report.outcome
        if when == "call":
            test["seconds"] = round(report.duration, 4)
        for key, prop in (("calls", PROP_CALLS), ("examples", PROP_EXAMPLES), ("digest", PROP_DIGEST), ("known", PROP_KNOWN),
                          ("run", PROP_RUN), ("environment", PROP_ENVIRONMENT)):
            if prop in props:
                test[key] = props[prop]
        if when == "call" or (when == "setup" and not report.passed):
            self.add_impl(impl)
            if report.failed and not props.get(PROP_ENVIRONMENT):
                test["failure"] = failure_of(report, props.get(PROP_VIOLATED) or invariants,
                                             props.get(PROP_CAUSE, "crash"))
            for inv, verdict in classify(report, invariants, props).items():
                self.cells[(inv, impl)].add(verdict.kind)
                self.tests[(inv, impl)] += 1
                if verdict.reason is not None:
                    test["reason"] = verdict.reason
                    self.reasons[(inv, impl)][verdict.kind].add(verdict.reason)
            if when == "call":
                self._record_known(impl, invariants, props.get(PROP_KNOWN) or {})
                if report.failed:
                    self.failed_tests.append((report.nodeid, impl, props.get(PROP_VIOLATED), props.get(PROP_SIGNATURES)))
                elif str(getattr(report, "wasxfail", "")).startswith(DECLARED_PREFIX):
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


def skip_reason(report, props: dict) -> str:
    """Why a test was skipped: a not-provided check's reason as it raised it
    (:data:`PROP_NOT_PROVIDED`), else what the skip said, without pytest's
    "Skipped: "."""
    not_provided = props.get(PROP_NOT_PROVIDED)
    if isinstance(not_provided, str):
        return not_provided
    longrepr = report.longrepr
    text = longrepr[2] if isinstance(longrepr, tuple) and len(longrepr) == 3 else str(longrepr or "")
    return text.removeprefix("Skipped: ").strip()


def failure_of(report, invariants: list[str], cause: str = "crash") -> dict:
    """A failing test's invariants, its message, its reproducer (the
    section the plugin prints it in), as the reports show them, and its
    cause (:data:`FAILURE_CAUSES`)."""
    crash = getattr(report.longrepr, "reprcrash", None)
    message = crash.message if crash is not None else str(report.longrepr or "")
    reproducer = next((text for title, text in report.sections if title == "fsdpcheck reproducer"), None)
    if reproducer is not None:
        # the reproducer is a field of its own, and rebuilds the example Hypothesis prints
        message = message.split("\nFailing test case:", 1)[0].replace(REPRODUCER_BELOW, "").rstrip()
    if len(message) > MESSAGE_LIMIT:
        message = message[:MESSAGE_LIMIT] + f"\n... ({len(message) - MESSAGE_LIMIT} more characters in the test's log)"
    return {"invariants": sorted(invariants), "message": message, "reproducer": reproducer, "cause": cause}


class Verdict(NamedTuple):
    """One test's verdict on one invariant: its kind (an outcome of
    :data:`RANK`) and, for an n/p or a skip, why."""

    kind: str
    reason: str | None = None


def classify(report, invariants: list[str], props: dict) -> dict[str, Verdict]:
    """The verdict per invariant of one setup/call report: its tagged ones,
    and any other a failing check found violated."""
    violated = props.get(PROP_VIOLATED)
    if report.skipped:
        if hasattr(report, "wasxfail"):
            hit = violated or invariants
            kind = "known" if props.get(PROP_KNOWN) else "divergence"
            return {inv: Verdict(kind if inv in hit else "pass") for inv in invariants}
        # Not provided: the area or form is missing (collection), or the check
        # raised NotProvided (the plugin put its reason in the report's properties).
        kind = "not provided" if props.get(PROP_NOT_PROVIDED) else "skipped"
        return dict.fromkeys(invariants, Verdict(kind, skip_reason(report, props)))
    if report.failed:
        if props.get(PROP_ENVIRONMENT):
            return dict.fromkeys(invariants, Verdict("error"))
        if violated:
            # a check may find a violation of an invariant its test is not
            # tagged with: that cell fails too, or the failure would be
            # hidden behind the tagged ones' "pass"
            return {**{inv: Verdict("pass") for inv in invariants}, **dict.fromkeys(violated, Verdict("fail"))}
        return dict.fromkeys(invariants, Verdict("fail"))
    return dict.fromkeys(invariants, Verdict("pass"))


def schema() -> dict:
    """The JSON report's published schema (JSON Schema 2020-12)."""
    from importlib.resources import files

    return json.loads((files("pytest_fsdpcheck.report") / "report.schema.json").read_text(encoding="utf-8"))


def payload(header: dict, matrix: Matrix, extra: dict) -> dict:
    """The JSON report's content (``report.schema.json``); the HTML pages are
    drawn from it too."""
    return {"schema_version": SCHEMA_VERSION, "header": header, "matrix": matrix.to_json(),
            "models": {spec: sub.to_json() for spec, sub in sorted(matrix.models.items())},
            "tests": matrix.per_test, **extra}


def json_text(content: dict) -> str:
    return json.dumps(content, indent=2, sort_keys=True) + "\n"


def write_atomically(path: str, text: str) -> None:
    """``path`` holds either its old content or all of ``text``, never a part:
    a full disk or a killed run leaves the previous report in place. The file
    gets the mode a plain ``open(path, "w")`` gives it: the existing file's,
    else 0666 less the umask (``tempfile.mkstemp`` would leave 0600)."""
    import secrets

    folder = os.path.dirname(os.path.abspath(path))
    # a folder named for the report is made, as --junitxml makes its own
    # (options.py checked that it can be: under a writable folder)
    os.makedirs(folder, exist_ok=True)
    temp = os.path.join(folder, f".fsdpcheck-{os.getpid()}-{secrets.token_hex(6)}.tmp")
    # the kernel applies the umask to the mode asked for here
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with contextlib.suppress(FileNotFoundError):
            os.chmod(temp, os.stat(path).st_mode & 0o777)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(temp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temp)
        raise


def exploration(per_test: dict, wall_s: float) -> dict:
    """Examples and examples/s per area, property and worker, and generator
    feature coverage, from the tests' ``run`` records."""
    from ..core.budget import SHARD_ID
    from ..core.features import coverage

    tables: dict[str, dict] = {"areas": {}, "properties": {}, "workers": {}}
    runs = []
    for nodeid, test in per_test.items():
        run = test.get("run")
        if not run:
            continue
        runs.append(run)
        name = SHARD_ID.sub("", nodeid.rpartition("::")[2]).replace("[]", "")
        for table, key in (("areas", run["area"]), ("properties", name), ("workers", run["worker"])):
            row = tables[table].setdefault(key, {"examples": 0, "seconds": 0.0, "tests": 0})
            row["examples"] += run["examples"]
            row["seconds"] += test.get("seconds", 0.0)
            row["tests"] += 1
            if "rounds" in run:
                row["rounds"] = row.get("rounds", 0) + run["rounds"]
    for table in tables.values():
        for row in table.values():
            row["seconds"] = round(row["seconds"], 3)
            row["examples_per_s"] = round(row["examples"] / row["seconds"], 2) if row["seconds"] else None
    examples = sum(r["examples"] for r in runs)
    return {
        "examples": examples,
        "wall_s": round(wall_s, 2),
        "examples_per_s": round(examples / wall_s, 2) if wall_s > 0 else None,
        **tables,
        "coverage": coverage(runs),
    }


def render_exploration(explored: dict) -> list[str]:
    lines = [f"{explored['examples']} examples in {explored['wall_s']:.1f} s of wall time "
             f"({explored['examples_per_s']} examples/s)"]

    def rate(row):
        return "-" if row["examples_per_s"] is None else f"{row['examples_per_s']:.1f}/s"

    for title, table in (("area", "areas"), ("worker", "workers"), ("property", "properties")):
        rows = explored[table]
        width = max((len(k) for k in rows), default=8)
        lines.append(f"per {title}:")
        for key, row in sorted(rows.items()):
            rounds = f"  {row['rounds']} rounds" if "rounds" in row else ""
            lines.append(f"  {key:<{width}}  {row['examples']:>8} examples  {rate(row):>10}{rounds}")
    cov = explored["coverage"]
    if cov["features"]:
        width = max(len(k) for k in cov["features"])
        lines.append("generator features (examples that had each):")
        for name, n in cov["features"].items():
            flag = "  <- NO EXAMPLE HAD THIS FEATURE" if n == 0 else ""
            lines.append(f"  {name:<{width}}  {n:>8}{flag}")
        reached = sum(1 for n in cov["features"].values() if n)
        lines.append(f"features reached: {reached} of {len(cov['features'])} that the generators of this run offer")
        if cov["missing"]:
            lines.append(f"features no example had: {', '.join(cov['missing'])}")
    return lines


# --- what the run prints and writes -------------------------------------------------


def header_lines(session) -> list[str]:
    from ..contract import provided_areas
    from ..core.bugs import active_bugs

    if session.awaiting_workers():
        return _controller_header(session)
    impl_lines = [
        f"  {spec}: {', '.join(provided_areas(obj)) or 'no areas'}" for spec, obj in session.impls.items()
    ]
    known = [
        f"  {spec}: {', '.join(b.id for b in active_bugs(obj, session.torch_version))}"
        for spec, obj in session.impls.items()
        if active_bugs(obj, session.torch_version)
    ]
    return [
        *_common_header(session),
        *(
            ["fsdpcheck: known bugs modelled (python -m pytest_fsdpcheck.known):", *known]
            if known and session.known_bugs
            else ["fsdpcheck: known bugs: " + ("none for these implementations" if session.known_bugs else "off")]
        ),
        "fsdpcheck: implementations (areas provided):",
        *impl_lines,
    ]


def _common_header(session) -> list[str]:
    seed = (
        "derandomized (ci profile)"
        if session.seed is None
        else f"{session.seed} (replay with --fsdpcheck-seed={session.seed})"
    )
    devices = ", ".join(session.devices) or "each xdist worker's (auto)"
    return [
        f"fsdpcheck: torch {session.torch_version}; devices: {devices}; profile: {session.profile}; seed: {seed}",
        *_plan_header(session),
        *_world_size_header(session),
        "fsdpcheck: divergence files: " + (", ".join(session.divergence_files) or "none"),
        *(["fsdpcheck: your models: " + ", ".join(session.models)] if session.models else []),
    ]


def _world_size_header(session) -> list[str]:
    """One line where --fsdpcheck-world-size asks for more ranks than are
    started on this host (the simulated tier takes the whole size)."""
    from ..core.ranks import spawned_ranks_note

    note = spawned_ranks_note(getattr(session, "world_size", None))
    return [f"fsdpcheck: {note}"] if note else []


def _controller_header(session) -> list[str]:
    return [
        *_common_header(session),
        "fsdpcheck: implementations: " + ", ".join(session.impls)
        + " (each xdist worker loads them: their areas and known bugs are listed with the matrix)",
    ]


def _plan_header(session) -> list[str]:
    plan = session.plan
    if plan is None:
        return []
    first = plan.stream(0) + 1
    streams = f"stream {first}" if plan.workers == 1 else f"streams {first}-{first + plan.workers - 1}"
    parts = [f"machine {plan.machine + 1}/{plan.machines} x {plan.workers} worker(s): {streams} of {plan.streams}"]
    if plan.budget_s is not None:
        parts.append(f"fuzz time {plan.budget_s:g} s, every property in rounds until its share is spent")
    parts.append(f"example database: {session.database}")
    return ["fsdpcheck: " + "; ".join(parts)]


class MatrixRecorder:
    """Registered as a plugin for the run: every test report goes to the matrix."""

    def __init__(self, session):
        self.session = session
        for spec in session.impls:
            session.matrix.add_impl(spec)

    def pytest_runtest_logreport(self, report):
        self.session.matrix.record(report)
        plan = self.session.plan
        if plan is not None and plan.budget_s is not None:
            if plan.deadline is None:
                # the xdist controller runs no test: its clock is its workers' first test's
                from ..core.budget import read_start

                started = read_start(plan.clock_path) or getattr(report, "start", None)
                if started:
                    plan.deadline = started + plan.budget_s
            if report.skipped and BUDGET_SKIP in str(report.longrepr):
                self.session.budget_skipped.append(report.nodeid)


def _header_json(session) -> dict:
    return {
        "torch": session.torch_version,
        "implementations": list(session.impls),
        "devices": session.devices,
        "profile": session.profile,
        "seed": session.seed,
        "divergence_files": session.divergence_files,
        # False: interrupted, stopped early (-x, --maxfail), ended by a crash
        # before the summary, or nothing ran; stale entries and unreproduced
        # bugs are then not judged
        "complete": not session.incomplete,
        # --fsdpcheck-world-size as given (None: the device's default); a re-run command passes it on
        "world_size": getattr(session, "world_size", None),
        **_plan_json(session),
    }


def start_report(session) -> None:
    """A report that says "incomplete" from the start, replaced at the end: a
    run that dies before its summary (a process exit the suite could not
    intercept) leaves that, never a previous run's green report (or page)."""
    if not session.report_path and not session.html_path and not session.junit_path:
        return
    content = payload({**_header_json(session), "complete": False}, Matrix(), {})
    for path, text in ((session.report_path, lambda: json_text(content)),
                       (session.html_path, lambda: _html_page(content)),
                       (session.junit_path, lambda: _junit(content))):
        if path:
            with contextlib.suppress(OSError):  # the end of the run reports a failing write
                write_atomically(path, text())


def terminal_summary(tr, session, findings, exposures=None) -> bool:
    """``findings``: (stale entries, unexpected passes, known bugs not reproduced);
    ``exposures``: per user model, its known-bug exposure (or why none was
    worked out). False when the JSON or HTML report was asked for and could not be written."""
    stale, unexpected, unreproduced, unprovided, expired, fixed = findings
    exposures = exposures or {}
    tr.section("fsdpcheck conformance matrix")
    if session.deferred and not session.awaiting_workers():
        # the header the workers' loading completes (the controller's was partial)
        for line in header_lines(session):
            tr.write_line(line)
    for line in session.matrix.render():
        tr.write_line(line)
    for line in _known_lines(session, unreproduced):
        tr.write_line(line)
    for error in session.matrix.case_errors.values():
        tr.write_line(f"case error (yours, no implementation judged on it): {error}", red=True)
    for entry in stale:
        tr.write_line(f"stale divergence ({entry.source}): {entry.match} [{entry.implementation}] matched no test")
    for inv, impl in unexpected:
        tr.write_line(f"unexpected pass: {inv} is declared divergent for {impl} but all its checks passed")
    for entry in expired:
        tr.write_line(f"expired divergence: {entry.describe()} was expected to end in torch {entry.until}, "
                      f"this is {session.torch_version}: fixed? drop your workaround and the entry")
    for entry in fixed:
        tr.write_line(f"no longer fails: {entry.describe()} excused no failure, its test passed: delete the entry")
    from ..known.divergences import held_by_old_examples

    loose = held_by_old_examples(session.divergences, session.matrix.declared_tests)
    if loose:
        tr.write_line(f"note: {len(loose)} {'entry' if len(loose) == 1 else 'entries'} ({', '.join(e.source for e in loose[:3])}"
                      f"{', ...' if len(loose) > 3 else ''}) held a failure by an example of the old form, every number read"
                      " as #, so another count or a larger difference passed too: write the baseline again"
                      " (--fsdpcheck-write-baseline) to hold only the failure recorded")
    if session.baseline_written:
        tr.write_line(session.baseline_written)
    for inv, reason in unprovided:
        tr.write_line(f"not provided although expected: {inv} [torch] was n/p in every check, but {reason}"
                      " (--fsdpcheck-strict fails on this)")
    if exposures:
        from ..cases.exposure import render

        tr.section("fsdpcheck known-bug exposure of your models")
        for spec, found in exposures.items():
            lines = render(found, spec) if isinstance(found, list) else [f"known-bug exposure of {spec}: not worked out ({found})"]
            for line in lines:
                tr.write_line(line)
    if session.budget_skipped:
        tr.write_line(f"fsdpcheck: {len(session.budget_skipped)} suite tests not run within the fuzz time "
                      f"({session.plan.budget_s:g} s, counted from the first test): skipped; a larger "
                      "--fsdpcheck-fuzz-time runs them", yellow=True)
    content = run_payload(session, findings, exposures)
    explored = content["exploration"]
    if session.profile != "ci" and explored["examples"]:
        tr.section("fsdpcheck exploration")
        for line in render_exploration(explored):
            tr.write_line(line)
    if os.environ.get("GITHUB_ACTIONS") == "true":
        from .junit import github_annotations

        for line in github_annotations(content):
            tr.write_line(line)
    written = True
    for what, path, text in (("JSON report", session.report_path, lambda: json_text(content)),
                             ("HTML report", session.html_path, lambda: _html_page(content)),
                             ("JUnit report", session.junit_path, lambda: _junit(content))):
        if not path:
            continue
        try:
            write_atomically(path, text())
        except OSError as exc:
            tr.write_line(f"fsdpcheck: ERROR: cannot write the {what} {path}: {exc.strerror or exc}"
                          " (the run fails; the previous report, if any, is left as it was)", red=True)
            written = False
        else:
            tr.write_line(f"fsdpcheck: {what} written to {path}")
    return written


def _entry_json(entry) -> dict:
    return {"match": entry.match, "implementation": entry.implementation, "test": entry.test, "until": entry.until,
            "source": entry.source, "baseline": entry.baseline}


def run_payload(session, findings, exposures) -> dict:
    """The run's report as the JSON file holds it: what the HTML pages and
    pytest-html's sections are drawn from too."""
    import time

    stale, unexpected, unreproduced, unprovided, expired, fixed = findings
    return payload(
        _header_json(session),
        session.matrix,
        {
            "stale_divergences": [{"match": e.match, "implementation": e.implementation} for e in stale],
            "unexpected_passes": [{"invariant": i, "implementation": m} for i, m in unexpected],
            **({"baseline": {"expired": [_entry_json(e) for e in expired], "fixed": [_entry_json(e) for e in fixed]}}
               if expired or fixed else {}),
            "not_provided_but_expected": [{"invariant": i, "implementation": "torch", "reason": r}
                                          for i, r in unprovided],
            "known_bugs": _known_json(session, unreproduced),
            "case_errors": dict(session.matrix.case_errors),
            **({"exposure": _exposure_json(exposures)} if exposures else {}),
            "exploration": exploration(session.matrix.per_test, time.time() - session.started),
        },
    )


def _junit(content: dict) -> str:
    from .junit import junit_xml

    return junit_xml(content)


def _html_page(content: dict) -> str:
    from .html import run_page

    return run_page(content)


def html_sections(session, findings, exposures) -> list[str]:
    """The suite's sections as HTML fragments, for pytest-html's summary."""
    from .html import STYLE, run_sections

    return [f"<style>{STYLE}</style>", '<h2 class="fsdpcheck" id="fsdpcheck">pytest-fsdpcheck</h2>',
            *run_sections(run_payload(session, findings, exposures))]


def _exposure_json(exposures) -> dict:
    from ..cases.exposure import to_json

    return {spec: to_json(found) if isinstance(found, list) else {"error": found} for spec, found in exposures.items()}


def _plan_json(session) -> dict:
    plan = session.plan
    if plan is None:
        return {}
    return {"shard": f"{plan.machine + 1}/{plan.machines}", "workers": plan.workers,
            "fuzz_time_s": plan.budget_s, "deadline": plan.deadline, "database": session.database,
            "not_run_in_budget": list(session.budget_skipped)}


def _known_lines(session, unreproduced) -> list[str]:
    lines = []
    for number, (spec, bug_id) in enumerate(session.matrix.known_order, 1):
        n = session.matrix.known_examples[(spec, bug_id)]
        lines.append(f"[{number}] known bug {bug_id} [{spec}]: explained {n} examples; "
                     f"reproducer: python -m pytest_fsdpcheck.known show {bug_id}")
    for spec, bug in unreproduced:
        lines.append(f"known bug {bug.id} [{spec}]: not reproduced on torch {session.torch_version} "
                     f"(declared for {bug.affects or 'every version'}, seen {bug.seen_range}) — fixed?")
    return lines


def _known_json(session, unreproduced) -> list[dict]:
    from ..core.bugs import active_bugs

    missing = {(spec, bug.id) for spec, bug in unreproduced}
    return [
        {
            "id": bug.id,
            "implementation": spec,
            "invariants": list(bug.invariants),
            "affects": bug.affects,
            "seen": list(bug.seen),
            "examples": session.matrix.known_examples.get((spec, bug.id), 0),
            "not_reproduced": (spec, bug.id) in missing,
            # the [n] its cells show in the matrix (numbered as the bugs were met)
            "number": (session.matrix.known_order.index((spec, bug.id)) + 1
                       if (spec, bug.id) in session.matrix.known_order else None),
            "reason": bug.reason,
            "reproducer": _reproducer_text(bug),
            "reproducer_command": f"python -m pytest_fsdpcheck.known show {bug.id}",
            # its upstream issue or PR, "owner/repo#number" (empty: not reported upstream)
            "upstream": list(bug.upstream),
        }
        for spec, impl in session.impls.items()
        for bug in active_bugs(impl, session.torch_version)
    ]


def _reproducer_text(bug) -> str | None:
    """The bug's torch-only reproducer script, as ``known show`` prints it."""
    if not bug.reproducer:
        return None
    from importlib.resources import files

    try:
        return (files("pytest_fsdpcheck.known") / "reproducers" / bug.reproducer).read_text(encoding="utf-8")
    except OSError:
        return None
