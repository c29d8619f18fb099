"""The torch adapter's seed-era branch (``_patch_tracer``/``param_exec_order``),
exercised with a stand-in module of that shape: the installed torch only has
``_ExecOrderTracer``."""

import types
from contextlib import contextmanager

import pytest

from pytest_fsdpcheck.generators.models import ModelSpec, build_model, make_tracer
from pytest_fsdpcheck.impls import torch_exec_order
from pytest_fsdpcheck.reference.exec_order import ReferenceExecOrder

pytestmark = pytest.mark.unit

SPEC = ModelSpec(
    kinds=("block", "block", "linear", "act"),
    children=((1, 3), (2,), (), ()),
    params=(("vec",), ("mat", "vec"), (), ()),
    programs=(
        (("call", 0), ("mul", 0), ("call_n", 0, 2), ("call", 1)),
        (("linear", 0), ("call", 0)),
        (),
        (),
    ),
)


def _seed_shaped_module():
    """``_init_execution_info``/``_patch_tracer`` filling seed-era fields,
    recorded by the reference."""

    def init(root):
        return types.SimpleNamespace(
            current_module=root,
            module_forward_order=[root],
            module_to_execution_infos={root: []},
            param_exec_order=[],
        )

    @contextmanager
    def patch(tracer, root, execution_info):
        with ReferenceExecOrder().patch_tracer(tracer, root) as info:
            try:
                yield
            finally:
                execution_info.module_forward_order[:] = info.module_forward_order
                execution_info.module_to_execution_infos.clear()
                execution_info.module_to_execution_infos.update(info.module_to_param_usage_infos)
                execution_info.param_exec_order[:] = info.param_forward_order

    return types.SimpleNamespace(_init_execution_info=init, _patch_tracer=patch)


@pytest.mark.parametrize("shape", ["installed", "seed-era"])
def test_adapter_normalises_to_reference(monkeypatch, shape):
    if shape == "seed-era":
        fake = _seed_shaped_module()
        monkeypatch.setattr(torch_exec_order.importlib, "import_module", lambda name: fake)
    built = build_model(SPEC)
    infos = []
    for recorder in (ReferenceExecOrder(), torch_exec_order.TorchExecOrder()):
        tracer = make_tracer(SPEC, built)
        with recorder.patch_tracer(tracer, built.root) as info:
            tracer.trace(built.root)
        infos.append(info)
    ref, got = infos
    assert [id(m) for m in got.module_forward_order] == [id(m) for m in ref.module_forward_order]
    assert [id(p) for p in got.param_forward_order] == [id(p) for p in ref.param_forward_order]
    assert {id(p) for p in got.visited_params} == {id(p) for p in ref.visited_params}
    norm = lambda usage: {  # noqa: E731
        id(m): [(id(e), [(n, id(p)) for n, p in named]) for e, named in entries]
        for m, entries in usage.items()
    }
    assert norm(got.module_to_param_usage_infos) == norm(ref.module_to_param_usage_infos)
