"""The golden corpus can fail, and says how: a changed behaviour shows up as a
readable unified diff against fixtures/golden, charged to the right ID."""

import pytest

from pytest_fsdpcheck.checks import golden_files as golden
from pytest_fsdpcheck.checks.golden import check_golden
from pytest_fsdpcheck.generators.corpus import CORPUS
from tests.demands import demand_failures

pytestmark = pytest.mark.unit

GOLDEN_PLANTED = {"tests.planted.golden:ReversedParamOrder": ("EXO-3", "test_golden_exec_order and mlp_chain")}


@pytest.mark.kill
def test_changed_exec_order_shows_unified_diff(run_suite):
    impl = "tests.planted.golden:ReversedParamOrder"
    result, report = run_suite(impl, k="test_golden_exec_order and mlp_chain")
    demand_failures(result, report, GOLDEN_PLANTED, control=None)
    assert report["matrix"][impl]["EXO-2"]["outcome"] == "pass"
    result.stdout.fnmatch_lines([
        "*EXO-3: expected the golden [[]exec order] of fixtures/golden/mlp_chain.txt*",
        "*--- fixtures/golden/mlp_chain.txt (expected)",
        "*+++ fixtures/golden/mlp_chain.txt (got)",
        "*-params: layers.0.weight layers.0.bias *",
        "*+params: head.bias head.weight *",
    ])


def test_checker_charges_bucket_differences_to_their_invariant():
    expected = ["caps: x", "bucket 0: 10 bytes: a b", "bucket 1: 4 bytes: c"]
    cases = {
        "SPL-4": ["caps: x", "bucket 0: 14 bytes: a b c", "bucket 1: 4 bytes: c"],
        "SPL-3": ["caps: x", "bucket 0: 10 bytes: a b", "bucket 1: 9 bytes: c d"],
        "SPL-5": ["caps: x", "bucket 0: 6 bytes: a", "bucket 1: 8 bytes: b c"],
        "SPL-7": ["caps: x", "bucket 0: 10 bytes: a b | extended by 1 ops, +0 bytes", "bucket 1: 4 bytes: c"],
    }
    for invariant, got in cases.items():
        violations = check_golden("buckets", expected, got, "m.txt")
        assert [v.invariant for v in violations] == [invariant], (invariant, violations)
        assert "--- m.txt (expected)" in violations[0].message


def test_checker_names_each_differing_line_kind():
    expected = ["states: s0@<root> s1@a", "handles: h0 h1", "root states: s0"]
    got = ["states: s0@<root> s1@a", "handles: h1 h0", "root states: s0 s1"]
    assert [v.invariant for v in check_golden("traversal", expected, got, "m.txt")] == ["TRV-6", "TRV-7"]
    assert check_golden("traversal", expected, list(expected), "m.txt") == []
    (missing,) = check_golden("exec order", None, got, "m.txt")
    assert golden.REGENERATE in missing.message and "EXPECTTEST_ACCEPT" not in missing.message
    plan = ["fully_shard(a): a.x a", "  params: a.x.w", "  buffers: -"]
    assert [v.invariant for v in check_golden("fsdp2", plan, ["fully_shard(a): a a.x", *plan[1:]], "m.txt")] == ["FS2-1"]
    assert [v.invariant for v in check_golden("fsdp2", plan, [*plan[:2], "  buffers: a.x.b"], "m.txt")] == ["FS2-4"]


def test_accept_rewrites_only_its_section(tmp_path):
    path = tmp_path / "m.txt"
    header = golden.HEADER.format(name="m", description="d")
    golden.write_section(path, header, "traversal", ["states: old"], ["buckets", "traversal"])
    golden.write_section(path, header, "buckets", ["bucket 0: 1 bytes: a"], ["buckets", "traversal"])
    golden.write_section(path, header, "traversal", ["states: new"], ["buckets", "traversal"])
    assert golden.read_sections(path) == {"buckets": ["bucket 0: 1 bytes: a"], "traversal": ["states: new"]}
    assert path.read_text().startswith("# pytest-fsdpcheck golden output")


def test_every_corpus_model_has_a_golden_file_with_all_sections():
    from pytest_fsdpcheck.generators.corpus import missing, untraceable

    for name in CORPUS:
        sections = golden.read_sections(golden.golden_dir() / f"{name}.txt")
        if missing(name) is not None:
            assert {"buckets", "traversal", "fsdp2"} <= set(sections), name
            continue
        # exec order is recorded during an fx trace: none for a model fx cannot trace
        expected = {"buckets", "traversal", "fsdp2"} | (set() if untraceable(name) else {"exec order"})
        assert set(sections) == expected, name


def test_a_failed_capture_is_the_suites_error_not_a_skip(monkeypatch):
    """Only a probe decided before the implementation runs makes the corpus
    bucket checks n/p; a capture that fails otherwise (here the suite's own
    "gave 2 graphs") is an error that names itself."""
    import pytest

    from conformance import test_golden
    from pytest_fsdpcheck.generators import corpus

    def two_graphs(name):
        raise RuntimeError(f"corpus model {name} gave 2 Dynamo graphs, expected 1")

    monkeypatch.setattr(test_golden, "captured", two_graphs)
    with pytest.raises(RuntimeError, match="gave 2 Dynamo graphs"):
        try:
            test_golden._require_capture("mlp_chain")
        except pytest.skip.Exception as exc:  # a skip propagating would read as skipped, not failed
            pytest.fail(f"a capture failure made the check n/p: {exc}")
    # The documented limitation is probed, not inferred from a failure.
    import dataclasses

    probed = dataclasses.replace(corpus.CORPUS["mlp_chain"], capture_missing=lambda: "probe says no")
    monkeypatch.setitem(corpus.CORPUS, "mlp_chain", probed)
    with pytest.raises(pytest.skip.Exception, match="not provided: probe says no"):
        test_golden._require_capture("mlp_chain")


def test_transformers_capture_is_probed_for_is_exporting(monkeypatch):
    import torch

    from pytest_fsdpcheck.generators import hf_corpus

    assert hf_corpus.capture_missing() is None  # this torch has torch.compiler.is_exporting
    monkeypatch.delattr(torch.compiler, "is_exporting")
    assert "torch.compiler.is_exporting" in hf_corpus.capture_missing()
