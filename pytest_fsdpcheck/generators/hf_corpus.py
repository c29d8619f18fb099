"""Real architectures for the golden corpus: tiny ``transformers`` models built
offline from configs (no download, no weights), seeded like every corpus
model. Optional: ``pip install "pytest-fsdpcheck[models]"``; without
``transformers`` each model's checks are ``n/p`` with the reason.

Each builder returns the model in eval mode (no dropout) with the KV cache
off, so Dynamo captures one graph of a plain forward over token ids.
"""

from __future__ import annotations

import importlib.util

WIDTH = 32
VOCAB = 64
TOKENS = (2, 8)  # batch, sequence
PINNED = "5.23"  # the transformers release the golden tables were rendered with


def missing() -> str | None:
    """Why the real-architecture corpus cannot run here, or None."""
    if importlib.util.find_spec("transformers") is None:
        return "transformers is not installed (pip install 'pytest-fsdpcheck[models]')"
    import torch
    import transformers
    from transformers.utils import is_torch_available

    # transformers refuses a torch older than it supports (5.x: torch >= 2.6)
    if not is_torch_available():
        return f"transformers {transformers.__version__} does not support torch {torch.__version__}"
    return None


def capture_missing() -> str | None:
    """Why Dynamo cannot capture these models on this torch, or None.

    transformers 5.x asks ``torch.compiler.is_exporting()`` in its forward;
    torch 2.6 lacks the function, and its Dynamo cannot trace the
    ``AttributeError`` that transformers catches there."""
    import torch

    if not hasattr(torch.compiler, "is_exporting"):
        return (f"transformers calls torch.compiler.is_exporting, which torch {torch.__version__} lacks, "
                "so this Dynamo cannot capture its models")
    return None


def _finish(model):
    model.config.use_cache = False
    return model.eval()


def gpt2():
    from transformers import GPT2Config, GPT2LMHeadModel

    config = GPT2Config(vocab_size=VOCAB, n_positions=16, n_embd=WIDTH, n_layer=2, n_head=2,
                        bos_token_id=0, eos_token_id=0, tie_word_embeddings=True)
    return _finish(GPT2LMHeadModel(config))


def llama():
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(vocab_size=VOCAB, hidden_size=WIDTH, intermediate_size=2 * WIDTH, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=16,
                         bos_token_id=0, eos_token_id=0, pad_token_id=0, tie_word_embeddings=True)
    return _finish(LlamaForCausalLM(config))


def bert():
    from transformers import BertConfig, BertModel

    config = BertConfig(vocab_size=VOCAB, hidden_size=WIDTH, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=2 * WIDTH, max_position_embeddings=16, pad_token_id=0)
    return _finish(BertModel(config))


def mixtral():
    from transformers import MixtralConfig, MixtralForCausalLM

    config = MixtralConfig(vocab_size=VOCAB, hidden_size=WIDTH, intermediate_size=48, num_hidden_layers=2,
                           num_attention_heads=2, num_key_value_heads=1, num_local_experts=4, num_experts_per_tok=2,
                           max_position_embeddings=16, bos_token_id=0, eos_token_id=0, pad_token_id=0)
    return _finish(MixtralForCausalLM(config))


def bart():
    from transformers import BartConfig, BartForConditionalGeneration

    config = BartConfig(vocab_size=VOCAB, d_model=WIDTH, encoder_layers=1, decoder_layers=1,
                        encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=2 * WIDTH,
                        decoder_ffn_dim=2 * WIDTH, max_position_embeddings=16,
                        pad_token_id=1, bos_token_id=0, eos_token_id=2, decoder_start_token_id=2)
    return _finish(BartForConditionalGeneration(config))
