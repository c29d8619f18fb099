"""The golden corpus: canonical models whose bucket plans, traversal orders
and exec orders are fixed in ``fixtures/golden/<name>.txt``.

Everything is rendered in terms of the model's own qualified names, never an
implementation's: bucket parameters are resolved by identity (through the
graph's placeholders for Dynamo-form graphs), so the same golden text holds
for every implementation and both graph forms.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

WIDTH = 16


class MLPChain(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(WIDTH, WIDTH) for _ in range(4))
        self.head = nn.Linear(WIDTH, 2)

    def forward(self, x):
        for layer in self.layers:
            x = torch.relu(layer(x))
        return self.head(x)


class Block(nn.Module):
    """Pre-norm single-head attention and MLP with residuals."""

    def __init__(self):
        super().__init__()
        self.norm1 = nn.LayerNorm(WIDTH)
        self.qkv = nn.Linear(WIDTH, 3 * WIDTH)
        self.proj = nn.Linear(WIDTH, WIDTH)
        self.norm2 = nn.LayerNorm(WIDTH)
        self.up = nn.Linear(WIDTH, 2 * WIDTH)
        self.down = nn.Linear(2 * WIDTH, WIDTH)

    def forward(self, x):
        q, k, v = self.qkv(self.norm1(x)).chunk(3, dim=-1)
        attn = torch.softmax(q @ k.transpose(-2, -1) * WIDTH**-0.5, dim=-1)
        x = x + self.proj(attn @ v)
        return x + self.down(F.gelu(self.up(self.norm2(x))))


class TiedTransformer(nn.Module):
    def __init__(self, vocab=24):
        super().__init__()
        self.embed = nn.Embedding(vocab, WIDTH)
        self.blocks = nn.ModuleList(Block() for _ in range(2))
        self.norm = nn.LayerNorm(WIDTH)
        self.lm_head = nn.Linear(WIDTH, vocab, bias=False)
        self.lm_head.weight = self.embed.weight

    def forward(self, tokens):
        h = self.embed(tokens)
        for block in self.blocks:
            h = block(h)
        return self.lm_head(self.norm(h))


class ConvBN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(8)
        self.conv2 = nn.Conv2d(8, 8, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(8)
        self.fc = nn.Linear(8, 4)

    def forward(self, x):
        x = torch.relu(self.bn1(self.conv1(x)))
        x = torch.relu(self.bn2(self.conv2(x)))
        return self.fc(x.mean(dim=(2, 3)))


class Expert(nn.Module):
    def __init__(self):
        super().__init__()
        self.up = nn.Linear(WIDTH, 2 * WIDTH)
        self.down = nn.Linear(2 * WIDTH, WIDTH)

    def forward(self, x):
        return self.down(torch.relu(self.up(x)))


class SharedExpertMoE(nn.Module):
    """Dense mixture (every expert runs; the gate weights them) plus one
    shared expert for every token: static control flow, traceable."""

    def __init__(self, n_experts=3):
        super().__init__()
        self.gate = nn.Linear(WIDTH, n_experts, bias=False)
        self.shared = Expert()
        self.experts = nn.ModuleList(Expert() for _ in range(n_experts))

    def forward(self, x):
        weights = torch.softmax(self.gate(x), dim=-1)
        out = self.shared(x)
        for i, expert in enumerate(self.experts):
            out = out + weights[..., i : i + 1] * expert(x)
        return out


class FrozenIgnored(nn.Module):
    """Frozen and DDP-ignored parameters count zero towards bucket sizes."""

    def __init__(self):
        super().__init__()
        self.frozen = nn.Linear(WIDTH, WIDTH)
        self.trained = nn.Linear(WIDTH, WIDTH)
        self.ignored = nn.Linear(WIDTH, WIDTH)
        self.out = nn.Linear(WIDTH, WIDTH)
        for p in self.frozen.parameters():
            p.requires_grad_(False)
        for p in self.ignored.parameters():
            p._ddp_ignored = True

    def forward(self, x):
        x = torch.tanh(self.frozen(x))
        x = torch.tanh(self.trained(x))
        x = torch.tanh(self.ignored(x))
        return self.out(x)


class InplaceBoundary(nn.Module):
    """A side branch that ends in an in-place op with no users, right where
    a bucket fills up: that bucket has no external output yet, so it must be
    extended (absorbing ``inp`` and its bytes) until it has one."""

    def __init__(self):
        super().__init__()
        self.inp = nn.Linear(WIDTH, WIDTH)
        self.side = nn.Linear(WIDTH, WIDTH)
        self.out = nn.Linear(WIDTH, WIDTH)

    def forward(self, x):
        h = self.inp(x)
        side = self.side(h)
        side.mul_(2)
        return self.out(h)


class CalledTwice(nn.Module):
    """One module applied twice and a residual: its parameters are counted once."""

    def __init__(self):
        super().__init__()
        self.inp = nn.Linear(WIDTH, WIDTH)
        self.shared = nn.Linear(WIDTH, WIDTH)
        self.out = nn.Linear(WIDTH, WIDTH)

    def forward(self, x):
        h = self.inp(x)
        h = torch.relu(self.shared(h)) + h
        h = torch.relu(self.shared(h)) + h
        return self.out(h)


class DirectParams(nn.Module):
    """Parameters used directly by functions, a buffer, and a scale vector."""

    def __init__(self):
        super().__init__()
        self.w1 = nn.Parameter(torch.randn(WIDTH, WIDTH) * 0.1)
        self.scale = nn.Parameter(torch.ones(WIDTH))
        self.register_buffer("shift", torch.full((WIDTH,), 0.5))
        self.lin = nn.Linear(WIDTH, WIDTH)
        self.w2 = nn.Parameter(torch.randn(WIDTH, WIDTH) * 0.1)

    def forward(self, x):
        h = torch.tanh(x @ self.w1.t()) * self.scale + self.shift
        h = self.lin(h)
        return h @ self.w2.t()


class ParamFreePreamble(nn.Module):
    """A parameter-free preamble: fused into the first parameter bucket."""

    def __init__(self):
        super().__init__()
        self.body = nn.ModuleList(nn.Linear(WIDTH, WIDTH) for _ in range(3))

    def forward(self, x):
        x = (x - x.mean(dim=-1, keepdim=True)) / (x.std(dim=-1, keepdim=True) + 1e-5)
        x = torch.tanh(x) * 2
        for layer in self.body:
            x = torch.relu(layer(x))
        return x


class UnusedBranch(nn.Module):
    """A registered module the forward never calls: absent from buckets and
    exec order, still a traversal unit."""

    def __init__(self):
        super().__init__()
        self.enc = nn.Linear(WIDTH, WIDTH)
        self.unused = nn.Linear(WIDTH, WIDTH)
        self.dec = nn.Linear(WIDTH, WIDTH)

    def forward(self, x):
        return self.dec(torch.relu(self.enc(x))) * 2


@dataclass(frozen=True)
class CorpusModel:
    name: str
    make: type
    input_shape: tuple
    bucket_bytes_cap: int
    first_bucket_cap: int
    #: FSDP units: qualified names ("" is the root) that get a state; names
    #: in one tuple share a single state. The root's state is the root state.
    units: tuple = ()
    handle_less: tuple = ()  # units whose state has no handle
    replicate: tuple = ()  # modules marked `replicate`
    integer_input: int | None = None  # vocabulary size for token inputs
    description: str = ""
    extra_roots: tuple = field(default=())  # units whose state is also a root
    #: why this model cannot be built here (an optional package), or None
    missing: object = None
    #: why this torch's Dynamo cannot capture the model, known before any
    #: implementation runs (a documented limitation, probed), or None
    capture_missing: object = None


def _lin(n):
    return (n,)


CORPUS: dict[str, CorpusModel] = {
    m.name: m
    for m in [
        CorpusModel(
            "mlp_chain", MLPChain, (4, WIDTH), 2200, 1100,
            units=(("",), *map(_lin, ["layers.0", "layers.1", "layers.2", "layers.3"])),
            description="four Linear+ReLU layers and a head",
        ),
        CorpusModel(
            "tied_transformer", TiedTransformer, (2, 5), 6000, 3000,
            units=(("",), ("blocks.0",), ("blocks.1",), ("embed", "lm_head")),
            integer_input=24,
            description="embedding, two pre-norm blocks, LM head tied to the embedding",
        ),
        CorpusModel(
            "conv_bn", ConvBN, (2, 3, 6, 6), 900, 500,
            units=(("",), ("conv1", "bn1"), ("conv2", "bn2")),
            handle_less=("conv2",),
            description="conv/batch-norm stack (buffers count zero) and a linear head",
        ),
        CorpusModel(
            "shared_expert_moe", SharedExpertMoE, (3, WIDTH), 4400, 2200,
            units=(("",), ("shared",), ("experts.0",), ("experts.1",), ("experts.2",)),
            replicate=("experts.1",),
            extra_roots=("experts.1",),
            description="gate, one shared expert, three dense experts (one under replicate, owning a root state)",
        ),
        CorpusModel(
            "frozen_ignored", FrozenIgnored, (4, WIDTH), 1000, 1000,
            units=(("",), ("frozen",), ("ignored",)),
            description="frozen and DDP-ignored layers between trained ones",
        ),
        CorpusModel(
            "inplace_boundary", InplaceBoundary, (4, WIDTH), 1000, 1000,
            units=(("",),),
            description="in-place ops with no users where buckets fill up",
        ),
        CorpusModel(
            "called_twice", CalledTwice, (4, WIDTH), 1100, 1100,
            units=(("",), ("shared",)),
            description="one Linear applied twice with residuals",
        ),
        CorpusModel(
            "direct_params", DirectParams, (4, WIDTH), 1100, 1024,
            units=(("",), ("lin",)),
            replicate=("lin",),
            description="parameters used directly, a scale vector and a buffer",
        ),
        CorpusModel(
            "param_free_preamble", ParamFreePreamble, (4, WIDTH), 1000, 1000,
            units=(("",), ("body.1",)),
            extra_roots=("body.1",),
            description="parameter-free normalisation before three layers",
        ),
        CorpusModel(
            "unused_branch", UnusedBranch, (4, WIDTH), 1000, 1000,
            units=(("",), ("unused",), ("dec",)),
            handle_less=("",),
            description="a registered but never-called module",
        ),
    ]
}


def _hf(name, make, cap, units, replicate, description):
    from . import hf_corpus

    return CorpusModel(
        name, make, hf_corpus.TOKENS, cap, cap // 2, units=units, replicate=replicate,
        extra_roots=replicate, integer_input=hf_corpus.VOCAB, missing=hf_corpus.missing,
        capture_missing=hf_corpus.capture_missing,
        description=f"{description} (transformers {hf_corpus.PINNED}, built from a config)",
    )


def _real_architectures():
    # Per layer a state; tied embeddings share one; one layer is marked
    # `replicate` and owns a root state of its own.
    from . import hf_corpus as hf

    return [
        _hf("hf_gpt2", hf.gpt2, 24000,
            (("",), ("transformer.wte", "lm_head"), ("transformer.wpe",), ("transformer.h.0",), ("transformer.h.1",)),
            ("transformer.h.1",), "GPT-2 decoder, LM head tied to the token embedding"),
        _hf("hf_llama", hf.llama, 16000,
            (("",), ("model.embed_tokens", "lm_head"), ("model.layers.0",), ("model.layers.1",)),
            ("model.layers.0",), "Llama decoder: rotary cache buffers, GQA, tied embeddings"),
        _hf("hf_bert", hf.bert, 16000,
            (("",), ("embeddings",), ("encoder.layer.0",), ("encoder.layer.1",), ("pooler",)),
            ("encoder.layer.1",), "BERT encoder with position-id and token-type buffers and a pooler"),
        _hf("hf_mixtral", hf.mixtral, 40000,
            (("",), ("model.embed_tokens",), ("model.layers.0",), ("model.layers.1.mlp",), ("model.layers.1",), ("lm_head",)),
            ("model.layers.1.mlp",), "Mixtral mixture-of-experts decoder, four experts, top-2 routing"),
        _hf("hf_bart", hf.bart, 20000,
            (("",), ("model.shared", "lm_head"), ("model.encoder",), ("model.decoder.layers.0",), ("model.decoder",)),
            ("model.decoder.layers.0",), "BART encoder-decoder, embeddings shared by encoder, decoder and LM head"),
    ]


CORPUS.update((m.name, m) for m in _real_architectures())


def missing(name: str) -> str | None:
    """Why corpus model ``name`` cannot be built here, or None."""
    check = CORPUS[name].missing
    return check() if check is not None else None


def capture_unavailable(name: str) -> str | None:
    """Why Dynamo cannot capture model ``name`` on this torch, decided by a
    probe before anything is captured, or None. Any other failure of the
    capture is the suite's own error, not a reason to judge nothing."""
    from ..core.torch_support import compile_unsupported

    reason = compile_unsupported()
    if reason is None and CORPUS[name].capture_missing is not None:
        reason = CORPUS[name].capture_missing()
    return reason


