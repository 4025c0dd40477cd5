"""A lean forward pass for Llama-architecture models, sharing the transformers module's weights.

Same math as transformers' LlamaForCausalLM (RMSNorm in fp32, RoPE, GQA attention, SwiGLU), with
fewer kernel launches: q/k/v and gate/up projections are fused into one matmul each, and no mask is
built for single-token steps. On a CPU a decode step is bound by reading the weights plus a fixed
cost per op, and transformers' generic forward spends a large share of the step on the latter.
Batch-1 fp32 forwards on a ready pointer cache (everything the engine runs after the prefill) take
`_rows`, which trims the per-op overhead further and is bit-identical to the general path, `_general`.
Used for the target (and `self` and layer-skip drafts) when the architecture fits; anything else
falls back to the transformers module. The fused matrices replace the module's own weights, which become views of
them (transformers' forward runs unchanged on the views), so the lean layout costs no extra memory.

Multi-token forwards (verification, prefill) on a CPU go through oneDNN with weights packed once
into its blocked layout: MKL's sgemm for 2-16 rows runs far below memory bandwidth (a 5-token forward
took 1.68x a 1-token one, packed 1.37x: benchmarks/onednn_cost.py). fp32 single-token
steps keep the plain matmul, the faster one for a single row; bf16 uses oneDNN for every size.
SPECVIZ_ONEDNN=0 turns packing off.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from .cache import KVCache
from .models import on_unload
from .window import layer_masks


def supports(model) -> bool:
    """Llama-family causal LMs without projection biases, on a plain (non-quantized) CPU/CUDA model."""
    cfg = model.config
    if getattr(cfg, "model_type", None) not in ("llama",) or getattr(model, "hf_device_map", None):
        return False
    if getattr(cfg, "attention_bias", False) or getattr(cfg, "mlp_bias", False):
        return False
    if getattr(cfg, "hidden_act", "silu") != "silu" or getattr(cfg, "pretraining_tp", 1) != 1:
        return False
    layer = model.model.layers[0]
    return all(isinstance(m, torch.nn.Linear) for m in (layer.self_attn.q_proj, layer.mlp.gate_proj))


class Weight:
    """One projection y = x @ W: the (in, out) matrix, plus a oneDNN-packed copy for multi-row inputs."""

    def __init__(self, w_t: torch.Tensor, pack: bool):
        self.t = w_t  # (in, out), contiguous
        self.packed = None
        if pack:
            try:
                self.packed = torch.ops.mkldnn._reorder_linear_weight(w_t.t().contiguous(), 4)
            except (RuntimeError, AttributeError):  # a build without oneDNN: the plain matmul it is
                self.packed = None
        # fp32: MKL's 1-row matmul runs at memory bandwidth, oneDNN's does not; bf16: oneDNN (AMX) wins at any size
        self.min_rows = 2 if w_t.dtype == torch.float32 else 1

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if self.packed is not None and x.numel() >= self.min_rows * x.shape[-1]:
            return torch.ops.mkldnn._linear_pointwise(x, self.packed, None, "none", [], "")
        return torch.mm(x, self.t) if x.dim() == 2 else x @ self.t


def _pack_default(model) -> bool:
    """Pack for oneDNN on a CPU with fp32/bf16 weights, when a second copy of them fits easily in RAM."""
    import os

    p = next(model.parameters())
    if os.environ.get("SPECVIZ_ONEDNN", "1") == "0" or p.device.type != "cpu":
        return False
    if p.dtype not in (torch.float32, torch.bfloat16) or not torch.backends.mkldnn.is_available():
        return False
    weight_bytes = sum(t.numel() * t.element_size() for t in model.parameters())
    try:
        ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return False
    return weight_bytes <= ram // 4  # the packed copy doubles the weights' memory


def _fuse(linears: list, pack: bool) -> "Weight":
    """One (in, out) matrix with these projections side by side; each Linear's weight becomes a view of it."""
    w_t = torch.cat([lin.weight for lin in linears]).t().contiguous()  # (in, sum of out)
    start = 0
    for lin in linears:
        n = lin.weight.shape[0]
        lin.weight = torch.nn.Parameter(w_t[:, start:start + n].t(), requires_grad=False)  # (out, in) view
        start += n
    return Weight(w_t, pack)


