"""The ci profile replays exactly: same outcomes and example counts across
runs and between serial and pytest-xdist; dev/fuzz seeds replay and reach
every xdist worker."""

import pytest

pytestmark = pytest.mark.process

K = "test_states_with_modules or test_annotate or test_idempotent"


def _fingerprint(report):
    return {
        nodeid: (t["outcome"], t.get("examples"), t.get("calls"), t.get("digest"))
        for nodeid, t in report["tests"].items()
    }


def test_ci_profile_is_deterministic_serial_and_parallel(run_suite):
    _, first = run_suite("torch", "reference", k=K, extra=["-p", "no:xdist"])
    _, second = run_suite("torch", "reference", k=K, extra=["-p", "no:xdist"])
    _, parallel = run_suite("torch", "reference", k=K, extra=["-n", "2"])
    assert _fingerprint(first) == _fingerprint(second) == _fingerprint(parallel)
    assert first["matrix"] == parallel["matrix"]
    assert all(examples and digest for _, examples, _, digest in _fingerprint(first).values())


def _shard(report, shard: str) -> dict:
    """The tests of one shard (all of them for the unsharded ones), by their id without it."""
    return {
        nodeid.replace(f"-{shard}", ""): fingerprint
        for nodeid, fingerprint in _fingerprint(report).items()
        if "-shard" not in nodeid or f"-{shard}]" in nodeid
    }


def test_dev_profile_prints_a_seed_that_replays(run_suite):
    # The first run is parallel with a fresh random seed, each property split
    # into one shard per worker: only if the workers used the controller's
    # seed can a serial replay of a shard see the same examples.
    result, first = run_suite("reference", k=K, extra=["--fsdpcheck-profile", "dev", "-n", "2"])
    header = [line for line in result.stdout.lines if "seed:" in line][0]
    seed = header.split("--fsdpcheck-seed=")[1].rstrip(")")
    for k in (1, 2):
        _, replay = run_suite(
            "reference", k=K,
            extra=["--fsdpcheck-profile", "dev", "--fsdpcheck-seed", seed, "--fsdpcheck-shard", f"{k}/2", "-p", "no:xdist"],
        )
        assert first["header"]["seed"] == replay["header"]["seed"] == int(seed)
        assert _shard(first, f"shard{k}of2") == _fingerprint(replay)
    assert _shard(first, "shard1of2") != _shard(first, "shard2of2")


def test_different_seeds_see_different_examples(run_suite):
    """The fingerprint can tell runs apart: without it the tests above prove nothing."""
    runs = [
        run_suite("reference", k="test_annotate", extra=["--fsdpcheck-profile", "dev", "--fsdpcheck-seed", seed])[1]
        for seed in ("1", "2")
    ]
    assert _fingerprint(runs[0]) != _fingerprint(runs[1])
