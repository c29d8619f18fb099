"""Real frameworks' FSDP2 plans as built-in model cases.

Each factory builds a tiny model with the framework's own model code and
returns a :class:`ModelCase` whose ``plan(model, mesh)`` calls the
framework's own sharding function, so :func:`record_plan` records the
``fully_shard`` calls the framework really makes (its grouping of tied
weights, its order, its keyword arguments) and every check judges them:

- ``torchtitan_llama3_debug`` / ``torchtitan_llama3_debug_tied``: torchtitan's
  ``apply_fsdp_to_decoder`` (what ``parallelize_llama`` applies, with the
  arguments it derives from the default configs) on its ``debugmodel``
  Llama 3 configuration, shrunk; the tied variant turns on
  ``enable_weight_tying`` as its 1B and 3B configurations do.
- ``torchtune_llama3_tiny``: torchtune's ``training.shard_model`` with the
  shard conditions its distributed recipes pass (``get_shard_conditions``
  with ``custom_sharded_layers=["tok_embeddings", "output"]``) on a tiny
  model from its ``llama3`` component builder.
- ``accelerate_fsdp2_llama`` / ``accelerate_fsdp2_llama_tied``: accelerate's
  ``fsdp2_prepare_model`` with an FSDP2 plugin wrapping ``LlamaDecoderLayer``
  (``transformer_based_wrap``), on a tiny transformers ``LlamaForCausalLM``.

Name one with ``--fsdpcheck-model pytest_fsdpcheck.cases.frameworks:<factory>``.
A factory whose framework is not importable raises
:class:`FrameworkUnavailable`, one line naming what is missing;
:func:`framework_models` lists them all with that reason, for skips.
"""

from __future__ import annotations

import importlib
import importlib.util
from dataclasses import dataclass

from .model import CaseError, ModelCase

# tiny on purpose: every check deep-copies, captures or traces the model
_DIM, _HEADS, _KV_HEADS, _LAYERS, _VOCAB, _SEQ = 32, 4, 2, 2, 128, 8


class FrameworkUnavailable(CaseError):
    """The framework a built-in case runs is not installed or not importable."""


@dataclass(frozen=True)
class FrameworkModel:
    name: str  # the factory's name in this module
    framework: str  # the distribution to install
    needs: tuple[str, ...]  # modules the factory imports, the first that fails is named

    @property
    def spec(self) -> str:
        return f"{__name__}:{self.name}"

    @property
    def factory(self):
        return globals()[self.name]

    def unavailable(self) -> str | None:
        return unavailable(self.needs)


def unavailable(modules) -> str | None:
    """Why one of ``modules`` cannot be imported, in one line, or None.

    A missing top-level package is found without importing anything; an
    installed one is imported, because a framework can be present and still
    not importable (torchtune 0.6.1 against a torchao that moved names)."""
    for name in modules:
        top = name.split(".")[0]
        try:
            found = importlib.util.find_spec(top)
        except (ImportError, ValueError):
            found = None
        if found is None:
            return f"{top} is not installed (pip install --no-deps {top}; see docs/models.md, 'Framework plans built in')"
    for name in modules:
        try:
            importlib.import_module(name)
        except Exception as exc:  # noqa: BLE001 - any import failure is the reason
            first = (str(exc).strip().splitlines() or [""])[0]
            return f"{name} is installed but cannot be imported: {type(exc).__name__}: {first}"
    return None


def _require(modules):
    reason = unavailable(modules)
    if reason is not None:
        raise FrameworkUnavailable(reason)


# --- torchtitan --------------------------------------------------------------------

_TORCHTITAN = (
    "torchtitan.models.llama3",
    "torchtitan.distributed.fsdp",
    "torchtitan.config",
    "torchtitan.models.common.attention",
)


