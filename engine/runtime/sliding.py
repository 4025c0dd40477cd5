"""Sliding-window attention with the pointer KV cache (Gemma-3's local layers, Mistral-style windows).

This module knows masks and positions; it knows nothing about speculation.

The pointer cache (runtime/cache.py) keeps every position in every layer, local layers included, and
reports itself as a full-attention cache. That is exact for sliding layers as long as their *mask*
hides keys more than `window` positions behind the query:
- chain rounds (prefill, steps, verification) pass no mask: transformers builds the sliding-window
  causal mask itself from the cache's sizes (absolute positions, kv offset 0), so the window holds;
- a tree round passes its own 4-D tree mask, which transformers would use as-is for *every* layer.
  `layer_masks` turns it into transformers' per-layer-type mapping, with the window applied on the
  sliding layers from the real positions (a tree node's position is its depth, not its cache slot).
Keeping keys beyond the window costs memory (a local layer could hold `window` slots), not correctness.
"""

from __future__ import annotations

import torch


def sliding_window(model) -> int | None:
    """The window of a model with sliding-window layers, else None."""
    cfg = model.config.get_text_config()
    types = getattr(cfg, "layer_types", None) or []
    window = getattr(cfg, "sliding_window", None)
    return window if window and "sliding_attention" in types else None


def layer_masks(model, mask: torch.Tensor, position_ids: torch.Tensor, cached: int):
    """A custom bool mask (B|1, 1, T, cached+T) -> {"full_attention": it, "sliding_attention": it ∧ window}.

    Key j < cached sits at position j (committed tokens, contiguous); key cached+i at position_ids[:, i]
    (window_near). transformers' window rule: query at position a sees key at position b iff a − b < window.
    """
    window = sliding_window(model)
    if window is None or mask is None or mask.dim() != 4 or mask.dtype != torch.bool:
        return mask
    return {
        "full_attention": mask,
        "sliding_attention": mask & window_near(position_ids, mask.shape[-1], window),
    }


def window_near(position_ids: torch.Tensor, width: int, window: int) -> torch.Tensor:
    """(B|1, 1, T, width) bool: row b's query i (at position_ids[b, i]) may see the key in slot j by transformers'
    window rule, a − b < window (causality is the other mask's). A committed key's position is its slot; a key of
    this forward's own new tokens sits at or before its slot and less than T slots behind the queries, so the rule
    read on slots gives the same answer for every key while T ≤ window (a batch's rows each on their own)."""
    slots = torch.arange(width, device=position_ids.device)
    return ((position_ids[:, :, None] - slots[None, None, :]) < window)[:, None]
