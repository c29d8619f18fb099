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
"""

import os

if os.environ.get("FSDPCHECK_PLANTED_WORLD") == "summing-ddp":
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    _init = DistributedDataParallel.__init__

    def _summing(state, bucket):
        return dist.all_reduce(bucket.buffer(), async_op=True).get_future().then(lambda fut: fut.value()[0])

    def _init_summing(self, *args, **kwargs):
        _init(self, *args, **kwargs)
        self.register_comm_hook(None, _summing)

    DistributedDataParallel.__init__ = _init_summing

if os.environ.get("FSDPCHECK_PLANTED_WORLD") == "one-gpu":
    import pytest_fsdpcheck.runs.world as _world

    _world.visible_gpus = lambda: 1

if os.environ.get("FSDPCHECK_PLANTED_WORLD") == "summing-fsdp2":
    from torch.distributed import ReduceOp
    from torch.distributed.fsdp._fully_shard import _fsdp_collectives

    def _sum_factors(*args, **kwargs):
        return None, None, ReduceOp.SUM, ReduceOp.SUM

    _fsdp_collectives._get_gradient_divide_factors = _sum_factors
