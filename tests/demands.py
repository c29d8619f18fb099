"""What the planted-bug tests demand, and the census of it.

A planted-bug test demands failures only through one of the helpers below,
called as a statement of the test's own body with a table named at module
level (its own or imported): ``demand_failures(result, report, PLANTED)``.
Each helper asserts, for every row, that the killer FAILed the invariant the
row names by that invariant's own violation: a failed test of the killer
whose JSON report records a failure with ``cause`` "violation" listing the ID
(a check's ConformanceFailure), with that ID in the failure's text. A leak,
time-out or crash also fails the cell and its message lists every invariant
of the test ("TRV-7: TRV-9: ... left process-wide state changed"): it meets
no demand. (``parametrize_with_checks`` writes no report: there the text must
show a ConformanceFailure naming the ID.) The census
(:func:`demands_in`, :func:`uncovered`) reads the same tables from the same
calls, found in the tests' source: a row it counts is a failure some test
asserts, and a table whose call is removed, weakened (its result tested,
caught, made conditional) or whose row is deleted no longer counts.

The census counts only demands pytest will run: the tests are collected by
pytest itself, in-process (:func:`running_tests`), and a test none of whose
items pytest runs as collected (deselected, or marked ``skip``, ``skipif``
with a true condition or ``xfail``, by decorator, module ``pytestmark`` or a
conftest hook, or using a fixture of the project's that may skip it)
demands nothing; nor does a call that a statement of the
body may skip (a ``return``, ``pytest.skip``/``xfail``/``exit``/
``importorskip``, a skip or xfail mark applied at run time) before it.

Tables, one row per killer:

- ``demand_failures`` (a suite run; the killer is an implementation):
  ``{impl: (wanted, selection)}``, ``wanted`` an ID or a tuple of
  alternatives (a row with alternatives kills none of them: only a demanded
  failure kills);
- ``demand_model_failures`` (``--fsdpcheck-model``): ``{killer: (wanted,
  model, impl)}``, the killer being the model's factory or the
  implementation;
- ``demand_check_failures`` (``parametrize_with_checks``): ``{killer:
  (wanted, check, model, impl)}``;
- ``demand_model_case_errors`` (``--fsdpcheck-model``, a plan's mistake:
  the user's, one line naming the factory and the rule, no cell):
  ``{factory: (rule, factory)}``; ``demand_check_case_errors`` (the same
  through ``parametrize_with_checks``): ``{factory: (rule, factory, impl)}``;
- ``demand_torch_failures`` (torch's own column; the killer is a fault
  planted in the installed torch, ``tests/planted/torch_faults.py``):
  ``{fault: (wanted, selection)}``.
"""

from __future__ import annotations

import ast
import contextlib
import importlib
import io
import re
from dataclasses import dataclass
from pathlib import Path

from tests.helpers import control_problems, failure_sections

TESTS = Path(__file__).resolve().parent

#: helper name -> the users' path its killers are demanded through
PATHS = {
    "demand_failures": "suite",
    "demand_model_failures": "--fsdpcheck-model",
    "demand_check_failures": "parametrize_with_checks",
    "demand_torch_failures": "torch's column",
    # a plan's mistake (PLN) is the user's: a case error naming the factory and the rule
    "demand_model_case_errors": "--fsdpcheck-model",
    "demand_check_case_errors": "parametrize_with_checks",
}


# --- the helpers ---------------------------------------------------------------------


def violated(report, wanted: str, test) -> list[str]:
    """The node ids of the report's failed tests, those ``test(nodeid,
    record)`` accepts, whose failure is ``wanted``'s own violation: cause
    "violation" (a check's ConformanceFailure) with ``wanted`` among the
    invariants it found violated. A leak's, time-out's or crash's failure
    lists every invariant of its test, none of them judged: never one."""
    return [nodeid for nodeid, record in report.get("tests", {}).items()
            if test(nodeid, record) and (failure := record.get("failure"))
            and failure.get("cause") == "violation" and wanted in failure.get("invariants", ())]


def _head(nodeid: str) -> str:
    """How pytest heads a test's failure section: its id past the file
    (``test_x[impl]``, ``TestY.test_x[impl]``)."""
    return nodeid.partition("::")[2].replace("::", ".")


def _violation_texts(report, sections: dict, wanted: str, test) -> list[str]:
    """The printed failures of the tests :func:`violated` finds, naming ``wanted``."""
    heads = {_head(nodeid) for nodeid in violated(report, wanted, test)}
    return [text for name, text in sections.items() if name in heads and f"{wanted}:" in text]


