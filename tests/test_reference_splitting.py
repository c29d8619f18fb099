"""The reference splitter on module-form graphs (seed era) and on graphs of
20,000 nodes, judged by the same checkers as the conformance suite."""

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pytest_fsdpcheck.checks import splitting as chk
from pytest_fsdpcheck.checks import splitting_compiled as cchk
from pytest_fsdpcheck.contract import BucketInfo
from pytest_fsdpcheck.generators.graphs import build_graph, graph_specs, large_spec
from pytest_fsdpcheck.reference.splitting import ReferenceSplitting, plan

pytestmark = pytest.mark.unit


@settings(max_examples=25, deadline=None, derandomize=True, database=None, suppress_health_check=list(HealthCheck))
@given(spec=graph_specs(), cap=st.integers(1, 600))
def test_module_form_plans_conform(spec, cap):
    built = build_graph(spec, "module")
    facts = chk.graph_facts(built.gm, built.example_inputs)
    calls = []
    result = ReferenceSplitting().split(
        built.gm, built.example_inputs, bucket_bytes_cap=cap, first_bucket_cap=cap,
        backend=lambda gm, ex: calls.append((gm, ex)) or gm,
    )
    assert not chk.check_plan(facts, result.buckets, cap, cap)
    assert not chk.check_counted_once(facts, result.buckets)
    assert not chk.check_table(result.table, result.buckets, cap, facts, cap)
    meta = cchk.value_meta(built.gm, built.example_inputs)
    assert not cchk.check_backend_calls(facts, result.buckets, calls, built.gm, built.example_inputs, meta)


def test_large_graph_plan_conforms_and_is_linear():
    # the timing is not asserted (speed lives in benchmarks/); the plan must
    # conform at 20,000 nodes without recursion
    for n in (5_000, 20_000):
        built = build_graph(large_spec(n), "dynamo")
        buckets = plan(built.gm, 4096, 1024)
        facts = chk.graph_facts(built.gm, built.example_inputs)
        as_infos = [BucketInfo([n.name for n in b.nodes], b.size, b.params, b.param_ids, b.extra_ops,
                               b.size - b.size_before_extension if b.extra_ops else 0) for b in buckets]
        assert not chk.check_plan(facts, as_infos, 4096, 1024)


def test_a_misplaced_parameter_is_named_as_the_graph_names_it():
    """SPL-3 names a bucket's parameters by the graph's own labels, so two
    releases spelling them differently (torch 2.4's ``mod_weight``, later
    ``mod.weight``) give the same violation; the implementation's own
    spelling is a detail outside the violation's identity."""
    import torch
    from torch import nn

    class Two(nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = nn.Linear(2, 2), nn.Linear(2, 2)

        def forward(self, x):
            return self.b(torch.relu(self.a(x)))

    gm = torch.fx.symbolic_trace(Two())
    example = [torch.randn(1, 2)]
    facts = chk.graph_facts(gm, example)
    buckets = plan(gm, 10**9, 10**9)
    (bucket,) = buckets
    swapped = [p for p in gm.b.parameters()] + [p for p in gm.a.parameters()]

    def info(names):
        # bucket sizes stay right; its first half of parameters is swapped for another module's
        ids = [id(p) for p in swapped[:2]] + [id(p) for p in swapped[:2]]
        return [BucketInfo([n.name for n in bucket.nodes], bucket.size, names, ids, 0, 0)]

    dotted = chk.check_plan(facts, info(["b.weight", "b.bias", "b.weight", "b.bias"]), 10**9, 10**9)
    joined = chk.check_plan(facts, info(["b_weight", "b_bias", "b_weight", "b_bias"]), 10**9, 10**9)
    assert [v.invariant for v in dotted] == ["SPL-3"] and dotted == joined
    assert "it leaves out [a.weight, a.bias]" in dotted[0].message
    assert "b_weight" in joined[0].detail and "b_weight" not in joined[0].message


def _split_calls(form="dynamo"):
    from pytest_fsdpcheck.generators.graphs import GraphSpec, ModuleSpec, OpSpec

    spec = GraphSpec(4, 2, (ModuleSpec("linear"), ModuleSpec("linear")), (), 0, (OpSpec("module", 0), OpSpec("module", 1)))
    built = build_graph(spec, form)
    facts = chk.graph_facts(built.gm, built.example_inputs)
    meta = cchk.value_meta(built.gm, built.example_inputs)
    calls = []
    result = ReferenceSplitting().split(built.gm, built.example_inputs, bucket_bytes_cap=80, first_bucket_cap=80,
                                        backend=lambda gm, ex: calls.append((gm, ex)) or gm)
    return lambda: cchk.check_backend_calls(facts, result.buckets, calls, built.gm, built.example_inputs, meta), calls


def test_spl10_sees_each_piece_of_metadata_a_submodule_holds_wrongly():
    """What the planted splitters do not reach: a changed value, a source on
    a placeholder that takes an earlier bucket's value, an emptied
    ``_param_name_to_source``; the reference's copies (equal, not the same
    objects) pass."""
    judge, calls = _split_calls()
    assert not judge()
    later = calls[1][0]
    later.meta = {**later.meta, "backend_id": "another"}
    (v,) = judge()
    assert v.invariant == "SPL-10" and "backend call 1" in v.message and "other values for ['backend_id']" in v.message
    judge, calls = _split_calls()
    (taking,) = [n for n in calls[1][0].graph.nodes if n.op == "placeholder" and not n.name.startswith("l_self")]
    taking._dynamo_source = "l_x_"
    (v,) = judge()
    assert f"placeholders [{taking.name!r}], which take values computed by earlier buckets, carry" in v.message
    judge, calls = _split_calls()
    calls[0][0]._param_name_to_source = {}
    (v,) = judge()
    assert "backend call 0" in v.message and "its _param_name_to_source differs" in v.message