def build(name: str):
    """``(model, example input)``, deterministic."""
    spec = CORPUS[name]
    torch.manual_seed(0)
    model = spec.make()
    generator = torch.Generator().manual_seed(1)
    if spec.integer_input:
        x = torch.randint(0, spec.integer_input, spec.input_shape, generator=generator)
    else:
        x = torch.randn(spec.input_shape, generator=generator)
    return model, x


def qualnames(model) -> dict[int, str]:
    """id -> first qualified name, for modules and parameters (tied ones
    share their first name)."""
    names: dict[int, str] = {}
    for name, module in model.named_modules():
        names.setdefault(id(module), name or "<root>")
    for name, param in model.named_parameters():
        names.setdefault(id(param), name)
    return names


@functools.cache
def captured(name: str):
    """The graph Dynamo hands a backend for the model: ``(model, gm,
    example_inputs, id -> parameter name)``. Captured once per process."""
    import torch._dynamo

    model, x = build(name)
    graphs = []

    def capture(gm, example_inputs):
        graphs.append((gm, list(example_inputs)))
        return gm.forward

    torch._dynamo.reset()
    torch.compile(model, backend=capture)(x)
    if len(graphs) != 1:
        raise RuntimeError(f"corpus model {name} gave {len(graphs)} Dynamo graphs, expected 1")
    gm, example_inputs = graphs[0]
    names = {id(p): n for n, p in reversed(list(model.named_parameters(remove_duplicate=False)))}
    for n, p in gm.named_parameters(remove_duplicate=False):
        names.setdefault(id(p), n)
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    for node, value in zip(placeholders, example_inputs, strict=False):
        # Dynamo form: the placeholder's example value stands for the parameter.
        if id(value) in names and "example_value" in node.meta:
            names[id(node.meta["example_value"])] = names[id(value)]
    return model, gm, example_inputs, names


