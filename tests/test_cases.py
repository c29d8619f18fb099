"""Model factories: loading (one-line errors), the simple and the rich
form, and factories whose keyword strategies are drawn and shrunk."""

import sys

import pytest

from pytest_fsdpcheck.cases import (
    CaseError,
    ModelCase,
    build_case,
    case_strategy,
    checks,
    load_factory,
    validate_case_spec,
)

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(("spec", "message"), [
    ("no_such_pkg_xyz:make", "cannot import 'no_such_pkg_xyz'"),
    ("tests.planted.plans:nope", "has no attribute 'nope'"),
    ("tests.planted.plans:WIDTH", "is a int, not a factory"),
    ("just_a_name", "not an installed model"),
])
def test_loader_errors_are_one_line(spec, message):
    with pytest.raises(CaseError) as info:
        load_factory(spec)
    assert message in str(info.value) and "\n" not in str(info.value)


def test_wrong_return_type_and_unknown_names(tmp_path, monkeypatch):
    (tmp_path / "userpkg_cases.py").write_text(
        "from torch import nn\n"
        "from pytest_fsdpcheck.cases import ModelCase\n"
        "def bad():\n    return nn.Linear(2, 2)\n"
        "def units():\n    return ModelCase('u', nn.Sequential(nn.Linear(2, 2)), (), fsdp1_units=('0', 'missing'), replicate=('gone',))\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(CaseError, match="returned a Linear; expected"):
        validate_case_spec("userpkg_cases:bad")
    problems = validate_case_spec("userpkg_cases:units")
    assert any("FSDP1 unit 'missing'" in p for p in problems)
    assert any("replicate module 'gone'" in p for p in problems)
    sys.modules.pop("userpkg_cases", None)


def test_simple_factory():
    case = build_case(load_factory("tests.planted.plans:plain"))
    assert isinstance(case, ModelCase) and case.plan is None and len(case.example_inputs) == 1
    assert validate_case_spec("tests.planted.plans:plain") == []
    checks.check_traversal(case)
    checks.check_buckets(case)


def test_rich_case_reproducer_imports_the_factory():
    case = build_case(load_factory("tests.planted.plans:good"))
    assert case.fsdp1_units and case.plan is not None
    assert case.reproducer_lines()[-1] == "case = build_case(good)"


def test_strategies_draw_and_shrink():
    from hypothesis import find

    from tests.planted import plans

    case = find(case_strategy(plans.drawn), lambda c: not dict(c.factory_kwargs)["tied"])
    assert dict(case.factory_kwargs) == {"depth": 1, "tied": False}
    with pytest.raises(CaseError) as info:
        checks.run_check(checks.check_case, plans.deep_tied_split, max_examples=20)
    # the user's mistake, shrunk to the smallest depth that breaks the rule, naming the factory
    assert str(info.value).startswith("model tests.planted.plans:deep_tied_split(depth=3): PLN-1: "), info.value
