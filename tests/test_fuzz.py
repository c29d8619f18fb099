"""Fuzzing at scale: failing examples are kept in the example database and
replayed first by the next run, by every worker, and by another machine
sharing the database through a real Redis server; streams are reproducible."""

from __future__ import annotations

import os
import pathlib
import shutil
import socket
import subprocess
import time

import pytest

pytestmark = pytest.mark.process

REPO = pathlib.Path(__file__).resolve().parents[1]
PLANTED = "tests.planted.replay:LosesAState"
PROPERTY = "test_states_with_modules"


@pytest.fixture
def suite(pytester, monkeypatch):
    """``suite(*args)``: the suite in a subprocess on the planted traversal;
    returns (result, calls): the trees it was handed, per worker, in order."""
    log = pytester.path / "calls.log"
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
    monkeypatch.setenv("FSDPCHECK_REPLAY_LOG", str(log))
    monkeypatch.delenv("FSDPCHECK_IMPL", raising=False)
    # under an outer -n run, its worker's id would leak into the inner run's log
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)

    def run(*args):
        log.write_text("")
        result = pytester.runpytest_subprocess(
            "-p", "no:randomly", "--fsdpcheck", "--fsdpcheck-impl", PLANTED, "--fsdpcheck-no-known-bugs",
            "-k", PROPERTY, *args, timeout=600,
        )
        calls: dict[str, list[str]] = {}
        for line in log.read_text().splitlines():
            worker, _, shape = line.partition(" ")
            calls.setdefault(worker, []).append(shape)
        return result, calls

    return run


def _failing(calls: list[str]) -> str:
    # Hypothesis ends a failing run by replaying its shrunk example.
    assert calls, "the implementation was never called"
    return calls[-1]


def test_failure_saved_under_the_cache_and_replayed_first_by_every_worker(suite, pytester):
    first, calls = suite("--fsdpcheck-profile", "dev", "--fsdpcheck-seed", "1")
    assert first.ret == 1, "\n".join(first.outlines[-30:])
    failing = _failing(calls["main"])
    assert len(failing.split(",")) == 6, failing  # shrunk to the smallest failing tree
    database = pytester.path / ".pytest_cache" / "fsdpcheck" / "examples"
    assert database.is_dir() and any(database.rglob("*")), "nothing saved in the example database"

    # Another seed, two workers, each running its own shard: both start with the saved example.
    again, calls = suite("--fsdpcheck-profile", "dev", "--fsdpcheck-seed", "2", "-n", "2")
    assert again.ret == 1, "\n".join(again.outlines[-30:])
    assert sorted(calls) == ["gw0", "gw1"], calls.keys()
    assert {worker: shapes[0] for worker, shapes in calls.items()} == {"gw0": failing, "gw1": failing}
    assert "shard1of2" in "\n".join(again.outlines) and "shard2of2" in "\n".join(again.outlines)


def test_ci_profile_keeps_no_database(suite, pytester):
    result, _ = suite()
    assert result.ret == 1, "\n".join(result.outlines[-30:])
    assert not (pytester.path / ".pytest_cache" / "fsdpcheck").exists()
    assert not (pytester.path / ".hypothesis" / "examples").exists()


def test_a_shard_replays_exactly_on_one_process(suite):
    """The header's seed and a worker's shard give the same examples serially
    (their generated streams: a worker may first replay what the other saved)."""
    _, sharded = suite("--fsdpcheck-profile", "fuzz", "--fsdpcheck-seed", "5", "-n", "2",
                       "--fsdpcheck-database", "db-a", "-p", "tests.planted.generate_only")
    _, serial = suite("--fsdpcheck-profile", "fuzz", "--fsdpcheck-seed", "5", "--fsdpcheck-shard", "2/2",
                      "--fsdpcheck-database", "db-b", "-p", "tests.planted.generate_only")
    by_worker = list(sharded.values())
    assert serial["main"] in by_worker, (serial, sharded)
    assert by_worker[0] != by_worker[1], "both shards ran the same examples"


