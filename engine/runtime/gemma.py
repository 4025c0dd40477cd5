"""Gemma-3 on its GGUF's blocks: the lean forward for the embedded Gemma-3-270M, reading the file as it ships.

The embedded Gemma-3-270M is 247 MB of blocks (Q5_0, Q4_K, Q6_K and Q8_0 layers, a Q8_0 embedding of 262,144 rows
that is also its LM head); de-quantized to fp32 it is 1,072 MB, and a decode step reads every byte of it. Here
every projection runs native.c's block kernels on the file's own blocks (blocks.py: each weight rebuilt with
gguf-py's arithmetic, so each product equals the de-quantized matrix's), and the rest of a layer is the same math
as transformers' Gemma3ForCausalLM on the de-quantized weights, op for op: the embedding scaled by √hidden, RMSNorm
in fp32 times (1 + w) (w as transformers reads it from the file: the file's weight − 1), q and k normed per head,
RoPE at each layer type's base, attention scaled by query_pre_attn_scalar^-½ over a sliding window of
`sliding_window` positions on the local layers (the pointer cache keeps every position; the mask hides the rest,
as sliding.py's rule), the tanh-GELU gate, the norms after attention and after the MLP.

GemmaForward is a LeanForward (the engine, the roofline and the cost model read it alike) whose layers run in
torch ops around the block kernels; there is no fused native layer for this architecture.

This module knows Gemma-3's layer; it knows nothing about speculation.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from . import blocks as gguf_blocks
from . import native
from .cache import KVCache, room
from .lean import LeanForward, causal_mask
from .sliding import window_near

ARCHITECTURES = ("gemma3", "gemma3_text")


def supports(config) -> bool:
    """A causal Gemma-3 text model without logit soft-capping in attention (Gemma-3 has none; Gemma-2 would; an
    embedding variant's bidirectional attention is not a causal LM's)."""
    return (
        getattr(config, "model_type", None) in ARCHITECTURES
        and not getattr(config, "attn_logit_softcapping", None)
        and not getattr(config, "use_bidirectional_attention", False)
    )


def gemma_norm(x: torch.Tensor, w1: torch.Tensor, eps: float) -> torch.Tensor:
    """Gemma3RMSNorm on fp32 x: x·rsqrt(mean(x²) + eps)·(1 + w), w1 = 1 + w precomputed as transformers adds it."""
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w1


def layer_names(i: int) -> dict[str, tuple[str, ...]]:
    """A Gemma-3 layer's GGUF tensor names by GemmaForward's projection (GemmaForward.SLOTS)."""
    b = f"blk.{i}."
    return {
        "qk": (b + "attn_q.weight", b + "attn_k.weight"),
        "v": (b + "attn_v.weight",),
        "o": (b + "attn_output.weight",),
        "gate_up": (b + "ffn_gate.weight", b + "ffn_up.weight"),
        "down": (b + "ffn_down.weight",),
    }


NORMS = ("attn_norm", "attn_q_norm", "attn_k_norm", "post_attention_norm", "ffn_norm", "post_ffw_norm")


class GemmaForward(LeanForward):
    """Gemma-3 on a GGUF's blocks, callable as LeanForward is: (input_ids, cache, ...) -> logits (B, T, V)."""

    SLOTS = {"qk": 0, "v": 1, "o": 2, "gate_up": 3, "down": 4}  # a projection's place in a layer's tuple

    def __init__(self, model, blocks: gguf_blocks.Blocks):
        cfg = model.config
        self.config = cfg
        self.heads, self.kv_heads = cfg.num_attention_heads, cfg.num_key_value_heads
        self.head_dim = cfg.head_dim
        self.eps = cfg.rms_norm_eps
        self.scale = cfg.query_pre_attn_scalar**-0.5
        self.window = cfg.sliding_window
        self.softcap = getattr(cfg, "final_logit_softcapping", None)
        self.weight_format = "gguf"
        self.fused = False
        # native.c's norms and RoPE for one sequence (SPECVIZ_NATIVE=0 or no build: torch's ops)
        self.native = native.library() is not None
        self.types = list(cfg.layer_types)

        def norm(name: str) -> torch.Tensor:
            # transformers reads the file's w + 1 as (file − 1) and adds 1 back in fp32: the same two roundings
            return 1.0 + (blocks.vector(name) - 1)

        self.head = blocks.weight("token_embd.weight")  # tied: the embedding is the LM head's rows
        self.embed = self.head
        # transformers' embed_scale: √hidden as an fp32 tensor, times the rows
        self.embed_scale = torch.tensor(cfg.hidden_size**0.5, dtype=torch.float32)
        self.layers = []
        self.norms = []
        for i in range(cfg.num_hidden_layers):
            names = layer_names(i)
            self.layers.append(tuple(blocks.weight(*names[slot]) for slot in self.SLOTS))
            self.norms.append(tuple(norm(f"blk.{i}.{n}.weight") for n in NORMS))
        self.norm = norm("output_norm.weight")
        self.rotary = type(model.model.rotary_emb)(config=cfg)  # its own buffers (the skeleton's are meta)
        self.weight_bytes = blocks.bytes

    def measure_kernels(self, refresh: bool = False) -> dict:
        """Nothing to measure: every projection runs the block kernel up to BLOCK_ROWS rows (blocks.py)."""
        self.plans = {}
        return self.plans

    def truncated(self, layers: int) -> "GemmaForward":
        view = super().truncated(layers)
        view.norms = self.norms[:layers]
        return view

    def _masks(self, attention_mask, position_ids, start: int, end: int, t: int, device) -> dict:
        """{"full_attention": mask, "sliding_attention": mask} for SDPA (bool, True = attend; None = all):
        causal over the cache when no mask is given, the window on the local layers."""
        mask = attention_mask if attention_mask is not None or t == 1 else causal_mask(start, end, device)
        near = None
        if self.window and int(position_ids.max()) >= self.window:  # some query has keys outside its window
            near = window_near(position_ids, end if mask is None else mask.shape[-1], self.window)
        sliding = mask if near is None else (near if mask is None else mask & near)
        return {"full_attention": mask, "sliding_attention": sliding}

    def _layer(self, x, cache_layer, weights, norms, cos, sin, mask, b: int, t: int) -> torch.Tensor:
        """One decoder layer on x (BT, H): transformers' Gemma3DecoderLayer, op for op."""
        w_qk, w_v, w_o, w_gu, w_down = weights
        n_in, n_q, n_k, n_post_att, n_ff, n_post_ff = norms
        nh, nkv, hd, eps = self.heads, self.kv_heads, self.head_dim, self.eps
        h = gemma_norm(x, n_in, eps)
        qk = w_qk(h).view(b, t, nh + nkv, hd).transpose(1, 2)  # (B, NH+KV, T, D)
        q = gemma_norm(qk[:, :nh], n_q, eps)
        k = gemma_norm(qk[:, nh:], n_k, eps)
        v = w_v(h).view(b, t, nkv, hd).transpose(1, 2)
        half = hd // 2
        q = q * cos + torch.cat((-q[..., half:], q[..., :half]), dim=-1) * sin
        k = k * cos + torch.cat((-k[..., half:], k[..., :half]), dim=-1) * sin
        keys, values = cache_layer.update(k, v)  # the live (B, KV, end, D) views
        att = F.scaled_dot_product_attention(
            q, keys, values, attn_mask=mask, scale=self.scale, enable_gqa=True
        )
        att = w_o(att.transpose(1, 2).reshape(b * t, nh * hd))
        x = x + gemma_norm(att, n_post_att, eps)
        gate, up = w_gu(gemma_norm(x, n_ff, eps)).chunk(2, dim=-1)
        mlp = w_down(F.gelu(gate, approximate="tanh") * up)
        return x + gemma_norm(mlp, n_post_ff, eps)

    def _native_layer(self, x, cache_layer, weights, norms, cos, sin, mask, t: int) -> torch.Tensor:
        """The same layer on one sequence's x (T, H) with native.c's RMSNorm and RoPE (one call each instead of
        five to seven torch ops): fp32 on a CPU. Its norms round as native.c's does (1/sqrt of the sum ÷ dim), so
        its logits agree with _layer's to float rounding, not bit for bit (tests/test_gemma_blocks.py)."""
        w_qk, w_v, w_o, w_gu, w_down = weights
        n_in, n_q, n_k, n_post_att, n_ff, n_post_ff = norms
        nh, nkv, hd, eps = self.heads, self.kv_heads, self.head_dim, self.eps
        h = native.rms_norm(x, n_in, eps)
        qk = w_qk(h)  # (T, (NH+KV) D)
        q = native.rms_norm(qk[:, : nh * hd].reshape(t * nh, hd).contiguous(), n_q, eps).view(t, nh * hd)
        k = native.rms_norm(qk[:, nh * hd :].reshape(t * nkv, hd).contiguous(), n_k, eps).view(t, nkv * hd)
        native.rope_(q, nh, hd, cos, sin)
        native.rope_(k, nkv, hd, cos, sin)
        v = w_v(h)
        keys, values = cache_layer.update(
            k.view(1, t, nkv, hd).transpose(1, 2), v.view(1, t, nkv, hd).transpose(1, 2)
        )
        q = q.view(1, t, nh, hd).transpose(1, 2)
        att = F.scaled_dot_product_attention(
            q, keys, values, attn_mask=mask, scale=self.scale, enable_gqa=True
        )
        att = w_o(att.transpose(1, 2).reshape(t, nh * hd))
        x.add_(native.rms_norm(att, n_post_att, eps))
        gate, up = w_gu(native.rms_norm(x, n_ff, eps)).chunk(2, dim=-1)
        x.add_(native.rms_norm(w_down(F.gelu(gate, approximate="tanh").mul_(up)), n_post_ff, eps))
        return x

    def __call__(
        self,
        input_ids: torch.Tensor,
        past_key_values: KVCache,
        attention_mask=None,
        position_ids=None,
        logits_to_keep: int = 0,
        hidden_out: list | None = None,
    ) -> torch.Tensor:
        """As LeanForward.__call__: input_ids (B, T) after the cache's tokens -> logits (B, T or logits_to_keep, V)."""
        cache = past_key_values
        b, t = input_ids.shape
        start = cache.length
        end = room(start, t, cache.max_len)
        x = self.embed.rows(input_ids).view(b * t, -1) * self.embed_scale  # (BT, H)
        if position_ids is None:
            position_ids = torch.arange(start, end, device=x.device)[None]
        masks = self._masks(attention_mask, position_ids, start, end, t, x.device)
        # cos, sin (B|1, T, D) of each layer type's base
        rope = {kind: self.rotary(x[None], position_ids, kind) for kind in set(self.types)}
        fast = self.native and b == 1 and x.device.type == "cpu"
        if fast:
            rope = {kind: (cos[0].contiguous(), sin[0].contiguous()) for kind, (cos, sin) in rope.items()}
        for kind, cache_layer, weights, norms in zip(self.types, cache.layers, self.layers, self.norms):
            cos, sin = rope[kind]
            if fast:
                x = self._native_layer(x, cache_layer, weights, norms, cos, sin, masks[kind], t)
            else:
                x = self._layer(x, cache_layer, weights, norms, cos[:, None], sin[:, None], masks[kind], b, t)
        x = x.view(b, t, -1)
        if logits_to_keep and hidden_out is None:
            x = x[:, -logits_to_keep:]
        x = gemma_norm(x, self.norm, self.eps)
        if hidden_out is not None:
            hidden_out.append(x)
            if logits_to_keep:
                x = x[:, -logits_to_keep:]
        logits = self.head(x.reshape(-1, x.shape[-1])).view(b, x.shape[1], -1)  # (B, T, V)
        if self.softcap:
            logits = torch.tanh(logits / self.softcap) * self.softcap
        return logits
