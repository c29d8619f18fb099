"""Every SPL invariant can fail: one suite run with all planted splitting
implementations, each running the tests of its target invariant, which must
fail that cell (others may fail too when a bug has knock-on effects); the
reference, on the same tests, passes every one."""

from tests.helpers import NO_SHRINK, control_problems, invariant_tests, planted_misses, selection
from tests.planted.splitting import TARGETS


def test_planted_splitting_bugs_are_caught(run_suite):
    planted = {f"tests.planted.splitting:{name}": (inv, invariant_tests("test_splitting", inv)) for name, inv in TARGETS.items()}
    result, report = run_suite("reference", *planted, k=f"test_splitting and ({selection(planted)})",
                               extra=("-p", "no:logging", *NO_SHRINK))
    assert result.ret == 1, "\n".join(result.outlines[-40:])
    assert planted_misses(result, report, planted) == []
    assert control_problems(report) == []
