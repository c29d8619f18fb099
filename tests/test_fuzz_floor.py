"""Under a time budget every feature is reached (issue 29 item 5): each
feature's floor property (``features.FLOORS``) runs before the other
properties and takes rounds until its features have been checked. Before,
the properties ran in cost order, the slow ones last, and on a loaded
2-core box a 60 s fuzz never started some of them (59-62 of 64 features
reached; in one such run test_higher_order_ops, the only property drawing
higher-order ops, started a second before the deadline). Here the schedule
is played on a fake clock."""

from __future__ import annotations

import pathlib
import time
import types

import pytest

from pytest_fsdpcheck.core import features
from pytest_fsdpcheck.plugin import collection, fuzz
from pytest_fsdpcheck.report.verdict import PROP_IMPL
from tests.test_feature_reach import suite_properties

pytestmark = pytest.mark.unit


def fake_item(module: str, function: str, params: dict, is_property: bool = True):
    ids = "-".join(["torch", *(f"shard{v + 1}" if k == "fsdpcheck_shard" else v for k, v in params.items())])
    return types.SimpleNamespace(
        nodeid=f"conformance/{module}::{function}[{ids}]", name=f"{function}[{ids}]", originalname=function,
        path=pathlib.Path("conformance") / module, callspec=types.SimpleNamespace(params=params),
        user_properties=[(PROP_IMPL, "torch")], obj=types.SimpleNamespace(is_hypothesis_test=is_property),
    )


def suite_items(workers: int):
    """The suite's property items, every graph form and shard, in the order
    that starves the floors: theirs last (the old cost order put the slow
    properties last, test_higher_order_ops among them), and fixed cases."""
    items = []
    for name, _strategies, _count, forms in suite_properties():
        module, function = name.split(".")
        for form in forms:
            for shard in range(workers):
                params = {} if form is None else {"fsdpcheck_graph_form": form}
                if workers > 1:
                    params["fsdpcheck_shard"] = shard
                items.append(fake_item(f"{module}.py", function, params))
    items.sort(key=lambda item: f"{item.path.name}::{item.originalname}" in features.FLOORS)
    fixed = [fake_item("test_traversal.py", f"test_golden_traversal_{k}", {}, is_property=False) for k in range(40)]
    return fixed + items


def play(items, budget_s: float, round_s: float, workers: int, monkeypatch, floor_rounds_needed: int = 1):
    """Runs the schedule on a fake clock as xdist's load scheduling hands it
    out: each worker first gets a chunk of consecutive items (a quarter of
    its share), then the next item whenever it is free. Every property round
    takes ``round_s``, a floor property reaches its features in its
    ``floor_rounds_needed``-th round. Returns the rounds as (start, worker,
    nodeid, round; None for a fixed case) and the items skipped."""
    monkeypatch.setattr(fuzz, "_load_average", lambda: 0.0)
    plan = fuzz.Plan(seed=0, workers=workers, budget_s=budget_s)
    # collection as if on a free core: the clock's load is the one given
    session = types.SimpleNamespace(plan=plan, started=time.time(), started_cpu=time.process_time())
    collection.share_budget(session, items)
    slicer = session.slicer
    slicer.start(0.0)
    chunk = collection.xdist_first_chunk(len(items), workers, None) if workers > 1 else len(items)
    queues = [list(items[k * chunk:(k + 1) * chunk]) for k in range(workers)]
    pending = list(items[workers * chunk:])
    clocks = [0.0] * workers
    rounds, skipped = [], []
    while any(queues) or pending:
        worker = min((k for k in range(workers) if queues[k] or pending), key=clocks.__getitem__)
        item = queues[worker].pop(0) if queues[worker] else pending.pop(0)
        now = clocks[worker]
        if slicer.admit(item.nodeid, now=now) is not None:
            skipped.append(item.nodeid)
            continue
        if item.nodeid not in slicer.positions:
            rounds.append((now, worker, item.nodeid, None))
            clocks[worker] = now + 0.05  # a fixed case, as estimated
            continue
        deadline = slicer.item_deadline(item.nodeid, now=now)
        floor = fuzz.floor_of(item)
        started, done = now, 0
        while True:
            rounds.append((now, worker, item.nodeid, done))
            now += round_s
            done += 1
            if done == 1:
                slicer.first_round_done(now - started)
            missing = bool(floor) and done < floor_rounds_needed
            if not fuzz.another_round(now, (now - started) / done, deadline, plan.deadline, done, missing):
                break
        assert now <= plan.deadline + 1e-9, "a round planned past the budget"
        clocks[worker] = now
    return rounds, skipped


def reached(items, rounds) -> set[str]:
    by_id = {item.nodeid: item for item in items}
    return {f for _, _, nodeid, r in rounds if r is not None for f in fuzz.floor_of(by_id[nodeid])}


