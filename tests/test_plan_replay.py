"""The one plan-replay loop (``checks.plan.placed``, ``cases.replay.PlanReplay``):
the oracle placed at each call with exactly the earlier calls' groups, a
group marked only when the next call is asked for, nothing marked past a
call the consumer stopped at."""

import pytest

pytestmark = pytest.mark.unit

torch = pytest.importorskip("torch")

from pytest_fsdpcheck.checks.plan import OracleInput, placed  # noqa: E402


def _model():
    inner = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Linear(2, 2))
    return torch.nn.Sequential(torch.nn.Linear(2, 2), inner, torch.nn.Linear(2, 2))


def test_each_call_sees_exactly_the_earlier_groups():
    model = _model()
    oracle = OracleInput(model)
    marked, seen = [], []
    calls = [((model[1][0],), None), ((model[1],), None), ((model,), None)]
    for roots, _ in placed(oracle, calls, marked.append):
        assert oracle.roots == roots
        seen.append(([oracle.label(r) for r in oracle.roots], sorted(oracle.label(oracle.modules[i]) for i in oracle.spec.groups),
                     [oracle.label(m) for m in marked]))
    assert seen == [
        (["1.0"], [], []),
        (["1"], ["1.0"], ["1.0"]),
        (["<root>"], ["1", "1.0"], ["1.0", "1"]),
    ], seen
    assert [oracle.label(m) for m in marked] == ["1.0", "1", "<root>"]


def test_a_consumer_that_stops_marks_nothing_past_the_call():
    model = _model()
    marked = []
    for _ in placed(OracleInput(model), [((model[1],), None), ((model,), None)], marked.append):
        break  # the call raised: what torch leaves after an error is not specified
    assert marked == []
