"""DDPOptimizer compiles every bucket's backward against the last bucket's
forward metadata.

Dynamo compiles a chain of three linears through DDPOptimizer (one bucket
per linear) with an AOTAutograd backend and static shapes, so AOTAutograd
compiles each bucket's backward lazily, at the first backward, last bucket
first. Each backward compile should find its own bucket's forward metadata
on the TracingContext (torch >= 2.9 keeps one per bucket,
pytorch/pytorch#160745); before 2.9 they all found the last bucket's.
Exit 1 = bug, 0 = fixed, 2 = not applicable.
"""
import sys

import torch
import torch.nn as nn

try:
    import torch._dynamo
    from functorch.compile import make_boxed_func
    from torch._dynamo.backends.common import aot_autograd
    from torch._dynamo.backends.distributed import DDPOptimizer
except Exception as e:  # noqa: BLE001 - ImportError, or Dynamo unusable
    print(f"n/a: {type(e).__name__}: {e}")
    sys.exit(2)

forwards, backwards = [], []


def metadata():
    return torch._guards.TracingContext.try_get().fw_metadata


def fw_compiler(gm, example_inputs):
    forwards.append(metadata())
    return make_boxed_func(gm.forward)


def bw_compiler(gm, example_inputs):
    backwards.append(next((i for i, m in enumerate(forwards) if m is metadata()), None))
    return make_boxed_func(gm.forward)


inner = aot_autograd(fw_compiler=fw_compiler, bw_compiler=bw_compiler)


def backend(gm, example_inputs):
    return DDPOptimizer(bucket_bytes_cap=1, backend_compile_fn=inner, first_bucket_cap=1).compile_fn(gm, example_inputs)


model = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 4), nn.Linear(4, 4))
try:
    torch.compile(model, backend=backend, dynamic=False)(torch.randn(2, 4)).sum().backward()
except Exception as e:  # noqa: BLE001 - e.g. torch 2.0: "Python 3.11+ not yet supported for torch.compile"
    print(f"n/a: torch.compile unusable: {type(e).__name__}: {(str(e).splitlines() or [''])[0]}")
    sys.exit(2)
if len(forwards) != 3 or len(backwards) != 3:
    print(f"n/a: not the expected compiles ({len(forwards)} forward, {len(backwards)} backward)")
    sys.exit(2)
if backwards != [2, 1, 0]:
    print(f"BUG: the backwards of buckets 2, 1, 0 were compiled against the forward metadata of buckets {backwards}")
    sys.exit(1)
print("fixed: each bucket's backward compiled against its own forward's metadata")
