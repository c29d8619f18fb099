"""FS2-7: a model given fully_shard is never freed once its caller drops it.

torch's composable-state mapping (torch.distributed._composable_state) held
every module given a state, and the state, in a plain dict until 2.6
(pytorch/pytorch#139650): ``del model`` frees nothing.
"""
import gc
import socket
import sys
import weakref

import torch.distributed as dist
import torch.nn as nn

try:
    from torch.distributed.fsdp import fully_shard
except ImportError:
    try:
        from torch.distributed._composable.fsdp import fully_shard
    except ImportError:
        print("n/a: this torch has no FSDP2 (fully_shard)")
        sys.exit(2)
from torch.distributed.device_mesh import init_device_mesh

with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
try:
    model = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 4))
    fully_shard(model, mesh=init_device_mesh("cpu", (1,)))
    alive = weakref.ref(model)
    del model
    gc.collect()
    if alive() is not None:
        print("BUG: the model is still alive after its caller dropped it and the garbage collector ran")
        sys.exit(1)
    print("fixed: the model is freed once dropped")
    sys.exit(0)
finally:
    dist.destroy_process_group()
