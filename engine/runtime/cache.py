"""A pre-allocated KV cache with a length pointer: rollback is an O(1) pointer move.

Like gpt-fast's cache indexed by `input_pos`: rejected slots are left behind and overwritten by
the next write, nothing is copied or recomputed. Unlike transformers' `StaticCache`, attention
only ever sees the live prefix `[:length]` (a view), so a cache sized for a long run costs a short
run nothing. The cache plugs into any transformers model through the `Cache` layer interface.

The cache owns its writes: every change to keys, values or the pointer is a method here (a forward's
write, a rollback, a tree's compaction, beam search's row expansion and reordering), and `room` is the
one capacity check.
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
        """Write (B, H, n, D) keys and values after the live prefix; returns the live (B, H, length, D) views."""
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        end = room(self.length, key_states.shape[-2], self.max_len)
        self.keys[:, :, self.length : end].copy_(key_states)
        self.values[:, :, self.length : end].copy_(value_states)
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


def room(length: int, n: int, max_len: int) -> int:
    """The end of a write of n tokens after `length`: the one capacity check (RuntimeError when full)."""
    end = length + n
    if end > max_len:
        raise RuntimeError(f"KV cache full: {end} tokens > {max_len} slots")
    return end


class KVCache(Cache):
    """One `PointerLayer` per model layer; `length` is the single pointer the engine moves.

    Invariant between rounds (the engine keeps it; every write goes through a method below): the target's
    cache holds every committed token but the last one, which is the next round's first input. A drafter
    on the target's cache (self, layer skip) moves the pointer back after drafting; a round's rollback
    (`truncate`, after `compact` for a tree) keeps the committed prefix plus the accepted drafts.
    """

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

    def claim(self, n: int, depth: int, like: torch.Tensor) -> list[tuple]:
        """The first `depth` layers' (keys, values) buffers for a write of n tokens at the pointer that is made
        outside the cache (native.layers writes them in C): allocated on first use (`like`: an empty
        (1, KV, 0, D) of their dtype), the room checked; `advance(n, depth)` once they are written."""
        room(self.length, n, self.max_len)
        out = []
        for layer in self.layers[:depth]:
            if not layer.is_initialized:
                layer.lazy_initialization(like, like)
            if (
                layer.length != self.length
            ):  # a layer-skip draft moved its first layers and did not move them back
                raise RuntimeError(f"a cache layer holds {layer.length} tokens, the pointer {self.length}")
            out.append((layer.keys, layer.values))
        return out

    def advance(self, n: int, depth: int) -> None:
        """The first `depth` layers hold n more tokens: claim()'s buffers were written."""
        end = room(self.length, n, self.max_len)
        for layer in self.layers[:depth]:
            layer.length = end

    def compact(self, start: int, path: list[int]) -> None:
        """A tree round's rollback: keep the accepted path's entries, moving slot start+1+node to start+1+depth,
        then the pointer. `start` is the root's slot; at most len(path) entries move, a chain's path none."""
        src = [start + 1 + node for node in path]
        dst = list(range(start + 1, start + 1 + len(path)))
        if src != dst:
            idx = torch.tensor(src, device=self.layers[0].keys.device)
            for layer in self.layers:
                for buf in (layer.keys, layer.values):
                    buf[:, :, dst[0] : dst[-1] + 1] = buf.index_select(2, idx)
        self.truncate(start + 1 + len(path))

    def expand_rows(self, rows: int) -> None:
        """A cache filled with one row (the prompt) becomes `rows` identical rows (beam search: once per run)."""
        for layer in self.layers:
            if layer.is_initialized and layer.keys.shape[0] != rows:
                layer.keys = layer.keys.expand(rows, -1, -1, -1).contiguous()
                layer.values = layer.values.expand(rows, -1, -1, -1).contiguous()

    def reorder_rows(self, rows: torch.Tensor) -> int:
        """Row i becomes row rows[i] (beam reordering), live prefix only; returns the bytes copied."""
        n, copied = self.length, 0
        for layer in self.layers:
            for buf in (layer.keys, layer.values):
                buf[:, :, :n] = buf[rows, :, :n]  # a gather, then a copy back in place
                copied += 2 * buf[:, :, :n].numel() * buf.element_size()
        return copied
