"""A users' model whose plan compiles: each block compiled on its own
(torchtitan's pattern) and the model run once before sharding, as a
framework warming up would, so Inductor compiles inside the users'-model
test that runs the plan (PLN-1..4's, FS2-7's). Correct: every check passes
for torch, whichever of those tests compiles first in the process."""

import torch

from pytest_fsdpcheck.cases import ModelCase
from tests.planted.plans import TinyLM, _inputs, good_plan


def warming_plan(model, mesh):
    model(*_inputs()).sum().backward()
    model.zero_grad(set_to_none=True)
    good_plan(model, mesh)


def compiled_and_warmed():
    torch.manual_seed(0)
    model = TinyLM()
    for i, layer in enumerate(model.layers):
        model.layers[i] = torch.compile(layer)
    return ModelCase("compiled_and_warmed", model, _inputs(), plan=warming_plan)
