"""The killer census: every invariant in the catalog can fail, because some
test demands, through one of the helpers of tests/demands.py, that a planted
implementation or model FAILs it with its ID. The census reads the demands
from the tables those calls assert on, so a deleted row, a removed or
weakened call, or a helper that stops asserting shows here."""

import ast
import importlib
import types

import pytest

from pytest_fsdpcheck.catalog import INVARIANTS
from tests import demands
from tests.demands import (
    demand_check_failures,
    demand_failures,
    demand_model_failures,
    demands_in,
    killers,
    uncovered,
)


@pytest.fixture(scope="module")
def census():
    return demands_in()


def test_every_invariant_has_a_killer(census):
    missing = uncovered(census, INVARIANTS)
    assert not missing, f"invariants no planted implementation is demanded to fail: {missing}"


def test_every_killer_exists_and_fails_a_catalog_id(census):
    for d in census:
        assert d.invariant in INVARIANTS, f"{d.test} demands {d.killer} fail {d.invariant}, not in the catalog"
        module, _, name = d.killer.partition(":")
        assert module.startswith("tests.planted."), d
        assert hasattr(importlib.import_module(module), name), f"{d.killer} ({d.test}) does not exist"


def test_the_users_model_paths_have_killers_of_their_own(census):
    for path in ("--fsdpcheck-model", "parametrize_with_checks"):
        on_path = killers([d for d in census if d.path == path])
        # a plan breaking each PLN rule, and an implementation's bug on a correct plan
        assert {f"PLN-{n}" for n in range(1, 5)} <= set(on_path), (path, on_path)
        assert any(not i.startswith("PLN") for i in on_path), (path, on_path)


def test_no_test_checks_a_planted_table_by_hand():
    """The helpers are the one way to demand a failure: a test reading the
    planted tables' misses itself would assert what the census cannot see."""
    by_hand = [f"{module}:{node.lineno}" for module, text in _sources().items() for node in ast.walk(ast.parse(text))
               if isinstance(node, ast.Call) and getattr(node.func, "id", "") in ("planted_misses", "control_problems")]
    assert not by_hand, f"call tests.demands' helpers instead: {by_hand}"


# --- the census itself can fail -----------------------------------------------------


def _sources():
    from pathlib import Path

    return {f"tests.{p.stem}": p.read_text(encoding="utf-8") for p in sorted(Path(demands.TESTS).glob("test_*.py"))}


def _calls(text):
    """(line, text) of every helper call statement in a test's body."""
    out = []
    for node in ast.parse(text).body:
        if isinstance(node, ast.FunctionDef):
            for s in node.body:
                if isinstance(s, ast.Expr) and isinstance(s.value, ast.Call) and getattr(s.value.func, "id", "") in demands.PATHS:
                    out.append((s.lineno, s.col_offset, s.end_lineno))
    return out


WEAKENED = [
    "assert outcomes",  # the demand replaced by a weaker assertion
    "with contextlib.suppress(AssertionError): {call}",  # caught
    "if False: {call}",  # never run
    "outcomes = {call}",  # its value kept, not its assertion
]


@pytest.mark.parametrize("weakening", WEAKENED)
def test_a_weakened_demand_is_not_counted(weakening):
    """Each helper call of every test file, weakened in its source: demands
    it made are gone from the census, and nothing new appears."""
    sources = _sources()
    weakened_any = False
    for module, text in sources.items():
        lines = text.splitlines()
        for lineno, col, end in _calls(text):
            call = " ".join(line.strip() for line in lines[lineno - 1:end])
            mutated = lines[:lineno - 1] + [" " * col + weakening.format(call=call)] + lines[end:]
            before = demands_in({module: text})
            if not before:
                continue  # only tables of its own (this file's helper tests)
            after = demands_in({module: "\n".join(mutated)})
            lost = [d for d in before if d not in after]
            assert lost, f"{module}:{lineno}: weakened to {weakening!r}, the census still counts all of {before}"
            assert all(d in before for d in after), (module, lineno)
            weakened_any = True
    assert weakened_any