class FastLlama:
    """Callable like the HF model for what the engine needs: (input_ids, cache, ...) -> logits (B, T, V)."""

    def __init__(self, model, layers: int | None = None):
        cfg, inner = model.config, model.model
        self.model = model
        self.heads, self.kv_heads = cfg.num_attention_heads, cfg.num_key_value_heads
        self.head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
        self.eps = cfg.rms_norm_eps
        pack = _pack_default(model)
        with torch.no_grad():
            tied = inner.embed_tokens.weight is model.lm_head.weight
            self.head = _fuse([model.lm_head], pack)  # (H, V)
            if tied:  # the embedding reads its rows from the same (now transposed) matrix
                inner.embed_tokens.weight = model.lm_head.weight
            self.layers = []
            for layer in list(inner.layers)[:layers]:
                att, mlp = layer.self_attn, layer.mlp
                self.layers.append((
                    layer.input_layernorm.weight,
                    _fuse([att.q_proj, att.k_proj, att.v_proj], pack),  # (H, q+2kv)
                    _fuse([att.o_proj], pack),
                    layer.post_attention_layernorm.weight,
                    _fuse([mlp.gate_proj, mlp.up_proj], pack),  # (H, 2I)
                    _fuse([mlp.down_proj], pack),
                ))
        self.embed, self.norm = inner.embed_tokens.weight, inner.norm.weight
        self.rotary = inner.rotary_emb
        self.config = cfg
        self.fp32 = self.head.t.dtype == torch.float32  # batch-1 forwards on a ready cache take _rows

    def truncated(self, layers: int) -> "FastLlama":
        """The first `layers` layers + final norm + LM head, sharing every tensor (layer-skip drafts)."""
        view = object.__new__(FastLlama)
        view.__dict__.update(self.__dict__)
        view.layers = self.layers[:layers]
        return view

    def _rms(self, x, w):
        dtype = x.dtype
        x = x.float()
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return w * x.to(dtype)

    @staticmethod
    def _rope(x, cos, sin):
        half = x.shape[-1] // 2
        rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
        return x * cos + rotated * sin

    def __call__(self, input_ids: torch.Tensor, past_key_values: KVCache, attention_mask=None,
                 position_ids=None, logits_to_keep: int = 0) -> torch.Tensor:
        if input_ids.shape[0] == 1 and self.fp32 and _ready(past_key_values, len(self.layers)):
            return self._rows(input_ids, past_key_values, attention_mask, position_ids, logits_to_keep)
        return self._general(input_ids, past_key_values, attention_mask, position_ids, logits_to_keep)

    def _general(self, input_ids: torch.Tensor, past_key_values: KVCache, attention_mask=None,
                 position_ids=None, logits_to_keep: int = 0) -> torch.Tensor:
        """Any batch, dtype and cache (the first write allocates a pointer cache's buffers)."""
        b, t = input_ids.shape
        start = past_key_values.length
        if position_ids is None:
            position_ids = torch.arange(start, start + t, device=input_ids.device)[None]
        x = F.embedding(input_ids, self.embed)  # (B, T, H)
        cos, sin = self.rotary(x, position_ids)  # (B, T, D)
        cos, sin = cos[:, None], sin[:, None]  # (B, 1, T, D)
        mask = attention_mask
        if mask is None and t > 1:  # causal with the cached prefix: query i sees keys <= start + i
            keys = torch.arange(start + t, device=x.device)
            mask = (keys[None, :] <= (start + torch.arange(t, device=x.device))[:, None])[None, None]
        q_size, kv_size = self.heads * self.head_dim, self.kv_heads * self.head_dim
        for layer_idx, (w_in, w_qkv, w_o, w_post, w_gu, w_down) in enumerate(self.layers):
            h = self._rms(x, w_in)
            qkv = w_qkv(h)  # (B, T, q+2kv)
            q = qkv[..., :q_size].view(b, t, self.heads, self.head_dim).transpose(1, 2)
            k = qkv[..., q_size:q_size + kv_size].view(b, t, self.kv_heads, self.head_dim).transpose(1, 2)
            v = qkv[..., q_size + kv_size:].view(b, t, self.kv_heads, self.head_dim).transpose(1, 2)
            q, k = self._rope(q, cos, sin), self._rope(k, cos, sin)
            k, v = past_key_values.layers[layer_idx].update(k, v)  # (B, KV, L, D)
            att = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)  # (B, NH, T, D)
            x = x + w_o(att.transpose(1, 2).reshape(b, t, q_size))
            h = self._rms(x, w_post)
            gate, up = w_gu(h).chunk(2, dim=-1)
            x = x + w_down(F.silu(gate) * up)
        if logits_to_keep:
            x = x[:, -logits_to_keep:]
        return self.head(self._rms(x, self.norm))  # (B, T, V)

    def _rows(self, input_ids: torch.Tensor, cache: KVCache, attention_mask=None, position_ids=None,
              logits_to_keep: int = 0) -> torch.Tensor:
        """One sequence of T fp32 tokens (a step, a verify, a tree): the same math as __call__ on 2-D rows,
        with q and k rotated together, K/V written straight into the cache buffers and in-place
        residuals. A forward on this CPU pays per-op overhead as well as the weight reads; this trims it."""
        t = input_ids.shape[1]
        start = cache.length
        end = start + t
        if end > cache.max_len:
            raise RuntimeError(f"KV cache full: {end} tokens > {cache.max_len} slots")
        nh, nkv, hd, eps = self.heads, self.kv_heads, self.head_dim, self.eps
        qk_size, half = (nh + nkv) * hd, hd // 2
        x = F.embedding(input_ids, self.embed).view(t, -1)  # (T, H)
        if position_ids is None:
            position_ids = torch.arange(start, end, device=x.device)[None]
        cos, sin = self.rotary(x[None], position_ids)  # (1, T, D)
        mask = attention_mask
        if mask is None and t > 1:  # causal with the cached prefix: query i sees keys <= start + i
            keys = torch.arange(end, device=x.device)
            mask = (keys[None, :] <= (start + torch.arange(t, device=x.device))[:, None])[None, None]
        for layer, (w_in, w_qkv, w_o, w_post, w_gu, w_down) in zip(cache.layers, self.layers):
            # RMSNorm, written out as _rms does it for fp32: calling _rms here cost ~3% of a step (step_cost.py)
            h = w_in * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))
            qkv = w_qkv(h)  # (T, q+2kv)
            qk = qkv[:, :qk_size].view(t, nh + nkv, hd).transpose(0, 1)  # q heads then k heads, (NH+KV, T, D)
            qk = qk * cos + torch.cat((-qk[..., half:], qk[..., :half]), dim=-1) * sin  # RoPE
            layer.keys[:, :, start:end].copy_(qk[nh:])  # (1, KV, T, D) into slots start..end-1
            layer.values[:, :, start:end].copy_(qkv[:, qk_size:].view(t, nkv, hd).transpose(0, 1))
            layer.length = end
            att = F.scaled_dot_product_attention(qk[:nh][None], layer.keys[:, :, :end], layer.values[:, :, :end],
                                                 attn_mask=mask, enable_gqa=True)  # (1, NH, T, D)
            x.add_(w_o(att[0].transpose(0, 1).reshape(t, nh * hd)))
            h = w_post * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))
            gate, up = w_gu(h).chunk(2, dim=-1)
            x.add_(w_down(F.silu(gate).mul_(up)))
        if logits_to_keep:
            x = x[-logits_to_keep:]
        x = self.norm * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))
        return self.head(x)[None]  # (1, T, V)


