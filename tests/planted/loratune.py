"""A second framework, written for issue 56 as its users write one: LoRA and
full fine-tuning of a causal LM (RMSNorm, rotary embeddings, grouped-query
attention, a SwiGLU MLP, tied embeddings), LoRA adapters wrapping frozen
Linears, a per-layer ``fully_shard`` plan with bf16 parameters and fp32
reduction, each decoder layer compiled (``layer.compile()``) and wrapped for
activation checkpointing before the plan shards it, and its own loss
(next-token cross-entropy), its own training step (two micro-batches
accumulated with gradient sync off, then AdamW). The sound setups must get no FAIL in torch's
column; each mistake (``mistake_*``) must be the user's, one line naming the
factory and the rule, exit 11.

Nothing here is the suite's: it imports only torch and the public
``pytest_fsdpcheck.cases`` API, as a framework would."""

import threading

import hypothesis.strategies as st
import torch
import torch.nn.functional as F
from torch import nn

try:
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
except ImportError:  # torch 2.3 and 2.4 keep FSDP2 in the composable package
    from torch.distributed._composable.fsdp import MixedPrecisionPolicy, fully_shard

from pytest_fsdpcheck.cases import ModelCase, model_examples, model_factory

VOCAB, DIM, HEADS, KV_HEADS, HIDDEN = 32, 16, 4, 2, 24


class RMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        normed = x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + self.eps)
        return normed.type_as(x) * self.weight


def rotary(x, positions):
    """Rotary position embedding over the last dim (pairs of halves)."""
    half = x.shape[-1] // 2
    freqs = 1.0 / (10000 ** (torch.arange(half, device=x.device, dtype=torch.float32) / half))
    angles = positions[:, None].float() * freqs[None, :]
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
    first, second = x[..., :half], x[..., half:]
    return torch.cat([first * cos - second * sin, first * sin + second * cos], dim=-1)


class LoRALinear(nn.Module):
    """A frozen Linear and a trainable low-rank update beside it."""

    def __init__(self, base: nn.Linear, rank=4, alpha=8.0):
        super().__init__()
        self.base = base
        self.base.weight.requires_grad_(False)
        if self.base.bias is not None:
            self.base.bias.requires_grad_(False)
        self.lora_a = nn.Linear(base.in_features, rank, bias=False)
        self.lora_b = nn.Linear(rank, base.out_features, bias=False)
        nn.init.normal_(self.lora_b.weight, std=0.02)  # not zero: the check must see the adapters' gradients
        self.scale = alpha / rank

    def forward(self, x):
        return self.base(x) + self.lora_b(self.lora_a(x)) * self.scale


class Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.head_dim = DIM // HEADS
        self.q_proj = nn.Linear(DIM, HEADS * self.head_dim, bias=False)
        self.k_proj = nn.Linear(DIM, KV_HEADS * self.head_dim, bias=False)
        self.v_proj = nn.Linear(DIM, KV_HEADS * self.head_dim, bias=False)
        self.o_proj = nn.Linear(HEADS * self.head_dim, DIM, bias=False)

    def forward(self, x):
        batch, length, _ = x.shape
        positions = torch.arange(length, device=x.device)
        q = self.q_proj(x).view(batch, length, HEADS, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(batch, length, KV_HEADS, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(batch, length, KV_HEADS, self.head_dim).transpose(1, 2)
        q, k = rotary(q, positions), rotary(k, positions)
        k = k.repeat_interleave(HEADS // KV_HEADS, dim=1)
        v = v.repeat_interleave(HEADS // KV_HEADS, dim=1)
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.o_proj(out.transpose(1, 2).reshape(batch, length, -1))


class SwiGLU(nn.Module):
    def __init__(self):
        super().__init__()
        self.gate_proj = nn.Linear(DIM, HIDDEN, bias=False)
        self.up_proj = nn.Linear(DIM, HIDDEN, bias=False)
        self.down_proj = nn.Linear(HIDDEN, DIM, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nn.Module):
    def __init__(self):
        super().__init__()
        self.input_norm = RMSNorm(DIM)
        self.attn = Attention()
        self.post_norm = RMSNorm(DIM)
        self.mlp = SwiGLU()

    def forward(self, x):
        x = x + self.attn(self.input_norm(x))
        return x + self.mlp(self.post_norm(x))


class CausalLM(nn.Module):
    def __init__(self, depth=2):
        super().__init__()
        self.embed_tokens = nn.Embedding(VOCAB, DIM)
        self.layers = nn.ModuleList(DecoderLayer() for _ in range(depth))
        self.norm = RMSNorm(DIM)
        self.lm_head = nn.Linear(DIM, VOCAB, bias=False)
        self.lm_head.weight = self.embed_tokens.weight  # tied

    def forward(self, tokens):
        h = self.embed_tokens(tokens)
        for layer in self.layers:
            h = layer(h)
        return self.lm_head(self.norm(h))


def next_token_loss(logits, tokens):
    """The framework's own loss: next-token cross-entropy, in fp32."""
    return F.cross_entropy(logits[:, :-1].float().reshape(-1, VOCAB), tokens[:, 1:].reshape(-1))


def add_lora(model):
    """Freeze the model; LoRA on every attention's q and v projections."""
    for p in model.parameters():
        p.requires_grad_(False)
    for layer in model.layers:
        attn = layer.attn
        attn.q_proj = LoRALinear(attn.q_proj)
        attn.v_proj = LoRALinear(attn.v_proj)
    return model


def _mp():
    return MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)


def plan(model, mesh):
    """Per layer, inner first; the tied pair in one group; the root last."""
    for layer in model.layers:
        fully_shard(layer, mesh=mesh, mp_policy=_mp())
    fully_shard([model.embed_tokens, model.lm_head], mesh=mesh, mp_policy=_mp())
    fully_shard(model, mesh=mesh, mp_policy=_mp())


def _wrapped(model, compile_layers, checkpoint):
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper

    for i, layer in enumerate(model.layers):
        if checkpoint:
            layer = checkpoint_wrapper(layer)
        if compile_layers:
            layer.compile()
        model.layers[i] = layer
    return model


def _tokens():
    return (torch.randint(0, VOCAB, (2, 8), generator=torch.Generator().manual_seed(0)),)


def adamw(model):
    """The framework's optimizer: AdamW over what trains, no decay on norms and biases."""
    trainable = [p for p in model.parameters() if p.requires_grad]
    return torch.optim.AdamW([{"params": [p for p in trainable if p.dim() > 1], "weight_decay": 0.01},
                              {"params": [p for p in trainable if p.dim() <= 1], "weight_decay": 0.0}], lr=1e-3)


def _case(name, model, the_plan=plan, **kw):
    # its own training step: next-token loss, two micro-batches accumulated, AdamW
    return ModelCase(name, model, _tokens(), plan=the_plan, loss=next_token_loss, micro_batches=2, optimizer=adamw,
                     **kw)


# --- the sound setups -----------------------------------------------------------------


# the production configuration, judged whatever else is drawn
PRODUCTION = {"compile_layers": True, "checkpoint": True}


@model_examples(PRODUCTION)
@model_factory(compile_layers=st.booleans(), checkpoint=st.booleans())
def full_finetune(compile_layers=True, checkpoint=True):
    torch.manual_seed(0)
    return _case("full_finetune", _wrapped(CausalLM(), compile_layers, checkpoint))


@model_examples(PRODUCTION)
@model_factory(compile_layers=st.booleans(), checkpoint=st.booleans())
def lora(compile_layers=True, checkpoint=True):
    torch.manual_seed(0)
    return _case("lora", _wrapped(add_lora(CausalLM()), compile_layers, checkpoint))


class LockedCausalLM(CausalLM):
    """As frameworks hold a lock for their logging: deepcopy refuses it."""

    def __init__(self):
        super().__init__()
        self.log_lock = threading.Lock()


def lora_locked():
    torch.manual_seed(0)
    return _case("lora_locked", _wrapped(add_lora(LockedCausalLM()), True, True))


def lora_adapters_unreduced():
    """Adapters ignored on purpose, said so: the framework all-reduces them itself."""
    torch.manual_seed(0)
    return _case("lora_adapters_unreduced", add_lora(CausalLM()), _adapters_ignored_plan,
                 unreduced=("*.lora_a.weight", "*.lora_b.weight"))


# --- the user's mistakes: each one line naming the factory and the rule, exit 11 -------


def _tied_split_plan(model, mesh):
    for layer in model.layers:
        fully_shard(layer, mesh=mesh, mp_policy=_mp())
    fully_shard(model.embed_tokens, mesh=mesh, mp_policy=_mp())
    fully_shard(model.lm_head, mesh=mesh, mp_policy=_mp())
    fully_shard(model, mesh=mesh, mp_policy=_mp())


def mistake_tied_split():  # PLN-1
    torch.manual_seed(0)
    return _case("mistake_tied_split", add_lora(CausalLM()), _tied_split_plan)


def _root_first_plan(model, mesh):
    fully_shard(model, mesh=mesh, mp_policy=_mp())
    for layer in model.layers:
        fully_shard(layer, mesh=mesh, mp_policy=_mp())


def mistake_root_first():  # PLN-4 (and PLN-2: the layers reachable from the root's group)
    torch.manual_seed(0)
    return _case("mistake_root_first", add_lora(CausalLM()), _root_first_plan)


def _lora_after_plan(model, mesh):
    plan(model, mesh)
    add_lora(model)


def mistake_lora_after_sharding():  # PLN-3: the adapters are in no group
    torch.manual_seed(0)
    return _case("mistake_lora_after_sharding", CausalLM(), _lora_after_plan)


def _adapters_ignored_plan(model, mesh):
    adapters = {p for name, p in model.named_parameters() if ".lora_" in name}
    for layer in model.layers:
        fully_shard(layer, mesh=mesh, mp_policy=_mp(), ignored_params=adapters)
    fully_shard([model.embed_tokens, model.lm_head], mesh=mesh, mp_policy=_mp())
    fully_shard(model, mesh=mesh, mp_policy=_mp(), ignored_params=adapters)


def mistake_adapters_ignored():  # PLN-5: never reduced, the ranks drift apart
    torch.manual_seed(0)
    return _case("mistake_adapters_ignored", add_lora(CausalLM()), _adapters_ignored_plan)


SOUND = ("full_finetune", "lora", "lora_locked")
MISTAKES = {
    "mistake_tied_split": "PLN-1",
    "mistake_root_first": "PLN-2",
    "mistake_lora_after_sharding": "PLN-3",
    "mistake_adapters_ignored": "PLN-5",
}
