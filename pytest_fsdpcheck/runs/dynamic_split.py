"""SPL-17 inside Dynamo's compile: a split driven by ``torch.compile(...,
dynamic=True)``, as a compiled DDP model meets its sequence lengths.

Dynamo hands its backend real tensors and, with dynamic shapes, symbolic
sizes (``SymInt`` inputs, and fakes with symbols in its graph's metadata).
DDPOptimizer stands between Dynamo and the user's backend: every bucket's
compile must see the sizes Dynamo's graph gives the values it takes,
symbolic ones as the same symbols, as fakes of the compile's own fake mode
(the TracingContext's). A bucket handed real or otherwise-static example
inputs is compiled for one length only (a compiler specializes on what it
sees: pytorch#140229's recompiles); fakes of a mode of the split's own mix
fake modes in one compile (pytorch#98321).

SPL-14 as users meet it uses the same machinery: :data:`HOP_CASES` are a
model with a checkpointed block and one with FlexAttention, judged the same
way (their split's violations reported as SPL-14's).

Two fixed models, each compiled once with ``dynamic=True`` through the
implementation's split (the cap puts every parameter-holding module in a
bucket of its own) and then run at several lengths:

- ``linear-chain``: Linear, ReLU, Linear over ``(n, 4)``;
- ``sequence-mean``: two Linears over ``(2, n, 8)`` and a mean over the
  sequence that divides by its length, so the last bucket takes the
  symbolic length itself as an input (pytorch#108877). (No layout change
  between them: torch 2.4's fake tensors specialize the sizes of a
  transposed ``contiguous()`` outside a trace, whoever propagates them;
  SPL-17's strides are the fixed split cases'.)

The control is the same model compiled by Dynamo with a backend that
splits nothing: it gives the number of graphs Dynamo compiles over the
lengths by itself (one; more is a graph break or recompile of Dynamo's own
and the case is not judged). More graphs with the split is the split's: its
compile made sizes static, and every new length recompiles.

Each with two backends behind the split: one that records and runs the
submodule as it is, and one that records and hands it to AOTAutograd (a
compiler that traces symbolically, as inductor does). The results are
plain records, judged by
:func:`pytest_fsdpcheck.checks.splitting_compiled.check_symbolic_example_inputs`
and compared with the model run eagerly.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import warnings
from dataclasses import dataclass, field

#: the fixed cases and backends, in the order the suite runs them: ``eager``
#: and ``aot`` compile with ``dynamic=True`` and run at :data:`LENGTHS`;
#: ``aot-static`` compiles with static shapes and runs twice at the first
#: length, so AOTAutograd compiles each bucket's backward lazily, at the
#: first backward (with symbolic sizes it compiles it with the forward)
DYNAMIC_CASES = ("linear-chain", "sequence-mean")
#: SPL-14 inside the compile: models whose Dynamo graph holds a
#: higher-order op, as users compile them (torch.utils.checkpoint's
#: ``tag_activation_checkpoint``, FlexAttention's ``flex_attention``)
HOP_CASES = ("checkpointed", "flex-attention")
#: cases run without a backward, under ``torch.no_grad()``: FlexAttention
#: has no backward on CPU (torch 2.13 raises NotImplementedError "does not
#: support backward on CPU"), so its split is judged as inference runs it
FORWARD_ONLY = ("flex-attention",)
DYNAMIC_BACKENDS = ("eager", "aot", "aot-static")

#: the lengths each compiled model is called with after its compile
LENGTHS = (7, 12, 5)


def lengths(kind: str) -> tuple:
    return (LENGTHS[0], LENGTHS[0]) if kind == "aot-static" else LENGTHS


def _model(case: str):
    import torch
    from torch import nn

    torch.manual_seed(0)
    if case == "linear-chain":
        return nn.Sequential(nn.Linear(4, 6), nn.ReLU(), nn.Linear(6, 4))
    if case == "checkpointed":
        return _checkpointed()
    if case == "flex-attention":
        return _flex_attention()

    class SequenceMean(nn.Module):
        def __init__(self):
            super().__init__()
            self.a = nn.Linear(8, 8)
            self.b = nn.Linear(8, 8)

        def forward(self, x):
            h = self.a(x).relu()
            return self.b(h).sum(1) / h.shape[1]

    return SequenceMean()


def _checkpointed():
    """A block under non-reentrant activation checkpointing between two
    Linears (pytorch#104674's shape): Dynamo captures it as
    ``tag_activation_checkpoint`` over a body graph, the block's parameters
    lifted to the op's arguments."""
    import torch
    from torch import nn

    class Checkpointed(nn.Module):
        def __init__(self):
            super().__init__()
            self.a = nn.Linear(8, 8)
            self.block = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 8))
            self.b = nn.Linear(8, 8)

        def forward(self, x):
            h = self.a(x).relu()
            h = torch.utils.checkpoint.checkpoint(self.block, h, use_reentrant=False)
            return self.b(h).sum(1) / h.shape[1]

    return Checkpointed()


