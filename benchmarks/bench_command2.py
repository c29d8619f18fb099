"""How long README command 2 takes from a fresh clone (issue 59's measure:
under five minutes on a 2-core machine, alone). A measurement, not a test:
nothing here asserts a time.

The command is read from the README's Quickstart as ``.ci/run`` reads it,
so what is timed is what CI and a new contributor run. The clone is made
from this checkout's ``HEAD`` (committed work only) into a temporary
folder, and the command runs there with this interpreter's environment,
the clone first on ``PYTHONPATH`` so its package, not this checkout's
editable install, is the one imported. Printed: the wall time, the
children's user and system CPU, pytest's outcome line (the test count) and
the load average before and after; quote the time with the load. Public
tools only: git, pytest, pytest-xdist::

    python benchmarks/bench_command2.py
    python benchmarks/bench_command2.py -m unit      # the same, one tier (-m replaces the command's own)
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def command2(readme: str) -> list[str]:
    """README command 2 as words: the Quickstart block's lines after ``# 2.``
    that are not comments (``.ci/run``'s reading)."""
    block = re.search(r"^## Quickstart.*?^```bash\n(.*?)^```", readme, re.S | re.M)
    if block is None or "# 2." not in block[1]:
        raise SystemExit("README.md: no Quickstart block with a '# 2.' command")
    lines = [line for line in block[1].split("# 2.", 1)[1].splitlines()[1:] if line.strip()
             and not line.lstrip().startswith("#")]
    return shlex.split(" ".join(line.rstrip("\\") for line in lines))


def with_marker(words: list[str], marker: str | None) -> list[str]:
    if marker is None:
        return words
    i = words.index("-m")
    return [*words[: i + 1], marker, *words[i + 2:]]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-m", dest="marker", help="run this marker expression instead of the command's own")
    args = parser.parse_args(argv)
    words = with_marker(command2((ROOT / "README.md").read_text(encoding="utf-8")), args.marker)
    if words[0] == "pytest":
        words = [sys.executable, "-m", "pytest", *words[1:]]
    with tempfile.TemporaryDirectory(prefix="fsdpcheck-command2-") as tmp:
        clone = Path(tmp) / "clone"
        subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=clone, capture_output=True, text=True,
                              check=True).stdout.strip()
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(clone), os.environ.get("PYTHONPATH")]))}
        print(f"commit {head}, from a fresh clone: {' '.join(words[2:] if words[1:2] == ['-m'] else words)}")
        print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.monotonic()
        done = subprocess.run(words, cwd=clone, env=env, capture_output=True, text=True)
        wall = time.monotonic() - start
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
    outcome = next((line.strip("= ") for line in reversed(done.stdout.splitlines())
                    if " passed" in line or " failed" in line), "no outcome line")
    print(f"exit {done.returncode}: {outcome}")
    print(f"wall {wall / 60:.1f} min ({wall:.0f} s); children's CPU: user {after.ru_utime - before.ru_utime:.0f} s, "
          f"system {after.ru_stime - before.ru_stime:.0f} s")
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return done.returncode


if __name__ == "__main__":
    sys.exit(main())
