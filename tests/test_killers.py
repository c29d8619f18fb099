"""The killer census: every invariant in the catalog can fail, because some
test demands, through one of the helpers of tests/demands.py, that a planted
implementation or model FAILs it with its ID. The census reads the demands
from the tables those calls assert on, so a deleted row, a removed or
weakened call, or a helper that stops asserting shows here."""

import ast
import importlib
import sys
import types
import uuid

import pytest

from pytest_fsdpcheck.core.catalog import INVARIANTS
from tests import demands
from tests.demands import (
    assert_leaked,
    demand_check_case_errors,
    demand_check_failures,
    demand_failures,
    demand_model_case_errors,
    demand_model_failures,
    demand_torch_failures,
    demands_in,
    killers,
    uncovered,
)

pytestmark = pytest.mark.kill


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
        assert {f"PLN-{n}" for n in range(1, 6)} <= set(on_path), (path, on_path)
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
    # the test may end, passing or skipped, before the demand runs
    "return\n{call}",
    "if not outcomes:\n    return\n{call}",
    "pytest.skip('later')\n{call}",
    "if outcomes: pytest.skip('later')\n{call}",
    "pytest.xfail('later')\n{call}",
    "pytest.importorskip('no_such_module')\n{call}",
    "request.applymarker(pytest.mark.xfail(reason='later'))\n{call}",
]


@pytest.fixture(scope="module")
def running():
    """What pytest runs of the tests as they are on disk (collected once)."""
    modules = {module: demands.TESTS / f"{module.rpartition('.')[2]}.py" for module, text in _sources().items()
               if _demanding_tests(text)}
    return demands.running_tests(modules)


@pytest.mark.parametrize("weakening", WEAKENED, ids=lambda w: w.replace("\n", "; "))
def test_a_weakened_demand_is_not_counted(weakening, running):
    """Each helper call of every test file, weakened in its source: demands
    it made are gone from the census, and nothing new appears."""
    sources = _sources()
    weakened_any = False
    for module, text in sources.items():
        lines = text.splitlines()
        for lineno, col, end in _calls(text):
            call = " ".join(line.strip() for line in lines[lineno - 1:end])
            weakened = [" " * col + line for line in weakening.format(call=call).split("\n")]
            mutated = lines[:lineno - 1] + weakened + lines[end:]
            before = demands_in({module: text}, running)
            if not before:
                continue  # only tables of its own (this file's helper tests)
            after = demands_in({module: "\n".join(mutated)}, running)
            lost = [d for d in before if d not in after]
            assert lost, f"{module}:{lineno}: weakened to {weakening!r}, the census still counts all of {before}"
            assert all(d in before for d in after), (module, lineno)
            weakened_any = True
    assert weakened_any


#: statements before a demand that cannot end the test quietly: the
#: demand stays counted (a function or lambda defined, not called; an
#: importorskip of a module this environment has; a failure)
NOT_WEAKENED = [
    "def later():\n    return pytest.skip('later')\n{call}",
    "later = lambda: pytest.xfail('later')\n{call}",
    "pytest.importorskip('ast')\n{call}",
    "if not outcomes: pytest.fail('red, not quiet')\n{call}",
]


@pytest.mark.parametrize("statement", NOT_WEAKENED, ids=lambda w: w.replace("\n", "; "))
def test_a_statement_that_cannot_end_the_test_quietly_keeps_the_demand(statement, running):
    sources = _sources()
    kept_any = False
    for module, text in sources.items():
        lines = text.splitlines()
        for lineno, col, end in _calls(text):
            call = " ".join(line.strip() for line in lines[lineno - 1:end])
            added = [" " * col + line for line in statement.format(call=call).split("\n")]
            before = demands_in({module: text}, running)
            if before:
                after = demands_in({module: "\n".join(lines[:lineno - 1] + added + lines[end:])}, running)
                assert after == before, (module, lineno, statement)
                kept_any = True
    assert kept_any


def _demanding_tests(text) -> list[str]:
    return sorted({function for function, _helper, _table in demands._helper_calls(ast.parse(text))})


def _decorated(text, decorator, functions) -> str:
    """``text`` with ``decorator`` put on each of ``functions``."""
    lines = text.splitlines()
    for node in sorted((n for n in ast.parse(text).body if isinstance(n, ast.FunctionDef) and n.name in functions),
                       key=lambda n: -n.lineno):
        first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
        lines.insert(first - 1, decorator)
    return "\n".join(lines) + "\n"


