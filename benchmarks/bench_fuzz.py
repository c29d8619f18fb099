"""Fuzzing at scale (issue 15): not a test, nothing here asserts a time.

``python benchmarks/bench_fuzz.py`` prints three tables (select with ``--only``):

* ``fuzz``: a fixed-time fuzz run of the properties (``--fsdpcheck-fuzz-time T
  -m hypothesis``) at ``-n 1``
  and ``-n 2`` (``--workers 1 2 16`` on a bigger machine): examples, examples
  per second of wall time, each worker's busy share (its tests' seconds /
  wall) and parallel efficiency = examples at ``-n N`` / (N x examples at ``-n 1``).
* ``suite``: the default ``ci`` suite (``pytest --fsdpcheck``, torch and
  reference) serial vs ``-n 2``: wall, CPU seconds, speed-up.
* ``startup``: where a worker's start-up goes: the interpreter, importing
  torch, Dynamo, the implementations, then pytest's collection of the suite.

Run it on a quiet machine: every figure is wall time.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PY = sys.executable
SUITE = [PY, "-m", "pytest", "-p", "no:randomly", "-q", "--fsdpcheck", "--fsdpcheck-impl", "torch",
         "--fsdpcheck-impl", "reference"]


def _timed(args, cwd) -> tuple[float, float, subprocess.CompletedProcess]:
    """(wall s, CPU s of the children, result)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    result = subprocess.run(args, cwd=cwd, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, result


def bench_fuzz(seconds: float, workers: list[int], k: str | None) -> list[str]:
    rows, base = [], None
    for n in workers:
        with tempfile.TemporaryDirectory() as tmp:
            report = Path(tmp, "r.json")
            args = [*SUITE, "--fsdpcheck-fuzz-time", f"{seconds:g}s", "-n", str(n), "--fsdpcheck-seed", "1",
                    "--fsdpcheck-report", str(report), "-p", "no:cacheprovider"]
            # the properties only: the fixed cases take the same time at any budget
            args += ["-m", "hypothesis"]
            if k:
                args += ["-k", k]
            wall, cpu, result = _timed(args, tmp)
            if not report.exists():
                rows.append(f"-n {n}: no report (exit {result.returncode}): {result.stdout[-500:]}")
                continue
            data = json.loads(report.read_text())
        explored = data["exploration"]
        examples = explored["examples"]
        base = examples if n == workers[0] and n == 1 else base
        efficiency = "-" if base is None else f"{examples / (n * base):.2f}"
        busy = ", ".join(f"{w} {row['seconds'] / wall:.0%}" for w, row in sorted(explored["workers"].items()))
        rows.append(f"-n {n:<3} {examples:>9} {wall:>8.1f} {examples / wall:>12.1f} {cpu:>8.1f} {efficiency:>10}   {busy}")
    head = f"{'workers':<7} {'examples':>9} {'wall s':>8} {'examples/s':>12} {'CPU s':>8} {'efficiency':>10}   busy share per worker"
    return [f"fuzz: --fsdpcheck-fuzz-time {seconds:g}s" + (f" -k {k!r}" if k else ""), head, *rows]


def bench_suite(repeat: int) -> list[str]:
    with tempfile.TemporaryDirectory() as tmp:
        serial, parallel = [], []
        for _ in range(repeat):
            wall, cpu, result = _timed([*SUITE, "-p", "no:xdist", "-p", "no:cacheprovider"], tmp)
            serial.append((wall, cpu, result.returncode))
            wall, cpu, result = _timed([*SUITE, "-n", "2", "-p", "no:cacheprovider"], tmp)
            parallel.append((wall, cpu, result.returncode))
    s_wall, s_cpu, s_rc = min(serial)
    p_wall, p_cpu, p_rc = min(parallel)
    return [
        f"suite (ci profile, torch + reference; best of {repeat})",
        f"serial  wall {s_wall:6.1f} s  CPU {s_cpu:6.1f} s  exit {s_rc}",
        f"-n 2    wall {p_wall:6.1f} s  CPU {p_cpu:6.1f} s  exit {p_rc}",
        f"speed-up x{s_wall / p_wall:.2f}",
    ]


STEPS = [
    ("interpreter", "pass"),
    ("import torch", "import torch"),
    ("+ torch._dynamo", "import torch, torch._dynamo"),
    ("+ implementations", "import torch, torch._dynamo\nfrom pytest_fsdpcheck.impls import load_implementation as load\n"
     "load('torch'); load('reference')"),
    ("+ hypothesis and the suite's modules", "import torch, torch._dynamo\n"
     "from pytest_fsdpcheck.impls import load_implementation as load\nload('torch'); load('reference')\n"
     "import hypothesis, importlib\nfor m in ('annotation', 'distributed', 'exec_order', 'fsdp2', 'golden', "
     "'splitting', 'traversal'):\n    importlib.import_module('pytest_fsdpcheck.conformance.test_' + m)"),
]


def bench_startup(repeat: int) -> list[str]:
    lines = [f"start-up of one process (best of {repeat}; each step includes the ones above)"]
    with tempfile.TemporaryDirectory() as tmp:
        for name, code in STEPS:
            best = min(_timed([PY, "-c", code], tmp)[0] for _ in range(repeat))
            lines.append(f"{name:<40} {best:6.2f} s")
        collect = min(_timed([*SUITE, "--collect-only", "-p", "no:cacheprovider"], tmp)[0] for _ in range(repeat))
        lines.append(f"{'pytest --fsdpcheck --collect-only':<40} {collect:6.2f} s")
        xdist = min(_timed([*SUITE, "--collect-only", "-n", "2", "-p", "no:cacheprovider"], tmp)[0]
                    for _ in range(repeat))
        lines.append(f"{'  the same with -n 2 (controller + 2 workers)':<40} {xdist:6.2f} s")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=["fuzz", "suite", "startup"], action="append")
    parser.add_argument("--seconds", type=float, default=300, help="fuzz time per run (default 300)")
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("-k", default=None, help="restrict the fuzz runs to these tests (pytest -k)")
    parser.add_argument("--repeat", type=int, default=1)
    args = parser.parse_args()
    only = args.only or ["fuzz", "suite", "startup"]
    print(f"# {os.uname().nodename}, {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}, python {sys.version.split()[0]}")
    for section in only:
        lines = {
            "fuzz": lambda: bench_fuzz(args.seconds, args.workers, args.k),
            "suite": lambda: bench_suite(args.repeat),
            "startup": lambda: bench_startup(args.repeat),
        }[section]()
        print("\n".join(lines) + "\n", flush=True)


if __name__ == "__main__":
    main()
