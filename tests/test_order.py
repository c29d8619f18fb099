"""Fail fast: the suite runs cheapest first (single calls, then large inputs,
the corpus, compiled code, processes), so under -x a broken implementation is
reported by the cheapest check that sees it; a property with a failing
example saved in the example database runs before everything."""

import os
import pathlib

import pytest

pytestmark = pytest.mark.plugin

REPO = pathlib.Path(__file__).resolve().parents[1]


@pytest.fixture
def collected(pytester, monkeypatch):
    """``collected(*args)``: the suite's test ids, in the order they would run."""
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    monkeypatch.delenv("FSDPCHECK_IMPL", raising=False)

    def run(*args):
        result = pytester.runpytest_subprocess("--fsdpcheck", "-p", "no:randomly", "--collect-only", "-q", *args)
        assert result.ret == 0, "\n".join(result.outlines[-30:])
        return [line for line in result.outlines if "::" in line and not line.startswith(" ")]

    return run


def _index(ids, predicate):
    return [i for i, nodeid in enumerate(ids) if predicate(nodeid)]


def test_cheapest_first_on_every_area(collected):
    ids = collected("--fsdpcheck-impl", "reference")
    processes = _index(ids, lambda n: n.startswith("test_distributed.py"))
    captured = _index(ids, lambda n: "test_golden_buckets" in n)
    compiled = _index(ids, lambda n: any(name in n for name in ("test_compiled_split", "test_dynamo_effect",
                                                                "test_dynamo_specialisation")))
    single = _index(ids, lambda n: any(n.startswith(f"test_{area}.py::") for area in
                                       ("traversal", "annotation", "exec_order", "fsdp2", "splitting"))
                    and not any(name in n for name in ("large_trees", "linear_growth", "compiled_split", "dynamo_effect",
                                                        "dynamo_specialisation", "model_buckets")))
    assert processes and captured and compiled and single
    assert max(single) < min(captured) < min(compiled), (ids[max(single)], ids[min(captured)], ids[min(compiled)])
    assert max(captured) < min(compiled) and max(compiled) < min(processes) and max(processes) == len(ids) - 1
    # the modules take turns: the first few checks come from different areas
    assert len({n.partition("::")[0] for n in ids[:5]}) >= 3, ids[:5]
    # fixed cases before properties: a golden a walk answers comes first in its area
    assert ids.index(next(n for n in ids if "test_golden_traversal" in n)) < min(
        _index(ids, lambda n: n.startswith("test_traversal.py::test_states_with_modules")))


def test_growth_checks_before_the_largest_inputs(collected):
    """TRV-8/FS2-6/EXO linear time: the growth-ratio checks (inputs a
    quadratic implementation still finishes in seconds) come before the
    single 100,000-module trees of the same class, which take it minutes:
    a visited list (planted ListVisited) ran past 2 minutes serially under
    -x inside test_large_trees before test_linear_growth failed it in 5 s."""
    ids = collected("--fsdpcheck-impl", "reference")
    for module in ("test_traversal.py", "test_fsdp2.py"):
        growth = _index(ids, lambda n, m=module: n.startswith(f"{m}::test_linear_growth"))
        large = _index(ids, lambda n, m=module: n.startswith(f"{m}::test_large_trees"))
        assert growth and large and max(growth) < min(large), (module, ids[max(growth)], ids[min(large)])


def test_exec_order_quick_growth_among_the_fixed_cases(collected):
    """EXO-8's quick ratio (a quarter of test_linear_growth's leaf) runs
    with the fixed cases, before exec order's properties and every large
    input: the full-size ratio, planted QuadraticMembership's only catch
    before, ran after them all (its serial first failure under -x 16.6 s,
    now 7.0 s)."""
    from pytest_fsdpcheck.conformance import test_exec_order as exo

    properties = {name for name, fn in vars(exo).items() if getattr(fn, "is_hypothesis_test", False)}
    ids = collected("--fsdpcheck-impl", "reference")
    quick = ids.index("test_exec_order.py::test_linear_growth_quick[reference]")
    later = _index(ids, lambda n: (n.startswith("test_exec_order.py::") and n.partition("::")[2].partition("[")[0] in properties)
                   or "test_large_trees" in n or "test_linear_growth[" in n)
    assert properties and later and quick < min(later), (ids[quick], ids[min(later)])


def test_under_x_the_first_failure_is_the_cheap_property(pytester, monkeypatch):
    """The issue's case: flags on the wrong modules of fully_shard's walk are
    seen by the single-process FS2 checks, long before the multi-process
    end-to-end check that collection order would reach first."""
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    monkeypatch.delenv("FSDPCHECK_IMPL", raising=False)
    result = pytester.runpytest_subprocess("--fsdpcheck", "-p", "no:randomly", "-p", "no:xdist", "-x", "-rf",
                                           "--fsdpcheck-impl", "tests.planted.fsdp2:PreOrder", "-p", "tests.planted.noshrink")
    failed = [line for line in result.outlines if line.startswith("FAILED ")]
    assert len(failed) == 1 and "test_distributed.py" not in failed[0], "\n".join(result.outlines[-30:])
    assert "FS2-1" in result.stdout.str()


