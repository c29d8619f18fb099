"""SPL-20, FS2-11, EXO-9: every rank of a real world gives the same answer.

The checker on hand-made rank records (which ranks differ, the first entry
where they do, one line for what several ranks share), and planted
implementations whose answer depends on the rank (they read
``torch.distributed.get_rank()``) failing through the suite with the ID and
the ranks named, in the spawned ranks (here) and under torchrun
(tests/test_torchrun.py).
"""

import pytest

from pytest_fsdpcheck.checks.distributed import (
    agreement_not_provided,
    check_ranks_agree,
    rank_entries,
)
from tests.demands import demand_failures

pytestmark = pytest.mark.unit

PLANTED = "tests.planted.distributed:"
#: answers reordered on every rank but 0 (the same entries: counts and
#: collectives agree)
AGREEMENT_PLANTED = {
    PLANTED + "SplitDependsOnRank": ("SPL-20", "test_ranks_agree"),
    PLANTED + "WalkDependsOnRank": ("FS2-11", "test_ranks_agree"),
    PLANTED + "ExecOrderDependsOnRank": ("EXO-9", "test_ranks_agree"),
}


def _ddp_rank(rank, nodes=(("a", "b"), ("c",)), params=("l0.weight", "l0.bias"), **changes):
    result = {
        "rank": rank, "error": None,
        "plans": {"impl": {"error": None, "not_provided": False, "buckets": [len(nodes)], "nodes": [[list(b) for b in nodes]]}},
        "exec_orders": {"impl": {"error": None, "not_provided": False, "modules": ["(root)", "l0"], "params": list(params)}},
    }
    result.update(changes)
    return result


def _fsdp2_rank(rank, modules=("m2", "m1"), params=("m2.w", "m1.w"), modes=("eager", "compiled")):
    call = {"impl_modules": list(modules), "impl_params": list(params), "sharded": list(params)}
    return {"rank": rank, "error": None, "unchecked": {}, "modes": list(modes),
            "impls": {"impl": {"error": None, "not_provided": False, **{m: {"calls": [call]} for m in modes}}}}


@pytest.mark.parametrize("area", ["splitting", "exec_order"])
def test_ranks_that_agree_pass(area):
    assert check_ranks_agree([_ddp_rank(0), _ddp_rank(1), _ddp_rank(2)], "impl", area) == []


def test_fsdp2_ranks_that_agree_pass():
    assert check_ranks_agree([_fsdp2_rank(0), _fsdp2_rank(1)], "impl", "fsdp2") == []


def test_a_bucket_plan_that_differs_names_the_ranks_and_the_first_entry():
    results = [_ddp_rank(0), _ddp_rank(1, nodes=(("b", "a"), ("c",))), _ddp_rank(2)]
    (violation,) = check_ranks_agree(results, "impl", "splitting")
    assert violation.invariant == "SPL-20"
    assert violation.message == (
        "expected every rank to give the same bucket plan, but rank 1 differs from ranks 0, 2 at entry 0: "
        "ranks 0, 2 have 'graph 0, bucket 0: a, b', rank 1 has 'graph 0, bucket 0: b, a'")


def test_each_group_of_ranks_that_differs_is_one_line():
    """Ranks 1 and 3 alike, rank 2 otherwise: two lines, each naming its ranks
    against rank 0's group; a plan shorter on one rank is 'nothing more'."""
    results = [_ddp_rank(0), _ddp_rank(1, nodes=(("a", "b"),)), _ddp_rank(2, nodes=(("a", "b"), ("d",))),
               _ddp_rank(3, nodes=(("a", "b"),))]
    messages = [v.message for v in check_ranks_agree(results, "impl", "splitting")]
    assert messages == [
        "expected every rank to give the same bucket plan, but ranks 1, 3 differ from rank 0 at entry 1: "
        "rank 0 has 'graph 0, bucket 1: c', ranks 1, 3 have 'nothing more'",
        "expected every rank to give the same bucket plan, but rank 2 differs from rank 0 at entry 1: "
        "rank 0 has 'graph 0, bucket 1: c', rank 2 has 'graph 0, bucket 1: d'",
    ]


