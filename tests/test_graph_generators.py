"""The synthesized Dynamo-form graphs are what Dynamo itself produces, the
generated graphs are valid and run forward and backward, and the size knob
reaches 20,000 nodes."""

import pytest
import torch
from hypothesis import HealthCheck, given, settings

from pytest_fsdpcheck.generators.graphs import (
    GraphSpec,
    ModuleSpec,
    OpSpec,
    ParamSpec,
    build_graph,
    graph_specs,
    large_spec,
)

pytestmark = pytest.mark.unit

FEATURES = GraphSpec(
    width=4,
    batch=3,
    modules=(
        ModuleSpec("linear"),
        ModuleSpec("norm", frozen=True),
        ModuleSpec("conv", ignored=True),
        ModuleSpec("embedding"),
        ModuleSpec("linear", tied_to=0),
    ),
    params=(ParamSpec("matrix"), ParamSpec("vector", "float64"), ParamSpec("vector", "bfloat16", frozen=True)),
    buffers=1,
    ops=(
        OpSpec("act"),
        OpSpec("mutate"),
        OpSpec("module", 0),
        OpSpec("module", 1),
        OpSpec("param", 1),
        OpSpec("param", 2, method=True),
        OpSpec("module", 2),
        OpSpec("module", 3),
        OpSpec("buffer", 0),
        OpSpec("skip", 2),
        OpSpec("accum", 0),
        OpSpec("module", 4),
        OpSpec("module", 0),
        OpSpec("param", 0),
    ),
    outputs=(3, 9),
)
CHAIN = GraphSpec(8, 2, tuple(ModuleSpec("linear") for _ in range(3)), (), 0, (OpSpec("module", 0), OpSpec("act"), OpSpec("module", 1), OpSpec("module", 2)))
PREAMBLE = GraphSpec(4, 1, (ModuleSpec("norm"),), (ParamSpec("vector"),), 0, (OpSpec("skip", 0), OpSpec("act"), OpSpec("module", 0), OpSpec("param", 0)))
# the fixed cases' dropped parameter reads (conformance SPLIT_CASES' extended-by-*): kept by a real capture
SCRATCH = GraphSpec(4, 2, (ModuleSpec("linear"),), (ParamSpec("matrix"), ParamSpec("matrix")), 0, (OpSpec("module", 0), OpSpec("scratch", 0), OpSpec("scratch", 1)))
# the fixed case module-output-as-method-argument's `x.add(h)`: a method call on the input, taking a module's output
METHOD_SKIP = GraphSpec(4, 2, (ModuleSpec("linear"), ModuleSpec("linear")), (), 0,
                        (OpSpec("module", 0), OpSpec("module", 1), OpSpec("skip", 0, method=True)))

# each non-contiguous layout of `h` (column-major, broadcast, strided slice) between modules
LAYOUTS = GraphSpec(4, 3, (ModuleSpec("linear"), ModuleSpec("linear"), ModuleSpec("norm")), (), 0,
                    (OpSpec("module", 0), OpSpec("layout", 0), OpSpec("module", 1), OpSpec("layout", 1),
                     OpSpec("module", 2), OpSpec("layout", 2)))


def canonical(gm, example_inputs):
    """Placeholders as the identity of the tensor passed for them; every other
    node as (op, target, args with nodes replaced by their canonical keys)."""
    keys, ops = {}, []
    inputs = iter(example_inputs)
    for node in gm.graph.nodes:
        if node.op == "placeholder":
            keys[node] = ("input", id(next(inputs)))
            continue
        args = torch.fx.node.map_arg((node.args, node.kwargs), lambda n: keys[n])
        target = node.target if node.op != "get_attr" else "<attr>"
        keys[node] = ("node", len(ops))
        ops.append((node.op, target, args))
    return sorted(k[1] for k in keys.values() if k[0] == "input"), ops


