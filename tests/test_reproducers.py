"""The snippet printed with a failure is a standalone script: pasted into a
file and run, it reproduces the planted failure — in each of the four areas."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import printed_reproducers

REPO = Path(__file__).parent.parent

CASES = {
    "traversal": ("tests.planted.traversal:UnfilteredRoots", "test_root_states", "TRV-7"),
    "annotation": ("tests.planted.annotation:TogglesFlag", "test_idempotent", "ANN-5"),
    "splitting": ("tests.planted.splitting:CountsFrozen", "test_split_plan", "SPL-3"),
    "exec order": ("tests.planted.exec_order:ReversedParamOrder", "test_exec_order and not subclasses", "EXO-3"),
}


@pytest.mark.parametrize("area", list(CASES))
def test_printed_snippet_reproduces_the_failure(run_suite, tmp_path, area):
    impl, k, invariant = CASES[area]
    result, report = run_suite(impl, k=k, extra=("-p", "no:xdist"))
    assert report["matrix"][impl][invariant]["outcome"] == "fail"
    snippets = printed_reproducers(result.outlines)
    assert snippets, result.stdout.str()
    script = tmp_path / "repro.py"
    script.write_text(snippets[0])
    # Run from an unrelated directory, as a user would: only the repo (for
    # the planted implementation's module) is importable.
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode != 0, snippets[0]
    assert "AssertionError" in proc.stderr and invariant in proc.stderr, snippets[0] + proc.stderr