def render_buckets(name: str, splitting) -> list[str]:
    spec = CORPUS[name]
    model, gm, example_inputs, names = captured(name)
    result = splitting.split(
        gm, example_inputs,
        bucket_bytes_cap=spec.bucket_bytes_cap,
        first_bucket_cap=spec.first_bucket_cap,
        backend=lambda sub_gm, _inputs: sub_gm.forward,
    )
    order = {n: i for i, (n, _) in enumerate(model.named_parameters())}
    lines = []
    for index, bucket in enumerate(result.buckets):
        params = sorted((names.get(pid, "<unknown parameter>") for pid in bucket.param_ids), key=lambda n: order.get(n, len(order)))
        line = f"bucket {index}: {bucket.size} bytes: {' '.join(params) or '-'}"
        if bucket.extra_ops:
            line += f" | extended by {bucket.extra_ops} ops, +{bucket.extra_bytes} bytes"
        lines.append(line)
    return lines


class _Handle:
    def __init__(self, label):
        self.label = label


def render_traversal(name: str, traversal) -> list[str]:
    spec = CORPUS[name]
    model, _ = build(name)
    modules = dict(model.named_modules())
    labels: dict[int, str] = {}
    # torch's registry holds states weakly: keep them alive while rendering.
    states_alive = []
    roots = {""} | set(spec.extra_roots)
    for i, unit in enumerate(spec.units):
        label = f"s{i}"
        handle = None if unit[0] in spec.handle_less else _Handle(f"h{i}")
        state = traversal.new_state(handle, is_root=unit[0] in roots)
        labels[id(state)] = label
        states_alive.append(state)
        for qualname in unit:
            traversal.attach_state(modules[qualname], state)
    for qualname in spec.replicate:
        traversal.mark_incompatible(modules[qualname], "replicate")
    names = qualnames(model)
    states, owners = traversal.states_with_modules(model)
    handles = traversal.handles(model)
    root_states = traversal.root_states(model)
    return [
        "states: " + " ".join(f"{labels.get(id(s), '?')}@{names.get(id(m), '?')}" for s, m in zip(states, owners, strict=False)),
        "handles: " + " ".join(getattr(h, "label", "?") for h in handles),
        "root states: " + " ".join(labels.get(id(s), "?") for s in root_states),
    ]


