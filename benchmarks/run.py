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

from pytest_fsdpcheck.checks.growth import best_time

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


def _suite(extra, report=None) -> tuple[float, float]:
    """Wall and CPU seconds (children included) of one suite run."""
    with tempfile.TemporaryDirectory() as tmp:
        args = [PY, "-m", "pytest", "--fsdpcheck", "--fsdpcheck-impl", "torch", "--fsdpcheck-impl", "reference", "-q", *extra]
        if report:
            args += ["--fsdpcheck-report", report]
        cpu_before = _children_cpu()
        wall = _run(args, tmp)
        return wall, _children_cpu() - cpu_before


def _children_cpu() -> float:
    times = os.times()
    return times.children_user + times.children_system


_SERIAL_REPORTS: list[dict] = []  # JSON reports of the serial suite runs


def bench_suite(repeat: int) -> list[tuple[str, str]]:
    serial, parallel = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(repeat):  # alternated, so load from neighbours hits both alike
            report = os.path.join(tmp, f"serial{i}.json")
            serial.append(_suite(["-p", "no:xdist"], report))
            if os.path.exists(report):
                _SERIAL_REPORTS.append(json.loads(Path(report).read_text()))
            parallel.append(_suite(["-n", "2"]))
    s_wall, p_wall = statistics.median(w for w, _ in serial), statistics.median(w for w, _ in parallel)
    s_cpu, p_cpu = statistics.median(c for _, c in serial), statistics.median(c for _, c in parallel)
    return [
        (f"suite: pytest --fsdpcheck, ci profile, serial (median of {repeat}, s)", f"{s_wall:.1f} wall, {s_cpu:.1f} CPU"),
        ("suite: same with -n 2 (s; target <= 60)", f"{p_wall:.1f} wall, {p_cpu:.1f} CPU"),
        ("suite: speed-up of -n 2 (target >= 1.5)", f"{s_wall / p_wall:.2f}"),
    ]


# Each area's main property test; its examples/s includes generation and checks.
THROUGHPUT = {
    "traversal": "test_traversal.py::test_states_with_modules",
    "annotation": "test_annotation.py::test_annotate",
    # plan, split, per-bucket compile, outputs and gradients (SPL-9..12)
    "splitting": "test_splitting.py::test_compiled_split",
    "exec order": "test_exec_order.py::test_exec_order",
}
TARGETS = {"traversal": 500, "annotation": 500, "splitting": 30, "exec order": 100}


def bench_throughput() -> list[tuple[str, str]]:
    """From the serial suite runs (one is made here if the suite section did
    not run): examples/s of each area's main test inside the whole suite, so
    one-time imports fall wherever the suite first needs them."""
    if not _SERIAL_REPORTS:
        with tempfile.TemporaryDirectory() as tmp:
            report = os.path.join(tmp, "r.json")
            _suite(["-p", "no:xdist"], report)
            if os.path.exists(report):
                _SERIAL_REPORTS.append(json.loads(Path(report).read_text()))
    rows = []
    for area, test in THROUGHPUT.items():
        for impl in ("torch", "reference"):
            # test_compiled_split carries a device parameter: [torch-cpu]
            found = [r["tests"].get(f"{test}[{impl}]") or r["tests"].get(f"{test}[{impl}-cpu]") for r in _SERIAL_REPORTS]
            found = [t for t in found if t and t.get("seconds") and t.get("examples")]
            label = f"throughput: {area} [{impl}] (examples/s; target >= {TARGETS[area]})"
            if not found:
                rows.append((label, "not measured"))
                continue
            rate = statistics.median(t["examples"] / t["seconds"] for t in found)
            rows.append((label, f"{rate:.0f} ({found[0]['examples']} examples, median of {len(found)} runs)"))
    return rows


def bench_scaling() -> list[tuple[str, str]]:
    import torch

    from pytest_fsdpcheck.generators.trees import build_tree, deep_chain, wide_tree
    from pytest_fsdpcheck.impls.reference import ReferenceImplementation
    from pytest_fsdpcheck.impls.torch_impl import TorchImplementation

    torch.set_num_threads(1)  # as during the suite
    rows = []
    impls = {"reference": ReferenceImplementation(), "torch": TorchImplementation()}
    for shape, make, sizes in (("wide", wide_tree, (25_000, 100_000)), ("chain", deep_chain, (25_000, 100_000))):
        times = {}
        for name, impl in impls.items():
            for n in sizes:
                tree = build_tree(make(n), impl.traversal)
                try:
                    times[(name, n)] = best_time(lambda t=tree, i=impl: i.traversal.states_with_modules(t.root), clock=time.perf_counter)
                except RecursionError:
                    times[(name, n)] = None
                del tree
        for name in impls:
            (small, t_small), (large, t_large) = sorted((n, t) for (i, n), t in times.items() if i == name)
            label = f"scaling: traversal {shape} {large:,} modules [{name}] (s; target <= 1)"
            if t_small is None or t_large is None:
                rows.append((label, "RecursionError"))
                continue
            rows.append((label, f"{t_large:.3f} (x{t_large / t_small:.2f} for x{large / small:.0f} modules)"))
        large = sizes[-1]
        if times[("torch", large)] and times[("reference", large)]:
            rows.append(
                (f"scaling: traversal {shape} {large:,}, torch / reference", f"{times[('torch', large)] / times[('reference', large)]:.2f}")
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


SECTIONS = {"idle": None, "suite": None, "throughput": bench_throughput, "scaling": bench_scaling}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", action="append", choices=list(SECTIONS), help="sections to run (default: all)")
    parser.add_argument("--repeat", type=int, default=15, help="runs per side for the idle ratio (a 2%% difference needs many)")
    parser.add_argument("--suite-repeat", type=int, default=3, help="suite runs per side (serial, -n 2)")
    args = parser.parse_args()
    import torch

    rows = [
        ("machine", f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, torch {torch.__version__}"),
    ]
    for name in args.only or list(SECTIONS):
        if name == "idle":
            rows += bench_idle(args.repeat)
        elif name == "suite":
            rows += bench_suite(args.suite_repeat)
        else:
            rows += SECTIONS[name]()
        width = max(len(k) for k, _ in rows)
    print(f"{'measure':<{width}}  value")
    print("-" * (width + 30))
    for key, value in rows:
        print(f"{key:<{width}}  {value}")


if __name__ == "__main__":
    main()
