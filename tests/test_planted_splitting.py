"""Every SPL invariant can fail: one suite run with all planted splitting
implementations, each of which must fail exactly its target cell (others
may fail too when a bug has knock-on effects)."""

from tests.planted.splitting import TARGETS


def test_planted_splitting_bugs_are_caught(run_suite):
    specs = [f"tests.planted.splitting:{name}" for name in TARGETS]
    result, report = run_suite(*specs, k="test_splitting", extra=("-p", "no:logging", "-p", "tests.planted.noshrink", "-n", "2"))
    assert report is not None, result.stdout.str()[-3000:]
    output = result.stdout.str()
    missed = []
    for name, invariant in TARGETS.items():
        spec = f"tests.planted.splitting:{name}"
        cell = report["matrix"][spec].get(invariant, {})
        if cell.get("outcome") != "fail":
            missed.append(f"{name}: {invariant} is {cell.get('outcome')!r}")
        elif f"{invariant}:" not in output:
            missed.append(f"{name}: {invariant} fails but no failure message names it")
    assert not missed, "\n".join(missed)
