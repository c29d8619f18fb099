"""Every traversal invariant can fail: each planted bug is caught by its ID."""

import pytest

from tests.demands import assert_leaked, demand_failures
from tests.helpers import PLANTED_RUN, selection
from tests.planted.traversal import PLANTED

pytestmark = pytest.mark.kill

#: a walk whose only fault is a leak (right root states, torch's default dtype
#: left changed): its cell is red, and a demand that it FAIL TRV-7 is unmet
LEAK_ONLY = {"tests.planted.traversal:LeaksDefaultDtype": ("TRV-7", "test_root_states")}


def test_planted_traversal_bugs_are_caught(run_suite):
    planted = {**PLANTED, **LEAK_ONLY}
    result, report = run_suite("reference", *planted, k=f"test_traversal and ({selection(planted)})", extra=PLANTED_RUN)
    assert result.ret == 1, "\n".join(result.outlines[-40:])
    # ... each with its ID; the same tests pass on the reference each bug was planted in
    demand_failures(result, report, PLANTED)
    # A leak is a FAIL of the run, its message listing every invariant of its
    # test ("TRV-7: TRV-9: ... left process-wide state changed"), but no
    # check found TRV-7 violated: it kills nothing (issue 56, item 6).
    assert_leaked(result, report, LEAK_ONLY)
    (leaker,) = LEAK_ONLY
    failures = [t["failure"] for t in report["tests"].values() if t["implementation"] == leaker and "failure" in t]
    assert any("TRV-7:" in f["message"] and "default_dtype" in f["message"] for f in failures), failures
    with pytest.raises(AssertionError, match="no failure of its tests is a violation of TRV-7"):
        demand_failures(result, report, LEAK_ONLY, control=None)
