"""The built-in framework plans (torchtitan, torchtune, accelerate): each one's
checks where the framework is importable, a skip naming what is missing
where it is not, and a one-line error from a factory whose framework is
absent."""

from __future__ import annotations

import pytest

from pytest_fsdpcheck.cases import CaseError, build_case, checks, record_plan
from pytest_fsdpcheck.cases import frameworks as fw

pytestmark = pytest.mark.unit

_PLAN_CHECKS = ("check_plan_rules", "check_fsdp2_walk", "check_fsdp2_recorded", "check_fully_shard_calls")


def _params():
    out = []
    for fm, reason in fw.framework_models():
        marks = [pytest.mark.skip(reason=f"{fm.framework}: {reason}")] if reason else []
        for name in _PLAN_CHECKS:
            out.append(pytest.param(fm, name, marks=marks, id=f"{fm.name}-{name}"))
    return out


@pytest.mark.parametrize(("fm", "check"), _params())
def test_a_framework_plan_passes_the_fsdp2_checks(fm, check):
    checks.run_check(checks.CHECKS[check][0], fm.factory, "torch")


@pytest.mark.parametrize("fm", [pytest.param(fm, id=fm.name) for fm in fw.FRAMEWORK_MODELS])
def test_the_framework_really_calls_fully_shard_and_groups_tied_weights_once(fm):
    reason = fm.unavailable()
    if reason:
        pytest.skip(f"{fm.framework}: {reason}")
    case = build_case(fm.factory)
    record = record_plan(case)
    assert record.plan_error is None and record.calls, record.plan_error
    assert [c.roots for c in record.calls][-1] == ("",), "the root is sharded last"
    assert all(c.error is None for c in record.calls), [c.error for c in record.calls]
    tied = [names for names in _tied_names(case.model)]
    for names in tied:
        holders = [c.label() for c in record.calls if c.sharded and any(n in c.sharded for n in names)]
        assert len(holders) == 1, (names, holders)


def _tied_names(model):
    by_id: dict[int, list[str]] = {}
    for name, p in model.named_parameters(remove_duplicate=False):
        by_id.setdefault(id(p), []).append(name)
    return [names for names in by_id.values() if len(names) > 1]


def test_an_unavailable_framework_fails_in_one_line_naming_the_package(monkeypatch):
    real = fw.importlib.util.find_spec

    def find_spec(name, *args):
        return None if name == "torchtitan" else real(name, *args)

    monkeypatch.setattr(fw.importlib.util, "find_spec", find_spec)
    with pytest.raises(fw.FrameworkUnavailable) as info:
        build_case(fw.torchtitan_llama3_debug)
    message = str(info.value)
    assert isinstance(info.value, CaseError)
    assert "\n" not in message and "torchtitan is not installed" in message
    listed = dict((fm.name, reason) for fm, reason in fw.framework_models())
    assert "torchtitan is not installed" in listed["torchtitan_llama3_debug"]


def test_an_installed_but_broken_framework_is_named_with_its_import_error(monkeypatch):
    real = fw.importlib.import_module

    def import_module(name, *args):
        if name.startswith("accelerate"):
            raise ImportError("cannot import name 'x' from 'torch'")
        return real(name, *args)

    monkeypatch.setattr(fw.importlib.util, "find_spec", lambda name, *a: object())
    monkeypatch.setattr(fw.importlib, "import_module", import_module)
    reason = fw.unavailable(("accelerate.utils.fsdp_utils",))
    assert reason == ("accelerate.utils.fsdp_utils is installed but cannot be imported: "
                      "ImportError: cannot import name 'x' from 'torch'")


def test_every_built_in_case_can_be_named_on_the_command_line():
    from pytest_fsdpcheck.cases import load_factory

    for fm in fw.FRAMEWORK_MODELS:
        assert load_factory(fm.spec) is fm.factory


# the checks' "is this the installed torch" question must see through the
# plugin's isolation guard: before, check_fsdp2_recorded was n/p for torch
# under --fsdpcheck on every model
PLAIN_MODEL = '''
import torch
from torch import nn
from torch.distributed.fsdp import fully_shard

from pytest_fsdpcheck.cases import ModelCase


def plan(model, mesh):
    fully_shard(model[0], mesh=mesh)
    fully_shard(model, mesh=mesh)


def make():
    return ModelCase("two-linears", nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 2)), (torch.randn(2, 4),), plan=plan)
'''


@pytest.mark.plugin
def test_the_recorded_calls_are_checked_for_torch_under_the_plugin(pytester):
    pytester.makepyfile(fwplain=PLAIN_MODEL)
    pytester.syspathinsert()
    result = pytester.runpytest_subprocess(
        "--fsdpcheck", "--fsdpcheck-model", "fwplain:make", "--fsdpcheck-impl", "torch",
        "-k", "test_model_fsdp2_recorded", "-p", "no:cacheprovider", "-p", "no:xdist", "-rs")
    result.assert_outcomes(passed=1)