def test_a_deleted_row_leaves_its_invariant_without_a_killer(monkeypatch):
    """For every invariant: delete every row demanding it from the tables
    (copies put in place of the module attributes); the census says exactly
    that invariant has no killer."""
    tables = {}
    for module_name, text in _sources().items():
        module = importlib.import_module(module_name)
        for _function, _helper, name in demands._helper_calls(ast.parse(text)):
            if isinstance(getattr(module, name, None), dict):
                tables[(module, name)] = getattr(module, name)
    assert tables
    sources = {module_name: text for module_name, text in _sources().items()
               if any(module.__name__ == module_name for module, _ in tables)}
    for invariant in sorted(INVARIANTS):
        with monkeypatch.context() as patch:
            for (module, name), table in tables.items():
                kept = {k: v for k, v in table.items() if demands._wanted_ids(v[0]) != (invariant,)}
                patch.setattr(module, name, kept)
            assert uncovered(demands_in(sources), INVARIANTS) == [invariant]


def test_a_new_catalog_id_without_a_killer_is_reported(census):
    assert uncovered(census, [*INVARIANTS, "NEW-1"]) == ["NEW-1"]


def _run(lines, report=None):
    return types.SimpleNamespace(outlines=lines, stdout=None), report


def _report(cells):
    return {"matrix": {impl: {inv: {"outcome": o} for inv, o in by_inv.items()} for impl, by_inv in cells.items()},
            "tests": {}}


def _section(name, body):
    return [f"____ {name} ____", body, "=" * 20]


def test_the_helpers_assert_what_they_demand():
    """Each helper raises unless its killer FAILed the ID it names, with
    the ID in its failure's text (and the control passed)."""
    table = {"tests.planted.x:Bug": ("FS2-1", "k")}
    named = _section("test_a[tests.planted.x:Bug]", "FS2-1: wrong")
    ok = {"tests.planted.x:Bug": {"FS2-1": "fail"}, "reference": {"FS2-1": "pass"}}
    demand_failures(*_run(named, _report(ok)), table)
    for lines, cells in [
        (named, {**ok, "tests.planted.x:Bug": {"FS2-1": "pass"}}),  # not failed
        (_section("test_a[tests.planted.x:Bug]", "FS2-2: wrong"), ok),  # failed, another ID named
        (named, {**ok, "reference": {"FS2-1": "fail"}}),  # the control failed too
    ]:
        with pytest.raises(AssertionError):
            demand_failures(*_run(lines, _report(cells)), table)

    model_table = {"tests.planted.p:plan": ("PLN-1", "tests.planted.p:plan", "reference")}
    model_named = _section("test_model_plan_rules[reference-tests.planted.p.plan]", "PLN-1: split")
    demand_model_failures(*_run(model_named, _report({"reference": {"PLN-1": "fail"}})), model_table)
    for lines, cells in [(model_named, {"reference": {"PLN-1": "pass"}}),
                         (_section("test_model_plan_rules[reference-tests.planted.p.other]", "PLN-1: x"),
                          {"reference": {"PLN-1": "fail"}})]:
        with pytest.raises(AssertionError):
            demand_model_failures(*_run(lines, _report(cells)), model_table)

    check_table = {"tests.planted.p:plan": ("PLN-1", "check_plan_rules", "tests.planted.p:plan", "reference")}
    check_named = _section("test_fsdp_reference[tests.planted.p:plan-check_plan_rules]", "PLN-1: split")
    demand_check_failures(_run(check_named)[0], check_table)
    for lines in (_section("test_fsdp_reference[tests.planted.p:plan-check_plan_rules]", "PLN-2: x"), []):
        with pytest.raises(AssertionError):
            demand_check_failures(_run(lines)[0], check_table)