def _ready(cache, layers: int) -> bool:
    """A pointer cache whose buffers exist in each of the first `layers` layers (the first write allocates
    them, through the general path). Every layer counts: with a one-token prompt there is no prefill, and a
    layer-skip draft sharing the cache allocates only its own first L layers before the target's verify."""
    return isinstance(cache, KVCache) and all(layer.is_initialized for layer in cache.layers[:layers])


_FAST: dict = {}
on_unload(lambda model: [_FAST.pop(k) for k in list(_FAST) if k[0] == id(model)])  # an unloaded model's lean forward


def forward_fn(model, layers: int | None = None):
    """logits = f(input_ids, cache, attention_mask=None, position_ids=None, logits_to_keep=0) for `model`.

    FastLlama where the architecture fits (built once per model), else the transformers module.
    SPECVIZ_FAST_FORWARD=0 forces the transformers path everywhere.
    """
    import os

    if hasattr(model, "skip_of"):  # a layer-skip view: the target's lean forward, cut after L layers
        base, layers = model.skip_of
        full = forward_fn(base)
        if isinstance(full, FastLlama):
            return full.truncated(layers)
    if os.environ.get("SPECVIZ_FAST_FORWARD", "1") != "0" and supports(model):
        key = (id(model), layers)
        if key not in _FAST:
            _FAST[key] = FastLlama(model, layers)
        return _FAST[key]

    def hf(input_ids, past_key_values, attention_mask=None, position_ids=None, logits_to_keep=0):
        if attention_mask is not None and position_ids is not None:  # a tree mask: keep sliding windows
            attention_mask = layer_masks(model, attention_mask, position_ids, past_key_values.length)
        return model(input_ids, past_key_values=past_key_values, attention_mask=attention_mask,
                     position_ids=position_ids, logits_to_keep=logits_to_keep).logits

    return hf
