"""Time to first failure: how soon ``pytest --fsdpcheck -x`` reports a broken
implementation (a measurement, not a test: nothing here asserts a time).

For every planted implementation in ``tests/planted`` (each breaks one
invariant), run the suite against it with ``-x`` and take the seconds from
start to the first ``FAILED`` line pytest prints; serially and with ``-n 2``.
Each is measured twice, on the same machine in the same run: in pytest's
collection order (``benchmarks/collection_order.py`` undoes the suite's
ordering, nothing else) and in the suite's own, cheapest-first order.
``--before REV`` adds the package as it was at ``REV`` (built into a
throwaway folder)::

    python benchmarks/bench_first_failure.py --modes serial n2 --whole-run

Output: one row per planted implementation and mode, then median and worst;
with ``--whole-run``, the default suite's wall time (``pytest --fsdpcheck``,
no ``-x``) per mode and variant, best of ``--repeat`` runs.
"""

from __future__ import annotations

import argparse
import importlib
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PLANTED_MODULES = ("traversal", "annotation", "splitting", "exec_order", "fsdp2", "fsdp2_plans")


def planted_specs(limit: int | None) -> list[str]:
    """Every planted implementation the project's tests name, areas interleaved."""
    sys.path.insert(0, str(REPO))
    per_area = []
    for name in PLANTED_MODULES:
        try:
            module = importlib.import_module(f"tests.planted.{name}")
        except ImportError:
            continue
        # tables differ by area: "module:Class" keys, or class names as keys or values
        table = getattr(module, "PLANTED", None) or getattr(module, "TARGETS", None) or getattr(module, "ALL", None) or {}
        names = list(table) if all(":" in k or (k[:1].isupper() and "-" not in k) for k in table) else list(table.values())
        specs = [n if ":" in n else f"tests.planted.{name}:{n}" for n in names if isinstance(n, str)]
        per_area.append(specs)
    ordered = [spec for group in _interleave(per_area) for spec in group]
    return ordered[:limit] if limit else ordered


def _interleave(groups):
    for i in range(max(map(len, groups), default=0)):
        yield [g[i] for g in groups if i < len(g)]


def install_revision(rev: str, into: Path) -> Path:
    """The package at ``rev``, installed (not editable) into ``into``."""
    src = into / "src"
    subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", str(src), rev], check=True,
                   capture_output=True)
    try:
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
                        "--target", str(into / "site"), str(src)], check=True)
    finally:
        subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(src)], check=False)
    return into / "site"


#: (name, the package's folder or None for this checkout, extra pytest arguments)
COLLECTION_ORDER = ("collection order", None, ("-p", "collection_order"))
CHEAPEST_FIRST = ("cheapest first", None, ())


def _command(variant, mode: str, *args: str) -> tuple[list[str], dict]:
    _, site, extra = variant
    command = [sys.executable, "-m", "pytest", "--fsdpcheck", *args, "-p", "no:cacheprovider", "-p", "no:randomly", *extra]
    command += ["-n", "2"] if mode == "n2" else ["-p", "no:xdist"]
    path = [str(site) if site else "", str(REPO), str(REPO / "benchmarks")]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in path if p))
    env.pop("FSDPCHECK_IMPL", None)
    return command, env


def first_failure(spec: str, mode: str, variant, timeout: float) -> tuple[float | None, float]:
    """(seconds to the first FAILED line or None, seconds the run took)."""
    args, env = _command(variant, mode, "--fsdpcheck-impl", spec, "-x", "-rf")
    with tempfile.TemporaryDirectory() as cwd:
        start = time.perf_counter()
        proc = subprocess.Popen(args, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        timer = threading.Timer(timeout, proc.kill)
        timer.start()
        seen = None
        for line in proc.stdout:
            # xdist prints "[gw0] FAILED ..." as it happens; serial -x prints the summary's line
            if seen is None and ("FAILED" in line or line.startswith("E  ")):
                seen = time.perf_counter() - start
        proc.wait()
        timer.cancel()
        return seen, time.perf_counter() - start


def whole_run(mode: str, variant, timeout: float) -> tuple[float, int]:
    """(seconds, exit status) of the default suite against the installed torch."""
    args, env = _command(variant, mode, "-q")
    with tempfile.TemporaryDirectory() as cwd:
        start = time.perf_counter()
        proc = subprocess.run(args, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=timeout)
        return time.perf_counter() - start, proc.returncode


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", metavar="REV", help="also measure the package at this git revision")
    parser.add_argument("--modes", nargs="+", default=["serial", "n2"], choices=["serial", "n2"])
    parser.add_argument("--limit", type=int, default=None, help="at most this many planted implementations")
    parser.add_argument("--timeout", type=float, default=600.0)
    parser.add_argument("--whole-run", action="store_true", help="also time the default suite without -x")
    parser.add_argument("--repeat", type=int, default=1, help="whole runs per mode and variant (the best is shown)")
    args = parser.parse_args(argv)
    specs = planted_specs(args.limit)
    variants = [COLLECTION_ORDER, CHEAPEST_FIRST]
    tmp = tempfile.TemporaryDirectory()
    if args.before:
        variants.insert(0, (f"at {args.before}", install_revision(args.before, Path(tmp.name)), ()))
    results: dict[tuple[str, str], list[float | None]] = {}
    print(f"{'planted implementation':<58} {'mode':<6} " + " ".join(f"{v[0]:>18}" for v in variants))
    for spec in specs:
        for mode in args.modes:
            row = []
            for variant in variants:
                seen, _ = first_failure(spec, mode, variant, args.timeout)
                results.setdefault((variant[0], mode), []).append(seen)
                row.append("no failure" if seen is None else f"{seen:.1f} s")
            print(f"{spec:<58} {mode:<6} " + " ".join(f"{c:>18}" for c in row), flush=True)
    print()
    if args.whole_run:
        print(f"{'whole default suite':<58} {'mode':<6} " + " ".join(f"{v[0]:>18}" for v in variants))
        for mode in args.modes:
            cells = []
            for variant in variants:
                runs = [whole_run(mode, variant, args.timeout) for _ in range(args.repeat)]
                best, status = min(runs)
                cells.append(f"{best:.1f} s (exit {status})")
            print(f"{'pytest --fsdpcheck':<58} {mode:<6} " + " ".join(f"{c:>18}" for c in cells), flush=True)
        print()
    for (variant, mode), times in results.items():
        found = [t for t in times if t is not None]
        missed = len(times) - len(found)
        summary = f"median {statistics.median(found):.1f} s, worst {max(found):.1f} s" if found else "none failed"
        print(f"{variant:<24} {mode:<6} {summary}; {len(found)} of {len(times)} failed" + (f", {missed} never" if missed else ""))
    tmp.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