def _causes(report, test) -> list[str]:
    """What ended the failed tests ``test`` accepts, and what they list (a miss's message)."""
    return sorted({f"{record['failure'].get('cause')} {record['failure'].get('invariants')}"
                   for nodeid, record in report.get("tests", {}).items()
                   if test(nodeid, record) and record.get("failure")})


def demand_failures(result, report, table: dict, control: str | None = "reference") -> None:
    """Every implementation of ``table`` FAILs its invariant by the
    invariant's own violation, named in its failure's text; ``control``
    (if any) passes every cell it ran."""
    assert report is not None, "the suite wrote no JSON report:\n" + "\n".join(result.outlines[-40:])
    sections = failure_sections(result.outlines)
    problems = []
    for spec, (wanted, _) in table.items():
        alternatives = _wanted_ids(wanted)
        cells = {inv: report["matrix"].get(spec, {}).get(inv, {}).get("outcome") for inv in alternatives}
        caught = [inv for inv, cell in cells.items() if cell == "fail"]
        own = lambda nodeid, record, spec=spec: record.get("implementation") == spec  # noqa: E731
        if not caught:
            problems.append(f"{spec}: matrix cells {cells}, expected 'fail' for {' or '.join(alternatives)}")
        elif not any(_violation_texts(report, sections, inv, own) for inv in caught):
            problems.append(f"{spec}: no failure of its tests is a violation of {' or '.join(caught)} naming it "
                            f"(a leak, time-out or crash lists every invariant of its test and meets no demand); "
                            f"its failures: {_causes(report, own)}")
    if control is not None:
        problems += control_problems(report, control)
    assert not problems, "\n".join(problems)


def model_id(factory: str) -> str:
    """How a factory ``pkg.mod:name`` appears in a suite test's id."""
    return factory.replace(":", ".")


def demand_model_failures(result, report, table: dict) -> None:
    """Every row's model, judged on its implementation by ``--fsdpcheck-model``,
    FAILs the row's invariant: the matrix cell fails and a failed test of that
    model and implementation is the ID's violation, naming it."""
    assert report is not None, "the suite wrote no JSON report:\n" + "\n".join(result.outlines[-40:])
    sections = failure_sections(result.outlines)
    problems = []
    for killer, (wanted, model, impl) in table.items():
        cell = report["matrix"].get(impl, {}).get(wanted, {}).get("outcome")
        mine = lambda nodeid, record, impl=impl, model=model: f"[{impl}-" in nodeid and model_id(model) in nodeid  # noqa: E731
        texts = _violation_texts(report, sections, wanted, mine)
        if cell != "fail" or not texts:
            problems.append(f"{killer}: {wanted} is {cell!r} for {impl} on model {model}, "
                            f"{'with' if texts else 'with no'} violation naming it: {_causes(report, mine)}")
    assert not problems, "\n".join(problems)


def demand_check_failures(result, table: dict) -> None:
    """Every row's check, run by a user's ``parametrize_with_checks`` test on
    the row's model and implementation, fails with the row's invariant's
    violation: a ConformanceFailure whose violations name it (no report
    here: the failure's text is read, :func:`violations_in`)."""
    sections = failure_sections(result.outlines)
    problems = []
    for killer, (wanted, check, model, impl) in table.items():
        texts = [text for name, text in sections.items() if f"[{model}-{check}]" in name and impl_test(impl) in name]
        if not any(wanted in violations_in(text) for text in texts):
            problems.append(f"{killer}: {check} on {model} ({impl}) did not fail with a violation of {wanted}: {texts}")
    assert not problems, "\n".join(problems)


#: a failure section's line, pytest's "E" prefix (long style) stripped
_LINE = re.compile(r"^(?:E\s+)?(.*)$")
#: the line an exception's message starts on: ``[module.]Name: message``
_RAISED = re.compile(r"^((?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*(?:Error|Exception|Failure|Fault|State|Timeout|Exit)): ?(.*)$")
#: a violation's line (checks.Violation's str): ``ID: message``
_VIOLATION = re.compile(r"^([A-Z][A-Z0-9]*-\d+): ")


def violations_in(text: str) -> set[str]:
    """The invariants a failure's text shows a ConformanceFailure found
    violated: the lines of its message (``ConformanceFailure: ID: ...``,
    then ``ID: ...`` each) up to the next exception's; a LeakedGlobalState's
    or any other exception's message, or a note, listing IDs is none."""
    found: set[str] = set()
    inside = False
    for line in text.splitlines():
        line = _LINE.match(line.rstrip()).group(1)
        raised = _RAISED.match(line)
        if raised:
            inside = raised.group(1).rpartition(".")[2] == "ConformanceFailure"
            line = raised.group(2)
        if inside and (violation := _VIOLATION.match(line)):
            found.add(violation.group(1))
    return found


