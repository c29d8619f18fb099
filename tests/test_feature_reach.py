"""Fuzzing reaches every generator feature (issue 29 item 5): a 30 s fuzz
ended with four features no example had (the module graph form, a
parameter passed by keyword, one inside a list argument, a trace that
raises). Here, at the strategy level and in seconds, the suite's own
properties draw what one fuzz round of each draws (its ``ci`` example
count, a seed of its own) and every registered feature of every kind is
among them, for several seeds: a fuzz run of any length that gives each
property one round reaches them all. A feature no property can draw, or one
a property draws but whose count reads the wrong thing, fails here."""

from __future__ import annotations

import importlib
import inspect

import pytest
from hypothesis import HealthCheck, Phase, given, seed, settings

from pytest_fsdpcheck.contract import GRAPH_FORMS
from pytest_fsdpcheck.core import features

pytestmark = pytest.mark.unit

MODULES = ("test_traversal", "test_annotation", "test_splitting", "test_exec_order", "test_fsdp2", "test_fsdp2_plans")


def suite_properties():
    """(name, given strategies, ci example count, graph forms) per property."""
    found = []
    for module_name in MODULES:
        module = importlib.import_module(f"pytest_fsdpcheck.conformance.{module_name}")
        for name, fn in vars(module).items():
            handle = getattr(fn, "hypothesis", None)
            if not name.startswith("test_") or handle is None:
                continue
            # Hypothesis keeps @given's strategies and @settings on the test (no public accessor)
            strategies = handle._given_kwargs
            count = fn._hypothesis_internal_use_settings.max_examples
            takes_form = "fsdpcheck_graph_form" in inspect.signature(handle.inner_test).parameters
            found.append((f"{module_name}.{name}", strategies, count, GRAPH_FORMS if takes_form else (None,)))
    return found


def one_round(strategies, count, seed_value) -> list[dict]:
    drawn = []

    @settings(max_examples=count, database=None, deadline=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @seed(seed_value)
    @given(**strategies)
    def draw(**values):
        drawn.append(values)

    draw()
    return drawn


@pytest.mark.parametrize("round_seed", [0, 1])
def test_one_round_of_every_property_reaches_every_feature(round_seed):
    reached: set[str] = set()
    kinds: set[str] = set()
    for number, (_name, strategies, count, forms) in enumerate(suite_properties()):
        for values in one_round(strategies, count, round_seed * 1000 + number):
            for form in forms:
                seen_kinds, present = features.observe(values.values(), features.Where(None, form))
                kinds.update(seen_kinds)
                reached.update(present)
    offered = {features.label(f) for f in features.FEATURES}
    assert {f.kind for f in features.FEATURES} <= kinds
    assert sorted(offered - reached) == []


def test_the_graph_form_is_the_items_not_the_implementations():
    """A splitting item's form decides its examples' graph-form feature:
    the implementation's ``graph_form`` is only the form it prefers."""
    from pytest_fsdpcheck.generators.graphs import GraphSpec, ModuleSpec, OpSpec

    spec = GraphSpec(4, 2, (ModuleSpec("linear"),), (), 0, (OpSpec("module", 0),))
    prefers_dynamo = type("Impl", (), {"splitting": type("S", (), {"graph_form": "dynamo"})()})()
    _, present = features.observe([spec], features.Where(prefers_dynamo, "module"))
    assert "GraphSpec: graph form: module (call_module/get_attr)" in present
    assert "GraphSpec: graph form: dynamo (placeholders)" not in present


def test_every_feature_has_one_floor_among_the_suite_properties():
    """Under a time budget each feature is reached by its floor property
    (``features.FLOORS``), run before the others: a feature with no floor,
    or a floor naming a property the suite lacks, would be left to chance."""
    names = {name.replace(".", ".py::", 1) for name, *_ in suite_properties()}
    assert set(features.FLOORS) <= names, sorted(set(features.FLOORS) - names)
    floored = [f for fs in features.FLOORS.values() for f in fs]
    offered = [features.label(f) for f in features.FEATURES]
    assert sorted(floored) == sorted(offered)  # each exactly once, no unknown label


@pytest.mark.parametrize("run_seed", [0, 1, 2])
def test_each_floor_draws_its_features_within_its_rounds(run_seed):
    """A floor property's first stream takes rounds (seeded as a fuzz run
    seeds them) until each of its features has been drawn, at most
    ``FLOOR_ROUNDS``: here each gets there, per graph form, for several
    run seeds."""
    from pytest_fsdpcheck.plugin.fuzz import FLOOR_ROUNDS, stream_seed

    by_name = {name.replace(".", ".py::", 1): (strategies, count, forms)
               for name, strategies, count, forms in suite_properties()}
    for floor, (strategies, count, forms) in by_name.items():
        if floor not in features.FLOORS:
            continue
        module, function = floor.split("::")
        for form in forms:
            wanted = features.floor_of(module, function, form)
            reached: set[str] = set()
            for round_ in range(FLOOR_ROUNDS):
                for values in one_round(strategies, count, stream_seed(run_seed, 0, 1, round_)):
                    reached.update(features.observe(values.values(), features.Where(None, form))[1])
                if wanted <= reached:
                    break
            assert sorted(wanted - reached) == [], (floor, form)
