"""Faults planted in the installed torch itself, for the killers that go
through torch's column.

Every path of the suite that turns a failing check into something other
than FAIL (known, declared, ERROR, n/p, a case error, a first import, a
skip at a stop, a retried example) is an excuse a real torch bug could hide
behind. The planted implementations elsewhere in ``tests/planted`` prove the
checks catch a broken *adapter*; these prove that a bug of the same shape in
*torch* still reads FAIL in the ``torch`` column, because the suite's
``torch`` implementation looks torch's private functions up at call time and
so runs whatever torch holds.

A suite run loads this module as a plugin (``-p tests.planted.torch_faults``)
and names the fault in ``FSDPCHECK_TORCH_FAULT``; the fault is planted in
``pytest_configure``, before any test runs. Without the variable it does
nothing. Each fault is a class whose ``plant()`` patches torch in this
process only (nothing installed is written).
"""

from __future__ import annotations

import os
import sys

FAULT_ENV = "FSDPCHECK_TORCH_FAULT"


def pytest_configure(config):
    name = os.environ.get(FAULT_ENV)
    if name:
        fault = globals().get(name)
        if not (isinstance(fault, type) and hasattr(fault, "plant")):
            raise SystemExit(f"{FAULT_ENV}={name!r}: no such fault in {__name__}")
        fault.plant()


class RootStatesDropLast:
    """TRV-7, next to torch 2.13's known ``trv-root-states-walk-modules``:
    ``_get_fsdp_root_states`` also loses the last root state whenever there
    are two or more. The known bug explains the walk's order, never a state
    gone missing: the cell must read FAIL, not known."""

    @staticmethod
    def plant():
        from torch.distributed.fsdp import _runtime_utils

        original = _runtime_utils._get_fsdp_root_states

        def dropping(module):
            states = list(original(module))
            return states[:-1] if len(states) > 1 else states

        _runtime_utils._get_fsdp_root_states = dropping


class RootStatesDropLastSometimes:
    """TRV-7 that shows on every other call only, as a bug depending on
    state left by the call before would: Hypothesis then fails to replay
    its example (``Flaky``) and shrinks nothing. A retried or unreplayable
    example is still torch's FAIL, never a pass or an error of the suite."""

    @staticmethod
    def plant():
        from torch.distributed.fsdp import _runtime_utils

        original = _runtime_utils._get_fsdp_root_states
        calls = [0]

        def sometimes_dropping(module):
            states = list(original(module))
            calls[0] += 1
            return states[:-1] if len(states) > 1 and calls[0] % 2 else states

        _runtime_utils._get_fsdp_root_states = sometimes_dropping


class ManagedModulesDropLast:
    """FS2-1 on a user's model: ``fully_shard``'s walk
    (``_fsdp_init._get_managed_modules``) loses the last managed module
    whenever it finds two or more. The user's case itself is sound: the
    bug is torch's cell, never the case's error."""

    @staticmethod
    def plant():
        from torch.distributed.fsdp._fully_shard import _fsdp_init

        original = _fsdp_init._get_managed_modules

        def dropping(*args, **kwargs):
            modules = list(original(*args, **kwargs))
            return modules[:-1] if len(modules) > 1 else modules

        _fsdp_init._get_managed_modules = dropping


#: the module :class:`AnnotationReimportsDynamoOff` imports again on every call
REIMPORTED = "tests.planted.torch_faults_dynamo_off"


class AnnotationReimportsDynamoOff:
    """ANN-7 through a re-import: ``_annotate_modules_for_dynamo`` drops a
    module from ``sys.modules`` and imports it again, and that module's
    import turns Dynamo off. A re-import is no library's first import: the
    change is torch's call's, a leak charged to torch (and Dynamo is on
    again for the next test), never an excused import nor an n/p."""

    @staticmethod
    def plant():
        import importlib

        from torch.distributed.fsdp import _dynamo_utils

        importlib.import_module(REIMPORTED)  # imported once before any test ran
        import torch._dynamo

        torch._dynamo.config.disable = False
        original = _dynamo_utils._annotate_modules_for_dynamo

        def reimporting(*args, **kwargs):
            sys.modules.pop(REIMPORTED, None)
            importlib.import_module(REIMPORTED)
            return original(*args, **kwargs)

        _dynamo_utils._annotate_modules_for_dynamo = reimporting