#: ways of keeping a test's failure from failing the run that only pytest's
#: collection shows: a mark on the function (``@``, put on every other
#: demanding test of each file), a module mark (every test of the file), a
#: conftest hook (every test)
MARKED = {
    "decorator-skip": {"decorator": "@__import__('pytest').mark.skip(reason='later')"},
    "decorator-skipif": {"decorator": "@__import__('pytest').mark.skipif(True, reason='later')"},
    "decorator-skipif-string": {"decorator": "@__import__('pytest').mark.skipif('sys.version_info > (3,)', reason='x')"},
    "decorator-xfail": {"decorator": "@__import__('pytest').mark.xfail(reason='later')"},
    "decorator-xfail-strict": {"decorator": "@__import__('pytest').mark.xfail(strict=True, reason='later')"},
    "module-pytestmark-xfail": {"module": "pytestmark = __import__('pytest').mark.xfail(reason='later')"},
    "module-pytestmark-skip": {"module": "pytestmark = [__import__('pytest').mark.skip(reason='later')]"},
    "module-skip-at-import": {"module": "__import__('pytest').skip('later', allow_module_level=True)"},
    "conftest-hook-xfail": {"conftest": (
        "import pytest\n\n\ndef pytest_collection_modifyitems(items):\n"
        "    for item in items:\n        item.add_marker(pytest.mark.xfail(reason='later'))\n")},
    "conftest-hook-skip": {"conftest": (
        "import pytest\n\n\ndef pytest_collection_modifyitems(items):\n"
        "    for item in items:\n        item.add_marker(pytest.mark.skip(reason='later'))\n")},
    "conftest-fixture-skips": {"conftest": (
        "import pytest\n\n\n@pytest.fixture(autouse=True)\ndef later():\n"
        "    if True:\n        pytest.skip('later')\n    yield\n")},
    "fixture-used-skips": {
        "decorator": "@__import__('pytest').mark.usefixtures('later')",
        "conftest": "import pytest\n\n\n@pytest.fixture\ndef later():\n    pytest.xfail('later')\n"},
    "conftest-hook-deselects": {"conftest": (
        "def pytest_collection_modifyitems(config, items):\n"
        "    config.hook.pytest_deselected(items=list(items))\n    items[:] = []\n")},
}


def _running_as_written(tmp_path, sources: dict[str, str], conftest: str | None = None) -> set[str]:
    """What pytest runs of ``sources`` (module name -> text), written as one
    package of their own beside ``conftest``: pytest's collection of those
    files, their module names the ones given."""
    package = tmp_path / f"census_{uuid.uuid4().hex[:12]}"
    package.mkdir()
    (package / "__init__.py").write_text("")
    if conftest is not None:
        (package / "conftest.py").write_text(conftest)
    files = {}
    for module, text in sources.items():
        files[module] = package / f"{module.rpartition('.')[2]}.py"
        files[module].write_text(text)
    try:
        return demands.running_tests(files, args=["--import-mode=importlib", "--rootdir", str(tmp_path)])
    finally:
        for name in [n for n in sys.modules if n == package.name or n.startswith(package.name + ".")]:
            del sys.modules[name]


@pytest.fixture(scope="module")
def demanding_sources():
    return {module: text for module, text in _sources().items() if demands_in({module: text}, {
        f"{module}::{f}" for f in _demanding_tests(text)})}


def test_the_census_counts_what_pytest_collects_as_written(tmp_path, demanding_sources, running):
    """The control of the marked cases below: the same files, written out
    unmarked and collected the same way, keep every demand the census counts
    on disk."""
    assert demanding_sources
    as_written = _running_as_written(tmp_path, demanding_sources)
    assert demands_in(demanding_sources, as_written) == demands_in(demanding_sources, running) != []


@pytest.mark.parametrize("case", list(MARKED))
def test_a_marked_demand_is_not_counted(case, tmp_path, demanding_sources, running):
    """A demanding test that pytest skips, expects to fail (xfail) or
    deselects, marked the way ``case`` does: its demands are gone from the
    census and the other tests' stay."""
    how = MARKED[case]
    marked_tests: set[str] = set()
    sources = {}
    for module, text in demanding_sources.items():
        if "decorator" in how:
            functions = _demanding_tests(text)[::2]  # every other one: the rest must stay
            text = _decorated(text, how["decorator"], set(functions))
            marked_tests |= {f"{module}::{f}" for f in functions}
        else:
            marked_tests |= {f"{module}::{f}" for f in _demanding_tests(text)}
        if "module" in how:
            text += "\n" + how["module"] + "\n"
        sources[module] = text
    before = demands_in(demanding_sources, running)
    after = demands_in(sources, _running_as_written(tmp_path, sources, how.get("conftest")))
    lost = [d for d in before if d not in after]
    assert lost and all(d.test in marked_tests for d in lost), (case, lost)
    assert [d for d in before if d.test not in marked_tests] == after, case


