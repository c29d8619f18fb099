"""Dynamo x FSDP: under torch.compile(dynamic=True), an integer attribute of
an FSDP-managed module becomes a symbolic graph input, where the same
attribute of a plain module is a constant.

Upstream: https://github.com/pytorch/pytorch/pull/194795 ("[dynamo]
Statically specialize int/tuple attrs of FSDP-managed modules under
skip_fsdp_guards", open, opened 2026-08-25). No separate issue was found;
the PR quotes the report (Flux2 training: 8644 symbolic kernel arguments
against 2607 without FSDP).

Area: Dynamo's handling of modules annotated as FSDP-managed
(`_is_fsdp_managed_module`, FSDPNNModuleSource).

What should happen: skip_fsdp_guards (on by default) only drops guards that
FSDP makes unnecessary; structural int/tuple attributes of a module
(num_heads, head_dim, ...) specialize as constants as they do for every other
nn.Module (allow_unspec_int_on_nn_module is False by default), as the PR
puts it, following a maintainer: "It should probably still statically
specialize though".

What happens: FSDPNNModuleSource's guard source fails both
is_specialized_nn_module() and is_unspecialized_nn_module(), so
is_int_specialization_case does not apply and `self.heads` is lifted as a
SymInt input of the graph.

One process, a gloo group of world size 1: the same module compiled with
dynamic=True before and after fully_shard, backend a recorder (no codegen).
Exit 1 and "REPRODUCED: ..." when only the FSDP-managed module's graph takes
the attribute as a symbolic input; exit 0 and "NOT REPRODUCED: ..." when
both graphs take the same symbolic inputs; exit 2 and "ERROR: ..." when the
scenario cannot be run here.
"""
import os
import sys
import tempfile
import warnings

import torch
import torch.distributed as dist
from torch import nn


class Attn(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, 8)
        self.heads = 2

    def forward(self, x):
        y = self.lin(x)
        return y.view(y.shape[0], self.heads, -1).sum(-1) * self.heads


def symbolic_inputs(model):
    """The placeholders of the captured graphs that are SymInts, by name."""
    seen = []

    def backend(gm, example_inputs):
        seen.extend(n.name for n in gm.graph.nodes
                    if n.op == "placeholder" and isinstance(n.meta.get("example_value"), torch.SymInt))
        return gm.forward

    torch._dynamo.reset()
    torch.compile(model, backend=backend, dynamic=True)(torch.randn(3, 8))
    return seen


def main():
    warnings.simplefilter("ignore")
    store = tempfile.NamedTemporaryFile(delete=False)
    dist.init_process_group("gloo", init_method=f"file://{store.name}", rank=0, world_size=1)
    try:
        from torch.distributed.fsdp import fully_shard

        plain = symbolic_inputs(Attn())
        sharded_model = Attn()
        fully_shard(sharded_model)
        sharded = symbolic_inputs(sharded_model)
    except Exception as e:  # noqa: BLE001
        print(f"ERROR: the scenario cannot run here: {type(e).__name__}: {str(e).splitlines()[0][:160]}")
        return 2
    finally:
        dist.destroy_process_group()
        os.unlink(store.name)
    extra = [name for name in sharded if "heads" in name]
    if extra:
        print(f"REPRODUCED: with dynamic=True the FSDP-managed module's int attribute `heads` is a symbolic "
              f"graph input ({', '.join(extra)}); the plain module's graph takes only {', '.join(plain) or 'nothing'}")
        return 1
    print(f"NOT REPRODUCED: the FSDP-managed module's int attribute is a constant, as for the plain module "
          f"(symbolic inputs: {', '.join(sharded) or 'none'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