class StatesWalkQuadraticInThread:
    """TRV-8 in a helper thread: ``_get_fsdp_states_with_modules`` first
    walks the tree quadratically (a list as its visited set) in a thread it
    starts and joins. Time spent in a thread the call uses is the call's."""

    @staticmethod
    def plant():
        import threading

        from torch.distributed.fsdp import _traversal_utils

        original = _traversal_utils._get_fsdp_states_with_modules

        def quadratic(module):
            visited = []
            stack = [module]
            while stack:
                current = stack.pop()
                if current in visited:  # a list: O(n) per lookup
                    continue
                visited.append(current)
                stack.extend(current._modules.values())

        def threaded(module):
            worker = threading.Thread(target=quadratic, args=(module,))
            worker.start()
            worker.join()
            return original(module)

        _traversal_utils._get_fsdp_states_with_modules = threaded


class DynamoCompilesNothing:
    """ANN-7's probe failing on a release that provides the effect: torch's
    Dynamo turned off for the whole process (``config.disable``), so it
    captures no graph at all. The probe that decides ANN-7's n/p before any
    implementation runs then finds nothing lifted; on a release the catalog
    says has the effect that n/p is a finding strict fails on, never a
    quiet excuse."""

    @staticmethod
    def plant():
        import torch._dynamo

        torch._dynamo.config.disable = True


class AnnotationBreaksGraphs:
    """ANN-8, next to torch's known ``ann-fsdp-int-attr-symbolic``:
    ``_annotate_modules_for_dynamo`` also registers a forward pre-hook
    Dynamo cannot trace on every module it marks, so the compiled model
    breaks into a graph per module. The known bug explains int attributes
    lifted as symbolic inputs, never graphs a plain module does not compile:
    the cell must read FAIL, not known."""

    @staticmethod
    def plant():
        from torch.distributed.fsdp import _dynamo_utils

        from tests.planted.annotation import break_graph

        original = _dynamo_utils._annotate_modules_for_dynamo

        def hooking(module, ignored_modules, use_orig_params):
            original(module, ignored_modules, use_orig_params)
            for submodule in module.modules():
                if submodule not in ignored_modules:
                    submodule.register_forward_pre_hook(break_graph)

        _dynamo_utils._annotate_modules_for_dynamo = hooking


class ExecOrderTracerGone:
    """The exec-order area gone from a release that provides it:
    ``_trace_utils._ExecOrderTracer`` renamed away. The adapter then
    provides no exec order; strict fails on the n/p."""

    @staticmethod
    def plant():
        from torch.distributed.fsdp import _trace_utils

        del _trace_utils._ExecOrderTracer


class FullyShardRefusesNoReshard:
    """FS2-7 on a user's plan: torch's ``fully_shard`` raising on a call it
    takes (``reshard_after_forward=False``). A call whose arguments do not
    fit ``fully_shard`` is the plan's mistake, one case-error line; one that
    fits and still raises is torch's cell, never the case's error."""

    @staticmethod
    def plant():
        from torch.distributed.fsdp._fully_shard import _fsdp_init, _fully_shard

        original = _fsdp_init._get_post_forward_mesh_info

        def refusing(reshard_after_forward, mesh_info):
            if reshard_after_forward is False:
                raise ValueError("reshard_after_forward should be a bool or an int")
            return original(reshard_after_forward, mesh_info)

        _fsdp_init._get_post_forward_mesh_info = refusing
        if getattr(_fully_shard, "_get_post_forward_mesh_info", None) is original:
            _fully_shard._get_post_forward_mesh_info = refusing


