"""SPL-17 inside Dynamo's compile, the checker alone: fakes of the
compile's fake mode with the graph's symbolic sizes pass; a real tensor, a
fake of another mode, or static sizes where the graph has symbols fail,
naming the placeholder."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
symbolic_shapes = pytest.importorskip("torch.fx.experimental.symbolic_shapes")

from pytest_fsdpcheck.checks import splitting_compiled as chk  # noqa: E402

pytestmark = pytest.mark.unit


def _symbolic(mode, tensor):
    from torch._dynamo.source import ConstantSource

    # the first dimension symbolic, as Dynamo makes a length; the rest fixed
    dims = [symbolic_shapes.DimDynamic.DYNAMIC] + [symbolic_shapes.DimDynamic.STATIC] * (tensor.dim() - 1)
    context = symbolic_shapes.StatelessSymbolicContext(dynamic_sizes=dims)
    return mode.from_tensor(tensor, symbolic_context=context, source=ConstantSource("x"))


@pytest.fixture
def compile_like():
    """A captured graph whose input ``x`` is ``(s0, 4)`` in its fake mode,
    and a bucket's submodule taking ``x``."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    mode = FakeTensorMode(shape_env=symbolic_shapes.ShapeEnv())
    real = torch.randn(7, 4)
    fake = _symbolic(mode, real)
    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    x.meta["example_value"] = fake
    graph.output(graph.call_function(torch.relu, (x,)))
    gm = torch.fx.GraphModule(torch.nn.Module(), graph)
    return mode, real, fake, gm


def test_the_graphs_fakes_pass(compile_like):
    mode, real, fake, gm = compile_like
    sizes = chk.dynamo_value_sizes(gm)
    assert sizes["x"].startswith("(s") and sizes["x"].endswith(", 4)"), sizes
    assert chk.check_symbolic_example_inputs([(gm, [fake], mode)], sizes) == []


def test_a_real_tensor_fails_naming_its_sizes(compile_like):
    mode, real, fake, gm = compile_like
    [violation] = chk.check_symbolic_example_inputs([(gm, [real], mode)], chk.dynamo_value_sizes(gm))
    assert violation.invariant == "SPL-17"
    assert "x: a real tensor of sizes (7, 4) where Dynamo's graph has (s" in violation.message


def test_a_fake_of_another_mode_fails(compile_like):
    from torch._subclasses.fake_tensor import FakeTensorMode

    mode, real, fake, gm = compile_like
    other = FakeTensorMode().from_tensor(real)
    [violation] = chk.check_symbolic_example_inputs([(gm, [other], mode)], chk.dynamo_value_sizes(gm))
    assert "another fake mode" in violation.message


def test_static_sizes_in_the_right_mode_fail(compile_like):
    mode, real, fake, gm = compile_like
    static = mode.from_tensor(torch.randn(7, 4), static_shapes=True)
    [violation] = chk.check_symbolic_example_inputs([(gm, [static], mode)], chk.dynamo_value_sizes(gm))
    assert "x: sizes (7, 4) where Dynamo's graph has (s" in violation.message


def test_outside_a_compile_only_the_sizes_are_compared(compile_like):
    _, real, fake, gm = compile_like
    assert chk.check_symbolic_example_inputs([(gm, [real], None)], {"x": "(7, 4)"}) == []
    [violation] = chk.check_symbolic_example_inputs([(gm, [real], None)], {"x": "(3, 4)"})
    assert "x: sizes (7, 4) where Dynamo's graph has (3, 4)" in violation.message
