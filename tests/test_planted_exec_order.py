"""Every exec-order invariant can fail: each planted bug is caught by its ID."""

from tests.helpers import NO_SHRINK
from tests.planted.exec_order import ALL


def test_planted_exec_order_bugs_are_caught(run_suite):
    impls = [f"tests.planted.exec_order:{name}" for name in ALL.values()]
    result, report = run_suite(*impls, k="test_exec_order", extra=NO_SHRINK)
    assert report is not None, result.stdout.str()
    output = result.stdout.str()
    for invariant, name in ALL.items():
        spec = f"tests.planted.exec_order:{name}"
        cell = report["matrix"][spec][invariant]
        assert cell["outcome"] == "fail", f"{name} should fail {invariant}, got {cell}"
        assert invariant in output, f"{invariant} not named in the output"


def test_reference_passes_every_exec_order_invariant(run_suite):
    """The control: the unplanted reference passes every EXO cell."""
    result, report = run_suite("reference", k="test_exec_order")
    assert report is not None, result.stdout.str()
    cells = report["matrix"]["reference"]
    assert {i: c["outcome"] for i, c in cells.items() if i.startswith("EXO")} == {
        f"EXO-{n}": "pass" for n in range(1, 9)
    }


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