class LastShardRowMissing:
    """FS2-10 in torch's own sharding: ``FSDPParam`` chunks dim 0 and the
    last rank holding rows gets one row fewer (an off-by-one at the end of
    an uneven dim), the padding left as it was. Only a world whose ranks
    are built (the simulated tier) sees it before a real step: torch's
    column must FAIL FS2-10, never n/p or an error of the suite."""

    @staticmethod
    def plant():
        from torch.distributed.fsdp._fully_shard import _fsdp_param

        original = _fsdp_param._chunk_with_empty

        def short_last(tensor, num_chunks, dim):
            chunks = list(original(tensor, num_chunks, dim))
            filled = [i for i, c in enumerate(chunks) if c.size(dim) > 0]
            if len(filled) > 1:
                last = filled[-1]
                chunks[last] = chunks[last].narrow(dim, 0, chunks[last].size(dim) - 1)
            return chunks

        _fsdp_param._chunk_with_empty = short_last


class DDPOptimizerHooksSeeCompile:
    """SPL-18 by release (``provided``: the caller's saved-tensors hooks
    deferred while DDPOptimizer compiles, from 2.7): the deferral gone from
    torch's ``compile_fn`` (``_disable_saved_tensors_hooks_during_tracing``
    a no-op), so the caller's pack hook sees the fake propagation through
    the buckets. On a release that provides the deferral it is torch's
    FAIL, never n/p."""

    @staticmethod
    def plant():
        import contextlib

        import torch._dynamo.utils as dynamo_utils

        dynamo_utils._disable_saved_tensors_hooks_during_tracing = contextlib.nullcontext


class DDPOptimizerDropsCompilerConfigs:
    """SPL-19 by release (``provided``: ``compile_fn``'s compiler configs,
    from 2.13): torch's per-bucket compiler (``SubmodCompiler``) drops the
    configs ``compile_fn`` hands it. On a release that provides them it is
    torch's FAIL, never n/p."""

    @staticmethod
    def plant():
        from torch._dynamo.backends import distributed

        original = distributed.SubmodCompiler.__init__

        def dropping(self, module, compiler, fake_mode, **_configs):
            original(self, module, compiler, fake_mode)

        distributed.SubmodCompiler.__init__ = dropping


class DDPOptimizerSpecializesSizes:
    """SPL-10 inside Dynamo's compile, next to the dynamic cases' n/p (a
    model Dynamo alone compiles more than once is not judged): torch's
    ``compile_fn`` reads every symbolic size it is handed as a number, so
    the graph holds for one length and Dynamo recompiles at each (the
    shape of pytorch#140229). The extra graphs are the split's, counted
    against the Dynamo-only control: torch's FAIL, never n/p."""

    @staticmethod
    def plant():
        import torch
        from torch._dynamo.backends import distributed

        original = distributed.DDPOptimizer.compile_fn

        def specializing(self, gm, example_inputs, *args, **kwargs):
            for value in example_inputs:
                if isinstance(value, torch.SymInt):
                    int(value)
            return original(self, gm, example_inputs, *args, **kwargs)

        distributed.DDPOptimizer.compile_fn = specializing


class DDPOptimizerRejectsHigherOrderOps:
    """SPL-14 next to its n/p by release: torch 2.1-2.5's DDPOptimizer
    rejected any graph with a higher-order op with a clear
    NotImplementedError, and the suite accepts that (n/p, or the rejection)
    on those releases only. The same rejection on a release that splits
    them (2.6 on) is torch's FAIL: a checkpointed model that compiled
    yesterday and is refused today."""

    @staticmethod
    def plant():
        from torch._dynamo.backends import distributed

        original = distributed.DDPOptimizer.compile_fn

        def rejecting(self, gm, example_inputs, *args, **kwargs):
            if distributed.has_higher_order_op(gm):
                raise NotImplementedError("DDPOptimizer backend: Found a higher order op in the graph. This is not "
                                          "supported. Please turn off DDP optimizer using "
                                          "torch._dynamo.config.optimize_ddp=False.")
            return original(self, gm, example_inputs, *args, **kwargs)

        distributed.DDPOptimizer.compile_fn = rejecting