def demand_model_case_errors(result, report, table: dict) -> None:
    """Every row's model, named with ``--fsdpcheck-model``, is the user's
    mistake breaking the row's rule: the report's ``case_errors`` give it one
    line starting ``model <factory>: <ID>:``, its setup error prints exactly
    that line, and no test of the model is a failure in any implementation's
    column (a plan's mistake is never a cell)."""
    assert report is not None, "the suite wrote no JSON report:\n" + "\n".join(result.outlines[-40:])
    sections = failure_sections(result.outlines)
    problems = []
    for killer, (wanted, model) in table.items():
        error = report.get("case_errors", {}).get(model) or ""
        head = f"model {model}: {wanted}: "
        printed = sections.get(f"ERROR at setup of test_model_case[{model_id(model)}]", "").strip()
        cells = sorted({nodeid for nodeid, record in report.get("tests", {}).items()
                        if model_id(model) in nodeid and record.get("outcome") == "failed"})
        if not error.startswith(head) or "\n" in error or printed != error or cells:
            problems.append(f"{killer}: expected the case error {head}..., one line, printed as it is and no "
                            f"implementation's failure; got {error!r}, printed {printed!r}, failed {cells}")
    assert not problems, "\n".join(problems)


def demand_check_case_errors(result, table: dict) -> None:
    """Every row's model, in a user's ``parametrize_with_checks`` test, fails
    ``check_case`` with one line ``model <factory>: <ID>: ...`` (the user's
    mistake) and no other check of it fails."""
    sections = failure_sections(result.outlines)
    problems = []
    for killer, (wanted, model, impl) in table.items():
        mine = {name: text.strip() for name, text in sections.items()
                if f"[{model}-" in name and impl_test(impl) in name}
        case = [text for name, text in mine.items() if name.endswith("-check_case]")]
        others = sorted(name for name in mine if not name.endswith("-check_case]"))
        if not (case and case[0].startswith(f"model {model}: {wanted}: ") and "\n" not in case[0]) or others:
            problems.append(f"{killer}: check_case on {model} ({impl}) did not fail in one line naming {wanted}, "
                            f"or another check failed: {case} {others}")
    assert not problems, "\n".join(problems)


def demand_torch_failures(result, report, table: dict) -> None:
    """Every row's fault, planted in the installed torch, makes the ``torch``
    column FAIL the row's invariant (not known, declared, ERROR, n/p or a
    case error) by its violation, with the ID in a failure of a ``torch`` test."""
    assert report is not None, "the suite wrote no JSON report:\n" + "\n".join(result.outlines[-40:])
    sections = failure_sections(result.outlines)
    torch_tests = lambda nodeid, record: record.get("implementation") == "torch"  # noqa: E731
    problems = []
    for fault, (wanted, _) in table.items():
        cell = report["matrix"].get("torch", {}).get(wanted, {}).get("outcome")
        texts = _violation_texts(report, sections, wanted, torch_tests)
        if cell != "fail" or not texts:
            problems.append(f"{fault}: torch's {wanted} is {cell!r}, {'with' if texts else 'with no'} violation "
                            f"naming it: {_causes(report, torch_tests)}")
    assert not problems, "\n".join(problems)


def assert_leaked(result, report, table: dict, column: str | None = None) -> None:
    """Every row's killer, ``{killer: (wanted, selection)}``, FAILs the
    ``wanted`` cell of its column (its own, or ``column``: ``"torch"`` for a
    fault planted in torch) by a leak: the cell is FAIL and a failed test
    charged to it has cause "leak". Not a demand: a leak lists every
    invariant of its test, none judged, so it kills none and the census
    counts no row of it (this helper is not one of :data:`PATHS`)."""
    assert report is not None, "the suite wrote no JSON report:\n" + "\n".join(result.outlines[-40:])
    problems = []
    for killer, (wanted, _) in table.items():
        impl = column or killer
        cell = report["matrix"].get(impl, {}).get(wanted, {}).get("outcome")
        own = lambda nodeid, record, impl=impl: record.get("implementation") == impl  # noqa: E731
        leaks = [nodeid for nodeid, record in report.get("tests", {}).items() if own(nodeid, record)
                 and (record.get("failure") or {}).get("cause") == "leak" and wanted in record["failure"]["invariants"]]
        if cell != "fail" or not leaks:
            problems.append(f"{killer}: {impl}'s {wanted} is {cell!r}, {'with' if leaks else 'with no'} leak charged to it: "
                            f"{_causes(report, own)}")
    assert not problems, "\n".join(problems)