def _relative_position(score, batch, head, q_index, kv_index):
    return score - (q_index - kv_index).abs() * 0.1


def _flex_attention():
    """One-head FlexAttention with a relative-position score modifier
    between two Linears (pytorch#137481's shape): Dynamo captures
    ``flex_attention`` with the modifier's graph as an argument."""
    from torch import nn

    class FlexAttention(nn.Module):
        def __init__(self):
            super().__init__()
            self.qkv = nn.Linear(8, 24)
            self.out = nn.Linear(8, 8)

        def forward(self, x):
            from torch.nn.attention.flex_attention import flex_attention

            q, k, v = (t.unsqueeze(1) for t in self.qkv(x).chunk(3, dim=-1))
            attended = flex_attention(q, k, v, score_mod=_relative_position).squeeze(1)
            return self.out(attended).sum(1) / x.shape[1]

    return FlexAttention()


def _input(case: str, length: int):
    import torch

    gen = torch.Generator().manual_seed(length)
    shape = (length, 4) if case == "linear-chain" else (2, length, 8)
    return torch.randn(shape, generator=gen, requires_grad=case not in FORWARD_ONLY)


@contextlib.contextmanager
def _run_mode(case: str):
    """No gradients for a forward-only case; and the eager reference run of
    FlexAttention without its advice to compile it (it is the control: the
    slow unfused path is what it should take)."""
    import torch

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="flex_attention called without torch.compile")
        with torch.no_grad() if case in FORWARD_ONLY else contextlib.nullcontext():
            yield


@dataclass
class Compiled:
    """One graph Dynamo handed the split: the graph, its form, the split's
    buckets and its backend calls (submodule, example inputs, the compile's
    fake mode at the call)."""

    gm: object
    form: str
    buckets: list = field(default_factory=list)
    calls: list = field(default_factory=list)
    forwards: list = field(default_factory=list)  # AOTAutograd's forward metadata, per forward compile
    #: per backward compile: (the bucket it belongs to, the index of the forward whose metadata it saw)
    backwards: list = field(default_factory=list)
    splitting: bool = True  # a backward compiled during the split is the last forward's; after it, lazily, in reverse


@dataclass
class DynamicSplit:
    """What one compiled model showed: the graphs Dynamo compiled without the
    split (the control's count) and with it, and per length the model's
    outputs and gradients, eager and compiled."""

    control_graphs: int = 0
    lengths: tuple = LENGTHS
    graphs: list = field(default_factory=list)  # Compiled, in compile order
    runs: list = field(default_factory=list)  # (length, eager, compiled or what the compiled run raised)


def _tracing_context():
    """The TracingContext Dynamo set up around the backend call, or None:
    ``try_get`` from torch 2.2; 2.0 and 2.1 have only ``get``, which gives
    None outside a compile (2.1.2's source)."""
    import torch

    context_type = torch._guards.TracingContext
    return getattr(context_type, "try_get", context_type.get)()


def _fw_metadata():
    return getattr(_tracing_context(), "fw_metadata", None)


