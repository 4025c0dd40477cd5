"""A pre-allocated KV cache with a length pointer: rollback is an O(1) pointer move.

Like gpt-fast's cache indexed by `input_pos`: rejected slots are left behind and overwritten by
the next write, nothing is copied or recomputed. Unlike transformers' `StaticCache`, attention
only ever sees the live prefix `[:length]` (a view), so a cache sized for a long run costs a short
run nothing. The cache plugs into any transformers model through the `Cache` layer interface.
"""
from __future__ import annotations

import torch
from transformers.cache_utils import Cache, CacheLayerMixin


class PointerLayer(CacheLayerMixin):
    """One attention layer's keys/values in a fixed buffer `(B, H, max_len, D)` plus a length."""

    is_compileable = False
    is_sliding = False
    is_croppable = True

    def __init__(self, max_len: int):
        super().__init__()
        self.max_len = max_len
        self.length = 0  # live tokens; slots at and past it are garbage waiting to be overwritten

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        b, h, _, dk = key_states.shape
        self.dtype, self.device = key_states.dtype, key_states.device
        self.keys = key_states.new_empty((b, h, self.max_len, dk))
        self.values = value_states.new_empty((b, h, self.max_len, value_states.shape[-1]))
        self.is_initialized = True

    def update(self, key_states, value_states, *args, **kwargs):
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        n = key_states.shape[-2]
        end = self.length + n
        if end > self.max_len:
            raise RuntimeError(f"KV cache full: {end} tokens > {self.max_len} slots")
        self.keys[:, :, self.length:end].copy_(key_states)
        self.values[:, :, self.length:end].copy_(value_states)
        self.length = end
        return self.keys[:, :, :end], self.values[:, :, :end]

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        return self.length + query_length, 0

    def get_seq_length(self) -> int:
        return self.length

    def get_max_length(self) -> int:
        return self.max_len

    def crop(self, tokens_to_remove: int) -> None:
        """transformers' convention: a negative count of tokens to drop."""
        self.length = max(0, self.length + min(0, tokens_to_remove))

    def reset(self) -> None:
        self.length = 0


class KVCache(Cache):
    """One `PointerLayer` per model layer; `length` is the single pointer the engine moves."""

    def __init__(self, num_layers: int, max_len: int):
        super().__init__(layers=[PointerLayer(max_len) for _ in range(num_layers)])
        self.max_len = max_len

    @classmethod
    def for_model(cls, model, max_len: int) -> "KVCache":
        """A cache sized for `max_len` tokens of `model` (allocated lazily on the first write)."""
        return cls(model.config.get_text_config().num_hidden_layers, max_len)

    @property
    def length(self) -> int:
        return self.layers[0].length

    def truncate(self, length: int) -> None:
        """Move the pointer back to `length` tokens: O(1), no copy, whatever the context length."""
        if not 0 <= length <= self.length:
            raise ValueError(f"cannot truncate a cache of {self.length} tokens to {length}")
        for layer in self.layers:
            layer.length = length
