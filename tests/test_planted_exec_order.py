"""Every exec-order invariant can fail: each planted bug is caught by its ID."""

from tests.planted.exec_order import ALL


def test_planted_exec_order_bugs_are_caught(run_suite):
    impls = [f"tests.planted.exec_order:{name}" for name in ALL.values()]
    result, report = run_suite(*impls, k="test_exec_order", extra=("-p", "tests.noshrink"))
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