def test_an_xfail_marked_killer_leaves_its_invariant_without_one(tmp_path, demanding_sources):
    """The issue's case: ANN-1's killers' tests marked xfail (a killer made
    correct would then xfail, and the run still pass): ANN-1 has no killer."""
    tests = {d.test for d in demands_in(demanding_sources, {
        f"{m}::{f}" for m, t in demanding_sources.items() for f in _demanding_tests(t)}) if d.invariant == "ANN-1"}
    by_module: dict[str, set[str]] = {}
    for test in tests:
        module, _, function = test.partition("::")
        by_module.setdefault(module, set()).add(function)
    sources = {module: _decorated(demanding_sources[module], "@__import__('pytest').mark.xfail", functions)
               for module, functions in by_module.items()}
    census = demands_in({**demanding_sources, **sources}, _running_as_written(tmp_path, {**demanding_sources, **sources}))
    assert "ANN-1" in uncovered(census, INVARIANTS)


def test_a_deleted_row_leaves_its_invariant_without_a_killer(monkeypatch, running):
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
            assert uncovered(demands_in(sources, running), INVARIANTS) == [invariant]


def test_a_new_catalog_id_without_a_killer_is_reported(census):
    assert uncovered(census, [*INVARIANTS, "NEW-1"]) == ["NEW-1"]


def _run(lines, report=None):
    return types.SimpleNamespace(outlines=lines, stdout=None), report


def _report(cells, failed=()):
    """A JSON report's matrix (impl -> invariant -> outcome) and, per
    ``(node id, implementation, cause, invariants)`` of ``failed``, its
    failed test as the plugin records it."""
    tests = {nodeid: {"outcome": "failed", "implementation": impl, "invariants": list(invariants),
                      "failure": {"invariants": list(invariants), "message": "", "reproducer": None, "cause": cause}}
             for nodeid, impl, cause, invariants in failed}
    return {"matrix": {impl: {inv: {"outcome": o} for inv, o in by_inv.items()} for impl, by_inv in cells.items()},
            "tests": tests}


def _section(name, body):
    return [f"____ {name} ____", body, "=" * 20]


#: what a leak's failure says: every invariant of its test, none judged
LEAK = "pytest_fsdpcheck.plugin.guard.LeakedGlobalState: {ids} x left process-wide state changed: default_dtype"


