"""Planted SPL-16 bugs: splitters whose plan disagrees with the number of
subgraphs a real compiled DDP run produces.

They wrap torch's own DDPOptimizer (so everything but the planted change is
right) and report one bucket too many or too few. Each declares the known
bugs of Dynamo's compile of DDP that SPL-16's world meets whatever the plan
(``DYNAMO_RUNTIME_BUGS``), as the reference does: those excuse nothing of a
wrong plan, whose violation stands beside them.
"""

import contextlib

from pytest_fsdpcheck.contract import BucketInfo, Implementation, SplitResult
from pytest_fsdpcheck.impls.torch_bugs import DYNAMO_RUNTIME_BUGS


class _DDPOptimizerSplitting:
    graph_form = "dynamo"

    def plan(self, gm, example_inputs, bucket_bytes_cap, first_bucket_cap, backend):
        from torch._dynamo.backends.distributed import DDPOptimizer

        optimizer = DDPOptimizer(bucket_bytes_cap, backend, first_bucket_cap)
        compiled = optimizer.compile_fn(gm, example_inputs)
        # DDPOptimizer collects each bucket's nodes walking backwards.
        buckets = [BucketInfo(nodes=[n.name for n in reversed(b.nodes)], size=b.size) for b in optimizer.buckets]
        return buckets, compiled

    def split(self, gm, example_inputs, *, bucket_bytes_cap, first_bucket_cap, backend):
        buckets, compiled = self.plan(gm, example_inputs, bucket_bytes_cap, first_bucket_cap, backend)
        return SplitResult(self.mutate(buckets), compiled)

    def mutate(self, buckets):
        return buckets


class _ExtraBucketSplitting(_DDPOptimizerSplitting):
    def mutate(self, buckets):
        return [BucketInfo(nodes=[], size=0), *buckets]


class _MissingBucketSplitting(_DDPOptimizerSplitting):
    def mutate(self, buckets):
        if len(buckets) < 2:
            return buckets
        merged = BucketInfo(nodes=buckets[0].nodes + buckets[1].nodes, size=buckets[0].size + buckets[1].size)
        return [merged, *buckets[2:]]


class Unchanged(Implementation):
    """Control: the wrapper with nothing planted must pass SPL-16."""

    name = "planted-unchanged"
    splitting = _DDPOptimizerSplitting()
    known_bugs = DYNAMO_RUNTIME_BUGS


class ExtraBucket(Implementation):
    name = "planted-extra-bucket"
    splitting = _ExtraBucketSplitting()
    known_bugs = DYNAMO_RUNTIME_BUGS


class MissingBucket(Implementation):
    name = "planted-missing-bucket"
    splitting = _MissingBucketSplitting()
    known_bugs = DYNAMO_RUNTIME_BUGS


# --- FS2-9: walks that drive a real fully_shard wrongly ------------------------------

from pytest_fsdpcheck.impls.torch_bugs import FULLY_SHARD_RUNTIME_BUGS  # noqa: E402
from pytest_fsdpcheck.reference.fsdp2 import ReferenceFsdp2  # noqa: E402


class _DropsFirstLeaf(ReferenceFsdp2):
    # Loses the first childless module of each walk: its parameters stay
    # plain tensors whose gradients are never averaged across ranks.
    def managed_modules(self, roots, ignored_params):
        got = super().managed_modules(roots, ignored_params)
        leaf = next((m for m in got if not m._modules), None)
        return [m for m in got if m is not leaf]


class _ShardsIgnored(ReferenceFsdp2):
    # Ignored parameters are sharded (and so averaged) like any other.
    def managed_states(self, modules, ignored_params):
        return super().managed_states(modules, None)


class _ParentFirst(ReferenceFsdp2):
    # Parents before children: same modules, FSDP2's order lost.
    def managed_modules(self, roots, ignored_params):
        got = super().managed_modules(roots, ignored_params)
        return got[-1:] + got[:-1]


class _DTensorsAsSharded(ReferenceFsdp2):
    # Takes a parameter that already is a DTensor for one an inner call
    # sharded: right on a 1-D mesh (FS2-9), where only fully_shard makes
    # DTensors; on a (dp, tp) mesh the tensor-parallel parameters are left
    # out of every group (FS2-15).
    def managed_states(self, modules, ignored_params):
        from pytest_fsdpcheck.runs.fsdp2_run import dtensor_class

        params, buffers = super().managed_states(modules, ignored_params)
        return [p for p in params if not isinstance(p, dtensor_class())], buffers


def _fsdp2_impl(cls, name, known_bugs=()):
    return type(name, (Implementation,), {"name": name, "known_bugs": known_bugs,
                                          "__init__": lambda self: setattr(self, "fsdp2", cls())})


