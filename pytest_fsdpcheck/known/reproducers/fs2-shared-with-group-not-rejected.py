"""FS2-8: a module or parameter shared with a subtree that already has its own
fully_shard group is not rejected with a clear error (torch 2.13).

(a) shared module with parameters: internal TypeError from DTensor mesh code;
(b) shared module without parameters, or a parameter tied across the groups:
    accepted silently, managed by both groups.
"""
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard

dist.init_process_group("gloo", rank=0, world_size=1, store=dist.HashStore())
mesh = init_device_mesh("cpu", (1,))
bad = 0
try:
    # (a) R -> G -> S and R -> S; S has parameters
    R, G, S = nn.Module(), nn.Module(), nn.Linear(2, 2)
    R.g, G.s, R.s = G, S, S
    fully_shard(G, mesh=mesh)
    try:
        fully_shard(R, mesh=mesh)
        print("(a) accepted"); bad += 1
    except (ValueError, RuntimeError) as e:
        print("(a) rejected:", e)
    except Exception as e:
        print(f"(a) internal {type(e).__name__}: {e}"); bad += 1
    # (b1) the same with a parameter-free shared module
    R, G, S = nn.Module(), nn.Module(), nn.Module()
    R.g, G.s, R.s = G, S, S
    fully_shard(G, mesh=mesh); fully_shard(R, mesh=mesh)
    print("(b1) parameter-free shared module accepted, managed twice"); bad += 1
    # (b2) a parameter tied across groups
    R, G, A, B = nn.Module(), nn.Module(), nn.Linear(2, 2), nn.Linear(2, 2)
    R.g, G.a, R.b = G, A, B
    B.weight = A.weight
    fully_shard(G, mesh=mesh); fully_shard(R, mesh=mesh)
    print("(b2) tied parameter accepted, managed by both groups"); bad += 1
finally:
    dist.destroy_process_group()
raise SystemExit(1 if bad else 0)
