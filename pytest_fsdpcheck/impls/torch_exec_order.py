"""The installed torch's exec-order tracer, adapted to ``contract.ExecInfo``.

Two shapes exist, looked up at call time (so a patched torch is what runs):

- torch >= 2.0: ``_trace_utils._ExecOrderTracer().patch_tracer(tracer, root)``
  fills ``.exec_info`` (``module_forward_order``, ``module_to_param_usage_infos``
  of ``_ParamUsageInfo(module, named_params)``, ``param_forward_order``,
  ``visited_params``);
- the seed era: ``_patch_tracer(tracer, root, _init_execution_info(root))``
  fills ``module_to_execution_infos`` and ``param_exec_order`` (no visited set:
  it is the set of the ordered parameters).

The yielded ``ExecInfo`` is filled from torch's object when the block exits
(normally or not); torch's own context manager does the patching and the
restoring, so EXO-1 observes torch's behaviour, not ours.
"""

from __future__ import annotations

import importlib
from contextlib import contextmanager

from ..contract import ExecInfo


def _normalise(target: ExecInfo, module_order, usage, param_order, visited) -> None:
    target.module_forward_order = list(module_order)
    target.module_to_param_usage_infos = {
        module: [(entry[0], list(entry[1])) for entry in entries]
        for module, entries in usage.items()
    }
    target.param_forward_order = list(param_order)
    target.visited_params = set(visited)


class TorchExecOrder:
    @contextmanager
    def patch_tracer(self, tracer, root):
        utils = importlib.import_module("torch.distributed.fsdp._trace_utils")
        info = ExecInfo()
        if hasattr(utils, "_ExecOrderTracer"):
            recorder = utils._ExecOrderTracer()
            try:
                with recorder.patch_tracer(tracer, root):
                    yield info
            finally:
                got = recorder.exec_info
                if got is not None:
                    _normalise(
                        info,
                        got.module_forward_order,
                        got.module_to_param_usage_infos,
                        got.param_forward_order,
                        got.visited_params,
                    )
        else:
            seed_info = utils._init_execution_info(root)
            try:
                with utils._patch_tracer(tracer, root, seed_info):
                    yield info
            finally:
                _normalise(
                    info,
                    seed_info.module_forward_order,
                    seed_info.module_to_execution_infos,
                    seed_info.param_exec_order,
                    seed_info.param_exec_order,
                )
