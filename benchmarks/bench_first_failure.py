"""Time to first failure: how soon ``pytest --fsdpcheck -x`` reports a broken
implementation (a measurement, not a test: nothing here asserts a time).

For every planted implementation of the area tables in ``tests/planted``
(each breaks one invariant), run the suite against it with ``-x`` and take
the seconds from start to the first ``FAILED`` line pytest prints (the
short summary ``-rf`` prints it as the run ends, serial or not); serially
and with ``-n 2``. Public tools only: the installed plugin, pytest,
pytest-xdist. ``--compare-collection-order`` adds the same checkout in
pytest's collection order (``benchmarks/collection_order.py`` undoes the
suite's ordering, nothing else); ``--before REV`` adds the package as it
was at ``REV`` (built into a throwaway folder)::

    python benchmarks/bench_first_failure.py              # serial and -n 2
    python benchmarks/bench_first_failure.py --modes serial --whole-run

Output: one row per planted implementation (serial, -n 2, and how much
later -n 2 was), the load average before and after (the figures are wall
time: on a shared machine they are as noisy as its load), then median and
worst per mode, the implementations slower than ``--goal`` seconds
serially and those slower under -n 2 than serially by more than
``--tolerance`` seconds.

``-n 2`` has a cost of its own that no plugin can take away: a second
interpreter starts before the workers do, and the controller prints its
summary only after the workers' interpreters have exited. The control
row measures it on a suite with nothing of this project in it (one test
file that imports torch and Dynamo, compiles once and fails), run the
same way; the last line names the implementations whose ``-n 2`` cost
is over the control's.
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
        # xdist prints "[gw0] FAILED ..." as it happens; serial -x prints the summary's line
        return _time_to_failure(args, cwd, env, lambda line: "FAILED" in line or line.startswith("E  "), timeout)


def _time_to_failure(args, cwd, env, is_failure, timeout: float) -> tuple[float | None, float]:
    """(seconds to the first line ``is_failure`` accepts or None, seconds the run took)."""
    start = time.perf_counter()
    proc = subprocess.Popen(args, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    timer = threading.Timer(timeout, proc.kill)
    timer.start()
    seen = None
    for line in proc.stdout:
        if seen is None and is_failure(line):
            seen = time.perf_counter() - start
    proc.wait()
    timer.cancel()
    return seen, time.perf_counter() - start


#: the control suite: torch and Dynamo imported at collection, as the suite's workers do, and the first test fails
CONTROL_SUITE = """\
import torch
import torch._dynamo


def test_fails_at_once():
    compiled = torch.compile(torch.nn.Linear(4, 4), backend=lambda gm, example_inputs: gm)
    compiled(torch.randn(2, 4))
    assert False, "the control suite's failure"
