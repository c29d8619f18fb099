"""An ignore rule that asks each module for the buffers of its whole subtree
(torch's ``module.buffers()`` with ``recurse`` left on, a surviving mutant
of docs/mutation.md) decides as torch does, so only FS2-6's time shows it.
The deep cases of test_large_trees see it only as a RecursionError beyond
the recursion limit, which torch's known bug fs2-walk-recursive explains
there; the chains of test_linear_growth_deep_ignored stay below the limit,
so its quadratic time fails FS2-6 on torch as on the reference."""

import pytest

from tests.demands import demand_failures
from tests.helpers import PLANTED_RUN

pytestmark = pytest.mark.kill

#: a whole-subtree buffer check in the ignore rule, on the deep-chain growth case added for it
WHOLE_SUBTREE_PLANTED = {"tests.planted.fsdp2:IgnoreRuleWholeSubtree": ("FS2-6", "test_linear_growth_deep_ignored")}


def test_a_whole_subtree_ignore_rule_fails_the_deep_chain_growth_by_its_time(run_suite):
    (spec,) = WHOLE_SUBTREE_PLANTED
    k = "test_fsdp2 and (test_ignored_params or test_linear_growth_deep_ignored)"
    result, report = run_suite(spec, k=k, extra=PLANTED_RUN)
    demand_failures(result, report, WHOLE_SUBTREE_PLANTED, control=None)
    outcomes = {nodeid.split("::")[-1].split("[")[0]: test["outcome"]
                for nodeid, test in report["tests"].items() if f"[{spec}" in nodeid}
    # its decisions are right (FS2-3 holds): only the time is wrong
    assert outcomes == {"test_ignored_params": "passed", "test_linear_growth_deep_ignored": "failed"}, outcomes
    result.stdout.fnmatch_lines(["*FS2-6: expected linear growth, but 4x the depth of chains*"])
