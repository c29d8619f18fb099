"""FS2-9 on a user's plan: the plan's real ``fully_shard`` calls at world
size 2 (CPU ranks, gloo), one step eagerly and one compiled, against the
unsharded model's gradients."""

import pytest
import torch

from pytest_fsdpcheck.checks import Violation
from pytest_fsdpcheck.checks.plan_distributed import check_plan_end_to_end

pytestmark = pytest.mark.skipif(not torch.distributed.is_available(), reason="no torch.distributed")


@pytest.fixture
def fast_compile(monkeypatch):
    # the spawned ranks inherit it: Dynamo and AOTAutograd without inductor's
    # C++ builds, which would take most of a minute per rank on a small CPU
    monkeypatch.setenv("FSDPCHECK_COMPILE_BACKEND", "aot_eager")


def _run(spec):
    from pytest_fsdpcheck.cases.checks import case_builder
    from pytest_fsdpcheck.known.exposure import case_of
    from pytest_fsdpcheck.runs.plan_run import run_plan_ranks

    return run_plan_ranks(case_builder(case_of(spec)), world_size=2, timeout=240)


def test_good_plan_matches_unsharded_eager_and_compiled(fast_compile):
    records = _run("tests.planted.plans:good")
    assert [r["error"] for r in records] == [None, None]
    for record in records:
        assert record["world_size"] == 2
        names = set(record["reference"])
        assert "embed.weight" in names and "layers.1.mlp.2.weight" in names
        for mode in ("eager", "compiled"):
            assert record[mode]["error"] is None
            assert set(record[mode]["grads"]) == names
    assert check_plan_end_to_end(records) == []


def test_rank_dependent_plan_fails_naming_the_parameter(fast_compile):
    violations = check_plan_end_to_end(_run("tests.planted.plans:rank_scaled"))
    assert violations and {v.invariant for v in violations} == {"FS2-9"}
    for mode in ("eager", "compiled"):
        assert any(f"{mode}: the gradient of layers.1.mlp.2.weight differs" in v.message for v in violations), violations


def _grad_records(have, want, **step):
    return [{"rank": 0, "error": None, "reference": {"w": want},
             "eager": {"error": None, "grads": {"w": have}}, "compiled": {"error": None, "grads": {"w": have}, **step}}]


def test_checker_judges_records():
    one = torch.ones(2, 2)
    assert check_plan_end_to_end(_grad_records(one.clone(), one)) == []
    wrong = check_plan_end_to_end(_grad_records(2 * one, one))
    assert [v.message.split(":")[0] for v in wrong] == ["rank 0, eager", "rank 0, compiled"]
    assert all("gradient of w differs" in v.message for v in wrong)
    assert "shape" in check_plan_end_to_end(_grad_records(torch.ones(4), one))[0].message
    assert "is None" in check_plan_end_to_end(_grad_records(None, one))[0].message
    failed = check_plan_end_to_end(_grad_records(one, one, error="RuntimeError: boom\nTraceback ..."))
    assert failed == [Violation("FS2-9", "rank 0, compiled: the plan's step failed: RuntimeError: boom")]
    died = check_plan_end_to_end([{"rank": 1, "error": "died without a result"}])
    assert died == [Violation("FS2-9", "rank 1 failed: died without a result")]


def test_before_fsdp2_runs_on_cpu_the_check_is_np_with_its_reason(monkeypatch):
    """FSDP2 steps on CPU ranks only from 2.7 (2.3-2.6 need CUDA streams):
    n/p from the release, decided before any rank starts."""
    from pytest_fsdpcheck.cases import checks
    from pytest_fsdpcheck.known.exposure import case_of

    monkeypatch.setattr(torch, "__version__", "2.6.0+cu124")
    monkeypatch.setattr("pytest_fsdpcheck.runs.plan_run.run_plan_ranks", lambda *a, **k: pytest.fail("a rank started"))
    with pytest.raises(pytest.skip.Exception, match="fully_shard's runtime runs on CPU from torch 2.7"):
        checks.check_plan_end_to_end(case_of("tests.planted.plans:good"), checks._torch_impl(), world_size=2)