def _compile_buckets_again(extra) -> None:
    """Torch's per-bucket compile (``SubmodCompiler.compile_submod``) hands
    the ``index``-th bucket of each split to the backend ``extra(index)``
    more times before its own call (those results thrown away)."""
    from torch._dynamo.backends import distributed

    original = distributed.SubmodCompiler.compile_submod

    def again(self, input_mod, args, kwargs):
        index = self.__dict__.get("_fsdpcheck_compiled", 0)
        self._fsdpcheck_compiled = index + 1
        for _ in range(extra(index)):
            self.compiler(input_mod, args, **getattr(self, "compiler_configs", {}))
        return original(self, input_mod, args, kwargs)

    distributed.SubmodCompiler.compile_submod = again


class DDPOptimizerCompilesABucketTwice:
    """SPL-10, the failure a baseline records: torch compiles the first
    bucket of each split twice ("with 2 buckets the backend should be called
    2 times, got 3"). Its worse sibling below compiles every bucket three
    times ("got 6"): the baseline written against this one must not hold it."""

    @staticmethod
    def plant():
        _compile_buckets_again(lambda index: 1 if index == 0 else 0)


class DDPOptimizerCompilesEveryBucketThrice:
    """SPL-10 grown worse than the baseline recorded: every bucket of each
    split compiled three times. The same test failing the same invariant
    with another count is a new FAIL, never the recorded one."""

    @staticmethod
    def plant():
        _compile_buckets_again(lambda index: 2)


def plant_in_this_process() -> None:
    """Plant the named fault in a process the suite spawned (FS2-9's ranks),
    where ``pytest_configure`` never ran: a fault with ``in_ranks`` is
    planted once per process. Called by ``tests.planted.plans`` as it is
    imported, which every rank does to build its case."""
    name = os.environ.get(FAULT_ENV)
    fault = globals().get(name) if name else None
    if isinstance(fault, type) and getattr(fault, "in_ranks", False) and not getattr(fault, "planted", False):
        fault.plant()


class ReduceScatterHangs:
    """FS2-9 killer of the time-out: ``fully_shard``'s post-backward
    reduction never returns (a collective waiting for a peer that never
    comes), in every rank's sharded step only. The unsharded control
    finishes in a fraction of a second, so the ranks killed at their time
    limit are torch's hang, a FAIL, never the world's ERROR."""

    in_ranks = True
    planted = False

    @classmethod
    def plant(cls):
        import time

        from torch.distributed.fsdp._fully_shard import _fsdp_param_group

        def hanging(*args, **kwargs):
            while True:
                time.sleep(1)

        _fsdp_param_group.foreach_reduce = hanging
        cls.planted = True


class ReduceScatterScalesTenPercent:
    """FS2-9 killer of the compiled tolerance (the dtypes upstream of a
    parameter, the unsharded model's own compiled noise): ``fully_shard``'s
    reduction scales every gradient by 1.1 before the reduce-scatter. On a
    model whose every gradient is computed through bf16 (the fp32 router's)
    the compiled tolerance is the widest the suite gives; ten percent is
    still beyond it, so torch's cell reads FAIL in both modes."""

    in_ranks = True
    planted = False

    @classmethod
    def plant(cls):
        from torch.distributed.fsdp._fully_shard import _fsdp_param_group

        original = _fsdp_param_group.foreach_reduce

        def scaling(fsdp_params, unsharded_grads, *args, **kwargs):
            return original(fsdp_params, [grad * 1.1 for grad in unsharded_grads], *args, **kwargs)

        _fsdp_param_group.foreach_reduce = scaling
        cls.planted = True


def _compile_once():
    """An Inductor compile that generates code (no FX graph cache to hit),
    once per process: a compile happens in the test the fault shows in, so
    only the compile's own changes can be excused there."""
    import torch
    import torch._inductor.config as inductor_config

    if getattr(_compile_once, "done", False):
        return
    _compile_once.done = True
    with inductor_config.patch(fx_graph_cache=False):
        torch.compile(lambda x: torch.relu(x) * 2)(torch.randn(3))


