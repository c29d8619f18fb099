"""Each real-forward feature of the exec-order area can fail: an
implementation mishandling buffers, views, tied parameters, never-called
containers or method-named parameters is caught on that feature's model,
with the invariant ID."""

import pytest

from tests.demands import demand_failures
from tests.helpers import PLANTED_RUN
from tests.planted.exec_order import REAL_FORWARD_PLANTED

pytestmark = pytest.mark.kill

PLANTED = {f"tests.planted.exec_order:{name}": (invariant, "test_real_forward_features")
           for name, (invariant, _case) in REAL_FORWARD_PLANTED.items()}


def test_planted_real_forward_bugs_are_caught(run_suite):
    specs = {name: f"tests.planted.exec_order:{name}" for name in REAL_FORWARD_PLANTED}
    result, report = run_suite(*specs.values(), k="test_real_forward_features", extra=PLANTED_RUN)
    demand_failures(result, report, PLANTED, control=None)
    for name, (_invariant, case) in REAL_FORWARD_PLANTED.items():
        # ... on the model with the feature it mishandles
        failed = [
            nodeid
            for nodeid, test in report["tests"].items()
            if f"[{specs[name]}-{case}]" in nodeid and test["outcome"] == "failed"
        ]
        assert failed, f"{name} should fail on the {case!r} model, failing tests: {[n for n, t in report['tests'].items() if t['outcome'] == 'failed']}"
