"""What the planted-bug tests demand, and the census of it.

A planted-bug test demands failures only through one of the helpers below,
called as a statement of the test's own body with a table named at module
level (its own or imported): ``demand_failures(result, report, PLANTED)``.
Each helper asserts, for every row, that the killer FAILed the invariant the
row names, with that ID in the failure's text. The census
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
- ``demand_torch_failures`` (torch's own column; the killer is a fault
  planted in the installed torch, ``tests/planted/torch_faults.py``):
  ``{fault: (wanted, selection)}``.
"""

from __future__ import annotations

import ast
import contextlib
import importlib
import io
from dataclasses import dataclass
from pathlib import Path

from tests.helpers import control_problems, failure_sections, planted_misses

TESTS = Path(__file__).resolve().parent

#: helper name -> the users' path its killers are demanded through
PATHS = {
    "demand_failures": "suite",
    "demand_model_failures": "--fsdpcheck-model",
    "demand_check_failures": "parametrize_with_checks",
    "demand_torch_failures": "torch's column",
}


# --- the helpers ---------------------------------------------------------------------


def demand_failures(result, report, table: dict, control: str | None = "reference") -> None:
    """Every implementation of ``table`` FAILs its invariant, named in its
    failure's text; ``control`` (if any) passes every cell it ran."""
    problems = planted_misses(result, report, table)
    if control is not None:
        problems += control_problems(report, control)
    assert not problems, "\n".join(problems)


def model_id(factory: str) -> str:
    """How a factory ``pkg.mod:name`` appears in a suite test's id."""
    return factory.replace(":", ".")


def demand_model_failures(result, report, table: dict) -> None:
    """Every row's model, judged on its implementation by ``--fsdpcheck-model``,
    FAILs the row's invariant: the matrix cell fails and a failed test of that
    model and implementation names the ID."""
    assert report is not None, "the suite wrote no JSON report:\n" + "\n".join(result.outlines[-40:])
    sections = failure_sections(result.outlines)
    problems = []
    for killer, (wanted, model, impl) in table.items():
        cell = report["matrix"].get(impl, {}).get(wanted, {}).get("outcome")
        texts = [text for name, text in sections.items()
                 if f"[{impl}-" in name and model_id(model) in name and f"{wanted}:" in text]
        if cell != "fail" or not texts:
            problems.append(f"{killer}: {wanted} is {cell!r} for {impl} on model {model}, "
                            f"{'with' if texts else 'with no'} failure naming it")
    assert not problems, "\n".join(problems)


def demand_check_failures(result, table: dict) -> None:
    """Every row's check, run by a user's ``parametrize_with_checks`` test on
    the row's model and implementation, fails naming the row's invariant."""
    sections = failure_sections(result.outlines)
    problems = []
    for killer, (wanted, check, model, impl) in table.items():
        texts = [text for name, text in sections.items() if f"[{model}-{check}]" in name and impl_test(impl) in name]
        if not any(f"{wanted}:" in text for text in texts):
            problems.append(f"{killer}: {check} on {model} ({impl}) did not fail naming {wanted}: {texts}")
    assert not problems, "\n".join(problems)


def demand_torch_failures(result, report, table: dict) -> None:
    """Every row's fault, planted in the installed torch, makes the ``torch``
    column FAIL the row's invariant (not known, declared, ERROR, n/p or a
    case error), with the ID in a failure of a ``torch`` test."""
    assert report is not None, "the suite wrote no JSON report:\n" + "\n".join(result.outlines[-40:])
    sections = failure_sections(result.outlines)
    problems = []
    for fault, (wanted, _) in table.items():
        cell = report["matrix"].get("torch", {}).get(wanted, {}).get("outcome")
        texts = [text for name, text in sections.items() if "[torch" in name and f"{wanted}:" in text]
        if cell != "fail" or not texts:
            problems.append(f"{fault}: torch's {wanted} is {cell!r}, {'with' if texts else 'with no'} failure naming it")
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
            position = 1 if call.func.id == "demand_check_failures" else 2
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
