"""A pre-allocated KV cache for B sequences at once, with one length pointer per row (batched speculation).

Like runtime/cache.py's pointer cache, rollback is an O(1) pointer move and nothing is copied or
recomputed, but every row has its own pointer: row b's live tokens are slots [0, lengths[b]) of its buffer,
at positions 0 .. lengths[b] − 1 (a row's committed tokens are always contiguous from slot 0). A forward
over (B, T) new tokens writes row b's T tokens at slots lengths[b] .. lengths[b] + T − 1 and returns the
keys up to max(lengths) + T: the caller's mask (B, 1, T, max(lengths) + T) hides from row b every slot at
or past lengths[b] that is not one of its own new tokens (runtime/batchmask.py builds it). Rows whose
drafts are shorter pad their input; the padding's slots lie past what the row keeps and are overwritten.

The cache owns its writes: a forward's write (`RowLayer.update`), a row's rollback (`truncate_row`, or
`row(b).compact` for a token tree) and dropping finished rows (`keep_rows`, the one copy: once per row
that finishes, never per round).
"""

from __future__ import annotations

import torch
from transformers.cache_utils import Cache, CacheLayerMixin

from .cache import room


class RowLayer(CacheLayerMixin):
    """One attention layer's keys/values `(B, H, max_len, D)` and a length per row."""

    is_compileable = False
    is_sliding = False
    is_croppable = False

    def __init__(self, max_len: int, rows: int):
        super().__init__()
        self.max_len = max_len
        self.lengths = [0] * rows  # live tokens per row

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        b, h, _, dk = key_states.shape
        self.dtype, self.device = key_states.dtype, key_states.device
        # zeros, not empty: a row's mask hides the slots past its length, but attention still reads them, and
        # uninitialised memory can hold NaN, which a masked score (NaN − inf) or a zero weight (0 · NaN) keeps
        self.keys = key_states.new_zeros((b, h, self.max_len, dk))
        self.values = value_states.new_zeros((b, h, self.max_len, value_states.shape[-1]))
        self.is_initialized = True

    def update(self, key_states, value_states, *args, **kwargs):
        """Write row b's (H, T, D) keys and values at slots lengths[b] ..; returns the (B, H, max + T, D) views."""
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        b, _, t, _ = key_states.shape
        if b != len(self.lengths):
            raise ValueError(f"a forward of {b} rows on a cache of {len(self.lengths)}")
        end = room(max(self.lengths), t, self.max_len)
        if len(set(self.lengths)) == 1:  # every row at one length (AR over equal prompts): one slice copy
            start = self.lengths[0]
            self.keys[:, :, start : start + t].copy_(key_states)
            self.values[:, :, start : start + t].copy_(value_states)
        else:
            rows = torch.arange(b, device=self.device)[:, None]  # (B, 1)
            slots = torch.tensor(self.lengths, device=self.device)[:, None] + torch.arange(
                t, device=self.device
            )
            self.keys[rows, :, slots] = key_states.transpose(1, 2)  # (B, T, H, D) into (B, H, slot, D)
            self.values[rows, :, slots] = value_states.transpose(1, 2)
        self.lengths = [n + t for n in self.lengths]
        return self.keys[:, :, :end], self.values[:, :, :end]

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        return max(self.lengths) + query_length, 0

    def get_seq_length(self) -> int:
        return max(self.lengths)

    def get_max_length(self) -> int:
        return self.max_len


