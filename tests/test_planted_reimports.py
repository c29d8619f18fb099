"""A re-import, or an import of the implementation's own code, is never a
library's first import: what its import-time code changes is the
implementation's leak, charged to the test that made it, and the process
state deciding other tests' verdicts is put back before the next test, so
torch's verdicts do not depend on what ran before them in the process."""

import pytest

from tests.demands import assert_leaked, demand_failures
from tests.helpers import failure_sections
from tests.planted.reimports import LEAK_ONLY, LEAKS, PLANTED

pytestmark = pytest.mark.kill

#: the planted killers' tests, and torch's verdicts they used to change
#: (ANN-7 pass; TRV-8 and FS2-6 known on the deep trees)
K = "test_dynamo_effect or (test_large_trees and deep)"
SERIAL = ("-p", "no:xdist")


def test_reimported_own_module_changing_process_state_fails_and_is_undone(run_suite):
    # the killers run first in one process (implementations in the order
    # given, per test), torch after each of them
    result, report = run_suite(*PLANTED, *LEAK_ONLY, "torch", k=K, extra=[*SERIAL, "--fsdpcheck-strict"])
    assert result.ret == 1, "\n".join(result.outlines[-40:])
    demand_failures(result, report, PLANTED, control=None)
    # the raised recursion limit breaks no check: its leak alone FAILs TRV-8's cell
    assert_leaked(result, report, LEAK_ONLY)
    sections = failure_sections(result.outlines)
    for spec, leak in LEAKS.items():
        named = [name for name, text in sections.items() if f"[{spec}" in name and leak in text]
        assert named, f"{spec}: no failure names {leak!r}:\n" + "\n".join(result.outlines[-60:])
    after_killers = {inv: cell["outcome"] for inv, cell in report["matrix"]["torch"].items()}
    # torch alone, in a process of its own: the same verdicts
    alone_result, alone = run_suite("torch", k=K, extra=SERIAL)
    assert alone is not None, "\n".join(alone_result.outlines[-40:])
    assert after_killers == {inv: cell["outcome"] for inv, cell in alone["matrix"]["torch"].items()}, (
        "\n".join(result.outlines[-40:]))
