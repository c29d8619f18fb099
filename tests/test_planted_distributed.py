"""SPL-16 can fail: planted splitters against a real compiled DDP run, and
the checker on hand-made rank results for the parts a splitter cannot break
(gradients, compile reasons, dead ranks)."""

import torch

from pytest_fsdpcheck.checks.distributed import check_ddp_end_to_end

PLANTED = "tests.planted.distributed:"


def test_wrong_bucket_count_is_caught_and_control_passes(run_suite):
    impls = [PLANTED + name for name in ("Unchanged", "ExtraBucket", "MissingBucket")]
    result, report = run_suite(*impls, k="test_distributed")
    outcomes = {impl: report["matrix"][impl]["SPL-16"]["outcome"] for impl in impls}
    assert outcomes == {impls[0]: "pass", impls[1]: "fail", impls[2]: "fail"}, outcomes
    result.stdout.fnmatch_lines(["*SPL-16: rank 0: expected one compiled subgraph per planned bucket*"])


def _rank(rank=0, **changes):
    grads = {"w": torch.ones(3)}
    result = {
        "rank": rank,
        "error": None,
        "ddp_bucket_bytes_cap": 100,
        "param_bytes": 400,
        "graphs_handed": 1,
        "compiled_subgraphs": 2,
        "reasons": ["DDPOptimizer intentional graph-break"] * 2,
        "plans": {"impl": {"error": None, "buckets": [2]}},
        "eager": {"grads": grads, "params": grads},
        "compiled": {"grads": dict(grads), "params": dict(grads)},
    }
    result.update(changes)
    return result


def test_checker_accepts_consistent_ranks():
    assert check_ddp_end_to_end([_rank(0), _rank(1)], "impl") == []


def test_checker_catches_gradient_mismatch():
    bad = _rank(compiled={"grads": {"w": torch.tensor([1.0, 1.0, 1.5])}, "params": {"w": torch.ones(3)}})
    (violation,) = check_ddp_end_to_end([bad], "impl")
    assert violation.invariant == "SPL-16" and "gradient of w" in violation.message


def test_checker_catches_reason_without_ddp_optimizer():
    bad = _rank(reasons=["DDPOptimizer intentional graph-break", "graph break in user code"])
    (violation,) = check_ddp_end_to_end([bad], "impl")
    assert "name DDPOptimizer" in violation.message


def test_checker_catches_unsplit_graph_and_dead_rank():
    unsplit = _rank(compiled_subgraphs=1, reasons=["x"], plans={"impl": {"error": None, "buckets": [1]}})
    dead = {"rank": 1, "error": "timed out after 120s and was killed"}
    messages = [v.message for v in check_ddp_end_to_end([unsplit, dead], "impl")]
    assert any("expected several buckets" in m for m in messages)
    assert any(m.startswith("rank 1:") and "timed out" in m for m in messages)


def test_checker_catches_ranks_disagreeing():
    other = _rank(1, compiled={"grads": {"w": torch.zeros(3)}, "params": {"w": torch.ones(3)}},
                  eager={"grads": {"w": torch.zeros(3)}, "params": {"w": torch.ones(3)}})
    (violation,) = check_ddp_end_to_end([_rank(0), other], "impl")
    assert "equal on every rank" in violation.message
