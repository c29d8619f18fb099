"""A planted world for the distributed checks, on the PYTHONPATH of a
suite run and so of every rank it starts (spawned ranks inherit the
environment). Inert unless ``FSDPCHECK_PLANTED_WORLD`` names the fault:

- ``summing-ddp``: every ``DistributedDataParallel`` all-reduces gradients
  as a sum instead of a mean, as a misbehaving backend would. The control
  (eager DDP) and the compiled run are then wrong alike, whatever the
  implementation under test.
- ``summing-fsdp2``: ``fully_shard`` reduces gradients with a sum instead
  of a mean (what ``fs2-gloo-grads-summed`` saw on torch 2.7 and 2.8), for
  whatever walk drives it: torch's own walk (the FS2-9 control) included.
- ``one-gpu``: every process is told it sees one GPU where ranks choose
  their device (issue 27's runner: two torchrun agents, one rank each, on
  a host with one GPU); nothing else believes in it.
- ``fsdp2-rs-loses-first``: ``fully_shard``'s gradient reduce-scatter input
  loses its first element on rank 1 (set to 0 after the copy-in), in eager
  and compiled steps alike (FSDP2's hooks run outside Dynamo); the gloo
  collectives themselves are fine.
- ``fsdp2-last-shard-stale``: pytorch#176076's shape: on the last rank of
  the shard dimension, a parameter whose shard is padded (a dim 0 the
  world size does not divide) has its all-gather storage split from the
  shard the optimizer updates (``FSDPParam.reset_sharded_param``, at the
  first forward's lazy init, leaves ``_sharded_param_data`` a copy): the
  gradients are right, the step lands in the shard, and every later
  forward all-gathers that rank's rows from before the step.
- ``fsdp2-frozen-latched``: pytorch#186998's shape, in fp32: what a group's
  first forward saw latched: a parameter frozen (``requires_grad`` False)
  when FSDP2's lazy init ran stays frozen to the group's backward after it
  is unfrozen: its gradient is dropped before the reduce-scatter, so its
  sharded gradient is never set and the step leaves it as it was.
- ``fsdp2-latch-fixed``: not a fault: torch 2.14's fix of pytorch#186998
  (PR 187376) put into the installed release: a group's original and
  reduce dtypes are taken from every parameter at its lazy init, not only
  from those that require grad then, so a group frozen at its first forward
  does not latch ``None``. FS2-9's mixed-precision step then runs as on a
  fixed release: what proves its control right where torch is.
- ``fsdp2-bf16-reduced``: the latch fixed as above, but the group's
  gradients are reduced in bf16 whatever its ``reduce_dtype`` (the silent
  form of pytorch#186998's report): the step runs, each mixed group's
  sharded gradient is off by bf16's rounding of the sum.
- ``fsdp2-grouped-reuse``: pytorch#183702's shape: a module of a grouped
  ``fully_shard([a, b])`` called again after the group's forward completed
  (resharded) in the same step is not unsharded again: it computes on its
  sharded parameters (the issue's "storage of size 0"; here the DTensor
  shards reach its matmul). A module called once per forward never meets it.
- ``fsdp2-tp-partials-kept``: pytorch#190626's step gone further wrong: in
  a bf16 step on a (dp, tp) mesh, a tensor-parallel parameter's ``Partial``
  gradient is never summed over tp (``FSDPParam._get_grad_inner_tensor``
  keeps each rank's own partial), so FSDP2 reduces over dp a gradient of
  the rank's rows only. fp32 steps are right.
- ``compiled-outputs-off``: torch's compiled path is faulty: every graph the
  backend compiles returns its floating outputs 1/16 too large (eager steps
  are right).
- ``ddpoptimizer-extra-subgraph`` (world size >= 2): DDPOptimizer's
  ``compile_fn`` compiles the whole graph once more after splitting it, so
  torch.compile of DDP compiles one subgraph more than there are buckets.
- ``ddpoptimizer-fails-once`` (world size >= 2): DDPOptimizer's
  ``compile_fn`` raises on its second call in a process (SPL-16's step
  through AOTAutograd), which Dynamo reports as ``BackendCompilerFailed``.
- ``ddpoptimizer-rank-dependent``: DDPOptimizer's plan depends on the rank:
  on rank 1 each bucket's node list is reversed after ``compile_fn`` (the
  compiled split is unchanged): only the ranks' plans compared (SPL-20)
  show it.
- ``broken-all-reduce``: the world itself is broken: ``all_reduce`` with a
  sum (``torch.distributed.all_reduce``, as plain collectives call it) adds
  1 to every element of the result.
- ``ranks-disagree``: the world's ranks do not draw alike: ``torch.randn``
  on rank 1 adds 1 to what it draws (the batches, FS2-9's weights).

Several faults are given separated by commas.
"""

import os

