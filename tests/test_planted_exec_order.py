"""Every exec-order invariant can fail: each planted bug is caught by its ID."""

from tests.helpers import NO_SHRINK, control_problems, invariant_tests, planted_misses, selection
from tests.planted.exec_order import ALL


def test_planted_exec_order_bugs_are_caught(run_suite):
    """Each planted bug on the tests of its invariant; the reference, the
    control, on all of them passes every EXO cell."""
    planted = {f"tests.planted.exec_order:{name}": (inv, invariant_tests("test_exec_order", inv)) for inv, name in ALL.items()}
    result, report = run_suite("reference", *planted, k=f"test_exec_order and ({selection(planted)})", extra=NO_SHRINK)
    assert result.ret == 1, "\n".join(result.outlines[-40:])
    assert planted_misses(result, report, planted) == []
    assert control_problems(report) == []
    assert {i for i in report["matrix"]["reference"] if i.startswith("EXO")} == {f"EXO-{n}" for n in range(1, 9)}


def test_buffer_recorded_as_parameter_is_caught(run_suite):
    """A recorder taking every ``get_attr`` input for a parameter meets a
    buffer only when the tracer proxies buffer attributes; the fixed
    proxied-buffers model and the drawn tracers both catch it."""
    spec = "tests.planted.exec_order:BufferProxiesAsParams"
    result, report = run_suite(spec, k="(test_real_forward_features or test_matches_reference) and not splitting",
                               extra=NO_SHRINK)
    assert report is not None, result.stdout.str()
    assert report["matrix"][spec]["EXO-3"]["outcome"] == "fail", report["matrix"][spec]
    output = result.stdout.str()
    assert f"FAILED test_exec_order.py::test_real_forward_features[{spec}-buffers-proxied]" in output, output
    assert f"FAILED test_exec_order.py::test_matches_reference[{spec}]" in output, output
    # read as plain tensors, buffers never look like parameters to it
    assert f"test_real_forward_features[{spec}-buffers]" not in output.replace("buffers-proxied", ""), output