def test_a_saved_failure_runs_first(collected, pytester, monkeypatch):
    """dev profile: the property whose failing example the database holds is
    the first test of the next run (Hypothesis then replays that example first)."""
    monkeypatch.setenv("FSDPCHECK_REPLAY_LOG", str(pytester.path / "calls.log"))
    common = ("--fsdpcheck-impl", "tests.planted.replay:LosesAState", "--fsdpcheck-no-known-bugs",
              "--fsdpcheck-profile", "dev", "--fsdpcheck-seed", "1")
    before = collected(*common)
    assert "test_states_with_modules" not in before[0], before[:3]
    first = pytester.runpytest_subprocess("--fsdpcheck", "-p", "no:randomly", "-k", "test_states_with_modules", *common)
    assert first.ret == 1, "\n".join(first.outlines[-30:])
    after = collected(*common)
    assert "test_states_with_modules" in after[0], after[:3]
    assert sorted(after) == sorted(before)


def _fake(name, model=None):
    from types import SimpleNamespace

    from pytest_fsdpcheck.report.verdict import PROP_IMPL

    path = pathlib.Path("test_golden.py" if model else "test_traversal.py")
    params = {"model": model} if model else {}
    return SimpleNamespace(nodeid=name, path=path, callspec=SimpleNamespace(params=params),
                           user_properties=[(PROP_IMPL, "impl")])


@pytest.mark.unit
def test_xdist_first_chunks_are_dealt():
    """-n 2: xdist starts each worker on a chunk of consecutive items, so in
    cheapest-first order one worker got every cheap check (for a one-area
    implementation, all 30 it provides) and the other only n/p skips: under
    -x nothing ran in parallel. Worker k's first chunk now takes every
    second of the cheapest items, a corpus model's tests staying together."""
    from pytest_fsdpcheck.plugin.collection import deal_first_chunks, xdist_first_chunk

    assert xdist_first_chunk(249, 2, None) == 31 and xdist_first_chunk(249, 2, 5) == 5
    assert xdist_first_chunk(3, 2, None) == 1
    items = [_fake("a"), _fake("g1", "m1"), _fake("g2", "m1"), _fake("b"), _fake("c"), _fake("d"),
             _fake("e"), _fake("f"), _fake("later")]
    deal_first_chunks(items, workers=2, chunk=4)
    first, second = [i.nodeid for i in items[:4]], [i.nodeid for i in items[4:8]]
    assert first == ["a", "b", "c", "e"] and second == ["g1", "g2", "d", "f"], (first, second)
    assert items[8].nodeid == "later"


def test_the_controller_tells_workers_how_xdist_deals(pytester, _builtin_implementations_imported):
    # parseconfig configures every installed plugin in this process (pytest-randomly
    # imports numpy to reseed it), and pytester forgets what they imported: torch and
    # numpy are imported first, or a later test's `import torch` meets half a numpy
    # ("cannot load module more than once per process")
    from types import SimpleNamespace

    from pytest_fsdpcheck.plugin import XdistHooks

    config = pytester.parseconfig("-n", "2", "--dist", "load")
    node = SimpleNamespace(config=config, workerinput={"workercount": 2})
    XdistHooks(config).pytest_configure_node(node)
    assert node.workerinput["fsdpcheck_deal"] == [2, None]
    other = SimpleNamespace(config=pytester.parseconfig("-n", "2", "--dist", "loadfile"), workerinput={"workercount": 2})
    XdistHooks(other.config).pytest_configure_node(other)
    assert "fsdpcheck_deal" not in other.workerinput


@pytest.mark.unit
def test_a_tests_cost_is_its_closest_mark():
    """The test's own mark over its module's, field by field; a bare item is
    the cheapest class; a class that is not one is a usage error naming the test."""
    from types import SimpleNamespace

    from pytest_fsdpcheck.plugin.collection import COST_CLASSES, cost_class, cost_of, fixed_cost_s

    def item(*marks):
        return SimpleNamespace(nodeid="test_x.py::test_y", path=pathlib.Path("test_x.py"),
                               iter_markers=lambda name: [m for m in marks if m.name == name])

    own, module = pytest.mark.fsdpcheck_cost(seconds=12.0).mark, pytest.mark.fsdpcheck_cost("processes").mark
    assert cost_of(item(own, module)) == {"seconds": 12.0, "class": "processes"}
    assert cost_class(item(own, module)) == COST_CLASSES.index("processes") and fixed_cost_s(item(own, module)) == 12.0
    assert cost_of(_fake("bare")) == {} and cost_class(_fake("bare")) == 0
    with pytest.raises(pytest.UsageError, match="test_x.py::test_y.*fsdpcheck_cost"):
        cost_of(item(pytest.mark.fsdpcheck_cost("cheap").mark))