_FAULTS = set(os.environ.get("FSDPCHECK_PLANTED_WORLD", "").split(","))

if "summing-ddp" in _FAULTS:
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    _init = DistributedDataParallel.__init__

    def _summing(state, bucket):
        return dist.all_reduce(bucket.buffer(), async_op=True).get_future().then(lambda fut: fut.value()[0])

    def _init_summing(self, *args, **kwargs):
        _init(self, *args, **kwargs)
        self.register_comm_hook(None, _summing)

    DistributedDataParallel.__init__ = _init_summing

if "one-gpu" in _FAULTS:
    import pytest_fsdpcheck.runs.world as _world

    _world.visible_gpus = lambda: 1

if "summing-fsdp2" in _FAULTS:
    from torch.distributed import ReduceOp
    from torch.distributed.fsdp._fully_shard import _fsdp_collectives

    def _sum_factors(*args, **kwargs):
        return None, None, ReduceOp.SUM, ReduceOp.SUM

    _fsdp_collectives._get_gradient_divide_factors = _sum_factors

if "fsdp2-rs-loses-first" in _FAULTS:
    import torch.distributed as dist
    from torch.distributed.fsdp._fully_shard import _fsdp_collectives

    _copy_in = _fsdp_collectives.foreach_reduce_scatter_copy_in

    def _copy_in_losing_first(unsharded_grads, reduce_scatter_input, world_size):
        _copy_in(unsharded_grads, reduce_scatter_input, world_size)
        if dist.get_rank() == 1:
            reduce_scatter_input.view(-1)[0] = 0

    _fsdp_collectives.foreach_reduce_scatter_copy_in = _copy_in_losing_first

if "fsdp2-last-shard-stale" in _FAULTS:
    from torch.distributed.fsdp._fully_shard import _fsdp_param

    _reset = _fsdp_param.FSDPParam.reset_sharded_param

    def _reset_leaving_last_shard_stale(self):
        _reset(self)
        info = self.mesh_info
        if info.shard_mesh_rank == info.shard_mesh_size - 1 and tuple(self.sharded_size) != tuple(
                self.padded_sharded_param_size):
            self._sharded_param_data = self._sharded_param_data.clone()

    _fsdp_param.FSDPParam.reset_sharded_param = _reset_leaving_last_shard_stale

if _FAULTS & {"fsdp2-latch-fixed", "fsdp2-bf16-reduced"}:
    import torch
    from torch.distributed.fsdp._fully_shard import _fsdp_param_group

    _reduced_in_bf16 = "fsdp2-bf16-reduced" in _FAULTS

    def _init_mp_dtypes_from_every_param(self):
        for fsdp_param in self.fsdp_params:
            fsdp_param.init_dtype_attrs(self.mp_policy)
        params = self.fsdp_params
        self._orig_dtype = params[0].orig_dtype if params else None
        self._reduce_dtype = params[0].reduce_dtype if params else None
        if _reduced_in_bf16 and self.mp_policy.param_dtype == torch.bfloat16:
            self._reduce_dtype = torch.bfloat16

    _fsdp_param_group.FSDPParamGroup._init_mp_dtypes = _init_mp_dtypes_from_every_param

if "fsdp2-frozen-latched" in _FAULTS:
    from torch.distributed.fsdp._fully_shard import _fsdp_param_group

    _lazy_init = _fsdp_param_group.FSDPParamGroup.lazy_init
    _post_backward = _fsdp_param_group.FSDPParamGroup.post_backward

    def _lazy_init_latching_frozen(self):
        _lazy_init(self)
        if not hasattr(self, "_planted_frozen"):  # the first lazy init only
            self._planted_frozen = [p for p in self.fsdp_params if not p.sharded_param.requires_grad]

    def _post_backward_as_if_still_frozen(self, *unused):
        for fsdp_param in getattr(self, "_planted_frozen", ()):
            if hasattr(fsdp_param, "_unsharded_param"):
                fsdp_param.unsharded_param.grad = None
        return _post_backward(self, *unused)

    _fsdp_param_group.FSDPParamGroup.lazy_init = _lazy_init_latching_frozen
    _fsdp_param_group.FSDPParamGroup.post_backward = _post_backward_as_if_still_frozen