def _torchtitan_model(tied: bool):
    import torch
    from torchtitan.models.common import ComplexRoPE, compute_ffn_hidden_dim
    from torchtitan.models.common.attention import ScaledDotProductAttention
    from torchtitan.models.llama3 import _build_llama3_layers, llama3_configs

    config = llama3_configs["debugmodel"](attn_backend="flex")
    config.dim, config.vocab_size = _DIM, _VOCAB
    config.tok_embeddings.num_embeddings, config.tok_embeddings.embedding_dim = _VOCAB, _DIM
    config.norm.normalized_shape = _DIM
    config.lm_head.in_features, config.lm_head.out_features = _DIM, _VOCAB
    config.enable_weight_tying = tied
    config.layers = _build_llama3_layers(
        fuse_qkv=True, n_layers=_LAYERS, dim=_DIM, n_heads=_HEADS,
        hidden_dim=compute_ffn_hidden_dim(_DIM, multiple_of=32),
        rope=ComplexRoPE.Config(dim=_DIM // _HEADS, max_seq_len=4 * _SEQ, theta=500000, scaling="llama"),
        attn_backend="flex",
    )
    # FlexAttention has no backward on CPU; torchtitan's own SDPA module is a
    # parameterless leaf like it, so the module tree and the plan are the same
    for layer in config.layers:
        layer.attention.inner_attention = ScaledDotProductAttention.Config()
    torch.manual_seed(0)
    model = config.build()
    model.init_states()
    return model


def _torchtitan_plan(model, mesh):
    from torchtitan.config import TORCH_DTYPE_MAP, ParallelismConfig, TrainingConfig
    from torchtitan.distributed.fsdp import apply_fsdp_to_decoder

    # what parallelize_llama passes on the classic FSDP2 path (no PP, CP, TP),
    # from the default configs; its own mesh building asks for torchtitan's
    # device type (cuda), so the world-of-one CPU mesh is given directly
    training, parallelism = TrainingConfig(), ParallelismConfig(spmd_backend="partial_dtensor")
    apply_fsdp_to_decoder(
        model, mesh,
        param_dtype=TORCH_DTYPE_MAP[training.mixed_precision_param],
        reduce_dtype=TORCH_DTYPE_MAP[training.mixed_precision_reduce],
        pp_enabled=False,
        cpu_offload=training.enable_cpu_offload,
        reshard_after_forward_policy=parallelism.fsdp_reshard_after_forward,
        dp_mesh_dims=None,
        enable_symm_mem=parallelism.enable_fsdp_symm_mem,
    )


def _torchtitan_case(name, tied):
    import torch

    _require(_TORCHTITAN)
    model = _torchtitan_model(tied)
    tokens = torch.randint(0, _VOCAB, (2, _SEQ), generator=torch.Generator().manual_seed(0))
    return ModelCase(name, model, (tokens,), plan=_torchtitan_plan)


def torchtitan_llama3_debug():
    """torchtitan's ``apply_fsdp_to_decoder`` on its Llama 3 ``debugmodel`` (shrunk)."""
    return _torchtitan_case("torchtitan-llama3-debug", tied=False)


def torchtitan_llama3_debug_tied():
    """The same with ``enable_weight_tying`` (as torchtitan's Llama 3.2 1B/3B)."""
    return _torchtitan_case("torchtitan-llama3-debug-tied", tied=True)


# --- torchtune ---------------------------------------------------------------------

_TORCHTUNE = ("torchtune.training", "torchtune.models.llama3._component_builders")
#: what torchtune's llama3 recipe configs set as ``custom_sharded_layers``
TORCHTUNE_CUSTOM_SHARDED_LAYERS = ("tok_embeddings", "output")


def _torchtune_plan(model, mesh):
    import functools

    from torchtune import training

    # as recipes/full_finetune_distributed.py calls it
    conditions = [functools.partial(training.get_shard_conditions,
                                    names_to_match=list(TORCHTUNE_CUSTOM_SHARDED_LAYERS))]
    training.shard_model(model=model, shard_conditions=conditions, cpu_offload=False,
                         reshard_after_forward=True, dp_mesh=mesh)


def torchtune_llama3_tiny():
    """torchtune's ``shard_model`` with its recipes' shard conditions on a tiny
    model from its ``llama3`` component builder."""
    import torch

    _require(_TORCHTUNE)
    from torchtune.models.llama3._component_builders import llama3

    torch.manual_seed(0)
    model = llama3(vocab_size=_VOCAB, num_layers=_LAYERS, num_heads=_HEADS, num_kv_heads=_KV_HEADS,
                   embed_dim=_DIM, max_seq_len=4 * _SEQ, intermediate_dim=2 * _DIM)
    tokens = torch.randint(0, _VOCAB, (2, _SEQ), generator=torch.Generator().manual_seed(0))
    return ModelCase("torchtune-llama3-tiny", model, (tokens,), plan=_torchtune_plan)


# --- HF accelerate -----------------------------------------------------------------

_ACCELERATE = ("accelerate.utils.fsdp_utils", "accelerate", "transformers")


def _accelerate_plan(model, mesh):
    import os

    from accelerate import Accelerator
    from accelerate.state import AcceleratorState
    from accelerate.utils import FullyShardedDataParallelPlugin
    from accelerate.utils.fsdp_utils import fsdp2_prepare_model

    # the plugin writes its settings into os.environ (FSDP_CPU_RAM_EFFICIENT_LOADING):
    # a plan must leave the process as it found it
    environ = dict(os.environ)
    plugin = FullyShardedDataParallelPlugin(
        fsdp_version=2, auto_wrap_policy="transformer_based_wrap",
        transformer_cls_names_to_wrap=[type(model.model.layers[0]).__name__],
        cpu_ram_efficient_loading=False,
    )
    # AcceleratorState is process-wide: each plan gets a fresh one over the
    # world-of-one group record_plan set up
    AcceleratorState._reset_state(reset_partial_state=True)
    try:
        accelerator = Accelerator(cpu=True)
        # on one CPU process accelerate's state takes the plugin only for
        # multi-device types; this is the assignment it makes there
        accelerator.state.fsdp_plugin = plugin
        fsdp2_prepare_model(accelerator, model)
    finally:
        AcceleratorState._reset_state(reset_partial_state=True)
        os.environ.clear()
        os.environ.update(environ)


def _accelerate_case(name, tied):
    import torch

    _require(_ACCELERATE)
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(vocab_size=_VOCAB, hidden_size=_DIM, intermediate_size=2 * _DIM,
                         num_hidden_layers=_LAYERS, num_attention_heads=_HEADS, num_key_value_heads=_KV_HEADS,
                         max_position_embeddings=4 * _SEQ, tie_word_embeddings=tied)
    torch.manual_seed(0)
    model = LlamaForCausalLM(config).eval()
    tokens = torch.randint(0, _VOCAB, (2, _SEQ), generator=torch.Generator().manual_seed(0))
    return ModelCase(name, model, (tokens,), plan=_accelerate_plan)


def accelerate_fsdp2_llama():
    """accelerate's ``fsdp2_prepare_model`` (``transformer_based_wrap`` on the
    decoder layers) on a tiny transformers Llama."""
    return _accelerate_case("accelerate-fsdp2-llama", tied=False)


def accelerate_fsdp2_llama_tied():
    """The same with ``tie_word_embeddings`` (as Llama 3.2 1B)."""
    return _accelerate_case("accelerate-fsdp2-llama-tied", tied=True)


FRAMEWORK_MODELS = (
    FrameworkModel("torchtitan_llama3_debug", "torchtitan", _TORCHTITAN),
    FrameworkModel("torchtitan_llama3_debug_tied", "torchtitan", _TORCHTITAN),
    FrameworkModel("torchtune_llama3_tiny", "torchtune", _TORCHTUNE),
    FrameworkModel("accelerate_fsdp2_llama", "accelerate", _ACCELERATE),
    FrameworkModel("accelerate_fsdp2_llama_tied", "accelerate", _ACCELERATE),
)


def framework_models() -> list[tuple[FrameworkModel, str | None]]:
    """Every built-in framework case with why it cannot run here (None: it can)."""
    return [(fm, fm.unavailable()) for fm in FRAMEWORK_MODELS]