@pytest.fixture
def redis_url(tmp_path):
    server = shutil.which("redis-server")
    if server is None:
        pytest.skip("redis-server is not installed (Debian: apt-get install redis-server)")
    pytest.importorskip("redis", reason="the redis client is not installed (pip install 'pytest-fsdpcheck[redis]')")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    process = subprocess.Popen(
        [server, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", str(tmp_path)],
        stdout=subprocess.DEVNULL,
    )
    import redis

    client = redis.Redis(port=port)
    try:
        for _ in range(100):
            try:
                client.ping()
                break
            except redis.ConnectionError:
                time.sleep(0.05)
        yield f"redis://127.0.0.1:{port}"
    finally:
        process.terminate()
        process.wait(10)


def test_a_second_machine_replays_a_failure_first_through_redis(suite, redis_url):
    common = ("--fsdpcheck-profile", "fuzz", "--fsdpcheck-seed", "3", "--fsdpcheck-database", redis_url, "-p", "no:cacheprovider")
    first, calls = suite(*common, "--fsdpcheck-shard", "1/2")
    assert first.ret == 1, "\n".join(first.outlines[-30:])
    failing = _failing(calls["main"])
    assert "stream 1/2" in "\n".join(first.outlines), "\n".join(first.outlines[-30:])

    second, calls = suite(*common, "--fsdpcheck-shard", "2/2")
    assert second.ret == 1, "\n".join(second.outlines[-30:])
    assert calls["main"][0] == failing, (calls["main"][:3], failing)


@pytest.mark.plugin
def test_coverage_flags_a_feature_a_generator_stopped_producing(run_suite):
    k = "test_states_with_modules"
    _, control = run_suite("reference", k=k, extra=["--fsdpcheck-profile", "dev", "--fsdpcheck-seed", "1"])
    result, planted = run_suite(
        "reference", k=k, extra=["--fsdpcheck-profile", "dev", "--fsdpcheck-seed", "1", "-p", "tests.planted.no_shared_modules"]
    )
    shared = "TreeSpec: shared modules"
    assert control["exploration"]["coverage"]["features"][shared] > 0
    assert shared not in control["exploration"]["coverage"]["missing"]
    assert planted["exploration"]["coverage"]["features"][shared] == 0
    assert shared in planted["exploration"]["coverage"]["missing"]
    flagged = [line for line in result.outlines if line.strip().startswith(shared)]
    assert flagged and "NO EXAMPLE HAD THIS FEATURE" in flagged[0], "\n".join(result.outlines[-40:])
    # every example is counted, once, per area, property and worker
    explored = planted["exploration"]
    assert explored["examples"] == explored["areas"]["traversal"]["examples"] == explored["workers"]["main"]["examples"] > 0
    assert explored["properties"]["test_states_with_modules[reference]"]["examples"] == explored["examples"]


def test_fuzz_time_keeps_every_worker_busy_until_the_budget(run_suite):
    k = "test_handles or test_root_states"
    result, report = run_suite("reference", k=k, extra=["--fsdpcheck-fuzz-time", "20s", "-n", "2"])
    assert result.ret == 0, "\n".join(result.outlines[-40:])
    header = report["header"]
    assert header["profile"] == "fuzz" and header["fuzz_time_s"] == 20
    shards = {nodeid: t for nodeid, t in report["tests"].items() if "shard" in nodeid}
    assert len(shards) == 4, shards.keys()  # two properties x two shards
    assert {t["run"]["worker"] for t in shards.values()} == {"gw0", "gw1"}
    # Each worker's last property ends at the deadline, give or take one round
    # (the budget includes starting the workers, so a loaded machine may leave
    # time for one round only).
    for worker in ("gw0", "gw1"):
        mine = [t for t in shards.values() if t["run"]["worker"] == worker]
        last = max(t["run"]["ended"] for t in mine)
        round_s = max(t["seconds"] / t["run"]["rounds"] for t in mine)
        assert header["deadline"] - round_s - 2 <= last <= header["deadline"] + round_s + 2, (worker, last, header)
    assert all(t["run"]["rounds"] >= 1 and t["run"]["examples"] >= 100 for t in shards.values())


def test_fuzz_time_holds_at_8_workers_from_the_first_test(run_suite):
    """Under -n 8 (on any number of cores) the budget is counted from the
    first test, on one clock for every worker, and the run ends within it:
    fixed cases (large trees, goldens) that do not fit are skipped with the
    budget's reason, and no property starts a round it cannot finish. Start-up
    (8 workers importing torch) is measured, reported and not counted. The
    margin is generous (a loaded 2-core box runs everything several times
    slower than estimated); before this rule, the same run overran by the
    whole of its fixed cases plus one round of each of its 48 property items."""
    budget = 15
    k = "test_large_trees or test_golden_traversal or test_golden_fsdp2 or test_handles or test_root_states"
    launched = time.time()
    result, report = run_suite("reference", k=k, extra=["--fsdpcheck-fuzz-time", f"{budget}s", "-n", "8"])
    ended = time.time()
    assert result.ret == 0, "\n".join(result.outlines[-40:])
    header = report["header"]
    first_test = header["deadline"] - budget
    startup = first_test - launched
    after_startup = ended - first_test
    print(f"start-up {startup:.1f} s, then {after_startup:.1f} s for a {budget} s budget")
    assert startup > 0, header
    # the JSON report, the summary and the workers' shutdown come after the last test
    assert after_startup <= budget + 20, (startup, after_startup)
    skipped = set(header["not_run_in_budget"])
    tests = report["tests"]
    assert skipped <= set(tests)
    assert all(t["outcome"] == "skipped" for nodeid, t in tests.items() if nodeid in skipped)
    assert any(t["outcome"] == "passed" for t in tests.values()), "nothing ran within the budget"
    if skipped:
        assert "not run within the fuzz time" in result.stdout.str()