if "fsdp2-grouped-reuse" in _FAULTS:
    from torch.distributed.fsdp._fully_shard import _fsdp_param_group

    _pre_forward = _fsdp_param_group.FSDPParamGroup.pre_forward
    _post_forward = _fsdp_param_group.FSDPParamGroup.post_forward
    _pre_backward = _fsdp_param_group.FSDPParamGroup.pre_backward

    def _pre_forward_not_unsharding_a_reused_module(self, module, args, kwargs):
        if len(self.modules) > 1 and self.__dict__.get("_planted_completed"):
            self._training_state = _fsdp_param_group.TrainingState.FORWARD
            return args, kwargs  # no unshard: the parameters stay resharded (storage of size 0)
        return _pre_forward(self, module, args, kwargs)

    def _post_forward_completing(self, module, input, output):
        self._planted_completed = True  # the group's forward completed (the full post-forward runs once)
        return _post_forward(self, module, input, output)

    def _pre_backward_next_step(self, *args, **kwargs):
        self._planted_completed = False
        return _pre_backward(self, *args, **kwargs)

    _fsdp_param_group.FSDPParamGroup.pre_forward = _pre_forward_not_unsharding_a_reused_module
    _fsdp_param_group.FSDPParamGroup.post_forward = _post_forward_completing
    _fsdp_param_group.FSDPParamGroup.pre_backward = _pre_backward_next_step

if "compiled-outputs-off" in _FAULTS:
    import torch
    import torch._dynamo

    _lookup_backend = torch._dynamo.lookup_backend

    def _off(out):
        if isinstance(out, torch.Tensor) and out.is_floating_point():
            return out * (1 + 1 / 16)
        if isinstance(out, (list, tuple)):
            return type(out)(_off(o) for o in out)
        return out

    def _lookup_faulty_backend(name):
        backend = _lookup_backend(name)

        def compile_faulty(gm, example_inputs, **kwargs):
            compiled = backend(gm, example_inputs, **kwargs)
            return lambda *args: _off(compiled(*args))

        return compile_faulty

    torch._dynamo.lookup_backend = _lookup_faulty_backend

if "ddpoptimizer-extra-subgraph" in _FAULTS or "ddpoptimizer-fails-once" in _FAULTS:
    import torch.distributed as dist
    from torch._dynamo.backends import distributed as _ddp_backend

    _compile_fn = _ddp_backend.DDPOptimizer.compile_fn
    _calls = []

    def _faulty_compile_fn(self, gm, example_inputs, **kwargs):
        _calls.append(gm)
        if not dist.is_initialized() or dist.get_world_size() < 2:
            return _compile_fn(self, gm, example_inputs, **kwargs)
        if "ddpoptimizer-fails-once" in _FAULTS and len(_calls) == 2:
            raise RuntimeError("planted: DDPOptimizer.compile_fn failed on its second call")
        compiled = _compile_fn(self, gm, example_inputs, **kwargs)
        if "ddpoptimizer-extra-subgraph" in _FAULTS and len(getattr(self, "buckets", ())) > 1:
            self.backend_compile_fn(gm, example_inputs)
        return compiled

    _ddp_backend.DDPOptimizer.compile_fn = _faulty_compile_fn

if "ddpoptimizer-rank-dependent" in _FAULTS:
    import torch.distributed as dist
    from torch._dynamo.backends import distributed as _ddp_backend

    _plan_compile_fn = _ddp_backend.DDPOptimizer.compile_fn

    def _compile_fn_planning_by_rank(self, gm, example_inputs, **kwargs):
        compiled = _plan_compile_fn(self, gm, example_inputs, **kwargs)
        if dist.is_initialized() and dist.get_rank() == 1:
            for bucket in self.buckets:
                bucket.nodes.reverse()
        return compiled

    _ddp_backend.DDPOptimizer.compile_fn = _compile_fn_planning_by_rank

if "fsdp2-tp-partials-kept" in _FAULTS:
    import torch
    from torch.distributed.fsdp._fully_shard import _fsdp_param

    _inner = _fsdp_param.FSDPParam._get_grad_inner_tensor

    def _keeping_bf16_partials(self, grad):
        if self.is_dtensor and grad.dtype == torch.bfloat16 and hasattr(grad, "_local_tensor"):
            return grad._local_tensor  # this rank's own partial: the sum over tp never taken
        return _inner(self, grad)

    _fsdp_param.FSDPParam._get_grad_inner_tensor = _keeping_bf16_partials

if "broken-all-reduce" in _FAULTS:
    import torch.distributed as dist
    from torch.distributed import distributed_c10d

    _all_reduce = distributed_c10d.all_reduce

    def _all_reduce_off_by_one(tensor, op=dist.ReduceOp.SUM, group=None, async_op=False):
        work = _all_reduce(tensor, op=op, group=group, async_op=async_op)
        if work is not None:
            work.wait()
        if op == dist.ReduceOp.SUM:
            tensor.add_(1)
        return None

    dist.all_reduce = distributed_c10d.all_reduce = _all_reduce_off_by_one

if "ranks-disagree" in _FAULTS:
    import torch
    import torch.distributed as dist

    _randn = torch.randn

    def _randn_on_rank_one(*args, **kwargs):
        drawn = _randn(*args, **kwargs)
        if dist.is_available() and dist.is_initialized() and dist.get_rank() == 1:
            drawn = drawn + 1
        return drawn

    torch.randn = _randn_on_rank_one