# the reference's walk: it meets fully_shard's runtime bugs as the reference does
ReferenceControl = _fsdp2_impl(ReferenceFsdp2, "ReferenceControl", FULLY_SHARD_RUNTIME_BUGS)
DropsFirstLeaf = _fsdp2_impl(_DropsFirstLeaf, "DropsFirstLeaf")
ShardsIgnored = _fsdp2_impl(_ShardsIgnored, "ShardsIgnored")
ParentFirst = _fsdp2_impl(_ParentFirst, "ParentFirst")
# declares fully_shard's runtime bugs as the reference does: only its walk is wrong
DTensorsAsSharded = _fsdp2_impl(_DTensorsAsSharded, "DTensorsAsSharded", FULLY_SHARD_RUNTIME_BUGS)



class _ExtraBucketOnRankOneSplitting(_DDPOptimizerSplitting):
    # Wrong on rank 1 only, and after the training step (the plan is judged,
    # not used), so the ranks' collectives still agree: only rank 1's
    # records show it, and rank 0's verdict must include them. (A walk
    # wrong on one rank would make FSDP2's collectives disagree instead.)
    def mutate(self, buckets):
        import torch.distributed as dist

        if dist.is_initialized() and dist.get_rank() == 1:
            return [BucketInfo(nodes=[], size=0), *buckets]
        return buckets


class WrongOnRankOne(Implementation):
    name = "planted-wrong-on-rank-one"
    splitting = _ExtraBucketOnRankOneSplitting()
    known_bugs = DYNAMO_RUNTIME_BUGS


# --- SPL-20, FS2-11, EXO-9: answers that depend on the rank -------------------------
# Each reads the rank (torch.distributed.get_rank(), or RANK where torchrun
# set it) and reorders its answer on every rank but 0: the same entries, so
# the collectives and the counts still agree; only comparing the ranks'
# answers shows it.


def _rank() -> int:
    import os

    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_rank()
    return int(os.environ.get("RANK", "0"))


class _BucketNodesReversedOffRankZero(_DDPOptimizerSplitting):
    # The same buckets (count and sizes: SPL-16 still passes), each bucket's
    # nodes listed in reverse on ranks other than 0.
    def mutate(self, buckets):
        if _rank() == 0:
            return buckets
        return [BucketInfo(nodes=list(reversed(b.nodes)), size=b.size) for b in buckets]


class SplitDependsOnRank(Implementation):
    name = "planted-split-depends-on-rank"
    splitting = _BucketNodesReversedOffRankZero()
    known_bugs = DYNAMO_RUNTIME_BUGS


class _WalkRotatedOffRankZero(ReferenceFsdp2):
    # The same managed modules, rotated by the rank: each group holds the
    # same parameters (the collectives' sizes agree), in another order.
    def managed_modules(self, roots, ignored_params):
        got = super().managed_modules(roots, ignored_params)
        shift = _rank() % len(got) if got else 0
        return got[shift:] + got[:shift]


WalkDependsOnRank = _fsdp2_impl(_WalkRotatedOffRankZero, "WalkDependsOnRank")

from pytest_fsdpcheck.reference.exec_order import ReferenceExecOrder  # noqa: E402


class _ExecOrderSwappedOffRankZero(ReferenceExecOrder):
    # The first two parameters recorded swapped on ranks other than 0 (a
    # single process is rank 0: EXO-2..8 see the reference's answer).
    @contextlib.contextmanager
    def patch_tracer(self, tracer, root):
        with super().patch_tracer(tracer, root) as info:
            yield info
        if _rank() != 0 and len(info.param_forward_order) > 1:
            order = info.param_forward_order
            order[0], order[1] = order[1], order[0]


class ExecOrderDependsOnRank(Implementation):
    name = "planted-exec-order-depends-on-rank"
    exec_order = _ExecOrderSwappedOffRankZero()


# --- torch itself, in a world whose torch runtime is faulted -------------------------

from pytest_fsdpcheck.impls.torch_impl import TorchImplementation  # noqa: E402


class TorchInFaultedRuntime(TorchImplementation):
    """The ``torch`` implementation unchanged (its areas, its known bugs),
    under a name of its own: the killer of the planted-world tests, run
    beside ``torch`` in a world whose torch runtime (FSDP2's reduce-scatter,
    DDPOptimizer's compile path, the compiled step) is faulted by
    tests/planted/world/sitecustomize.py. Its column must FAIL as torch's
    does: a fault of torch's runtime that the control does not share is
    never the world's."""

    name = "torch-in-a-faulted-runtime"
