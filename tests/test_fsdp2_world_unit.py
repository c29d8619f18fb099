"""FS2-10's pure pieces: the spec's chunking, the ranks sampled, and the
checker on hand-made rank views (no fake process group needed for these)."""

import pytest

from pytest_fsdpcheck.checks.fsdp2_world import (
    _coverage,
    _disagreements,
    _shard_violations,
    chunk_rows,
    ranks_to_build,
)

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(("rows", "shards", "index", "want"), [
    (1000, 64, 0, (0, 16, 16)),
    (1000, 64, 62, (992, 8, 16)),  # the short one
    (1000, 64, 63, (1000, 0, 16)),  # empty, padded to 16
    (9, 8, 4, (8, 1, 2)),
    (9, 8, 5, (9, 0, 2)),
    (3, 1024, 2, (2, 1, 1)),
    (3, 1024, 1023, (3, 0, 1)),
    (256, 256, 255, (255, 1, 1)),
])
def test_chunk_rows_is_torch_chunk_semantics(rows, shards, index, want):
    assert chunk_rows(rows, shards, index) == want


def test_chunks_cover_each_row_once_padding_last():
    for rows in (1, 7, 63, 64, 65, 1000, 1025):
        for shards in (8, 64, 256, 1024):
            parts = [chunk_rows(rows, shards, i) for i in range(shards)]
            assert sum(count for _, count, _ in parts) == rows
            assert [start for start, count, _ in parts if count] == sorted(start for start, count, _ in parts if count)
            counts = [count for _, count, _ in parts]
            # short or empty shards only after every full one
            assert counts == sorted(counts, reverse=True)


def test_ranks_sampled_above_eight():
    assert ranks_to_build((8,)) == list(range(8))
    assert ranks_to_build((2, 4)) == list(range(8))
    sampled = ranks_to_build((1024,), [1023, 3])
    assert {0, 1, 512, 1022, 1023} <= set(sampled)
    assert {2, 3} <= set(sampled)  # where the 3-row parameter ends, and the next
    assert len(sampled) <= 12
    assert ranks_to_build((64,), [1000], every_up_to=64) == list(range(64))


def test_checker_names_a_short_shard_and_wrong_padding():
    torch = pytest.importorskip("torch")
    original = torch.arange(27.0).reshape(9, 3)
    # shard 4 of 8 holds row 8 only; a shard missing it and padded to 1 fails twice
    violations = _shard_violations(4, "8-rank", 4, 8, "m0.w0", original[8:8], 1, original)
    assert [v.invariant for v in violations] == ["FS2-10", "FS2-10"]
    assert "holds (0, 3), expected rows 8:9 (1, 3)" in violations[0].message
    assert "padded to 1 rows, expected 2" in violations[1].message
    assert _shard_violations(4, "8-rank", 4, 8, "m0.w0", original[8:9], 2, original) == []


def test_checker_names_disagreeing_ranks_and_uncovered_rows():
    torch = pytest.importorskip("torch")
    seen = {0: (("m0", "m1"), {}), 7: (("m0",), {})}
    [v] = _disagreements(seen, "8-rank")
    assert "ranks 0 and 7" in v.message and "m1" in v.message
    original = torch.arange(3.0)
    held = [(0, original[0:1], original), (1, original[1:2], original)]  # row 2 on no shard
    [v] = _coverage({"m0.w0": held}, 2, "2-rank")
    assert v.invariant == "FS2-10" and "exactly once" in v.message
