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
import importlib
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


def _helper_calls(tree: ast.Module):
    """``(test function, helper name, table name)`` for each helper call that
    is a statement of a test function's own body (so it always runs and its
    assertion is the test's)."""
    for node in tree.body:
        if not isinstance(node, ast.FunctionDef) or not node.name.startswith("test_"):
            continue
        for statement in node.body:
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


def demands_in(sources: dict[str, str] | None = None) -> list[Demand]:
    """Every demanded failure: ``sources`` maps a test module's name to its
    text (default: every ``tests/test_*.py`` as it is on disk); tables are
    read from the imported module by the name the call gives."""
    if sources is None:
        sources = {f"tests.{path.stem}": path.read_text(encoding="utf-8") for path in sorted(TESTS.glob("test_*.py"))}
    out = []
    for module_name, text in sources.items():
        calls = list(_helper_calls(ast.parse(text)))
        if not calls:
            continue
        module = importlib.import_module(module_name)
        for function, helper, table_name in calls:
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