class RootStatesRaiseRecursionLimit:
    """A leak beside a compile: ``_get_fsdp_root_states`` compiles with
    Inductor (which may raise the recursion limit itself, excused) and then
    raises the limit further on its own, left raised. Inductor's compile-time
    state is torch's bookkeeping; torch raising the limit outside the
    compile is a leak, the test's FAIL (TRV-7 is known on 2.13: the leak
    turns it to FAIL)."""

    @staticmethod
    def plant():
        from torch.distributed.fsdp import _runtime_utils

        original = _runtime_utils._get_fsdp_root_states

        def raising(module):
            _compile_once()
            sys.setrecursionlimit(max(sys.getrecursionlimit(), 2000) + 1000)
            return original(module)

        _runtime_utils._get_fsdp_root_states = raising


class CompileLeavesFallbackRandom:
    """A leak of the very setting FS2-9's compiled step asks Inductor for
    (issue 56): ``torch.compile`` sets Inductor's process-wide
    ``fallback_random`` and leaves it set. The suite asks for it in its own
    compiles only (``compile_fx``'s ``config_patches``, as
    ``torch.compile(options=...)`` does): torch leaving it set is still
    torch's leak, never hidden by the suite's own setting nor put back by
    it (``tests/test_plan_rank_step.py``, in-process)."""

    @staticmethod
    def plant():
        import torch

        original = torch.compile

        def leaving(*args, **kwargs):
            import torch._inductor.config as inductor_config

            inductor_config.fallback_random = True
            return original(*args, **kwargs)

        torch.compile = leaving


class RootStatesLeavePoolThread:
    """A thread left beside a compile: ``_get_fsdp_root_states`` compiles
    with Inductor (whose compile thread pool is torch's, excused) and leaves
    a ``ThreadPoolExecutor`` of its own running, named as Inductor's are.
    Only Inductor's pool object is excused, never a name: a leak, FAIL."""

    @staticmethod
    def plant():
        from concurrent.futures import ThreadPoolExecutor

        from torch.distributed.fsdp import _runtime_utils

        original = _runtime_utils._get_fsdp_root_states
        pools = []

        def leaving(module):
            _compile_once()
            pool = ThreadPoolExecutor(1)
            pool.submit(int).result()
            pools.append(pool)  # kept: its worker stays alive
            return original(module)

        _runtime_utils._get_fsdp_root_states = leaving


class ForwardRaisesMixedDtype:
    """FS2-9 killer of the user's mistake (a plan whose step fails the same
    way in the unsharded control at its precision is a case error):
    ``fully_shard``'s pre-forward raises the very error a plan mixing bf16
    and fp32 gets (``mat1 and mat2 must have the same dtype``), on a sound
    bf16 plan. The unsharded control at the plan's precision runs fine, so
    the failure is torch's FS2-9 FAIL, never the case's one line."""

    in_ranks = True
    planted = False

    @classmethod
    def plant(cls):
        from torch.distributed.fsdp._fully_shard import _fsdp_state

        def raising(self, module, args, kwargs):
            raise RuntimeError("mat1 and mat2 must have the same dtype, but got BFloat16 and Float")

        _fsdp_state.FSDPState._pre_forward = raising
        cls.planted = True


class LinearRaisesInBFloat16:
    """FS2-9 killer of the user's mistake shared by the control: torch's
    own ``F.linear`` raises on bf16 inputs what a plan mixing bf16 and fp32
    gets. The unsharded control at the plan's precision fails as the
    sharded step does (they share torch's operators), so only a step the
    plan did not ask for (the model cast wholly to bf16) tells it is
    torch's: FS2-9 FAIL in torch's column, never the case's one line."""

    in_ranks = True
    planted = False

    @classmethod
    def plant(cls):
        import torch
        import torch.nn.functional as F

        linear = F.linear

        def raising(input, weight, bias=None):
            if input.dtype == torch.bfloat16:
                raise RuntimeError("mat1 and mat2 must have the same dtype, but got BFloat16 and Float")
            return linear(input, weight, bias)

        F.linear = raising
        cls.planted = True


