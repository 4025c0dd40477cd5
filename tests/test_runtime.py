"""Small runtime facts with one owner each: the end-of-text ids, the training prompt file, the cache's capacity."""

from __future__ import annotations

import pytest
import torch
from transformers import GenerationConfig as HFGenerationConfig
from transformers import LlamaConfig, LlamaForCausalLM

from engine.runtime.cache import KVCache, room
from engine.runtime.models import eos_ids
from training import corpus, prompts, train


class Tok:
    def __init__(self, eos):
        self.eos_token_id = eos


def tiny(eos) -> LlamaForCausalLM:
    cfg = LlamaConfig(
        vocab_size=32,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        eos_token_id=eos,
    )
    model = LlamaForCausalLM(cfg)
    model.generation_config = HFGenerationConfig(eos_token_id=eos)
    return model


def test_eos_ids_is_one_definition_and_never_holds_none():
    """Training's corpus and the engine read the same eos_ids; a model without any end-of-text id gives none
    (headtrain's own copy used to return [None])."""
    assert eos_ids(tiny(None), Tok(None)) == frozenset()
    assert eos_ids(tiny([2, 5]), Tok(7)) == {2, 5, 7}
    assert not hasattr(corpus, "_eos_ids") and corpus.eos_ids is eos_ids


def test_the_training_prompts_file_is_named_once():
    """python -m training.train and training.prompts read and write one file."""
    assert train.PROMPTS is prompts.PROMPTS and prompts.PROMPTS.exists()


def test_room_is_the_one_capacity_check():
    """A write past the cache's slots is refused before anything is written, by the lean forward and by
    transformers' path (PointerLayer.update) alike: both call room()."""
    assert room(3, 2, 5) == 5
    with pytest.raises(RuntimeError, match="KV cache full: 6 tokens > 5 slots"):
        room(3, 3, 5)
    cache = KVCache(1, 4)
    k = torch.zeros(1, 1, 3, 2)
    cache.layers[0].update(k, k)
    with pytest.raises(RuntimeError, match="KV cache full: 6 tokens > 4 slots"):
        cache.layers[0].update(k, k)
    assert cache.length == 3