def _recording(calls: list, kind: str, graph: Compiled | None = None):
    """The backend behind the split: records each call, then returns the
    submodule as it is (``eager``) or hands it to AOTAutograd (``aot``),
    whose forward and backward compilers record the forward metadata
    AOTAutograd left on Dynamo's TracingContext (``graph.forwards``) and,
    for each lazily compiled backward, which forward's it found there
    (``graph.backwards``: an index into ``graph.forwards``, or None)."""

    if kind in ("aot", "aot-static"):
        from functorch.compile import make_boxed_func
        from torch._dynamo.backends.common import aot_autograd

        def fw_compiler(gm, example_inputs):
            if graph is not None:
                graph.forwards.append(_fw_metadata())
            return make_boxed_func(gm.forward)

        def bw_compiler(gm, example_inputs):
            if graph is not None:
                meta = _fw_metadata()
                seen = next((i for i, m in enumerate(graph.forwards) if m is meta and m is not None), None)
                lazily_before = sum(1 for _, _, during in graph.backwards if not during)
                owner = len(graph.forwards) - 1 - (0 if graph.splitting else lazily_before)
                graph.backwards.append((owner, seen, graph.splitting))
            return make_boxed_func(gm.forward)

        after = aot_autograd(fw_compiler=fw_compiler, bw_compiler=bw_compiler)
    else:
        after = None

    def backend(gm, example_inputs):
        context = _tracing_context()
        calls.append((gm, list(example_inputs), getattr(context, "fake_mode", None)))
        return after(gm, example_inputs) if after else gm

    return backend


def _step(call, model, x):
    """One forward and backward of ``call`` (``model`` or its compiled
    form): the output, ``model``'s gradients by name and the input's; the
    gradients are then cleared for the next length. Without gradients (a
    forward-only case, under no_grad): the output alone."""
    out = call(x)
    if not out.requires_grad:
        return out.detach(), {}, None
    out.sum().backward()
    grads = {name: p.grad.detach().clone() for name, p in model.named_parameters()}
    for p in model.parameters():
        p.grad = None
    return out.detach(), grads, x.grad.detach().clone()


def run_dynamic_split(splitting, case: str, kind: str, accepted_forms=("dynamo", "module")) -> DynamicSplit:
    """Compile ``case``'s model through ``splitting`` (every
    parameter-holding module its own bucket) with the ``kind`` backend
    behind it, and run it at :func:`lengths`. What the split raises is
    raised as it is (Dynamo's wrapping taken off)."""
    import torch
    import torch._dynamo

    from ..core.not_provided import NotProvided

    model = _model(case)
    compiled_model = copy.deepcopy(model)
    dynamic = kind != "aot-static"
    record = DynamicSplit(control_graphs=_control_graphs(case, kind), lengths=lengths(kind))
    raised: list = []

    def split_backend(gm, example_inputs):
        form = "module" if any(n.op == "call_module" for n in gm.graph.nodes) else "dynamo"
        graph = Compiled(gm, form)
        record.graphs.append(graph)
        if form not in accepted_forms:
            raise NotProvided(f"Dynamo captured {case} as a {form}-form graph, which this implementation's splitting "
                              "does not accept")
        try:
            result = splitting.split(gm, list(example_inputs), bucket_bytes_cap=1, first_bucket_cap=1,
                                     backend=_recording(graph.calls, kind, graph))
        except BaseException as exc:
            raised.append(exc)
            raise
        graph.buckets = list(result.buckets)
        graph.splitting = False
        return result.compiled

    torch._dynamo.reset()
    try:
        compiled = torch.compile(compiled_model, backend=split_backend, dynamic=dynamic)
        for length in lengths(kind):
            with _run_mode(case):
                eager = _step(model, model, _input(case, length))
                try:
                    got = _step(compiled, compiled_model, _input(case, length))
                except Exception as exc:  # noqa: BLE001 - the split's own error as it is; a run's is SPL-11's
                    if raised:
                        raise raised[0] from None
                    got = exc
            record.runs.append((length, eager, got))
    finally:
        torch._dynamo.reset()
    return record


