"""Trained draft heads on the target's own last hidden state: Medusa-1 heads and an EAGLE-style head.

A *feature* is the target's last hidden state after its final norm, the vector its LM head turns into
logits: feature f_t at position t predicts token t+1. Both heads draft from features the target has
already computed (its verify forward), and decode their guesses with a slice of the target's own frozen
LM head restricted to a small *draft vocabulary* (the most frequent tokens of the training corpus, as
FR-Spec / EAGLE-3 do): on a CPU the full 49k-row LM head would cost a fifth of a target step per drafted
token. Verification still uses the target's full distribution, so the output stays lossless.

  Medusa-1 (Cai et al. 2024): head k (k = 1..K) maps f_t to token t+1+k with one residual block
      h_k = f_t + SiLU(W_k f_t + b_k),  logits = LM_draft(h_k)
  EAGLE (Li et al. 2024): one decoder layer over the sequence of [f_t ; emb(token t+1)] predicts f_{t+1};
      drafting feeds its own predicted feature and the token it decoded back in, with its own small KV cache.

This module holds the modules, their shipped weights (assets/heads/) and the features plumbing; the
training is in train.py beside it, the drafters in engine/drafters/heads.py. It knows nothing about events or HTML.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

from ..runtime.lean import LeanForward, forward_fn, rms_norm

ASSETS = Path(__file__).resolve().parents[2] / "assets" / "heads"
WEIGHTS = ASSETS / "smollm2-135m-heads.pt"  # the shipped heads (fp16) with their training record


@dataclass
class HeadsConfig:
    """Shapes of the heads; the rest comes from the target (hidden size, heads, rope)."""

    medusa_heads: int = 4  # K Medusa heads: head k predicts the token k+1 after a feature's position
    # tokens the draft LM head can propose (the corpus's most frequent), <= target vocab
    draft_vocab: int = 4096
    eagle_ffn: int = 1024  # intermediate size of the EAGLE layer's SwiGLU


class MedusaHeads(torch.nn.Module):
    """K residual blocks on a feature, decoded by the frozen draft LM head: (..., H) -> (K, ..., V_draft)."""

    def __init__(self, hidden: int, k: int):
        super().__init__()
        self.blocks = torch.nn.ModuleList(torch.nn.Linear(hidden, hidden) for _ in range(k))
        for block in self.blocks:  # Medusa's init: each head starts as the base LM head (a zero residual)
            torch.nn.init.zeros_(block.weight)
            torch.nn.init.zeros_(block.bias)

    def forward(self, feature: torch.Tensor, lm_head: torch.Tensor) -> torch.Tensor:
        hs = torch.stack([feature + F.silu(block(feature)) for block in self.blocks])  # (K, ..., H)
        return hs @ lm_head.T  # (K, ..., V_draft)


class EagleLayer(torch.nn.Module):
    """One Llama-style decoder layer over fc([feature ; embedding]): (B, T, 2H) -> next features (B, T, H).

    Its attention runs over its own cache of keys and values (a plain list it appends to), so drafting
    is autoregressive: each step adds one position."""

    def __init__(self, hidden: int, n_heads: int, n_kv: int, ffn: int, eps: float):
        super().__init__()
        self.n_heads, self.n_kv, self.head_dim, self.eps = n_heads, n_kv, hidden // n_heads, eps
        self.fc = torch.nn.Linear(2 * hidden, hidden)
        self.norm1 = torch.nn.Parameter(torch.ones(hidden))
        self.qkv = torch.nn.Linear(hidden, (n_heads + 2 * n_kv) * self.head_dim, bias=False)
        self.o = torch.nn.Linear(n_heads * self.head_dim, hidden, bias=False)
        self.norm2 = torch.nn.Parameter(torch.ones(hidden))
        self.gate_up = torch.nn.Linear(hidden, 2 * ffn, bias=False)
        self.down = torch.nn.Linear(ffn, hidden, bias=False)

    def forward(
        self,
        feature: torch.Tensor,
        embedding: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        kv: list | None = None,
        mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """feature, embedding (B, T, H); cos, sin (B|1, T, D) for the T positions; kv: [keys, values]
        of earlier positions (extended in place) or None (no cache: causal over these T)."""
        b, t, _ = feature.shape
        nh, nkv, hd = self.n_heads, self.n_kv, self.head_dim
        x = self.fc(torch.cat([feature, embedding], dim=-1))  # (B, T, H)
        qkv = self.qkv(rms_norm(x, self.norm1, self.eps)).view(b, t, nh + 2 * nkv, hd).transpose(1, 2)
        qk, v = qkv[:, : nh + nkv], qkv[:, nh + nkv :]  # (B, NH+KV, T, D), (B, KV, T, D)
        half = hd // 2
        qk = qk * cos[:, None] + torch.cat((-qk[..., half:], qk[..., :half]), dim=-1) * sin[:, None]  # RoPE
        q, k = qk[:, :nh], qk[:, nh:]
        if kv is not None:
            if kv:
                k, v = torch.cat([kv[0], k], dim=2), torch.cat([kv[1], v], dim=2)
            kv[:] = [k, v]
        causal = mask is None and t > 1
        if causal and k.shape[2] != t:  # new queries after cached keys: query i sees keys <= start + i
            start = k.shape[2] - t
            mask = torch.arange(k.shape[2])[None] <= (start + torch.arange(t))[:, None]
            causal = False
        att = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal, enable_gqa=True)
        x = x + self.o(att.transpose(1, 2).reshape(b, t, nh * hd))
        gate, up = self.gate_up(rms_norm(x, self.norm2, self.eps)).chunk(2, dim=-1)
        return x + self.down(F.silu(gate) * up)  # (B, T, H): the predicted next features


class Heads(torch.nn.Module):
    """Both heads and the draft vocabulary (target ids of the draft LM head's rows)."""

    def __init__(self, cfg: HeadsConfig, target_config, vocab_ids: torch.Tensor):
        super().__init__()
        tc = target_config
        hidden = tc.hidden_size
        self.cfg = cfg
        self.medusa = MedusaHeads(hidden, cfg.medusa_heads)
        self.eagle = EagleLayer(
            hidden, tc.num_attention_heads, tc.num_key_value_heads, cfg.eagle_ffn, tc.rms_norm_eps
        )
        self.register_buffer("vocab_ids", vocab_ids.to(torch.long))  # (V_draft,)
        self.record: dict = {}  # the training record of loaded heads (accuracy, calibration per confidence bin)


@dataclass
class Target:
    """The frozen parts of the target the heads use: its embedding, draft LM head rows and RoPE."""

    embed: torch.Tensor  # (V, H) token embeddings
    lm_head: torch.Tensor  # (V_draft, H) the LM head's rows for the draft vocabulary
    vocab_ids: torch.Tensor  # (V_draft,) target id of each draft row
    rotary: torch.nn.Module  # the target's rotary embedding: (x, position_ids) -> (cos, sin)

    def rope(self, positions: torch.Tensor, like: torch.Tensor):
        cos, sin = self.rotary(like, positions[None])  # (1, T, D)
        return cos, sin


def frozen_parts(model: torch.nn.Module, vocab_ids: torch.Tensor) -> Target:
    """The target's embedding, LM head rows and RoPE: the module's, or on a GGUF's blocks (a skeleton module
    without weights) the lean forward's, de-quantized once here (the heads read them every round)."""
    forward = forward_fn(model)
    if getattr(model, "specviz_gguf", None) is not None and isinstance(forward, LeanForward):
        embed, head = forward.matrix("embed"), forward.matrix("head")
        return Target(embed, head[vocab_ids].contiguous(), vocab_ids, forward.rotary)
    inner = model.model
    head = model.lm_head.weight.detach()
    return Target(
        inner.embed_tokens.weight.detach().float(),
        head[vocab_ids].float().contiguous(),
        vocab_ids,
        inner.rotary_emb,
    )


def save(heads: Heads, record: dict, path: Path) -> None:
    """fp16 weights plus the training record (command, seed, held-out accuracy) in one file; the record also
    as JSON beside it (PATH.json), for readers that do not load torch (the Explain tab)."""
    state = {k: (v.half() if v.is_floating_point() else v) for k, v in heads.state_dict().items()}
    torch.save({"config": asdict(heads.cfg), "state": state, "record": record}, path)
    Path(path).with_suffix(".json").write_text(
        json.dumps(record, indent=1, sort_keys=True) + "\n", encoding="utf-8"
    )


def load(path: Path, target_config) -> tuple[Heads, dict]:
    """Heads in fp32 (from the shipped fp16) and their training record."""
    blob = torch.load(path, map_location="cpu", weights_only=True)
    heads = Heads(HeadsConfig(**blob["config"]), target_config, blob["state"]["vocab_ids"])
    heads.load_state_dict({k: v.float() if v.is_floating_point() else v for k, v in blob["state"].items()})
    heads.record = blob["record"]
    return heads.eval(), blob["record"]


def record_of(path: Path = WEIGHTS) -> dict | None:
    """The shipped heads' training record (for the Explain tab and the README), or None when absent."""
    if not Path(path).exists():
        return None
    return torch.load(path, map_location="cpu", weights_only=True)["record"]
