"""Performance measurements for pytest-fsdpcheck (not tests: nothing here
asserts a time). ``python benchmarks/run.py`` prints one table.

Sections (select with ``--only``):

* ``idle``: ``pytest --collect-only`` of a generated 200-test project with the
  plugin installed vs ``-p no:fsdpcheck`` (median of N runs), and whether the
  idle plugin imported torch.
* ``suite``: wall time of ``pytest --fsdpcheck`` (ci profile), serial and ``-n 2``.
* ``throughput``: examples per second of each area's main property test
  (generation + implementation + checks), from the suite's JSON report.
* ``scaling``: reference vs torch on large inputs, and growth with size.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PY = sys.executable


def _run(args, cwd, env=None) -> float:
    start = time.perf_counter()
    subprocess.run(args, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    return time.perf_counter() - start


def _median_pair(a, b, repeat):
    """Alternate A and B so drift on a shared machine hits both alike."""
    ta, tb = [], []
    for _ in range(repeat):
        ta.append(a())
        tb.append(b())
    return statistics.median(ta), statistics.median(tb)


def bench_idle(repeat: int) -> list[tuple[str, str]]:
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(20):
            body = "\n".join(f"def test_{i}_{j}():\n    assert {j} == {j}\n" for j in range(10))
            Path(tmp, f"test_mod{i}.py").write_text(body)
        Path(tmp, "pytest.ini").write_text("[pytest]\naddopts = -p no:cacheprovider\n")
        base = [PY, "-m", "pytest", "--collect-only", "-q"]
        on, off = _median_pair(lambda: _run(base, tmp), lambda: _run([*base, "-p", "no:fsdpcheck"], tmp), repeat)
        probe = (
            "import sys, pytest; pytest.main(['--collect-only', '-q']); "
            "print('TORCH' if 'torch' in sys.modules else 'NO-TORCH')"
        )
        out = subprocess.run([PY, "-c", probe], cwd=tmp, capture_output=True, text=True).stdout.split()[-1]
        written = sorted(p.name for p in Path(tmp).iterdir() if not p.name.startswith(("test_mod", "pytest.ini")))
    return [
        ("idle: collect 200 tests, plugin installed (median s)", f"{on:.3f}"),
        ("idle: same with -p no:fsdpcheck (median s)", f"{off:.3f}"),
        ("idle: ratio (target <= 1.05)", f"{on / off:.3f}"),
        ("idle: torch imported by idle plugin", "no" if out == "NO-TORCH" else "YES"),
        ("idle: files written", ", ".join(written) or "none"),
    ]


def _suite(extra, report=None) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        args = [PY, "-m", "pytest", "--fsdpcheck", "--fsdpcheck-impl", "torch", "--fsdpcheck-impl", "reference", "-q", *extra]
        if report:
            args += ["--fsdpcheck-report", report]
        return _run(args, tmp)


def bench_suite() -> list[tuple[str, str]]:
    serial = _suite(["-p", "no:xdist"])
    parallel = _suite(["-n", "2"])
    return [
        ("suite: pytest --fsdpcheck, ci profile, serial (s)", f"{serial:.1f}"),
        ("suite: same with -n 2 (s; target <= 60)", f"{parallel:.1f}"),
        ("suite: speed-up of -n 2 (target >= 1.5)", f"{serial / parallel:.2f}"),
    ]


# Each area's main property test; its examples/s includes generation and checks.
THROUGHPUT = {
    "traversal": "test_traversal.py::test_states_with_modules",
    "annotation": "test_annotation.py::test_annotate",
    "splitting": "test_splitting.py::test_split_equivalence",
    "exec order": "test_exec_order.py::test_exec_order_matches_oracle",
}


def bench_throughput() -> list[tuple[str, str]]:
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        report = os.path.join(tmp, "r.json")
        names = " or ".join(t.split("::")[1] for t in THROUGHPUT.values())
        _suite(["-p", "no:xdist", "-k", names], report)
        tests = json.loads(Path(report).read_text())["tests"] if os.path.exists(report) else {}
    for area, test in THROUGHPUT.items():
        for impl in ("torch", "reference"):
            t = tests.get(f"{test}[{impl}]") or next(
                (v for k, v in tests.items() if k.startswith(f"{test}[{impl}")), None
            )
            if not t or not t.get("seconds") or not t.get("examples"):
                rows.append((f"throughput: {area} [{impl}] (examples/s)", "not measured"))
                continue
            rows.append(
                (f"throughput: {area} [{impl}] (examples/s)", f"{t['examples'] / t['seconds']:.0f} ({t['examples']} in {t['seconds']:.2f} s)")
            )
    return rows


def _best(fn, repeat=3) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def bench_scaling() -> list[tuple[str, str]]:
    from pytest_fsdpcheck.generators.trees import build_tree, deep_chain, wide_tree
    from pytest_fsdpcheck.impls.reference import ReferenceImplementation
    from pytest_fsdpcheck.impls.torch_impl import TorchImplementation

    rows = []
    impls = {"reference": ReferenceImplementation(), "torch": TorchImplementation()}
    for shape, make, sizes in (("wide", wide_tree, (25_000, 100_000)), ("chain", deep_chain, (5_000, 20_000))):
        times = {}
        for name, impl in impls.items():
            for n in sizes:
                tree = build_tree(make(n), impl.traversal)
                times[(name, n)] = _best(lambda t=tree, i=impl: i.traversal.states_with_modules(t.root))
        for name in impls:
            (small, t_small), (large, t_large) = sorted((n, t) for (i, n), t in times.items() if i == name)
            rows.append(
                (f"scaling: traversal {shape} {large:,} modules [{name}] (s)", f"{t_large:.3f} (x{t_large / t_small:.2f} for x{large / small:.0f} modules)")
            )
    for extra in _extra_scaling():
        rows.extend(extra())
    return rows


def _extra_scaling():
    # Areas add their own scaling figures in benchmarks/bench_<area>.py.
    here = Path(__file__).parent
    sys.path.insert(0, str(here))
    out = []
    for path in sorted(here.glob("bench_*.py")):
        module = __import__(path.stem)
        if hasattr(module, "scaling_rows"):
            out.append(module.scaling_rows)
    return out


SECTIONS = {"idle": None, "suite": bench_suite, "throughput": bench_throughput, "scaling": bench_scaling}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", action="append", choices=list(SECTIONS), help="sections to run (default: all)")
    parser.add_argument("--repeat", type=int, default=7, help="runs per side for the idle ratio")
    args = parser.parse_args()
    import torch

    rows = [
        ("machine", f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, torch {torch.__version__}"),
    ]
    for name in args.only or list(SECTIONS):
        rows += bench_idle(args.repeat) if name == "idle" else SECTIONS[name]()
        width = max(len(k) for k, _ in rows)
    print(f"{'measure':<{width}}  value")
    print("-" * (width + 30))
    for key, value in rows:
        print(f"{key:<{width}}  {value}")


if __name__ == "__main__":
    main()