def impl_test(impl: str) -> str:
    """The name of the user's test function checking ``impl`` (one per
    implementation: ``parametrize_with_checks`` takes one)."""
    return "test_fsdp_" + "".join(c if c.isalnum() else "_" for c in impl)


# --- the census ----------------------------------------------------------------------


@dataclass(frozen=True)
class Demand:
    killer: str
    invariant: str
    path: str  # PATHS' values
    test: str  # module::function that asserts it


#: pytest's calls that end a test without failing it (``fail`` is a failure)
_ENDS_QUIETLY = {"skip", "xfail", "exit", "importorskip"}
#: marks that keep a test's failure from failing the run
_QUIET_MARKS = {"skip", "skipif", "xfail"}


def _own_nodes(statement):
    """The nodes of ``statement`` that run with it: of a function, lambda or
    class it defines, only what the definition itself evaluates (decorators,
    defaults, bases), not the body, which runs when called, if ever."""
    stack = [statement]
    while stack:
        node = stack.pop()
        yield node
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            stack.extend([*getattr(node, "decorator_list", ()), *node.args.defaults,
                          *(d for d in node.args.kw_defaults if d is not None)])
        elif isinstance(node, ast.ClassDef):
            stack.extend([*node.decorator_list, *node.bases, *node.keywords])
        else:
            stack.extend(ast.iter_child_nodes(node))


def _importable_here(call: ast.Call) -> bool:
    """``importorskip("name")`` (a literal name, no version asked) that this
    environment can import: it does not skip here."""
    import importlib.util

    if len(call.args) != 1 or call.keywords or not isinstance(call.args[0], ast.Constant):
        return False
    try:
        return importlib.util.find_spec(call.args[0].value) is not None
    except (ImportError, ValueError, TypeError):
        return False


def _may_end_quietly(statement, returns: bool = True) -> bool:
    """Whether ``statement`` may end the test before the statements after it
    without failing it: a ``return``, a ``pytest.skip``/``xfail``/``exit``
    call, an ``importorskip`` of a module this environment cannot import, or
    a skip or xfail mark applied while running (``request.applymarker``,
    ``node.add_marker``), however conditional."""
    for node in _own_nodes(statement):
        if isinstance(node, ast.Return) and returns:
            return True
        if not isinstance(node, ast.Call):
            continue
        name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
        if name == "importorskip" and _importable_here(node):
            continue  # pytest runs on past it in this environment
        if name in _ENDS_QUIETLY:
            return True
        if name in ("applymarker", "add_marker") and any(
                isinstance(n, ast.Attribute) and n.attr in _QUIET_MARKS
                for arg in node.args for n in ast.walk(arg)):
            return True
    return False


def _helper_calls(tree: ast.Module):
    """``(test function, helper name, table name)`` for each helper call that
    is a statement of a test function's own body (so its assertion is the
    test's) and that no earlier statement may skip (so it runs whenever the
    test does)."""
    for node in tree.body:
        if not isinstance(node, ast.FunctionDef) or not node.name.startswith("test_"):
            continue
        for statement in node.body:
            if _may_end_quietly(statement):
                break  # what follows may never run
            call = statement.value if isinstance(statement, ast.Expr) else None
            if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id in PATHS):
                continue
            position = 1 if call.func.id in ("demand_check_failures", "demand_check_case_errors") else 2
            table = call.args[position] if len(call.args) > position else next(
                (k.value for k in call.keywords if k.arg == "table"), None)
            if isinstance(table, ast.Name):
                yield node.name, call.func.id, table.id


def _wanted_ids(wanted) -> tuple[str, ...]:
    return (wanted,) if isinstance(wanted, str) else tuple(wanted)


class _Collected:
    """A plugin keeping the items of a pytest session once collection (and
    every hook modifying or deselecting them) is done."""

    def __init__(self):
        self.items = None

    def pytest_collection_finish(self, session):
        self.items = list(session.items)


def _fixture_may_end_quietly(func, root: Path) -> bool:
    """Whether a fixture of the project's own (its file under ``root``) may
    skip or xfail the tests using it (a ``return`` is a fixture's value)."""
    import inspect
    import textwrap

    try:
        if not Path(inspect.getsourcefile(func)).resolve().is_relative_to(root):
            return False  # pytest's and plugins' own fixtures
        definition = ast.parse(textwrap.dedent(inspect.getsource(func))).body[0]
    except (OSError, TypeError, SyntaxError, IndexError):
        return True  # cannot be read: not counted on trust
    return any(_may_end_quietly(statement, returns=False) for statement in definition.body)


