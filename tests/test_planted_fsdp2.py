"""Every FSDP2 invariant can fail: each planted bug is caught by its ID."""

from tests.helpers import NO_SHRINK, control_problems, planted_misses, selection
from tests.planted.fsdp2 import PLANTED


def test_planted_fsdp2_bugs_are_caught(run_suite):
    result, report = run_suite("reference", *PLANTED, k=f"test_fsdp2 and ({selection(PLANTED)})", extra=NO_SHRINK)
    assert result.ret == 1, "\n".join(result.outlines[-40:])
    assert planted_misses(result, report, PLANTED) == []
    # The same tests pass on the reference each bug was planted in.
    assert control_problems(report) == []
