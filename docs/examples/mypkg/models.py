import hypothesis.strategies as st
import torch

try:
    from torch.distributed.fsdp import fully_shard
except ImportError:  # torch 2.3 and 2.4 (the recipe's oldest jobs) keep it in the composable package
    from torch.distributed._composable.fsdp import fully_shard

from pytest_fsdpcheck.cases import ModelCase, model_factory

from .layers import TinyLM


def plan(model, mesh):  # exactly what the framework does
    for layer in model.layers:
        fully_shard(layer, mesh=mesh)
    fully_shard([model.embed, model.lm_head], mesh=mesh)  # tied: one group
    fully_shard(model, mesh=mesh)


@model_factory(depth=st.integers(1, 4), tied=st.booleans())  # drawn and shrunk
def make(depth=2, tied=True):
    model = TinyLM(depth, tied)
    return ModelCase("tiny-lm", model, (torch.randint(0, 16, (2, 5)),), plan=plan,
                     fsdp1_units=tuple(f"layers.{i}" for i in range(depth)), bucket_cap_mb=0.01)


def make_plain():
    """The simplest factory: no arguments, `(model, example_inputs)`."""
    return TinyLM(depth=2, tied=False), (torch.randint(0, 16, (2, 5)),)