class RowsKVCache(Cache):
    """One `RowLayer` per model layer; `lengths[b]` is the pointer of row b.

    Invariant between rounds (the batched loop keeps it): row b holds every token row b committed but its
    last one, which is its next round's first input. `length` is the longest row's (what a forward's
    capacity check and the mask's width start from).
    """

    def __init__(self, num_layers: int, max_len: int, rows: int):
        if rows < 1:
            raise ValueError(f"a cache of {rows} rows")
        super().__init__(layers=[RowLayer(max_len, rows) for _ in range(num_layers)])
        self.max_len = max_len

    @classmethod
    def for_model(cls, model, max_len: int, rows: int) -> "RowsKVCache":
        return cls(model.config.get_text_config().num_hidden_layers, max_len, rows)

    @property
    def rows(self) -> int:
        return len(self.layers[0].lengths)

    @property
    def lengths(self) -> list[int]:
        return list(self.layers[0].lengths)

    @property
    def length(self) -> int:
        return max(self.layers[0].lengths)

    def truncate_row(self, b: int, length: int) -> None:
        """Move row b's pointer back to `length` tokens: O(1), no copy."""
        if not 0 <= length <= self.layers[0].lengths[b]:
            raise ValueError(f"cannot truncate row {b} of {self.layers[0].lengths[b]} tokens to {length}")
        for layer in self.layers:
            layer.lengths[b] = length

    def set_lengths(self, lengths: list[int]) -> None:
        """Every row's pointer at once (after a ragged prefill: each row keeps its own prompt's slots)."""
        for b, n in enumerate(lengths):
            self.truncate_row(b, n)

    def row(self, b: int) -> "RowView":
        return RowView(self, b)

    def keep_rows(self, keep: list[int]) -> None:
        """Only the rows `keep`, in that order, stay (finished rows drop out: a copy of the live prefix, once)."""
        if not keep:
            raise ValueError("keep_rows needs at least one row")
        idx = None
        for layer in self.layers:
            if layer.is_initialized:
                idx = torch.tensor(keep, device=layer.keys.device) if idx is None else idx
                live = max(layer.lengths[b] for b in keep)
                # zeros: see lazy_initialization
                keys = layer.keys.new_zeros((len(keep),) + layer.keys.shape[1:])
                values = layer.values.new_zeros((len(keep),) + layer.values.shape[1:])
                keys[:, :, :live] = layer.keys.index_select(0, idx)[:, :, :live]
                values[:, :, :live] = layer.values.index_select(0, idx)[:, :, :live]
                layer.keys, layer.values = keys, values
            layer.lengths = [layer.lengths[b] for b in keep]


class RowView:
    """Row b of a RowsKVCache seen as a one-row cache: its length, its rollback and a tree's compaction."""

    def __init__(self, cache: RowsKVCache, b: int):
        self.cache, self.b = cache, b

    @property
    def length(self) -> int:
        return self.cache.layers[0].lengths[self.b]

    def truncate(self, length: int) -> None:
        self.cache.truncate_row(self.b, length)

    def compact(self, start: int, path: list[int]) -> None:
        """Row b's tree rollback (KVCache.compact): slot start+1+node -> start+1+depth, then its pointer."""
        src = [start + 1 + node for node in path]
        dst = list(range(start + 1, start + 1 + len(path)))
        if src != dst:
            for layer in self.cache.layers:
                idx = torch.tensor(src, device=layer.keys.device)
                for buf in (layer.keys, layer.values):
                    buf[self.b, :, dst[0] : dst[-1] + 1] = buf[self.b].index_select(1, idx)
        self.truncate(start + 1 + len(path))


def ragged_inputs(lengths: list[int], rows: list[tuple], device, pad: int = 0):
    """One forward's inputs for B rows of different lengths after a RowsKVCache at `lengths`.

    rows[b] = (tokens, mask, offsets): row b's T_b new tokens and, for a token tree (or a drafter's extra rows),
    their own (1, 1, T_b, T_b) mask and (1, T_b) position offsets (step.verify_rows' layout); (tokens, None, None) is
    causal. Returns input ids (B, T), the bool mask (B, 1, T, max(lengths) + T) and position ids (B, T), T = max T_b:
    row b's query i is at slot and position lengths[b] + i (a tree's at lengths[b] + its depth), sees its own
    committed slots [0, lengths[b]) and its own new tokens as its mask says, never another row's garbage. A
    shorter row is padded after its tokens (the padding sees causally, is never read, and its slots are dropped).
    """
    b, t = len(rows), max(len(tokens) for tokens, _, _ in rows)
    width = max(lengths) + t
    x = torch.full((b, t), pad, dtype=torch.long)
    slots = torch.tensor(lengths)[:, None] + torch.arange(t)  # (B, T): each query's own slot
    mask = torch.arange(width)[None, None, :] <= slots[:, :, None]  # (B, T, W): causal within the row
    positions = slots.clone()
    for r, (tokens, tree_mask, offsets) in enumerate(rows):
        n, start = len(tokens), lengths[r]
        x[r, :n] = torch.tensor(tokens)
        if tree_mask is not None:
            mask[r, :n, start : start + n] = tree_mask[0, 0].cpu()
            positions[r, :n] = offsets[0].cpu() + start
    return x.to(device), mask[:, None].to(device), positions.to(device)