def dynamo_capture(built):
    torch._dynamo.reset()
    captured = {}

    def backend(gm, example_inputs):
        captured["gm"], captured["inputs"] = gm, example_inputs
        return gm.forward

    torch.compile(built.module, backend=backend, fullgraph=True)(*built.inputs)
    return captured["gm"], captured["inputs"]


@pytest.mark.parametrize("spec", [FEATURES, CHAIN, PREAMBLE, SCRATCH, METHOD_SKIP, LAYOUTS],
                         ids=["features", "chain", "preamble", "scratch", "method-skip", "layouts"])
def test_synthesized_dynamo_graph_matches_real_capture(spec):
    built = build_graph(spec, "dynamo")
    real_gm, real_inputs = dynamo_capture(built)
    real_placeholders, real_ops = canonical(real_gm, real_inputs)
    ours_placeholders, ours_ops = canonical(built.gm, built.example_inputs)
    assert ours_placeholders == real_placeholders
    assert ours_ops == real_ops
    real = {id(t): n for n, t in zip(real_gm.graph.find_nodes(op="placeholder"), real_inputs, strict=False)}
    for node, tensor in zip(built.gm.graph.find_nodes(op="placeholder"), built.example_inputs, strict=False):
        twin = real[id(tensor)]
        ours, theirs = node.meta["example_value"], twin.meta["example_value"]
        assert ours is tensor
        assert (ours.shape, ours.dtype, ours.requires_grad) == (theirs.shape, theirs.dtype, theirs.requires_grad)
        assert isinstance(ours, torch.nn.Parameter) == isinstance(theirs, torch.nn.Parameter)
        assert hasattr(node, "_dynamo_source") and hasattr(twin, "_dynamo_source")
    _assert_metadata_like_capture(built.gm, real_gm)


def _assert_metadata_like_capture(ours, real):
    """The graph-level metadata a backend reads (SPL-10 demands the split
    submodules carry it): every key the capture's ``meta`` has, the flat
    parameter names mapped as it maps them and the ids of the same types;
    ``_param_name_to_source`` names what the capture's names, with sources."""
    from torch._guards import Source

    assert set(real.meta) <= set(ours.meta), (sorted(real.meta), sorted(ours.meta))
    assert ours.meta["dynamo_flat_name_to_original_fqn"] == real.meta["dynamo_flat_name_to_original_fqn"]
    for key in set(real.meta) - {"dynamo_flat_name_to_original_fqn"}:
        assert type(ours.meta[key]) is type(real.meta[key]), key
    assert ours._param_name_to_source and set(ours._param_name_to_source) <= set(real._param_name_to_source)
    assert all(isinstance(s, Source) for s in ours._param_name_to_source.values())


@settings(max_examples=60, deadline=None, derandomize=True, database=None, suppress_health_check=list(HealthCheck))
@given(spec=graph_specs(hop=True))
def test_generated_graphs_are_valid_and_run(spec):
    for form in ("dynamo", "module"):
        if form == "module" and spec.has_hop:
            continue
        built = build_graph(spec, form)
        built.gm.graph.lint()
        got = built.gm(*built.example_inputs)
        want = built.module(*built.inputs)
        assert all(torch.equal(a, b) for a, b in zip(got, want, strict=False))
        sum(o.float().sum() for o in got).backward()


def test_module_form_uses_call_module_and_get_attr():
    built = build_graph(FEATURES, "module")
    ops = {n.op for n in built.gm.graph.nodes}
    assert {"call_module", "get_attr"} <= ops
    assert not any(n.op == "placeholder" and n.target.startswith("l_self") for n in built.gm.graph.nodes)
    # the graph-level metadata is the Dynamo form's (Dynamo set it on module-form graphs too)
    assert built.gm.meta == build_graph(FEATURES, "dynamo").gm.meta
    assert built.gm._param_name_to_source == build_graph(FEATURES, "dynamo").gm._param_name_to_source


def test_large_graph_has_20000_nodes():
    built = build_graph(large_spec(20_000), "dynamo")
    assert len(built.gm.graph.nodes) >= 20_000
    built.gm.graph.lint()
