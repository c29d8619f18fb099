"""Planted implementations and user models for the checks on users' models
(issue 28 item 5): what a bucket lists, DDP-ignored marks, ignored modules.

``TorchRotated`` / ``ReferenceRotated``: torch's DDPOptimizer (declaring
torch's known bugs) and the reference, with each bucket's parameter list
handed to the next bucket (the last one's to the first), sizes as computed:
every bucket holds the right number of bytes but lists parameters it does
not hold. SPL-3 must FAIL on both; on torch no known bug may explain it.

``CountsIgnored``: the reference, except that DDP-ignored parameters count
like any other trainable one (torch's ``spl-ddp-ignored-lost-on-fake``, but
declared by nobody). ``ignored_layer`` is a user model with a DDP-ignored
layer: the bucket check on it must see the flag.

``gated``: a plan that ignores a module's own parameter while its child
stays managed; the annotation check must run with that module ignored (the
planted ``tests.planted.annotation:SkipsIgnoredSubtrees`` fails ANN-3 on it).
"""

from __future__ import annotations

import torch
from torch import nn
from torch.distributed.fsdp import fully_shard

from pytest_fsdpcheck.cases import ModelCase
from pytest_fsdpcheck.impls.reference import ReferenceImplementation
from pytest_fsdpcheck.impls.torch_bugs import TORCH_BUGS
from pytest_fsdpcheck.reference import splitting as reference_splitting

WIDTH = 8


class _RotatedLists:
    """Each bucket lists the next bucket's parameters; sizes untouched."""

    def __init__(self, inner):
        self._inner = inner
        self.graph_form = inner.graph_form
        self.graph_forms = getattr(inner, "graph_forms", (inner.graph_form,))

    def split(self, gm, example_inputs, **kwargs):
        result = self._inner.split(gm, example_inputs, **kwargs)
        buckets = result.buckets
        if len(buckets) > 1:
            lists = [(b.params, b.param_ids) for b in buckets]
            for bucket, (params, ids) in zip(buckets, lists[1:] + lists[:1], strict=True):
                bucket.params, bucket.param_ids = params, ids
        return result


class TorchRotated:
    def __init__(self):
        from pytest_fsdpcheck.impls import load_implementation

        torch_impl = load_implementation("torch")
        vars(self).update(vars(torch_impl))
        self.known_bugs = TORCH_BUGS
        self.splitting = _RotatedLists(torch_impl.splitting)


class ReferenceRotated(ReferenceImplementation):
    def __init__(self):
        super().__init__()
        self.splitting = _RotatedLists(self.splitting)


class _CountsIgnoredSplitting(reference_splitting.ReferenceSplitting):
    """The reference's plan with every ``_ddp_ignored`` flag hidden from it."""

    def split(self, gm, example_inputs, **kwargs):
        flagged = [t for t in [*gm.parameters(), *example_inputs] if getattr(t, "_ddp_ignored", False)]
        for t in flagged:
            del t._ddp_ignored
        try:
            return super().split(gm, example_inputs, **kwargs)
        finally:
            for t in flagged:
                t._ddp_ignored = True


class CountsIgnored(ReferenceImplementation):
    def __init__(self):
        super().__init__()
        self.splitting = _CountsIgnoredSplitting()


class IgnoredLayer(nn.Module):
    def __init__(self):
        super().__init__()
        self.first = nn.Linear(WIDTH, WIDTH)
        self.ignored = nn.Linear(WIDTH, WIDTH)
        self.last = nn.Linear(WIDTH, WIDTH)
        for p in self.ignored.parameters():
            p._ddp_ignored = True  # what DDP marks for params_and_buffers_to_ignore

    def forward(self, x):
        return self.last(torch.relu(self.ignored(torch.relu(self.first(x)))))


def ignored_layer():
    torch.manual_seed(0)
    return ModelCase("ignored_layer", IgnoredLayer(), (torch.randn(2, WIDTH),))


class Chain(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.Sequential(*(nn.Linear(WIDTH, WIDTH) for _ in range(4)))

    def forward(self, x):
        return self.layers(x)


def chain():
    """No parameter is DDP-ignored; about four buckets."""
    torch.manual_seed(0)
    return ModelCase("chain", Chain(), (torch.randn(2, WIDTH),))


def chain_small_first_bucket():
    """The chain's 1152 bytes with a first bucket far below the others' cap:
    DDP's assignment closes the first bucket after one layer."""
    torch.manual_seed(0)
    mib = 1024 * 1024
    return ModelCase("chain_small_first", Chain(), (torch.randn(2, WIDTH),),
                     bucket_cap_mb=384 / mib, first_bucket_cap_mb=115 / mib)


class Gated(nn.Module):
    def __init__(self):
        super().__init__()
        self.gate = nn.Parameter(torch.ones(WIDTH))
        self.proj = nn.Linear(WIDTH, WIDTH)

    def forward(self, x):
        return self.proj(x) * self.gate


class GatedNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.inp = nn.Linear(WIDTH, WIDTH)
        self.gated = Gated()

    def forward(self, x):
        return self.gated(torch.relu(self.inp(x)))


def gated_plan(model, mesh):
    fully_shard(model, mesh=mesh, ignored_params={model.gated.gate})


def gated():
    torch.manual_seed(0)
    # each rank keeping its own gate is this case's design: said so (PLN-5)
    return ModelCase("gated", GatedNet(), (torch.randn(2, WIDTH),), plan=gated_plan, unreduced=("gated.gate",))


def gated_without_ignored():
    torch.manual_seed(0)
    return ModelCase("gated_plain", GatedNet(), (torch.randn(2, WIDTH),), plan=lambda model, mesh: fully_shard(model, mesh=mesh))
