"""Every exec-order invariant can fail: each planted bug is caught by its ID."""

import pytest

from tests.demands import demand_failures
from tests.helpers import PLANTED_RUN, invariant_tests, selection
from tests.planted.exec_order import ALL

pytestmark = pytest.mark.kill

#: each planted bug on the tests of its invariant
PLANTED = {f"tests.planted.exec_order:{name}": (inv, invariant_tests("test_exec_order", inv)) for inv, name in ALL.items()}
#: a recorder taking every get_attr input for a parameter
BUFFER_PLANTED = {"tests.planted.exec_order:BufferProxiesAsParams": ("EXO-3", "test_real_forward_features or test_matches_reference")}


def test_planted_exec_order_bugs_are_caught(run_suite):
    """Each planted bug on the tests of its invariant; the reference, the
    control, on all of them passes every EXO cell."""
    result, report = run_suite("reference", *PLANTED, k=f"test_exec_order and ({selection(PLANTED)})", extra=PLANTED_RUN)
    assert result.ret == 1, "\n".join(result.outlines[-40:])
    demand_failures(result, report, PLANTED)
    assert {i for i in report["matrix"]["reference"] if i.startswith("EXO")} == {f"EXO-{n}" for n in range(1, 9)}


def test_buffer_recorded_as_parameter_is_caught(run_suite):
    """A recorder taking every ``get_attr`` input for a parameter meets a
    buffer only when the tracer proxies buffer attributes; the fixed
    proxied-buffers model and the drawn tracers both catch it."""
    spec = "tests.planted.exec_order:BufferProxiesAsParams"
    result, report = run_suite(spec, k="(test_real_forward_features or test_matches_reference) and not splitting",
                               extra=PLANTED_RUN)
    demand_failures(result, report, BUFFER_PLANTED, control=None)
    output = result.stdout.str()
    assert f"FAILED test_exec_order.py::test_real_forward_features[{spec}-buffers-proxied]" in output, output
    assert f"FAILED test_exec_order.py::test_matches_reference[{spec}]" in output, output
    # read as plain tensors, buffers never look like parameters to it
    assert f"test_real_forward_features[{spec}-buffers]" not in output.replace("buffers-proxied", ""), output
