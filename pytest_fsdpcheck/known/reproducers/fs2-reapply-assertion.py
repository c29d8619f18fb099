"""FS2-8: fully_shard given a root that an earlier fully_shard already gave a
group of its own fails with an AssertionError from the composable contract
(naming the module only by its repr), not a clear error naming it: a single
root, the first, middle or last of several roots, and a parameter-free module.
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
import torch
import torch.nn as nn

# fully_shard takes a list of modules from 2.5
SEVERAL_ROOTS = tuple(int(x) for x in torch.__version__.split(".")[:2]) >= (2, 5)

dist.init_process_group("gloo", rank=0, world_size=1, store=dist.HashStore())
mesh = init_device_mesh("cpu", (1,))
bad, seen = [], []


def case(what, again, build):
    model = build()
    fully_shard(model[0], mesh=mesh)
    try:
        fully_shard(again(model), mesh=mesh)
    except ValueError as e:
        seen.append(f"{what}: rejected: {e}")
        return
    except Exception as e:  # noqa: BLE001 - an internal error is the bug
        seen.append(f"{what}: internal {type(e).__name__}: {str(e).splitlines()[0][:120]}")
    else:
        seen.append(f"{what}: accepted, fully_shard applied twice")
    bad.append(what)


def linears():
    return nn.Sequential(nn.Linear(2, 2), nn.Linear(2, 2), nn.Linear(2, 2))


try:
    case("(a) the same module again", lambda m: m[0], linears)
    case("(b) a parameter-free module again", lambda m: m[0], lambda: nn.Sequential(nn.Module(), nn.Linear(2, 2)))
    if SEVERAL_ROOTS:
        case("(c) first of several roots", lambda m: [m[0], m[1], m[2]], linears)
        case("(d) middle of several roots", lambda m: [m[1], m[0], m[2]], linears)
        case("(e) last of several roots", lambda m: [m[1], m[2], m[0]], linears)
finally:
    dist.destroy_process_group()
if bad:
    print("BUG: not rejected with a clear error:", "; ".join(bad))
    print("\n".join(seen))
    sys.exit(1)
print("fixed: every repeated fully_shard is rejected with a ValueError")
print("\n".join(seen))