@functools.cache
def untraceable(name: str) -> str | None:
    """Why plain ``torch.fx`` cannot trace the model (the exec-order area
    records during such a trace), or None."""
    model, _ = build(name)
    try:
        torch.fx.Tracer().trace(model)
    except Exception as exc:  # noqa: BLE001 - the reason is what fx says
        first = (str(exc).strip().splitlines() or [""])[0][:160]
        return f"{name} is not torch.fx-traceable ({type(exc).__name__}: {first})"
    return None


def render_exec_order(name: str, exec_order) -> list[str]:
    model, _ = build(name)
    names = qualnames(model)
    tracer = torch.fx.Tracer()
    with exec_order.patch_tracer(tracer, model) as info:
        tracer.trace(model)
    return [
        "modules: " + " ".join(names.get(id(m), "?") for m in info.module_forward_order),
        "params: " + " ".join(names.get(id(p), "?") for p in info.param_forward_order),
    ]


# --- FSDP2: the fully_shard calls a user writes for the model ----------------------


def fsdp2_calls(name: str) -> list[tuple[str, ...]]:
    """``fully_shard`` calls in the order a user makes them: every unit that
    ``replicate`` does not own, deepest first, the root last. A unit of
    several modules (tied embeddings) is one call on all of them."""
    spec = CORPUS[name]
    replicated = set(spec.replicate)
    units = [u for u in spec.units if u != ("",) and not replicated & set(u)]
    units.sort(key=lambda unit: -max(q.count(".") + 1 for q in unit))
    return [*units, ("",)]


