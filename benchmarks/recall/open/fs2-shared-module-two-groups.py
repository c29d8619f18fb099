"""FSDP2: a submodule shared by two parents that are sharded separately
(fully_shard(a); fully_shard(b)) is not rejected with the clear error that
fully_shard now has for shared parameters; the second call fails inside the
DTensor code instead.

Upstream: https://github.com/pytorch/torchtitan/issues/2817 ("[FSPD2] Can
FSDP modules share parameters?", opened 2026-04-03, open) and
https://github.com/pytorch/pytorch/pull/179532 ("[FSDP2] Detect shared
modules/parameters across FSDP groups at init", 2026-04-07, "fixes
pytorch/torchtitan#2817"), which raises "ValueError: Parameter '...' is
shared with a parameter already managed by another FSDP group ... use
fully_shard([module_a, module_b])" -- but only at the root's lazy init, the
first forward.

Area: FSDP2 fully_shard (its walk and states; the suite's FS2-8).

What should happen: the reporter's case, verbatim in the thread: "#
module_a.shared_submod is the same as module_b.shared_submod /
fully_shard(module_a) / fully_shard(module_b)" should give the actionable
ValueError that names the shared parameter and the two ways out (group the
parents, or shard the shared module first).

What happens: the second fully_shard takes the first group's sharded
(DTensor) parameter for a tensor-parallel one and fails inside
FSDPParam._init_sharded_param (TypeError "Invariant encountered: value was
None when it should not be" on 2.11+), before the new check can run. (The
suite's catalog models this as the known bug fs2-group-conflict-not-rejected,
whose reproducer covers more shapes.)

One process, a gloo group of world size 1.
Exit 1 and "REPRODUCED: ..." when something other than the clear ValueError
happens; exit 0 and "NOT REPRODUCED: ..." when fully_shard (or the first
forward) raises a ValueError naming the shared parameter; exit 2 and
"ERROR: ..." when the scenario cannot be run here.
"""
import sys

import torch
import torch.distributed as dist
from torch import nn


class Branch(nn.Module):
    def __init__(self, shared):
        super().__init__()
        self.own = nn.Linear(4, 4)
        self.shared_submod = shared

    def forward(self, x):
        return self.shared_submod(self.own(x))


class Root(nn.Module):
    def __init__(self):
        super().__init__()
        shared = nn.Linear(4, 4)
        self.module_a, self.module_b = Branch(shared), Branch(shared)

    def forward(self, x):
        return self.module_b(self.module_a(x))


def main():
    try:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard
    except ImportError as e:
        print(f"ERROR: no FSDP2 here: {e}")
        return 2
    dist.init_process_group("gloo", rank=0, world_size=1, store=dist.HashStore())
    try:
        mesh = init_device_mesh("cpu", (1,))
        model = Root()
        try:
            fully_shard(model.module_a, mesh=mesh)
            fully_shard(model.module_b, mesh=mesh)
            fully_shard(model, mesh=mesh)
            model(torch.randn(2, 4)).sum().backward()
        except ValueError as e:
            if "shared" in str(e) and "shared_submod" in str(e):
                print(f"NOT REPRODUCED: rejected with a clear error: {str(e).splitlines()[0][:160]}")
                return 0
            print(f"REPRODUCED: a ValueError that does not name the shared parameter: {str(e)[:160]}")
            return 1
        except Exception as e:  # noqa: BLE001 - an internal error is the bug
            print(f"REPRODUCED: fully_shard(module_a); fully_shard(module_b) with a shared submodule fails "
                  f"inside torch, not with the shared-parameter ValueError: {type(e).__name__}: "
                  f"{str(e).splitlines()[0][:120]}")
            return 1
        print("REPRODUCED: a submodule shared by two separately sharded parents is accepted, managed by both "
              "groups")
        return 1
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    sys.exit(main())
