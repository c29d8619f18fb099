"""Golden files are judged, never rewritten by a run: EXPECTTEST_ACCEPT (which
PyTorch developers often have set) changes nothing, and the only writer is the
maintainer command, which renders from the reference into a source checkout."""

import subprocess

import pytest

from pytest_fsdpcheck.checks import golden_files as golden
from tests.demands import demand_failures

pytestmark = pytest.mark.process

#: takes every state for a root
ACCEPT_PLANTED = {"tests.planted.traversal:UnfilteredRoots": ("TRV-7", "test_golden_traversal and mlp_chain")}


@pytest.mark.kill
def test_expecttest_accept_neither_passes_a_bug_nor_rewrites_the_golden_file(run_suite, monkeypatch):
    path = golden.golden_dir() / "mlp_chain.txt"
    original = path.read_bytes()
    (planted,) = ACCEPT_PLANTED
    monkeypatch.setenv("EXPECTTEST_ACCEPT", "1")
    try:
        result, report = run_suite("reference", planted, k="test_golden_traversal and mlp_chain")
        after = path.read_bytes()
    finally:
        if path.read_bytes() != original:  # the shared checkout must not keep a bug's rendering
            path.write_bytes(original)
    assert after == original, "a suite run rewrote fixtures/golden/mlp_chain.txt"
    assert result.ret == 1, "\n".join(result.outlines[-30:])
    demand_failures(result, report, ACCEPT_PLANTED)


def test_regenerate_refuses_a_folder_outside_a_source_checkout(tmp_path):
    installed = tmp_path / "lib" / "site-packages" / "pytest_fsdpcheck" / "fixtures" / "golden"
    installed.mkdir(parents=True)
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    for folder, why in [(tmp_path.parent / "not-a-checkout", "not inside a git checkout"),
                        (installed, "inside an installed package")]:
        folder.mkdir(exist_ok=True)
        with pytest.raises(SystemExit) as exc:
            golden.main(["regenerate", "mlp_chain", "--folder", str(folder)])
        message = str(exc.value.code)
        assert message.startswith("error: ") and why in message and "\n" not in message, message
        assert list(folder.iterdir()) == []


def test_regenerate_renders_the_reference_into_a_checkout(tmp_path, capsys):
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    changed = golden.regenerate(["mlp_chain"], tmp_path)
    assert changed == [tmp_path / "mlp_chain.txt"]
    assert golden.read_sections(changed[0]) == golden.read_sections(golden.golden_dir() / "mlp_chain.txt")
    assert changed[0].read_bytes() == (golden.golden_dir() / "mlp_chain.txt").read_bytes()
    assert golden.regenerate(["mlp_chain"], tmp_path) == []  # a second run changes nothing