def _runs_as_collected(item, fixtures_read: dict) -> bool:
    """Whether pytest runs ``item`` as a test whose failure fails the run:
    no skip mark applies to it (``skip``, ``skipif`` with a true condition),
    no xfail mark with a true condition, and no fixture of the project's own
    that it uses may skip or xfail it. Marks from anywhere count, as pytest
    reads them: the function's, its module's ``pytestmark``, those a hook
    added; fixtures too, however requested (argument, ``usefixtures``,
    autouse)."""
    from _pytest.skipping import evaluate_skip_marks, evaluate_xfail_marks

    try:
        if evaluate_skip_marks(item) is not None or evaluate_xfail_marks(item) is not None:
            return False
    except Exception:  # a condition that cannot be evaluated: an error, not a run
        return False
    root = Path(item.config.rootpath).resolve()
    definitions = getattr(getattr(item, "_fixtureinfo", None), "name2fixturedefs", {})
    for name, defs in definitions.items():
        if defs and name in item.fixturenames:
            func = defs[-1].func
            if func not in fixtures_read:  # read once per collection, not per item
                fixtures_read[func] = _fixture_may_end_quietly(func, root)
            if fixtures_read[func]:
                return False
    return True


def running_tests(modules: dict[str, Path], args=()) -> set[str]:
    """``module::function`` of each test function of ``modules`` (a module's
    name -> its file) that pytest collects and runs, every one of its items,
    as collected: pytest's own collection, in this process (the conftest
    files and plugins it would load included), then each item's marks.
    ``args``: more command-line arguments for that collection."""
    import pytest

    if not modules:
        return set()
    names = {Path(path).resolve(): name for name, path in modules.items()}
    collected = _Collected()
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        # plain asserts: a module imported here first is not rewritten twice;
        # no faulthandler: the outer session's stays as it is
        code = pytest.main([*map(str, names), "--collect-only", "-q", "--assert=plain",
                            "-p", "no:randomly", "-p", "no:faulthandler", *args], plugins=[collected])
    if collected.items is None or code not in (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED):
        raise RuntimeError(f"collecting the demanding tests failed ({code!r}):\n{printed.getvalue()[-3000:]}")
    runs: dict[str, bool] = {}
    fixtures_read: dict = {}
    for item in collected.items:
        module = names.get(Path(item.path).resolve())
        function = getattr(item, "originalname", item.name)
        if module is not None:
            key = f"{module}::{function}"
            runs[key] = runs.get(key, True) and _runs_as_collected(item, fixtures_read)
    return {key for key, run in runs.items() if run}


def demands_in(sources: dict[str, str] | None = None, running: set[str] | None = None) -> list[Demand]:
    """Every demanded failure: ``sources`` maps a test module's name to its
    text (default: every ``tests/test_*.py`` as it is on disk); tables are
    read from the imported module by the name the call gives. ``running``:
    the ``module::function`` names pytest runs (default: pytest's collection
    of the on-disk files of the modules with a demand, :func:`running_tests`);
    a demand in any other test is not counted."""
    if sources is None:
        sources = {f"tests.{path.stem}": path.read_text(encoding="utf-8") for path in sorted(TESTS.glob("test_*.py"))}
    calls_of = {name: calls for name, text in sources.items() if (calls := list(_helper_calls(ast.parse(text))))}
    if running is None:
        running = running_tests({name: TESTS / f"{name.rpartition('.')[2]}.py" for name in calls_of})
    out = []
    for module_name, calls in calls_of.items():
        module = importlib.import_module(module_name)
        for function, helper, table_name in calls:
            if f"{module_name}::{function}" not in running:
                continue  # skipped, xfail-marked or deselected: its demands never fail a run
            table = getattr(module, table_name, None)
            if not isinstance(table, dict):
                continue  # a table of the function's own: not one the census can read
            for killer, row in table.items():
                ids = _wanted_ids(row[0])
                if len(ids) == 1:
                    out.append(Demand(killer, ids[0], PATHS[helper], f"{module_name}::{function}"))
    return out


def killers(demands: list[Demand]) -> dict[str, set[str]]:
    """invariant ID -> the killers demanded to fail it."""
    table: dict[str, set[str]] = {}
    for d in demands:
        table.setdefault(d.invariant, set()).add(d.killer)
    return table


def uncovered(demands: list[Demand], invariants) -> list[str]:
    """Catalog IDs no killer is demanded to fail."""
    return sorted(set(invariants) - set(killers(demands)))
