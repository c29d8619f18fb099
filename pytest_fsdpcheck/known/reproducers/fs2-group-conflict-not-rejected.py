"""FS2-8: a module or parameter shared with a subtree that already has its
own fully_shard group is not rejected with a clear error.

(a) a shared module with parameters: an internal error from the DTensor code
    (the earlier group's sharded parameter is taken for a tensor-parallel one);
(b) a parameter-free shared module, or a parameter tied across the groups:
    accepted silently, managed by both groups.
"""
import sys

try:
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh

    try:
        from torch.distributed.fsdp import fully_shard
    except ImportError:
        from torch.distributed._composable.fsdp import fully_shard
except ImportError as e:
    print(f"n/a: this torch has no FSDP2 (fully_shard): {e}")
    sys.exit(2)
import torch.nn as nn

dist.init_process_group("gloo", rank=0, world_size=1, store=dist.HashStore())
mesh = init_device_mesh("cpu", (1,))
bad, seen = [], []


def case(what, build):
    outer, inner = build()
    fully_shard(inner, mesh=mesh)
    try:
        fully_shard(outer, mesh=mesh)
    except ValueError as e:
        seen.append(f"{what}: rejected: {e}")
        return
    except Exception as e:  # noqa: BLE001 - an internal error is the bug
        seen.append(f"{what}: internal {type(e).__name__}: {str(e)[:120]}")
    else:
        seen.append(f"{what}: accepted, managed by both groups")
    bad.append(what)


def shared_module(with_params):
    # outer -> inner -> shared and outer -> shared
    outer, inner = nn.Module(), nn.Module()
    shared = nn.Linear(2, 2) if with_params else nn.Module()
    outer.inner, inner.shared, outer.shared = inner, shared, shared
    return outer, inner


def tied_parameter():
    outer, inner, a, b = nn.Module(), nn.Module(), nn.Linear(2, 2), nn.Linear(2, 2)
    outer.inner, inner.a, outer.b = inner, a, b
    b.weight = a.weight
    return outer, inner


try:
    case("(a) shared module with parameters", lambda: shared_module(True))
    case("(b1) parameter-free shared module", lambda: shared_module(False))
    case("(b2) parameter tied across groups", tied_parameter)
finally:
    dist.destroy_process_group()
if bad:
    print("BUG: not rejected with a clear error:", "; ".join(bad))
    print("\n".join(seen))
    sys.exit(1)
print("fixed: every conflict is rejected with a ValueError")
print("\n".join(seen))
