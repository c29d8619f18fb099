"""``python -m pytest_fsdpcheck.known run`` tells a bug present (1) from a
torch without the API (2) and from a reproducer that crashed (3): an
exception escaping a script exits 1 as "present" does, so before the guard
a renamed torch function read as a bug still there. (That the snippets
printed with failures reproduce them: tests/test_reproducer_scripts.py.)"""

import pytest

from pytest_fsdpcheck.commands import known as known_main
from pytest_fsdpcheck.impls.torch_bugs import TORCH_BUGS

pytestmark = pytest.mark.process

SCRIPTS = {
    "present": ("import sys\nprint('BUG: still there')\nsys.exit(1)\n", 1, "present"),
    "fixed": ("print('fixed: gone')\n", 0, "fixed"),
    "lacks": ("import sys\nprint('n/a: no such function')\nsys.exit(2)\n", 2, "torch lacks the API"),
    # what a renamed torch function does to a reproducer
    "crash": ("import torch\ntorch.distributed.fsdp._no_such_module._gone()\n", 3, "crashed"),
}


@pytest.mark.parametrize("case", list(SCRIPTS))
def test_reproducer_exit_codes(tmp_path, case):
    text, code, _ = SCRIPTS[case]
    script = tmp_path / "repro.py"
    script.write_text(text)
    assert known_main.run_reproducer(script).returncode == code


@pytest.mark.parametrize("case", list(SCRIPTS))
def test_known_run_reports_each_outcome(tmp_path, monkeypatch, capsys, case):
    text, code, word = SCRIPTS[case]
    script = tmp_path / "repro.py"
    script.write_text(text)
    monkeypatch.setattr(known_main, "reproducer_path", lambda bug: script)
    status = known_main.main(["run", TORCH_BUGS[0].id])
    line = capsys.readouterr().out.strip()
    assert f"exit {code} ({word})" in line, line
    assert status == {1: 1, 0: 0, 2: 0, 3: 3}[code]
    if case == "crash":  # the exception, not a blank "present"
        assert "AttributeError" in line, line


def test_a_crash_outranks_bugs_present(tmp_path, monkeypatch, capsys):
    scripts = {}
    for bug, case in zip(TORCH_BUGS[:2], ("present", "crash"), strict=True):
        scripts[bug.id] = tmp_path / f"{case}.py"
        scripts[bug.id].write_text(SCRIPTS[case][0])
    monkeypatch.setattr(known_main, "reproducer_path", lambda bug: scripts[bug.id])
    assert known_main.main(["run", *scripts]) == known_main.CRASHED