class FrozenDtypesAsserted:
    """FS2-12, next to torch 2.3-2.7's known ``fs2-frozen-dtypes-asserted``
    (out of range on the installed torch): a group's lazy init asserts one
    original dtype over its frozen parameters too, as 2.7's
    ``_init_mp_dtypes`` did. Torch's FS2-12 must FAIL, never be known."""

    @staticmethod
    def plant():
        from torch.distributed.fsdp._fully_shard import _fsdp_param_group

        original = _fsdp_param_group.FSDPParamGroup._init_mp_dtypes

        def asserting(self):
            dtypes = {p.sharded_param.dtype for p in self.fsdp_params}
            if len(dtypes) != 1:
                raise AssertionError(f"FSDP expects uniform original parameter dtype but got {dtypes}")
            return original(self)

        _fsdp_param_group.FSDPParamGroup._init_mp_dtypes = asserting


class IntParamCast:
    """FS2-12 silently: a frozen integer parameter is all-gathered in the
    group's ``param_dtype`` (bf16), so the forward gets 256 for 257, as a
    release that reached the cast would have given it (no exception where
    the forward does not index with it: here it does, and raises)."""

    @staticmethod
    def plant():
        from torch.distributed.fsdp._fully_shard import _fsdp_param

        original = _fsdp_param.FSDPParam.init_dtype_attrs

        def casting(self, mp_policy):
            original(self, mp_policy)
            if mp_policy.param_dtype is not None and mp_policy.param_dtype != self.orig_dtype:
                self.param_dtype = mp_policy.param_dtype

        _fsdp_param.FSDPParam.init_dtype_attrs = casting


class ComposableStateKeepsModules:
    """FS2-7's lifetime, next to torch 2.3-2.5's known
    ``fs2-state-mapping-keeps-modules`` (out of range here): every module
    given a composable state is also kept in a list for the process's life,
    as 2.5's plain dict kept it. Torch's FS2-7 must FAIL."""

    kept: list = []

    @classmethod
    def plant(cls):
        from torch.distributed import _composable_state
        from torch.distributed.fsdp._fully_shard import _fsdp_state

        original = _composable_state._insert_module_state

        def keeping(module, state):
            original(module, state)
            cls.kept.append(module)

        _composable_state._insert_module_state = keeping
        _fsdp_state._insert_module_state = keeping


class GradientSyncIgnoresRecurse:
    """FS2-13: ``FSDPModule.set_requires_gradient_sync`` turns reduction off
    in every group below the module whatever ``recurse`` says (torch 2.3's
    setter, pytorch/pytorch#124318)."""

    @staticmethod
    def plant():
        from torch.distributed.fsdp._fully_shard._fully_shard import FSDPModule

        def every_group(self, requires_gradient_sync, *, recurse=True):
            for module in self.modules():
                if isinstance(module, FSDPModule):
                    for group in module._get_fsdp_state()._fsdp_param_groups:
                        group.reduce_grads = requires_gradient_sync
                        group.all_reduce_grads = requires_gradient_sync

        FSDPModule.set_requires_gradient_sync = every_group


class ReshardAfterForwardIgnored:
    """FS2-14, next to torch's known ``fs2-inplace-view-hook-dropped``: a
    group told ``reshard_after_forward=False`` reshards after its forward
    all the same. On its own a slower step; beside the dropped pre-backward
    hook, the kept case's backward reads freed storage too, with the known
    bug's very error. The known bug is the resharded case's alone: the kept
    case's cell must read FAIL."""

    @staticmethod
    def plant():
        from torch.distributed.fsdp._fully_shard import _fsdp_param_group

        def always(self):
            self._to_sharded()

        _fsdp_param_group.FSDPParamGroup.reshard = always


