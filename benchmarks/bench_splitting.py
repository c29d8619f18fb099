"""Splitting throughput: examples per second of the conformance work per
example (build graph, split + compile through a recording backend, plan
checks, outputs and gradients of original and split module), per
implementation; and bucket planning / the full split on 50,000-node graphs (growth 25k-100k),
reference vs torch (``scaling_rows``, also printed by ``benchmarks/run.py``).

    python benchmarks/bench_splitting.py [n_examples]
"""

import sys
import time

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pytest_fsdpcheck.checks import splitting as chk
from pytest_fsdpcheck.checks import splitting_compiled as cchk
from pytest_fsdpcheck.checks.growth import best_time
from pytest_fsdpcheck.generators.graphs import build_graph, graph_specs, large_spec


def specs(n):
    found = []

    @settings(max_examples=n, derandomize=True, database=None, deadline=None, suppress_health_check=list(HealthCheck))
    @given(graph_specs(), st.integers(1, 600))
    def collect(spec, cap):
        found.append((spec, cap))

    collect()
    return found


def one_example(impl, spec, cap):
    built = build_graph(spec, impl.graph_form)
    facts = chk.graph_facts(built.gm, built.example_inputs)
    meta = cchk.value_meta(built.gm, built.example_inputs)
    wrt = [t for t in built.example_inputs if getattr(t, "requires_grad", False)]
    expected = cchk.evaluate(built.gm, built.example_inputs, wrt)
    calls = []
    result = impl.split(built.gm, built.example_inputs, bucket_bytes_cap=cap, first_bucket_cap=cap,
                        backend=lambda gm, ex: calls.append((gm, ex)) or gm)
    chk.check_plan(facts, result.buckets, cap, cap)
    cchk.check_backend_calls(facts, result.buckets, calls, built.gm, built.example_inputs, meta)
    cchk.compare(expected, cchk.evaluate(result.compiled, built.example_inputs, wrt), "split", "SPL-11")
    return len(result.buckets)


class _Planned(Exception):
    pass


def torch_plan(gm, example_inputs, cap, first):
    """torch's bucket planning alone: ``DDPOptimizer.compile_fn`` stopped where
    it logs the finished plan, before split_module and the per-bucket compiles."""
    import importlib

    mod = importlib.import_module("torch._dynamo.backends.distributed")
    optimizer = mod.DDPOptimizer(cap, lambda g, e: g, first_bucket_cap=first)
    original = mod.pretty_print_buckets

    def stop(*_args, **_kwargs):
        raise _Planned

    mod.pretty_print_buckets = stop
    try:
        optimizer.compile_fn(gm, list(example_inputs))
    except _Planned:
        return optimizer.buckets
    finally:
        mod.pretty_print_buckets = original
    raise RuntimeError("compile_fn returned without reaching its bucket table")


def scaling_rows(sizes=(25_000, 50_000, 100_000), cap=4096, first=1024, at=50_000):
    """Rows for ``benchmarks/run.py``: bucket planning and the full split on
    large Dynamo-form graphs, reference vs torch, and growth with size."""
    import torch

    from pytest_fsdpcheck.impls.torch_splitting import TorchSplitting
    from pytest_fsdpcheck.reference.splitting import ReferenceSplitting, plan

    torch.set_num_threads(1)  # as during the suite
    graphs = {n: build_graph(large_spec(n), "dynamo") for n in sizes}
    nodes = {n: len(g.gm.graph.nodes) for n, g in graphs.items()}
    plan_times = {
        "reference": {n: best_time(lambda g=g: plan(g.gm, cap, first), clock=time.perf_counter) for n, g in graphs.items()},
        "torch": {n: best_time(lambda g=g: torch_plan(g.gm, g.example_inputs, cap, first), clock=time.perf_counter) for n, g in graphs.items()},
    }
    buckets = {n: len(plan(g.gm, cap, first)) for n, g in graphs.items()}
    for g in graphs.values():
        assert [len(b.nodes) for b in torch_plan(g.gm, g.example_inputs, cap, first)] == [
            len(b.nodes) for b in plan(g.gm, cap, first)
        ], "reference and torch plans differ on the benchmark graph"
    # below ~20,000 nodes the graph fits in cache and per-node cost is lower,
    # which would read as super-linear growth; grow from 25,000 instead
    small, large = sizes[0], sizes[-1]
    rows = []
    for name, times in plan_times.items():
        rows.append(
            (
                f"scaling: bucket plan {nodes[at]:,} nodes, {buckets[at]} buckets [{name}] (s)",
                f"{times[at]:.3f} (x{times[large] / times[small]:.2f} from {nodes[small]:,} to {nodes[large]:,} nodes)",
            )
        )
    rows.append(
        (
            f"scaling: bucket plan {nodes[at]:,} nodes, torch / reference",
            f"{plan_times['torch'][at] / plan_times['reference'][at]:.2f}",
        )
    )
    g = graphs[at]
    for name, impl in (("reference", ReferenceSplitting()), ("torch", TorchSplitting())):
        def full(impl=impl):
            impl.split(g.gm, g.example_inputs, bucket_bytes_cap=cap, first_bucket_cap=first, backend=lambda gm, ex: gm)

        rows.append((f"scaling: plan + split + compile {nodes[at]:,} nodes [{name}] (s)", f"{best_time(full, 1, clock=time.perf_counter):.2f}"))
    return rows


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 200
    examples = specs(n)
    from pytest_fsdpcheck.impls.torch_splitting import TorchSplitting
    from pytest_fsdpcheck.reference.splitting import ReferenceSplitting

    for name, impl in (("torch", TorchSplitting()), ("reference", ReferenceSplitting())):
        one_example(impl, *examples[0])  # warm-up
        start = time.perf_counter()
        buckets = [one_example(impl, spec, cap) for spec, cap in examples]
        elapsed = time.perf_counter() - start
        split = sum(1 for k in buckets if k > 1)
        print(f"{name:10s} {len(examples) / elapsed:7.1f} examples/s  ({len(examples)} examples, {split} split into >1 bucket, {elapsed:.2f} s)")

    for key, value in scaling_rows():
        print(f"{key}: {value}")


if __name__ == "__main__":
    main()
