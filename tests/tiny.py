"""A tiny random-weight Llama built in memory (no tokenizer, nothing saved): for tests of the runtime's parts."""

from __future__ import annotations

import torch
from transformers import LlamaConfig, LlamaForCausalLM


def tiny_llama(seed: int = 0, vocab: int = 512, hidden: int = 64, **config) -> LlamaForCausalLM:
    """2 layers, 4 heads of hidden/4 (2 key-value heads), MLP 2·hidden; `config` overrides any LlamaConfig field."""
    torch.manual_seed(seed)
    cfg = LlamaConfig(
        **{
            **dict(
                vocab_size=vocab,
                hidden_size=hidden,
                intermediate_size=2 * hidden,
                num_hidden_layers=2,
                num_attention_heads=4,
                num_key_value_heads=2,
                max_position_embeddings=64,
            ),
            **config,
        }
    )
    return LlamaForCausalLM(cfg).eval()