def fsdp2_oracle_input(model, replicate, roots, earlier):
    """The model as the FSDP2 checkers see a generated tree: module indices in
    ``named_modules`` order, children in registration order, the roots of
    this call and the modules earlier calls gave a group of their own."""
    from .fsdp2 import BuiltFsdp2, Fsdp2Spec
    from .trees import BuiltTree, TreeSpec

    named = dict(model.named_modules())
    modules = list(named.values())
    index = {id(m): i for i, m in enumerate(modules)}
    children = tuple(tuple(index[id(c)] for c in m._modules.values() if c is not None) for m in modules)
    tree = TreeSpec(children=children, replicate=frozenset(index[id(named[q])] for q in replicate))
    spec = Fsdp2Spec(tree=tree, roots=tuple(index[id(named[q])] for q in roots),
                     groups=frozenset(index[id(named[q])] for call in earlier for q in call))
    return BuiltFsdp2(spec, BuiltTree(tree, model, modules), tuple(named[q] for q in roots), None)


def fsdp2_plan(name: str, area):
    """Yield ``(call, built)`` for each of the model's ``fully_shard`` calls,
    on a fresh model marked through ``area`` as those calls would leave it:
    ``replicate`` owners marked, each earlier call's roots holding a group."""
    spec = CORPUS[name]
    model, _ = build(name)
    named = dict(model.named_modules())
    for qualname in spec.replicate:
        area.mark_incompatible(named[qualname], "replicate")
    done: list[tuple[str, ...]] = []
    for call in fsdp2_calls(name):
        yield call, fsdp2_oracle_input(model, spec.replicate, call, done)
        for qualname in call:
            area.mark_own_group(named[qualname])
        done.append(call)


def render_fsdp2(name: str, area) -> list[str]:
    lines = []
    for call, built in fsdp2_plan(name, area):
        names = qualnames(built.tree.root)
        buffer_names = {id(b): q for q, b in built.tree.root.named_buffers(remove_duplicate=False)}
        managed = area.managed_modules(built.roots, None)
        params, buffers = area.managed_states(managed, None)
        lines += [
            f"fully_shard({', '.join(q or '<root>' for q in call)}): " + " ".join(names.get(id(m), "?") for m in managed),
            "  params: " + (" ".join(names.get(id(p), "?") for p in params) or "-"),
            "  buffers: " + (" ".join(buffer_names.get(id(b), "?") for b in buffers) or "-"),
        ]
    return lines
