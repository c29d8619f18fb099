"""ANN-8: under ``torch.compile(dynamic=True)`` an int attribute of a module
FSDP manages is a symbolic input of the graph, where the same attribute of
the same module unmanaged is a constant.

Dynamo specializes the int members of every nn.Module
(``torch._dynamo.config.allow_unspec_int_on_nn_module`` is off by default:
"Dynamo will always specialize on int members of NN module"), and
``skip_fsdp_guards`` (on by default) only drops the guards FSDP makes
unnecessary. But a managed module's attributes get FSDPNNModuleSource,
whose guard source is neither a specialized nor an unspecialized nn module,
so the int-specialization rule does not apply and ``self.heads`` becomes a
SymInt input (pytorch/pytorch#194795, open: "Statically specialize int/tuple
attrs of FSDP-managed modules under skip_fsdp_guards"; the report there: 8644
symbolic kernel arguments against 2607 without FSDP).

On 2.6 and 2.7 Dynamo takes a plain module's int attribute symbolically
too, and only the ints of a tuple attribute (``self.shape``) tell the two
apart: the managed module's are symbolic, the plain module's constants.

The module is marked with torch's own FSDP annotation
(``torch.distributed.fsdp._dynamo_utils._annotate_modules_for_dynamo``, which
FSDP and fully_shard use); the backend records the graph and runs it eagerly.
"""
import re
import sys
import warnings

import torch
import torch.nn as nn

try:
    from torch.distributed.fsdp._dynamo_utils import _annotate_modules_for_dynamo
except Exception as e:  # noqa: BLE001 - this torch lacks the annotation
    print(f"n/a: {type(e).__name__}: {e}")
    sys.exit(2)


class Heads(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, 8)
        self.heads = 2
        self.shape = (2, 4)

    def forward(self, x):
        y = self.lin(x)
        return y.view(y.shape[0], self.heads, -1).sum(-1) * self.heads + y.view(-1, *self.shape).sum(-1)


def symbolic_inputs(module):
    """The names of the captured graph's placeholders that are symbolic ints."""
    names = []

    def backend(gm, example_inputs):
        # l_self_heads, or l_fn_heads where a release traces the module through the call wrapping it
        names.extend(re.sub(r"^l_(self|fn)_", "l_self_", n.name) for n in gm.graph.nodes
                     if n.op == "placeholder" and isinstance(n.meta.get("example_value"), torch.SymInt))
        return gm.forward

    torch._dynamo.reset()
    torch.compile(module, backend=backend, dynamic=True)(torch.randn(3, 8))
    return names


warnings.simplefilter("ignore")
try:
    plain = symbolic_inputs(Heads())
    managed_module = Heads()
    _annotate_modules_for_dynamo(managed_module, set(), True)
    managed = symbolic_inputs(managed_module)
except Exception as e:  # noqa: BLE001 - e.g. torch.compile unsupported on this Python
    print(f"n/a: torch.compile cannot run here: {type(e).__name__}: {str(e).splitlines()[0][:160]}")
    sys.exit(2)
# the module's attributes only: the input's size is a symbol whose number differs from compile to compile
extra = [name for name in managed if name.startswith("l_self_") and name not in plain]
if extra:
    print(f"BUG: the FSDP-managed module's graph takes symbolic inputs the plain module's does not: {', '.join(extra)} "
          f"(plain: {', '.join(plain) or 'none'})")
    sys.exit(1)
print(f"fixed: the FSDP-managed module's int attribute is a constant, as the plain module's "
      f"(symbolic inputs: {', '.join(managed) or 'none'})")
