"""Every annotation invariant can fail: each planted bug is caught by its ID."""

import pytest

from tests.demands import demand_failures
from tests.helpers import PLANTED_RUN, selection
from tests.planted.annotation import PLANTED

pytestmark = pytest.mark.kill


def test_planted_annotation_bugs_are_caught(run_suite):
    result, report = run_suite("reference", *PLANTED, k=f"test_annotation and ({selection(PLANTED)})", extra=PLANTED_RUN)
    assert result.ret == 1, "\n".join(result.outlines[-40:])
    # ... each with its ID; the same tests pass on the reference each bug was planted in
    demand_failures(result, report, PLANTED)
