"""Splitting throughput: examples per second of the conformance work per
example (build graph, split + compile through a recording backend, plan
checks, outputs and gradients of original and split module), per
implementation; and the reference planner on a 20,000-node graph.

    python benchmarks/bench_splitting.py [n_examples]
"""

import sys
import time

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pytest_fsdpcheck.checks import splitting as chk
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
    meta = chk.value_meta(built.gm, built.example_inputs)
    wrt = [t for t in built.example_inputs if getattr(t, "requires_grad", False)]
    expected = chk.evaluate(built.gm, built.example_inputs, wrt)
    calls = []
    result = impl.split(built.gm, built.example_inputs, bucket_bytes_cap=cap, first_bucket_cap=cap,
                        backend=lambda gm, ex: calls.append((gm, ex)) or gm)
    chk.check_plan(facts, result.buckets, cap, cap)
    chk.check_backend_calls(facts, result.buckets, calls, built.gm, built.example_inputs, meta)
    chk.compare(expected, chk.evaluate(result.compiled, built.example_inputs, wrt), "split", "SPL-11")
    return len(result.buckets)


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 200
    examples = specs(n)
    from pytest_fsdpcheck.impls.torch_splitting import TorchSplitting
    from pytest_fsdpcheck.reference.splitting import ReferenceSplitting, plan

    for name, impl in (("torch", TorchSplitting()), ("reference", ReferenceSplitting())):
        one_example(impl, *examples[0])  # warm-up
        start = time.perf_counter()
        buckets = [one_example(impl, spec, cap) for spec, cap in examples]
        elapsed = time.perf_counter() - start
        split = sum(1 for k in buckets if k > 1)
        print(f"{name:10s} {len(examples) / elapsed:7.1f} examples/s  ({len(examples)} examples, {split} split into >1 bucket, {elapsed:.2f} s)")

    for n_nodes in (5_000, 20_000):
        built = build_graph(large_spec(n_nodes), "dynamo")
        start = time.perf_counter()
        buckets = plan(built.gm, 4096, 1024)
        print(f"reference plan, {len(built.gm.graph.nodes)} nodes: {time.perf_counter() - start:.3f} s, {len(buckets)} buckets")


if __name__ == "__main__":
    main()
