"""Every SPL invariant can fail: one suite run with all planted splitting
implementations, each running the tests of its target invariant, which must
fail that cell (others may fail too when a bug has knock-on effects); the
reference, on the same tests, passes every one."""

import pytest

from tests.demands import demand_failures
from tests.helpers import PLANTED_RUN, invariant_tests, selection
from tests.planted.splitting import TARGETS

pytestmark = pytest.mark.kill

#: the splitting area's conformance modules (``-k test_splitting`` selects both)
MODULES = ("test_splitting", "test_splitting_compiled")

#: each planted splitter on the tests of its target invariant
PLANTED = {f"tests.planted.splitting:{name}": (inv, invariant_tests(MODULES, inv)) for name, inv in TARGETS.items()}


def test_planted_splitting_bugs_are_caught(run_suite):
    result, report = run_suite("reference", *PLANTED, k=f"test_splitting and ({selection(PLANTED)})",
                               extra=("-p", "no:logging", *PLANTED_RUN))
    assert result.ret == 1, "\n".join(result.outlines[-40:])
    demand_failures(result, report, PLANTED)
