"""Exec-order benchmarks (run as a script; not a timed test).

    python benchmarks/bench_exec_order.py [--examples 300]

1. Throughput of the conformance check: generated examples per second through
   a full example (build the model, patched trace, unpatched trace, eager
   oracle, all EXO-2..6 checkers), including hypothesis' generation.
2. Tracing a flat chain of 2,000 and 10,000 modules: unpatched fx, the
   reference recorder and torch's, best of 3 with the collector off.
"""

from __future__ import annotations

import argparse
import gc
import time


def best_of(fn, repeat=3):
    """Best wall and best CPU seconds of ``repeat`` runs, collector off."""
    best_wall = best_cpu = float("inf")
    for _ in range(repeat):
        gc.disable()
        try:
            start, cpu_start = time.perf_counter(), time.process_time()
            fn()
            best_wall = min(best_wall, time.perf_counter() - start)
            best_cpu = min(best_cpu, time.process_time() - cpu_start)
        finally:
            gc.enable()
    return best_wall, best_cpu


def throughput(impl_name, exec_order, n_examples):
    from hypothesis import HealthCheck, given, settings

    from pytest_fsdpcheck.checks.exec_order import (
        check_module_order,
        check_param_order,
        check_same_graph,
        check_usage_infos,
        check_visited,
        observe_eager,
    )
    from pytest_fsdpcheck.generators.models import build_model, make_tracer, model_specs

    count = [0]

    @settings(
        max_examples=n_examples,
        derandomize=True,
        database=None,
        deadline=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(spec=model_specs())
    def run(spec):
        built = build_model(spec)
        tracer = make_tracer(spec, built)
        with exec_order.patch_tracer(tracer, built.root) as info:
            graph = tracer.trace(built.root)
        plain = make_tracer(spec, built).trace(built.root)
        observed = observe_eager(built.root, built.inputs(), make_tracer(spec, built))
        violations = (
            check_module_order(built, info, observed)
            + check_param_order(built, info, observed)
            + check_usage_infos(built, info, observed)
            + check_visited(built, info)
            + check_same_graph(plain, graph)
        )
        assert not violations, violations
        count[0] += 1

    start, cpu_start = time.perf_counter(), time.process_time()
    run()
    elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu_start
    # CPU time too: on a shared machine wall time mostly measures the neighbours.
    print(
        f"throughput {impl_name:9s}: {count[0]} examples in {elapsed:.2f}s wall = {count[0] / elapsed:.0f}/s, "
        f"{cpu:.2f}s CPU = {count[0] / cpu:.0f}/s"
    )


def chain_times(impls, sizes=(2000, 10_000)):
    """``{n: {name: (best wall s, best CPU s)}}`` for tracing a chain of ``n``
    modules with plain fx and with each recorder patched in."""
    from torch import fx

    from pytest_fsdpcheck.generators.models import chain_model

    def trace(exec_order, model):
        tracer = fx.Tracer()
        if exec_order is None:
            return tracer.trace(model)
        with exec_order.patch_tracer(tracer, model):
            return tracer.trace(model)

    out = {}
    for n in sizes:
        model = chain_model(n)
        out[n] = {name: best_of(lambda e=e, m=model: trace(e, m)) for name, e in [("fx only", None), *impls]}
    return out


def chains(impls):
    for n, times in chain_times(impls).items():
        cells = ", ".join(
            f"{name} {w * 1000:.0f} ms ({c * 1000:.0f} ms CPU)" for name, (w, c) in times.items()
        )
        print(f"chain of {n:>6} modules (+root): {cells}")


def scaling_rows():
    """Rows for ``benchmarks/run.py``: tracing 2,000- and 10,000-module
    chains, each recorder against plain fx, and growth with size."""
    from pytest_fsdpcheck.impls.torch_exec_order import TorchExecOrder
    from pytest_fsdpcheck.reference.exec_order import ReferenceExecOrder

    times = chain_times([("reference", ReferenceExecOrder()), ("torch", TorchExecOrder())])
    (small, t_small), (large, t_large) = sorted(times.items())
    rows = []
    for name in t_large:
        rows.append(
            (
                f"scaling: exec order, chain of {large:,} modules [{name}] (s)",
                f"{t_large[name][0]:.3f} (x{t_large[name][0] / t_small[name][0]:.2f} for x{large / small:.0f} modules; "
                f"{small:,}: {t_small[name][0]:.3f})",
            )
        )
    rows.append(
        (
            f"scaling: exec order, chain of {large:,}, torch / reference",
            f"{t_large['torch'][0] / t_large['reference'][0]:.2f} (overhead over fx alone: reference "
            f"x{t_large['reference'][0] / t_large['fx only'][0]:.2f}, torch x{t_large['torch'][0] / t_large['fx only'][0]:.2f})",
        )
    )
    return rows


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--examples", type=int, default=300)
    args = parser.parse_args()
    from pytest_fsdpcheck.impls.torch_exec_order import TorchExecOrder
    from pytest_fsdpcheck.reference.exec_order import ReferenceExecOrder

    impls = [("reference", ReferenceExecOrder()), ("torch", TorchExecOrder())]
    throughput("warm-up", impls[0][1], 5)
    for name, exec_order in impls:
        throughput(name, exec_order, args.examples)
    chains(impls)


if __name__ == "__main__":
    main()