def test_the_helpers_assert_what_they_demand():
    """Each helper raises unless its killer FAILed the ID it names by that
    ID's own violation (the report's failure with cause "violation"), with
    the ID in its failure's text (and the control passed): a leak, time-out
    or crash, whose message lists every invariant of its test, meets none."""
    bug, test = "tests.planted.x:Bug", "test_a[tests.planted.x:Bug]"
    table = {bug: ("FS2-1", "k")}
    named = _section(test, "pytest_fsdpcheck.checks.ConformanceFailure: FS2-1: wrong")
    ok = {bug: {"FS2-1": "fail"}, "reference": {"FS2-1": "pass"}}
    violation = [(f"t.py::{test}", bug, "violation", ["FS2-1"])]
    demand_failures(*_run(named, _report(ok, violation)), table)
    for lines, cells, failed in [
        (named, {**ok, bug: {"FS2-1": "pass"}}, violation),  # not failed
        (_section(test, "FS2-2: wrong"), ok, violation),  # failed, another ID named
        (named, {**ok, "reference": {"FS2-1": "fail"}}, violation),  # the control failed too
        (named, ok, [(f"t.py::{test}", bug, "violation", ["FS2-2"])]),  # another ID violated
        (named, ok, [(f"t.py::test_b[{bug}]", bug, "violation", ["FS2-1"])]),  # by a test that printed nothing
        *((_section(test, LEAK.format(ids="FS2-1: FS2-2:")), ok, [(f"t.py::{test}", bug, cause, ["FS2-1", "FS2-2"])])
          for cause in ("leak", "timeout", "crash", None)),  # no check judged FS2-1
    ]:
        with pytest.raises(AssertionError):
            demand_failures(*_run(lines, _report(cells, failed)), table)

    model_table = {"tests.planted.p:plan": ("PLN-1", "tests.planted.p:plan", "reference")}
    model_test = "test_model_plan_rules[reference-tests.planted.p.plan]"
    model_named = _section(model_test, "PLN-1: split")
    model_failed = [(f"t.py::{model_test}", "reference", "violation", ["PLN-1"])]
    demand_model_failures(*_run(model_named, _report({"reference": {"PLN-1": "fail"}}, model_failed)), model_table)
    other = "test_model_plan_rules[reference-tests.planted.p.other]"
    for lines, cells, failed in [
        (model_named, {"reference": {"PLN-1": "pass"}}, model_failed),
        (_section(other, "PLN-1: x"), {"reference": {"PLN-1": "fail"}}, [(f"t.py::{other}", "reference", "violation", ["PLN-1"])]),
        (model_named, {"reference": {"PLN-1": "fail"}}, [(f"t.py::{model_test}", "reference", "leak", ["PLN-1"])]),
    ]:
        with pytest.raises(AssertionError):
            demand_model_failures(*_run(lines, _report(cells, failed)), model_table)

    torch_table = {"fault": ("FS2-1", "k")}
    torch_test = "test_a[torch]"
    torch_named = _section(torch_test, "FS2-1: wrong")
    demand_torch_failures(*_run(torch_named, _report({"torch": {"FS2-1": "fail"}},
                                                     [(f"t.py::{torch_test}", "torch", "violation", ["FS2-1"])])), torch_table)
    for cause in ("leak", "timeout", "crash"):
        with pytest.raises(AssertionError):
            demand_torch_failures(*_run(torch_named, _report({"torch": {"FS2-1": "fail"}},
                                                             [(f"t.py::{torch_test}", "torch", cause, ["FS2-1"])])), torch_table)

    check_table = {"tests.planted.p:plan": ("PLN-1", "check_plan_rules", "tests.planted.p:plan", "reference")}
    check_test = "test_fsdp_reference[tests.planted.p:plan-check_plan_rules]"
    for body in ("E   pytest_fsdpcheck.checks.ConformanceFailure: PLN-1: split",  # pytest's long style
                 "pytest_fsdpcheck.checks.ConformanceFailure: PLN-2: x\nPLN-1: split",  # native, its second violation
                 f"{LEAK.format(ids='PLN-2:')}\npytest_fsdpcheck.checks.ConformanceFailure: PLN-1: split"):
        demand_check_failures(_run(_section(check_test, body))[0], check_table)
    for lines in (_section(check_test, "E   pytest_fsdpcheck.checks.ConformanceFailure: PLN-2: x"), [],
                  _section(check_test, "E   " + LEAK.format(ids="PLN-1: PLN-2:")),  # a leak lists them, judges none
                  _section(check_test, "E   pytest_fsdpcheck.checks.ConformanceFailure: PLN-2: x\n"
                                       "E   LeakedGlobalState: PLN-1: PLN-2: left process-wide state changed"),
                  _section(check_test, "E   RuntimeError: PLN-1: boom")):  # a crash naming it
        with pytest.raises(AssertionError):
            demand_check_failures(_run(lines)[0], check_table)

    # a plan's mistake: the user's case error, one line naming the factory and the rule, no cell
    mistake_table = {"tests.planted.p:plan": ("PLN-1", "tests.planted.p:plan")}
    case_head = "ERROR at setup of test_model_case[tests.planted.p.plan]"
    line = "model tests.planted.p:plan: PLN-1: tied parameters split"
    as_error = {"matrix": {}, "tests": {}, "case_errors": {"tests.planted.p:plan": line}}
    demand_model_case_errors(_run(_section(case_head, line))[0], as_error, mistake_table)
    cell = _report({"torch": {"FS2-1": "fail"}}, [("t.py::test_model_fsdp2_walk[torch-tests.planted.p.plan]", "torch",
                                                   "violation", ["FS2-1"])])
    for lines, report in [
        (_section(case_head, line), {**as_error, "case_errors": {}}),  # no case error
        (_section(case_head, line.replace("PLN-1", "PLN-2")), {**as_error, "case_errors": {
            "tests.planted.p:plan": line.replace("PLN-1", "PLN-2")}}),  # another rule
        (_section(case_head, line + "\nTraceback"), as_error),  # not the one line
        (_section(case_head, line), {**as_error, "tests": cell["tests"]}),  # and a cell in torch's column
    ]:
        with pytest.raises(AssertionError):
            demand_model_case_errors(_run(lines)[0], report, mistake_table)
    check_mistakes = {"tests.planted.p:plan": ("PLN-1", "tests.planted.p:plan", "reference")}
    case_test = "test_fsdp_reference[tests.planted.p:plan-check_case]"
    demand_check_case_errors(_run(_section(case_test, line))[0], check_mistakes)
    for lines in (_section(case_test, line.replace("PLN-1", "PLN-3")), [], _section(case_test, line + "\nmore"),
                  _section(case_test, line) + _section(case_test.replace("check_case", "check_fsdp2_walk"), "x")):
        with pytest.raises(AssertionError):
            demand_check_case_errors(_run(lines)[0], check_mistakes)

    # not a demand: a leak FAILs the cell and kills nothing
    leak_table = {bug: ("FS2-1", "k")}
    assert_leaked(*_run([], _report(ok, [(f"t.py::{test}", bug, "leak", ["FS2-1", "FS2-2"])])), leak_table)
    for cells, cause in ((ok, "violation"), ({bug: {"FS2-1": "pass"}}, "leak")):
        with pytest.raises(AssertionError):
            assert_leaked(*_run([], _report(cells, [(f"t.py::{test}", bug, cause, ["FS2-1"])])), leak_table)
