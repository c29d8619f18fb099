"""How long the project's own tests take, per tier, with inner pytest runs
forked from a preloaded process (tests/preloaded.py) and with each in a new
interpreter (a measurement, not a test: nothing here asserts a time).

Each row is one ``pytest -n N tests -m TIER`` (or the files given), run once
with ``FSDPCHECK_TESTS_SUBPROCESS=0`` and once with ``=1``, alternating which
goes first per tier so a drift in the machine's load does not favour one;
wall time, the children's user and system CPU, the outcome line and the load
average before and after. The figures are wall time on a shared machine:
quote them with the load. Public tools only: pytest, pytest-xdist::

    python benchmarks/bench_project_tests.py                       # kill and plugin tiers, -n 2
    python benchmarks/bench_project_tests.py --tiers "not e2e" e2e
    python benchmarks/bench_project_tests.py --files tests/test_planted_known.py tests/test_plugin.py
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _run(args: list[str], forked: bool) -> tuple[float, float, float, str]:
    env = {**os.environ, "FSDPCHECK_TESTS_SUBPROCESS": "0" if forked else "1"}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:randomly", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True)
    wall = time.monotonic() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    tail = next((line for line in reversed(proc.stdout.splitlines()) if line.strip()), f"exit {proc.returncode}")
    return wall, after.ru_utime - before.ru_utime, after.ru_stime - before.ru_stime, tail.strip("= ")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tiers", nargs="*", default=["kill", "plugin"], help="-m expressions, one row each")
    parser.add_argument("--files", nargs="*", default=[], help="test files for one row instead of tiers")
    parser.add_argument("-n", "--workers", default="2")
    options = parser.parse_args(argv)
    rows = [(" ".join(options.files), [*options.files])] if options.files else [
        (tier, ["tests", "-m", tier]) for tier in options.tiers]
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(f"{'selection':<28} {'mode':<11} {'wall s':>8} {'user s':>8} {'sys s':>7}  outcome")
    for index, (name, args) in enumerate(rows):
        modes = (True, False) if index % 2 == 0 else (False, True)
        for forked in modes:
            wall, user, system, tail = _run([*args, "-n", options.workers], forked)
            print(f"{name:<28} {'forked' if forked else 'subprocess':<11} {wall:8.1f} {user:8.1f} {system:7.1f}  {tail}",
                  flush=True)
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
