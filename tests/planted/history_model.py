"""A tied model whose plan runs on every release with FSDP2 (2.3+), for the
per-model history: the known bugs it meets change with the release."""

import torch
from torch import nn

try:
    from torch.distributed.fsdp import fully_shard
except ImportError:  # before 2.6 FSDP2 is only under _composable
    from torch.distributed._composable.fsdp import fully_shard

from pytest_fsdpcheck.cases import ModelCase

WIDTH = 8


class TiedLM(nn.Module):
    def __init__(self, vocab=16):
        super().__init__()
        self.embed = nn.Embedding(vocab, WIDTH)
        self.layers = nn.ModuleList(nn.Sequential(nn.Linear(WIDTH, WIDTH), nn.ReLU()) for _ in range(2))
        self.lm_head = nn.Linear(WIDTH, vocab, bias=False)
        self.lm_head.weight = self.embed.weight

    def forward(self, tokens):
        h = self.embed(tokens)
        for layer in self.layers:
            h = layer(h)
        return self.lm_head(h)


def plan(model, mesh):
    # one module per call (several-module calls came with 2.5); the tied
    # pair stays in the root's group
    for layer in model.layers:
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)


def make():
    return ModelCase("tied-lm", TiedLM(), (torch.randint(0, 16, (2, 5)),), plan=plan)
