"""Adapter for torch's DDPOptimizer (``torch._dynamo.backends.distributed``).

The module and class are looked up on every call, so a patched or forked
torch is what gets checked. torch >= 2.4 consumes Dynamo-form graphs
(parameters lifted to placeholders); the seed era (2.3) module-form graphs.
``graph_forms`` lists every form ``compile_fn`` has code for, by release
(``provided.PROVIDED_FROM``): both from 2.4 on.
"""

from __future__ import annotations

import importlib
import logging

from ..contract import BucketInfo, SplitResult

MODULE = "torch._dynamo.backends.distributed"


class _Collect(logging.Handler):
    def __init__(self):
        super().__init__(level=logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record):
        self.lines.extend(record.getMessage().strip("\n").splitlines())


class TorchSplitting:
    def __init__(self):
        # Dynamo lifts parameters to placeholders from torch 2.5 on, and that
        # is when DDPOptimizer learnt to count placeholder arguments: below
        # it, the graphs it is handed are module form.
        from ..core.provided import expected_provided, installed_torch

        importlib.import_module(MODULE).DDPOptimizer  # noqa: B018 - the area needs the class
        self.graph_forms = _forms_handled(installed_torch())
        self.graph_form = self.graph_forms[0]
        # compile_fn's second path, taken with optimize_ddp_lazy_compile on
        # (an opt-in): by release, like the forms
        self.lazy_compile = _lazy_path_provided(installed_torch())
        # whether the log states the bucket count outside its tables (which
        # need tabulate): by release too
        self.logs_bucket_count = _count_logged(installed_torch())
        # compile_fn's **compiler_configs, handed on to each bucket's
        # compile: by release too
        self.compiler_configs = _configs_forwarded(installed_torch())
        # whether the caller's saved-tensors hooks are kept from the
        # per-bucket pass (SPL-18): by release too
        self.defers_saved_tensors_hooks = expected_provided("splitting.saved_tensors_hooks_deferred", installed_torch())
        # whether a graph with a higher-order op is split, not rejected with
        # NotImplementedError (SPL-14): by release too
        self.splits_higher_order_ops = expected_provided("splitting.splits_higher_order_ops", installed_torch())

    def split(self, gm, example_inputs, *, bucket_bytes_cap, first_bucket_cap, backend, lazy_compile=False,
              compiler_configs=None):
        import torch._dynamo.config as dynamo_config

        mod = importlib.import_module(MODULE)
        if lazy_compile and not self.lazy_compile:
            raise ValueError("lazy_compile: this torch release's DDPOptimizer has no lazy compile path")
        if lazy_compile and not (hasattr(dynamo_config, "optimize_ddp_lazy_compile") and hasattr(mod, "SubmoduleReplacer")):
            # the table says this release has the path: its absence is a finding
            raise RuntimeError(
                "DDPOptimizer's lazy compile path (torch._dynamo.config.optimize_ddp_lazy_compile, "
                f"{MODULE}.SubmoduleReplacer) is recorded for this torch release but was not found"
            )
        if compiler_configs and not self.compiler_configs:
            raise ValueError("compiler_configs: this torch release's DDPOptimizer.compile_fn takes no compiler configs")
        optimizer = mod.DDPOptimizer(bucket_bytes_cap, backend, first_bucket_cap=first_bucket_cap)
        handler = _Collect()
        logger = getattr(mod, "log", None) or logging.getLogger(MODULE)
        # The table is logged at DEBUG; only our handler sees it (no
        # propagation), and the graph-dump artifact logger below stays quiet:
        # rendering every graph costs more than the split.
        graph_logger = getattr(mod, "ddp_graph_log", None)
        saved = (logger.level, logger.propagate, graph_logger.level if graph_logger else None, logger.handlers)
        logger.handlers = [handler]
        logger.setLevel(logging.DEBUG)
        logger.propagate = False
        if graph_logger is not None:
            graph_logger.setLevel(logging.INFO)
        # Releases with the lazy path defer each submodule's compile to its
        # first run when asked to; by default compile eagerly so the backend
        # calls (SPL-10) happen inside the split. With lazy_compile they happen
        # at the split module's first call.
        had_lazy = hasattr(dynamo_config, "optimize_ddp_lazy_compile")
        old_lazy = getattr(dynamo_config, "optimize_ddp_lazy_compile", None)
        try:
            if had_lazy:
                dynamo_config.optimize_ddp_lazy_compile = bool(lazy_compile)
            compiled = optimizer.compile_fn(gm, list(example_inputs), **(compiler_configs or {}))
        finally:
            if had_lazy:
                dynamo_config.optimize_ddp_lazy_compile = old_lazy
            logger.handlers = saved[3]
            logger.setLevel(saved[0])
            logger.propagate = saved[1]
            if graph_logger is not None:
                graph_logger.setLevel(saved[2])
        return SplitResult(_buckets(optimizer.buckets), compiled, _table(handler.lines))


def _forms_handled(version) -> tuple[str, ...]:
    """The forms ``compile_fn`` has code for, by release (``provided``):
    Dynamo form needs placeholder arguments counted (``add_param_args``,
    torch >= 2.4); module form needs the ``call_module`` and ``get_attr``
    branches, still there long after Dynamo stopped producing that form by
    default (a fork, a direct caller, or ``inline_inbuilt_nn_modules=False``
    reach them). Decided by the version, not by reading torch's source: a
    release that dropped a form's code fails that form's checks, visibly,
    rather than making them n/p."""
    from ..core.provided import expected_provided

    return tuple(form for form in ("dynamo", "module") if expected_provided(f"splitting.{form}_form", version))


def _count_logged(version) -> bool:
    from ..core.provided import expected_provided

    return expected_provided("splitting.log_bucket_count", version)


def _configs_forwarded(version) -> bool:
    from ..core.provided import expected_provided

    return expected_provided("splitting.compiler_configs", version)


def _lazy_path_provided(version) -> bool:
    from ..core.provided import expected_provided

    return expected_provided("splitting.lazy_compile", version)


def _buckets(buckets) -> list[BucketInfo]:
    # torch keeps buckets in graph order but each bucket's nodes backwards
    # (they are collected walking from the last node).
    infos = []
    for b in buckets:
        # torch < 2.1 never extends a bucket, and its Bucket has no such fields
        extra_ops = getattr(b, "opcount_increased_to_capture_external_output", 0)
        infos.append(
            BucketInfo(
                nodes=[n.name for n in reversed(b.nodes)],
                size=b.size,
                params=list(b.params),
                param_ids=list(b.param_ids),
                extra_ops=extra_ops,
                extra_bytes=b.size - getattr(b, "paramsize_before_opcount_increase", 0) if extra_ops else 0,
            )
        )
    return infos


def _table(lines: list[str]) -> list[str]:
    # the per-node debug lines of the submodule compiler are not the table
    return [line for line in lines if not line.startswith("run_node ")]
