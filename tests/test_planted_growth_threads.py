"""The growth checks count every thread a call uses: a quadratic walk run in
a helper thread the call starts and joins FAILs TRV-8, FS2-6 and EXO-8 as
the same walk does inline (a clock of the calling thread alone measured it
0.0002 s -> 0.0002 s), and an exponential one there is cut by the CPU
budget, its thread ended, never waited for."""

import pytest

from tests.demands import demand_failures
from tests.helpers import PLANTED_RUN, selection

pytestmark = pytest.mark.kill

_FS2_WIDE = "test_fsdp2 and test_linear_growth and not ignored"

#: each walk's superlinear work in a thread the call starts and joins
THREADED_PLANTED = {
    "tests.planted.threaded:ThreadedListVisited": ("TRV-8", "test_traversal and test_linear_growth"),
    "tests.planted.threaded:ThreadedFsdp2ListVisited": ("FS2-6", _FS2_WIDE),
    "tests.planted.threaded:ThreadedIgnoreRuleNoMemo": ("FS2-6", "test_fsdp2 and test_linear_growth_shared_ignored"),
    "tests.planted.threaded:ThreadedQuadraticMembership": ("EXO-8", "test_exec_order and test_linear_growth_quick"),
}
#: the FSDP2 walk inline, beside its threaded run (the traversal's and the
#: recorder's inline walks are PLANTED rows of their areas)
INLINE_PLANTED = {"tests.planted.threaded:Fsdp2ListVisited": ("FS2-6", _FS2_WIDE)}


def test_threaded_superlinear_walks_fail_growth(run_suite):
    planted = {**THREADED_PLANTED, **INLINE_PLANTED}
    result, report = run_suite("reference", *planted, k=selection(planted), extra=PLANTED_RUN)
    assert result.ret == 1, "\n".join(result.outlines[-40:])
    demand_failures(result, report, THREADED_PLANTED)
    demand_failures(result, report, INLINE_PLANTED)
    # the runaway in a helper thread is cut by the budget, not left to the per-call limit
    result.stdout.fnmatch_lines(["*test_linear_growth_shared_ignored*ThreadedIgnoreRuleNoMemo*",
                                 "*FS2-6: expected linear growth, but 4x the diamond chains*did not return within*"])
    assert "threads left running" not in result.stdout.str()
