"""Each real-forward feature of the exec-order area can fail: an
implementation mishandling buffers, views, tied parameters, never-called
containers or method-named parameters is caught on that feature's model,
with the invariant ID."""

from tests.helpers import NO_SHRINK
from tests.planted.exec_order import REAL_FORWARD_PLANTED


def test_planted_real_forward_bugs_are_caught(run_suite):
    specs = {name: f"tests.planted.exec_order:{name}" for name in REAL_FORWARD_PLANTED}
    result, report = run_suite(*specs.values(), k="test_real_forward_features", extra=NO_SHRINK)
    assert report is not None, result.stdout.str()
    output = result.stdout.str()
    for name, (invariant, case) in REAL_FORWARD_PLANTED.items():
        cell = report["matrix"][specs[name]][invariant]
        assert cell["outcome"] == "fail", f"{name} should fail {invariant}, got {cell}"
        failed = [
            nodeid
            for nodeid, test in report["tests"].items()
            if f"[{specs[name]}-{case}]" in nodeid and test["outcome"] == "failed"
        ]
        assert failed, f"{name} should fail on the {case!r} model, failing tests: {[n for n, t in report['tests'].items() if t['outcome'] == 'failed']}"
        assert invariant in output, f"{invariant} not named in the output"
