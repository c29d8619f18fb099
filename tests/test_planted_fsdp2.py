"""Every FSDP2 invariant can fail: each planted bug is caught by its ID."""

import pytest

from tests.demands import demand_failures
from tests.helpers import PLANTED_RUN, selection
from tests.planted.fsdp2 import (
    CORPUS_PLANTED,
    EQUAL_PLANTED,
    NESTED_PLANTED,
    PLANTED,
    WORLD_PLANTED,
)

pytestmark = pytest.mark.kill


def test_planted_fsdp2_bugs_are_caught(run_suite):
    result, report = run_suite("reference", *PLANTED, k=f"test_fsdp2 and ({selection(PLANTED)})", extra=PLANTED_RUN)
    assert result.ret == 1, "\n".join(result.outlines[-40:])
    # ... each with its ID; the same tests pass on the reference each bug was planted in
    demand_failures(result, report, PLANTED)


def test_nested_roots_mistakes_fail_the_fixed_groups(run_suite):
    """A group whose modules nest: walking the inner one again, leaving it
    out, or reducing the roots by walking them in the order given each fail
    FS2-5 on the fixed groups, every run, where torch's documented rule
    (the reference) passes them."""
    result, report = run_suite("reference", *NESTED_PLANTED, k=selection(NESTED_PLANTED), extra=PLANTED_RUN)
    demand_failures(result, report, NESTED_PLANTED)


def test_modules_compared_by_equality_fail_the_equal_trees(run_suite):
    """Modules that all compare equal: a walk taking a module with its own
    group for the root it equals (``!=`` or ``in`` where the reference asks
    ``is``) enters that group, one keeping its visited modules in a list
    skips the ones equal to a visited module; each fails FS2-2 on the fixed
    trees, which the reference passes."""
    result, report = run_suite("reference", *EQUAL_PLANTED, k=selection(EQUAL_PLANTED), extra=PLANTED_RUN)
    demand_failures(result, report, EQUAL_PLANTED)


def test_simulated_world_mistakes_fail_fs2_10(run_suite):
    """At 8 to 1024 simulated ranks and on HSDP meshes: padding on the first
    ranks instead of the last, the last rank's shard missing a row, and a
    rank whose managed modules differ from the others' each fail FS2-10 on
    the fixed uneven worlds, which the reference passes."""
    result, report = run_suite("reference", *WORLD_PLANTED, k=selection(WORLD_PLANTED), extra=PLANTED_RUN)
    demand_failures(result, report, WORLD_PLANTED)


def test_planted_fsdp2_bugs_are_caught_on_the_corpus(run_suite):
    """The corpus models' fully_shard plans (layers, tied modules in one call,
    the root) catch the same mistakes, by the golden text and by the oracle."""
    result, report = run_suite("reference", *CORPUS_PLANTED, k=selection(CORPUS_PLANTED), extra=PLANTED_RUN)
    assert result.ret == 1, "\n".join(result.outlines[-40:])
    demand_failures(result, report, CORPUS_PLANTED)
    failed = {nodeid.partition("::")[2].partition("[")[0] for nodeid, test in report["tests"].items()
              if test["outcome"] == "failed"}
    assert {"test_golden_fsdp2", "test_corpus_fsdp2_invariants"} <= failed, failed


def _runtime_bug_or_pass(invariant: str) -> str:
    """What a walk declaring fully_shard's runtime bugs reads on this torch."""
    import torch

    from pytest_fsdpcheck.impls.torch_bugs import FULLY_SHARD_RUNTIME_BUGS

    bugs = [b for b in FULLY_SHARD_RUNTIME_BUGS if invariant in b.invariants and b.applies_to_version(torch.__version__)]
    return "known" if bugs else "pass"


def test_features_a_fully_shard_predates_are_not_provided(run_suite):
    impl = "tests.planted.fsdp2:FirstFullyShard"
    result, report = run_suite(impl, k="test_fsdp2", extra=PLANTED_RUN)
    outcomes = {inv: cell["outcome"] for inv, cell in report["matrix"][impl].items()}
    assert outcomes == {
        "FS2-1": "pass", "FS2-2": "pass", "FS2-3": "not provided", "FS2-4": "pass",
        "FS2-5": "not provided", "FS2-6": "pass", "FS2-7": "pass", "FS2-8": "pass",
        # the simulated worlds build one module per call here, as this fully_shard takes
        "FS2-10": "pass",
        # the one-rank steps give fully_shard one module per call and no ignored parameters;
        # it drives torch's runtime and declares its bugs, as the reference does
        "FS2-12": "pass", "FS2-13": "pass", "FS2-14": _runtime_bug_or_pass("FS2-14"),
    }, outcomes
    result.stdout.fnmatch_lines(["*FS2-5*n/p*"])
    assert result.ret == 0, "\n".join(result.outlines[-30:])