@functools.cache
def _control_graphs(case: str, kind: str) -> int:
    """How many graphs Dynamo compiles for ``case``'s model over ``kind``'s
    lengths with a backend that runs each graph as it is (nothing of any
    split). Torch's Dynamo alone decides it, the same for every
    implementation in this process: compiled once per case and backend."""
    import torch
    import torch._dynamo

    graphs = []

    def as_captured(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    torch._dynamo.reset()
    try:
        compiled = torch.compile(_model(case), backend=as_captured, dynamic=kind != "aot-static")
        for length in lengths(kind):
            with _run_mode(case):
                compiled(_input(case, length))
    finally:
        torch._dynamo.reset()
    return len(graphs)


def judge(record: DynamicSplit) -> list:
    """SPL-17 on the backend calls, SPL-10 on their count over every length
    (one per bucket: no bucket compiled again for a new length), SPL-11 on
    outputs and gradients at every length."""
    import torch

    from ..checks import Violation, error_of
    from ..checks import splitting_compiled as chk

    if record.control_graphs != 1:
        from ..core.not_provided import NotProvided

        raise NotProvided(f"without any split, Dynamo compiles the model {record.control_graphs} times over the "
                          f"lengths {record.lengths} (graph breaks or recompiles of its own); the check takes one graph",
                          case_input=True)
    first = record.graphs[0]
    out = chk.check_symbolic_example_inputs(first.calls, chk.dynamo_value_sizes(first.gm))
    if len(record.graphs) > 1:
        out.append(Violation("SPL-10", f"Dynamo compiled the model {len(record.graphs)} times over the lengths "
                                       f"{record.lengths} through the split, once without it: the split's compile made sizes "
                                       "static, so every new length recompiles every bucket"))
    elif len(first.buckets) > 1 and len(first.calls) != len(first.buckets):
        out.append(Violation("SPL-10", f"the split planned {len(first.buckets)} buckets, but over the lengths "
                                       f"{record.lengths} its backend was called {len(first.calls)} times (one compile per "
                                       "bucket, whatever the length, under dynamic shapes)"))
    out += _pairing(first)
    for length, (want_out, want_grads, want_x), got in record.runs:
        where = f"at length {length}"
        if isinstance(got, BaseException):
            out.append(Violation("SPL-11", f"the compiled model raised {type(got).__name__} {where} (compiled at length "
                                           f"{record.lengths[0]})", detail=str(got), error=error_of(got)))
            continue
        got_out, got_grads, got_x = got
        pairs = [("the output", want_out, got_out), ("the input's gradient", want_x, got_x),
                 *((f"{name}'s gradient", want_grads[name], got_grads.get(name)) for name in want_grads)]
        for what, want, got in pairs:
            if want is None and got is None:  # a forward-only case: no input gradient
                continue
            if got is None or got.shape != want.shape or not torch.allclose(want, got, rtol=1e-4, atol=1e-5):
                out.append(Violation("SPL-11", f"the compiled model's {what} differs from the eager model's {where}"))
                break
    return out


def _pairing(graph: Compiled) -> list:
    """SPL-10 through AOTAutograd: each bucket's backward is compiled
    against its own forward's metadata, the one AOTAutograd left on the
    TracingContext when it compiled that bucket's forward (what inductor
    reads to know, for one, which buffers the backward may donate). A
    backward compiled with its forward (symbolic sizes) is that forward's; a
    lazily compiled one, at the first backward, runs the buckets last first
    (the models are chains)."""
    from ..checks import Violation

    if len(graph.forwards) < 2 or all(m is None for m in graph.forwards):
        return []
    wrong = [f"bucket {owner}'s backward with " + ("no bucket's" if seen is None else f"bucket {seen}'s")
             + (" (compiled lazily)" if not during else "")
             for owner, seen, during in graph.backwards if seen != owner]
    if not wrong:
        return []
    return [Violation("SPL-10", "each bucket's backward should be compiled against its own forward's metadata "
                                f"(AOTAutograd's fw_metadata on the TracingContext), but it compiled {', '.join(wrong)}",
                      evidence=tuple(wrong))]


def reproducer_lines(case: str, kind: str) -> list[str]:
    """The lines of a reproducer that run and judge one case."""
    return [
        "from pytest_fsdpcheck.contract import accepted_forms",
        "from pytest_fsdpcheck.runs.dynamic_split import judge, run_dynamic_split",
        f"violations = judge(run_dynamic_split(impl.splitting, {case!r}, {kind!r}, accepted_forms(impl.splitting)))",
        "assert not violations, violations",
    ]