class NoSyncBackwardLosesGradients:
    """FS2-9 killer of the framework's accumulation: a backward run with
    gradient sync off (``set_requires_gradient_sync(False)``, every
    micro-batch but the last) loses what it computed, so the reduction
    after the last micro-batch holds that micro-batch alone. One-step
    checks never turn sync off and cannot see it; the framework's step
    (``ModelCase.micro_batches``) must FAIL it in torch's column."""

    in_ranks = True
    planted = False

    @classmethod
    def plant(cls):
        from torch.distributed.fsdp._fully_shard import _fsdp_param_group

        post_backward = _fsdp_param_group.FSDPParamGroup.post_backward

        def losing(self, *args, **kwargs):
            result = post_backward(self, *args, **kwargs)
            if not self.reduce_grads:
                for fsdp_param in self.fsdp_params:
                    fsdp_param._unsharded_param.grad = None
                    fsdp_param.unsharded_accumulated_grad = None
            return result

        _fsdp_param_group.FSDPParamGroup.post_backward = losing
        cls.planted = True


class ShardedAddcdivTwice:
    """FS2-9 killer of the framework's optimizer step: DTensor's in-place
    ``addcdiv_`` (Adam's parameter update) applies its value twice on
    sharded parameters. The gradients are right, so only a check that
    steps the framework's optimizer on the sharded parameters
    (``ModelCase.optimizer``) and compares them with the same step on plain
    tensors sees it: FS2-9 FAIL in torch's column."""

    in_ranks = True
    planted = False

    @classmethod
    def plant(cls):
        import torch

        from pytest_fsdpcheck.runs.fsdp2_run import dtensor_class

        dispatcher = dtensor_class()._op_dispatcher
        addcdiv_ = torch.ops.aten.addcdiv_.default
        if hasattr(dispatcher, "dispatch"):  # DTensor's Python dispatch (before its C++ fast path)
            dispatch = dispatcher.dispatch

            def twice(op_call, args, kwargs):
                if op_call is addcdiv_:
                    kwargs = {**kwargs, "value": kwargs.get("value", 1) * 2}
                return dispatch(op_call, args, kwargs)

            dispatcher.dispatch = twice
        else:  # the C++ fast path still hands an op with a custom handler to it
            handlers = dispatcher._custom_op_handlers

            def handled_twice(op_call, args, kwargs):
                del handlers[addcdiv_]  # the op itself, through the normal dispatch
                try:
                    return op_call(*args, **{**kwargs, "value": kwargs.get("value", 1) * 2})
                finally:
                    handlers[addcdiv_] = handled_twice

            handlers[addcdiv_] = handled_twice
        cls.planted = True


class UnusedParamsFlagIgnored:
    """FS2-9 killer of per-rank data (issue 57): FSDP2's reduce-scatter
    ignores ``set_reduce_scatter_unused_params(True)``, so where ranks'
    batches reach different parameters their reduce-scatters differ and
    the step crashes or hangs. The plan keeps what FSDP2 documents (the
    switch on, every group's module called on every rank), so this is
    torch's FS2-9 FAIL naming the parameters, never the case error a plan
    that leaves the switch off gets."""

    in_ranks = True
    planted = False

    @classmethod
    def plant(cls):
        from torch.distributed.fsdp._fully_shard import _fsdp_param_group

        post_backward = _fsdp_param_group.FSDPParamGroup.post_backward

        def ignoring(self, *args, **kwargs):
            asked, self.reduce_scatter_unused_params = self.reduce_scatter_unused_params, False
            try:
                return post_backward(self, *args, **kwargs)
            finally:
                self.reduce_scatter_unused_params = asked

        _fsdp_param_group.FSDPParamGroup.post_backward = ignoring
        cls.planted = True


class UnusedParamsGradientOnes:
    """FS2-9 killer of per-rank data (issue 57): the gradient FSDP2 reduces
    for a parameter a rank's backward did not reach, with
    ``set_reduce_scatter_unused_params(True)``, is ones, not zeros. Nothing
    crashes: a parameter some rank reached averages in a wrong term, and
    one no rank reached gets a gradient of ones, where the check allows
    only FSDP2's documented zero."""

    in_ranks = True
    planted = False

    @classmethod
    def plant(cls):
        import torch
        from torch.distributed.fsdp._fully_shard import _fsdp_param

        cls_ = _fsdp_param.FSDPParam
        cls_.unsharded_zero_grad_data = property(
            lambda self: self._get_grad_inner_tensor(torch.ones_like(self.unsharded_param)))
        cls.planted = True
