"""A world's ranks run once a session: under xdist the first worker to ask
runs them and the others read its results (``SuiteRun.world_results``);
here two processes ask for the same key at once."""

import multiprocessing
import os

import pytest
import torch

from pytest_fsdpcheck.plugin.fixtures import _shared_once

pytestmark = pytest.mark.unit


def _ask(folder, key, runs_file, out):
    def run_world():
        with open(runs_file, "a") as f:
            f.write(f"{os.getpid()}\n")
        return [{"rank": 0, "grads": {"w": torch.ones(3)}}]

    results = _shared_once(folder, key, run_world)
    out.put(results[0]["grads"]["w"].tolist())


def test_two_workers_asking_for_one_world_run_it_once(tmp_path):
    ctx = multiprocessing.get_context("fork")
    out = ctx.Queue()
    runs = tmp_path / "runs"
    key = (2, "cpu", ("torch",), "fsdp2", 0)
    workers = [ctx.Process(target=_ask, args=(str(tmp_path), key, str(runs), out)) for _ in range(2)]
    for w in workers:
        w.start()
    got = [out.get(timeout=60) for _ in workers]
    for w in workers:
        w.join(timeout=60)
    assert got == [[1.0, 1.0, 1.0]] * 2
    assert len(runs.read_text().split()) == 1, "the world ran more than once"
    # another world is another key
    _shared_once(str(tmp_path), (3, *key[1:]), lambda: [{}])
    assert len(list(tmp_path.glob("*.lock"))) == 2


def test_a_world_that_raised_leaves_nothing_for_the_next_asker(tmp_path):
    key = (2, "cpu", ("torch",), "ddp", 0)

    def broken():
        raise RuntimeError("spawn failed")

    with pytest.raises(RuntimeError, match="spawn failed"):
        _shared_once(str(tmp_path), key, broken)
    assert _shared_once(str(tmp_path), key, lambda: ["ran"]) == ["ran"]
    assert _shared_once(None, key, lambda: ["alone"]) == ["alone"]
