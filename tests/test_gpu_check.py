"""The device check (benchmarks/gpu/check.sh, issue 60) without a GPU: its
dry run reaches every part, collects each as it would run it, runs the gpu
tier (which skips, naming why), and exits 0; on a machine with a GPU the
same script runs the parts."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parent.parent
PARTS = ("suite-cuda", "suite-auto-n8", "users", "split-cuda", "gpu-tier")


def test_the_dry_run_reaches_every_part_and_skips_it(tmp_path):
    env = {**os.environ, "OUT": str(tmp_path / "out"), "PYTHON": sys.executable, "CUDA_VISIBLE_DEVICES": ""}
    done = subprocess.run(["bash", str(ROOT / "benchmarks" / "gpu" / "check.sh")], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)
    lines = done.stdout.splitlines()
    assert done.returncode == 0, done.stdout + done.stderr
    assert "torch sees no CUDA device" in lines[0], lines
    for part in PARTS[:-1]:
        (line,) = [line for line in lines if line.startswith(f"part {part}: ")]
        assert "skipped (dry run" in line and "exit 0, " in line and "tests collected" in line, line
    (tier,) = [line for line in lines if line.startswith("part gpu-tier: ")]
    assert tier.startswith("part gpu-tier: exit 0 in ") and " skipped" in tier and "failed" not in tier, tier
    assert lines[-1] == "device check: exit 0"
    summary = (tmp_path / "out" / "summary.txt").read_text().splitlines()
    assert [line.split(":")[0] for line in summary] == [f"part {part}" for part in PARTS]