def test_an_exec_order_that_differs_is_exo_9():
    (violation,) = check_ranks_agree([_ddp_rank(0), _ddp_rank(1, params=("l0.bias", "l0.weight"))], "impl", "exec_order")
    assert violation.invariant == "EXO-9"
    assert "rank 1 differs from rank 0 at entry 2: rank 0 has 'parameter 0: l0.weight', rank 1 has 'parameter 0: l0.bias'" \
        in violation.message


def test_a_walk_that_differs_is_fs2_11_with_its_mode_and_call():
    results = [_fsdp2_rank(0), _fsdp2_rank(1, modules=("m1", "m2"))]
    (violation,) = check_ranks_agree(results, "impl", "fsdp2", where="world size 3, ")
    assert violation.invariant == "FS2-11"
    assert violation.message == (
        "world size 3, expected every rank to give the same managed modules and groups, but rank 1 differs from "
        "rank 0 at entry 0: rank 0 has 'eager, call 0: modules m2 m1', rank 1 has 'eager, call 0: modules m1 m2'")


def test_a_rank_without_an_answer_is_a_violation_not_a_pass():
    """A rank that failed, or whose implementation failed, has nothing to
    compare: that is said (one line for ranks alike), never passed over."""
    failed = {"rank": 1, "error": "Traceback ...\nRuntimeError: boom"}
    impl_failed = _ddp_rank(2, exec_orders={"impl": {"error": "Traceback\nValueError: no", "not_provided": False}})
    messages = [v.message for v in check_ranks_agree([_ddp_rank(0), failed, impl_failed], "impl", "exec_order")]
    assert messages == [
        "rank 1: expected its exec order to compare, but the rank failed: RuntimeError: boom",
        "rank 2: expected its exec order to compare, but impl failed: ValueError: no",
    ]
    both = [{"rank": r, "error": "x\nRuntimeError: boom"} for r in (0, 1)]
    assert [v.message for v in check_ranks_agree(both, "impl", "splitting")] == [
        "ranks 0, 1: expected its bucket plan to compare, but the rank failed: RuntimeError: boom"]


def test_not_provided_only_where_no_rank_has_the_area():
    missing = {"plans": {"impl": {"error": None, "not_provided": True, "buckets": []}}}
    assert agreement_not_provided([_ddp_rank(0, **missing), _ddp_rank(1, **missing)], "impl", "splitting")
    assert not agreement_not_provided([_ddp_rank(0), _ddp_rank(1, **missing)], "impl", "splitting")
    # one rank providing it and another not is a divergence
    (violation,) = check_ranks_agree([_ddp_rank(0), _ddp_rank(1, **missing)], "impl", "splitting")
    assert "rank 1 has '(not provided)'" in violation.message
    assert rank_entries({"rank": 0, "error": None, "unchecked": {"FS2-9": "no walk"}}, "impl", "fsdp2") is None


@pytest.mark.e2e
def test_answers_that_depend_on_the_rank_fail_naming_the_ranks(run_suite, monkeypatch):
    """Spawned ranks (2 for SPL-16's world and FS2-9's, 3 for FS2-9's
    second): each planted answer, reordered on ranks other than 0, FAILs
    its agreement invariant naming rank 1; torch and the reference pass."""
    monkeypatch.setenv("FSDPCHECK_COMPILE_BACKEND", "aot_eager")  # the answers differ before any kernel
    result, report = run_suite("torch", "reference", *AGREEMENT_PLANTED, k="test_ranks_agree")
    demand_failures(result, report, AGREEMENT_PLANTED, control="reference")
    for inv in ("SPL-20", "FS2-11", "EXO-9"):
        assert report["matrix"]["torch"][inv]["outcome"] == "pass", report["matrix"]["torch"]
    result.stdout.fnmatch_lines([
        "*SPL-20: expected every rank to give the same bucket plan, but rank 1 differs from rank 0 at entry 0*",
        "*EXO-9: expected every rank to give the same exec order, but rank 1 differs from rank 0 at entry *: "
        "rank 0 has 'parameter 0: *",
    ], consecutive=False)
    result.stdout.fnmatch_lines(["*FS2-11: world size 3, expected every rank to give the same managed modules and "
                                 "groups, but rank 2 differs from rank 0*"])