@pytest.mark.parametrize("workers", [1, 2])
def test_a_budget_too_short_for_every_property_still_runs_every_floor_first(workers, monkeypatch):
    items = suite_items(workers)
    properties = sum(item.obj.is_hypothesis_test for item in items)
    # one round of every property needs about twice the time the budget leaves them
    round_s = 1.0
    budget_s = 4.0 + properties * round_s / workers / 2
    rounds, skipped = play(items, budget_s, round_s, workers, monkeypatch)
    assert any(item.nodeid in skipped for item in items if item.obj.is_hypothesis_test), "the budget fits them all"
    offered = {features.label(f) for f in features.FEATURES}
    assert sorted(offered - reached(items, rounds)) == []
    # on each worker, its floors' first rounds start before any property's
    # second, any property that is nobody's floor and any fixed case
    by_id = {item.nodeid: item for item in items}
    for worker in range(workers):
        mine = [(start, nodeid, r) for start, w, nodeid, r in rounds if w == worker]
        floors = [start for start, nodeid, r in mine if r == 0 and fuzz.floor_of(by_id[nodeid])]
        others = [start for start, nodeid, r in mine if r != 0 or not fuzz.floor_of(by_id[nodeid])]
        assert floors and max(floors) <= min(others, default=float("inf")), worker
    assert any(r is None for *_, r in rounds), "no fixed case ran"


def test_a_floor_takes_rounds_until_its_features_are_checked_within_the_budget(monkeypatch):
    """A floor property whose features come in its third round takes three
    rounds though its share is one; never past the budget, and never more
    than FLOOR_ROUNDS."""
    items = suite_items(1)
    round_s = 1.0
    rounds, _ = play(items, 4.0 + 60 * round_s, round_s, 1, monkeypatch, floor_rounds_needed=3)
    by_id = {item.nodeid: item for item in items}
    per_item: dict[str, int] = {}
    for _, _, nodeid, r in rounds:
        if r is not None:
            per_item[nodeid] = max(per_item.get(nodeid, 0), r + 1)
    floor_items = [nodeid for nodeid in per_item if fuzz.floor_of(by_id[nodeid])]
    assert floor_items and all(per_item[nodeid] == 3 for nodeid in floor_items), per_item


def test_another_round():
    deadline, budget = 10.0, 20.0
    # past the item's share: a floor feature still missing gets another round, up to FLOOR_ROUNDS
    assert fuzz.another_round(12.0, 1.0, deadline, budget, 1, floor_missing=True)
    assert not fuzz.another_round(12.0, 1.0, deadline, budget, fuzz.FLOOR_ROUNDS, floor_missing=True)
    assert not fuzz.another_round(12.0, 1.0, deadline, budget, 1, floor_missing=False)
    # never a round planned to end past the budget, floor or not
    assert not fuzz.another_round(19.5, 1.0, deadline, budget, 1, floor_missing=True)
    # within the share: the round that ends nearer the item's deadline
    assert fuzz.another_round(9.0, 1.0, deadline, budget, 1, floor_missing=False)
    assert not fuzz.another_round(9.6, 1.0, deadline, budget, 1, floor_missing=False)


def test_only_the_first_streams_items_are_floors():
    item = fake_item("test_splitting.py", "test_counted_once", {"fsdpcheck_graph_form": "module", "fsdpcheck_shard": 0})
    other_shard = fake_item("test_splitting.py", "test_counted_once",
                            {"fsdpcheck_graph_form": "module", "fsdpcheck_shard": 1})
    floor = fuzz.floor_of(item)
    assert features.FORM_FEATURES["module"] in floor and features.FORM_FEATURES["dynamo"] not in floor
    assert fuzz.floor_of(other_shard) == frozenset()


def test_the_fixed_cases_keep_a_reserve_only_for_the_properties_after_them(monkeypatch):
    """The floors run before the fixed cases: the time the fixed cases leave
    for first rounds counts only the property items still to come."""
    monkeypatch.setattr(fuzz, "_load_average", lambda: 0.0)
    plan = fuzz.Plan(seed=0, budget_s=100.0)
    positions = {f"p{k}": k for k in range(10)}
    assert fuzz.Slicer(plan, positions, cpus=1, floors=4).reserve == pytest.approx(6 * fuzz.FIRST_ROUND_S)
    assert fuzz.Slicer(plan, positions, cpus=1).reserve == pytest.approx(10 * fuzz.FIRST_ROUND_S)


def test_under_xdist_every_worker_starts_with_its_part_of_the_floors(monkeypatch):
    """xdist's load scheduling first hands each worker a chunk of consecutive
    items: the floors are dealt over those chunks, not all in the first."""
    monkeypatch.setattr(fuzz, "_load_average", lambda: 0.0)
    items = suite_items(2)
    plan = fuzz.Plan(seed=0, workers=2, budget_s=60.0)
    collection.share_budget(types.SimpleNamespace(plan=plan, started=time.time(), started_cpu=time.process_time()),
                            items)
    chunk = collection.xdist_first_chunk(len(items), 2, None)  # what xdist's LoadScheduling sends each worker first
    floors = [sum(bool(fuzz.floor_of(item)) for item in items[k * chunk:(k + 1) * chunk]) for k in range(2)]
    total = sum(bool(fuzz.floor_of(item)) for item in items)
    assert sum(floors) == total and abs(floors[0] - floors[1]) <= 1, (floors, total)
    # and each chunk starts with them
    assert all(fuzz.floor_of(item) for k in range(2) for item in items[k * chunk:k * chunk + floors[k]])
