"""HypoFuzz (``hypothesis fuzz -- --fsdpcheck ...``) collects every property
of the suite, under any profile, and fuzzes it with the plugin's options in
force. HypoFuzz is AGPL: only these tests use it, in subprocesses, and they
skip where it is not installed."""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import subprocess
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parents[1]
pytestmark = [pytest.mark.process, pytest.mark.skipif(
    shutil.which("hypothesis", path=os.path.dirname(sys.executable)) is None
    or subprocess.run([sys.executable, "-c", "import hypofuzz"], capture_output=True).returncode != 0,
    reason="HypoFuzz is not installed (pip install hypofuzz)",
)]

COLLECT = """
import json, sys
from hypofuzz.collection import collect_tests
found = collect_tests(sys.argv[1:])
print("RESULT" + json.dumps({"targets": [t.nodeid for t in found.fuzz_targets],
                             "refused": {k: v["status_reason"] for k, v in found.not_collected.items()}}))
"""


def _env(tmp_path):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    env.pop("FSDPCHECK_IMPL", None)
    # Where CI is set Hypothesis loads its database-less 'ci' profile, which
    # HypoFuzz cannot run under (see the test of that case below).
    env.pop("CI", None)
    env["FSDPCHECK_REPLAY_LOG"] = str(tmp_path / "calls.log")
    return env


def _suite_properties(tmp_path, args) -> set[str]:
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-m", "hypothesis", "-p", "no:randomly", *args],
        cwd=tmp_path, env=_env(tmp_path), capture_output=True, text=True, timeout=300,
    )
    return {line for line in out.stdout.splitlines() if "::" in line}


@pytest.mark.parametrize("profile", [[], ["--fsdpcheck-profile", "dev"], ["--fsdpcheck-profile", "fuzz"]],
                         ids=["ci", "dev", "fuzz"])
def test_hypofuzz_collects_every_property(tmp_path, profile):
    args = ["--fsdpcheck", "--fsdpcheck-impl", "reference", "-p", "no:randomly", *profile]
    out = subprocess.run([sys.executable, "-c", COLLECT, *args], cwd=tmp_path, env=_env(tmp_path),
                         capture_output=True, text=True, timeout=300)
    line = next((x for x in out.stdout.splitlines() if x.startswith("RESULT")), None)
    assert line is not None, out.stdout[-3000:] + out.stderr[-3000:]
    found = json.loads(line[len("RESULT"):])
    expected = _suite_properties(tmp_path, args)
    assert len(expected) > 20, expected
    assert found["refused"] == {}
    assert set(found["targets"]) == expected


def test_hypofuzz_fuzzes_a_property_with_the_plugin_options(tmp_path):
    """The implementation named by --fsdpcheck-impl is the one fuzzed, and a
    bug in it is found: HypoFuzz stops once every test has a failing input."""
    out = subprocess.run(
        [os.path.join(os.path.dirname(sys.executable), "hypothesis"), "fuzz", "-n", "1", "--no-dashboard", "--",
         "--fsdpcheck", "--fsdpcheck-impl", "tests.planted.replay:LosesAState", "--fsdpcheck-no-known-bugs",
         "-p", "no:randomly", "-k", "test_states_with_modules"],
        cwd=tmp_path, env=_env(tmp_path), capture_output=True, text=True, timeout=300,
    )
    output = out.stdout + out.stderr
    assert "fuzz 1 test" in output and "skipped" not in output, output[-3000:]
    assert "Found a failing input for every test" in output, output[-3000:]
    assert (tmp_path / "calls.log").read_text().count("\n") > 1


def test_hypofuzz_without_a_database_is_refused_with_its_cause(tmp_path):
    """Hypothesis' 'ci' profile (loaded where CI is set) keeps no database; HypoFuzz's
    workers would die on it and report "a failing input for every test"."""
    out = subprocess.run(
        [os.path.join(os.path.dirname(sys.executable), "hypothesis"), "fuzz", "-n", "1", "--no-dashboard", "--",
         "--fsdpcheck", "--fsdpcheck-impl", "tests.planted.replay:LosesAState", "-p", "no:randomly",
         "-k", "test_states_with_modules"],
        cwd=tmp_path, env={**_env(tmp_path), "CI": "true"}, capture_output=True, text=True, timeout=300,
    )
    output = out.stdout + out.stderr
    assert out.returncode != 0, output[-3000:]
    assert "HypoFuzz needs an example database" in output and "'ci' profile" in output, output[-3000:]
    assert "Found a failing input" not in output and "Traceback" not in output, output[-3000:]
    assert not (tmp_path / "calls.log").exists()
