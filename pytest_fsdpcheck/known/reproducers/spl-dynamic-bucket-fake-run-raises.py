"""DDPOptimizer inside torch.compile(dynamic=True), each bucket compiled by a
backend that hands the submodule back as it is (not through AOTAutograd, as
backend="eager" does): to give the next bucket its example inputs,
DDPOptimizer runs the bucket on fakes under the compile's fake mode, and on
torch 2.8.0 Dynamo calls the backend with the python dispatcher off, so a
bucket that views a tensor by symbolic sizes (a Linear on a 3-D input)
raises RuntimeError "SymIntArrayRef expected to contain only concrete
integers". The same split with the python dispatcher on runs. Exit 1 = bug,
0 = fixed, 2 = not applicable."""
import sys

import torch
import torch.nn as nn

try:
    import torch._dynamo
    from torch._dynamo.backends.distributed import DDPOptimizer
except Exception as e:  # noqa: BLE001
    print(f"n/a: {type(e).__name__}: {e}")
    sys.exit(2)


class SequenceMean(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(8, 8)
        self.b = nn.Linear(8, 8)

    def forward(self, x):
        h = self.a(x).relu()
        return self.b(h).sum(1) / h.shape[1]


def backend(gm, example_inputs):
    # every parameter-holding module its own bucket; each bucket run as it is
    return DDPOptimizer(bucket_bytes_cap=1, backend_compile_fn=lambda g, ex: g, first_bucket_cap=1).compile_fn(
        gm, example_inputs)


torch.manual_seed(0)
model = SequenceMean()
compiled = torch.compile(model, backend=backend, dynamic=True)
try:
    for length in (3, 5):
        x = torch.randn(2, length, 8)
        torch.testing.assert_close(compiled(x), model(x))
except Exception as e:  # noqa: BLE001
    first = (str(e).strip().splitlines() or [""])[0]
    if "SymIntArrayRef expected to contain only concrete integers" in str(e):
        print(f"BUG: {type(e).__name__}: {first[:200]}")
        sys.exit(1)
    raise
print("fixed: DDPOptimizer splits the dynamic graph and runs it")
