"""Planted models and plans for the PLN rules: a correct plan (layers
deepest first, tied modules in one call, the root last) and one plan
breaking each rule. Each plan calls ``fully_shard`` as a framework does,
through a different import path, so the recorder must catch them all."""

import torch
from torch import nn
from torch.distributed._composable.fsdp import fully_shard as composable_fully_shard
from torch.distributed.fsdp import fully_shard

from pytest_fsdpcheck.cases import ModelCase, model_factory

WIDTH = 8


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = nn.LayerNorm(WIDTH)
        self.mlp = nn.Sequential(nn.Linear(WIDTH, WIDTH), nn.ReLU(), nn.Linear(WIDTH, WIDTH))

    def forward(self, x):
        return x + self.mlp(self.norm(x))


class TinyLM(nn.Module):
    def __init__(self, depth=2, tied=True, vocab=16):
        super().__init__()
        self.embed = nn.Embedding(vocab, WIDTH)
        self.layers = nn.ModuleList(Block() for _ in range(depth))
        self.norm = nn.LayerNorm(WIDTH)
        self.lm_head = nn.Linear(WIDTH, vocab, bias=False)
        if tied:
            self.lm_head.weight = self.embed.weight

    def forward(self, tokens):
        h = self.embed(tokens)
        for layer in self.layers:
            h = layer(h)
        return self.lm_head(self.norm(h))


def good_plan(model, mesh):
    for layer in model.layers:
        fully_shard(layer, mesh=mesh)
    fully_shard([model.embed, model.lm_head], mesh=mesh)
    fully_shard(model, mesh=mesh)


def tied_split_plan(model, mesh):  # PLN-1: embed and lm_head in two groups
    for layer in model.layers:
        fully_shard(layer, mesh=mesh)
    fully_shard(model.embed, mesh=mesh)
    fully_shard(model.lm_head, mesh=mesh)
    fully_shard(model, mesh=mesh)


def shared_module_plan(model, mesh):  # PLN-2: one Linear reachable from both layers' groups
    for layer in model.layers:
        composable_fully_shard(layer, mesh=mesh)
    composable_fully_shard([model.embed, model.lm_head], mesh=mesh)
    composable_fully_shard(model, mesh=mesh)


def unsharded_root_plan(model, mesh):  # PLN-3 (the root's own modules) and PLN-4 (no root call)
    for layer in model.layers:
        fully_shard(layer, mesh=mesh)
    fully_shard([model.embed, model.lm_head], mesh=mesh)


def root_first_plan(model, mesh):  # PLN-4: the root before its layers
    fully_shard(model, mesh=mesh)
    for layer in model.layers:
        fully_shard(layer, mesh=mesh)


def _inputs():
    return (torch.randint(0, 16, (2, 5), generator=torch.Generator().manual_seed(0)),)


def _case(name, plan, **kw):
    torch.manual_seed(0)
    return ModelCase(name, TinyLM(), _inputs(), plan=plan, **kw)


def good():
    return _case("good", good_plan, fsdp1_units=("layers.0", "layers.1", ("embed", "lm_head")))


def tied_split():
    return _case("tied_split", tied_split_plan)


def shared_module():
    torch.manual_seed(0)
    model = TinyLM()
    model.layers[1].mlp[0] = model.layers[0].mlp[0]  # one Linear in both layers (no group of its own)
    return ModelCase("shared_module", model, _inputs(), plan=shared_module_plan)


def unsharded_root():
    return _case("unsharded_root", unsharded_root_plan)


def root_first():
    return _case("root_first", root_first_plan)


def plain():
    """The simplest factory: no plan, just the model and its inputs."""
    torch.manual_seed(0)
    return TinyLM(), _inputs()


@model_factory(depth=__import__("hypothesis").strategies.integers(1, 3),
               tied=__import__("hypothesis").strategies.booleans())
def drawn(depth=2, tied=True):
    torch.manual_seed(0)
    plan = good_plan if tied else untied_plan
    return ModelCase("drawn", TinyLM(depth=depth, tied=tied), _inputs(), plan=plan)


def untied_plan(model, mesh):
    for layer in model.layers:
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)


@model_factory(depth=__import__("hypothesis").strategies.integers(1, 4))
def deep_tied_split(depth=1):
    """Breaks PLN-1 only from depth 3 on: shrinking must find depth=3."""
    torch.manual_seed(0)
    return ModelCase("deep_tied_split", TinyLM(depth=depth), _inputs(),
                     plan=tied_split_plan if depth >= 3 else good_plan)



def rank_scaled_plan(model, mesh):  # FS2-9: one rank's shard of layers.1.mlp.2.weight rescaled after sharding
    good_plan(model, mesh)
    with torch.no_grad():
        model.layers[1].mlp[2].weight.to_local().mul_(1 + mesh.get_local_rank())


def rank_scaled():
    return _case("rank_scaled", rank_scaled_plan)