"""


def control_failure(mode: str, timeout: float) -> float | None:
    """Seconds to the first FAILED line of the control suite (plain pytest, no --fsdpcheck)."""
    with tempfile.TemporaryDirectory() as cwd:
        Path(cwd, "test_control.py").write_text(CONTROL_SUITE)
        Path(cwd, "pytest.ini").write_text("[pytest]\n")
        args = [sys.executable, "-m", "pytest", "-x", "-rf", "-p", "no:cacheprovider", "-p", "no:randomly", "test_control.py"]
        args += ["-n", "2"] if mode == "n2" else ["-p", "no:xdist"]
        return _time_to_failure(args, cwd, None, lambda line: "FAILED" in line, timeout)[0]


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
    parser.add_argument("--compare-collection-order", action="store_true",
                        help="also measure this checkout in pytest's collection order")
    parser.add_argument("--modes", nargs="+", default=["serial", "n2"], choices=["serial", "n2"])
    parser.add_argument("--only", nargs="+", default=None, help="planted implementations whose spec contains one of these")
    parser.add_argument("--limit", type=int, default=None, help="at most this many planted implementations")
    parser.add_argument("--timeout", type=float, default=600.0)
    parser.add_argument("--goal", type=float, default=20.0, help="seconds a serial first failure should stay under")
    parser.add_argument("--tolerance", type=float, default=0.0, help="seconds -n 2 may exceed serial by")
    parser.add_argument("--whole-run", action="store_true", help="also time the default suite without -x")
    parser.add_argument("--repeat", type=int, default=1, help="whole runs per mode and variant (the best is shown)")
    parser.add_argument("--control-runs", type=int, default=3,
                        help="runs of the control suite per mode, before and after (the best is taken; 0: none)")
    args = parser.parse_args(argv)
    specs = [s for s in planted_specs(args.limit) if not args.only or any(o in s for o in args.only)]
    variants = [CHEAPEST_FIRST]
    if args.compare_collection_order:
        variants.insert(0, COLLECTION_ORDER)
    tmp = tempfile.TemporaryDirectory()
    if args.before:
        variants.insert(0, (f"at {args.before}", install_revision(args.before, Path(tmp.name)), ()))
    print(f"load average at start: {_load()}; {os.cpu_count()} CPUs", flush=True)
    controls: dict[str, list[float | None]] = {mode: [] for mode in args.modes}

    def run_control(when: str) -> None:
        if not args.control_runs:
            return
        for mode in args.modes:
            controls[mode] += [control_failure(mode, args.timeout) for _ in range(args.control_runs)]
        print(f"{'control suite (' + when + ')':<52} " + " ".join(
            f"{_s(_best(controls[m])):>20}" for m in args.modes), flush=True)

    results: dict[tuple[str, str], list[float | None]] = {}
    cells = [f"{v[0][:14]} {m}" for v in variants for m in args.modes]
    late = "  n2 - serial" if args.modes == ["serial", "n2"] else ""
    print(f"{'planted implementation':<52} " + " ".join(f"{c:>20}" for c in cells) + late, flush=True)
    run_control("before")
    for spec in specs:
        row, seen_by = [], {}
        for variant in variants:
            for mode in args.modes:
                seen, _ = first_failure(spec, mode, variant, args.timeout)
                results.setdefault((variant[0], mode), []).append(seen)
                seen_by[(variant[0], mode)] = seen
                row.append("no failure" if seen is None else f"{seen:.1f} s")
        extra = ""
        if late:
            serial, n2 = seen_by[(CHEAPEST_FIRST[0], "serial")], seen_by[(CHEAPEST_FIRST[0], "n2")]
            extra = f"  {n2 - serial:+.1f} s" if serial is not None and n2 is not None else "  -"
        print(f"{spec:<52} " + " ".join(f"{c:>20}" for c in row) + extra, flush=True)
    run_control("after")
    print(f"load average at end: {_load()}")
    print()
    if args.whole_run:
        print(f"{'whole default suite':<52} {'mode':<6} " + " ".join(f"{v[0]:>18}" for v in variants))
        for mode in args.modes:
            whole = []
            for variant in variants:
                runs = [whole_run(mode, variant, args.timeout) for _ in range(args.repeat)]
                best, status = min(runs)
                whole.append(f"{best:.1f} s (exit {status})")
            print(f"{'pytest --fsdpcheck':<52} {mode:<6} " + " ".join(f"{c:>18}" for c in whole), flush=True)
        print()
    for (variant, mode), times in results.items():
        found = [t for t in times if t is not None]
        missed = len(times) - len(found)
        summary = f"median {statistics.median(found):.1f} s, worst {max(found):.1f} s" if found else "none failed"
        print(f"{variant:<24} {mode:<6} {summary}; {len(found)} of {len(times)} failed" + (f", {missed} never" if missed else ""))
    ours = {mode: results.get((CHEAPEST_FIRST[0], mode), []) for mode in args.modes}
    if "serial" in ours:
        slow = [(s, t) for s, t in zip(specs, ours["serial"], strict=True) if t is None or t > args.goal]
        print(f"serial first failure over {args.goal:g} s: " + (", ".join(f"{s} ({_s(t)})" for s, t in slow) or "none"))
    if late:
        later = [(s, a, b) for s, a, b in zip(specs, ours["serial"], ours["n2"], strict=True)
                 if a is None or b is None or b > a + args.tolerance]
        print(f"-n 2 later than serial by over {args.tolerance:g} s: "
              + (", ".join(f"{s} ({_s(a)} serial, {_s(b)} -n 2)" for s, a, b in later) or "none"))
        floor_serial, floor_n2 = _best(controls["serial"]), _best(controls["n2"])
        if floor_serial is not None and floor_n2 is not None:
            floor = floor_n2 - floor_serial
            over = [(s, a, b) for s, a, b in zip(specs, ours["serial"], ours["n2"], strict=True)
                    if a is None or b is None or b - a > floor]
            print(f"-n 2's own cost (the control suite's best -n 2 minus its best serial): {floor:+.1f} s; "
                  "-n 2 later than serial by more than that: "
                  + (", ".join(f"{s} ({b - a:+.1f} s)" if a is not None and b is not None else s
                               for s, a, b in over) or "none"))
    tmp.cleanup()
    return 0


def _best(times):
    found = [t for t in times if t is not None]
    return min(found) if found else None


def _s(seconds) -> str:
    return "no failure" if seconds is None else f"{seconds:.1f} s"


def _load() -> str:
    try:
        return " ".join(f"{x:.1f}" for x in os.getloadavg())
    except OSError:
        return "unknown"


if __name__ == "__main__":
    sys.exit(main())
