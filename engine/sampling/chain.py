"""The probability math of speculative decoding, as small pure functions on tensors.

Notation: p = target distribution, q = draft distribution (Leviathan et al. 2023).
Nothing here knows about models or caches.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


def shape_probs(logits: torch.Tensor, temperature: float, top_k: int, top_p: float) -> torch.Tensor:
    """Logits (..., V) -> probabilities (..., V) in float32, shaped by temperature, top-k, top-p.

    p and q must go through the same shaping, or the acceptance test compares different things.
    Temperature 0 (greedy) keeps the unshaped softmax: that is what the UI shows on hover.
    """
    logits = logits.float()
    if temperature > 0:
        logits = logits / temperature
        if top_k:
            kth = torch.topk(logits, min(top_k, logits.shape[-1]), dim=-1).values[..., -1:]
            logits = logits.masked_fill(logits < kth, float("-inf"))
        if top_p < 1.0:
            sorted_logits, order = torch.sort(logits, dim=-1, descending=True)
            sorted_probs = sorted_logits.softmax(-1)
            # drop a token when the tokens above it already reach top_p (the top one always stays)
            drop_sorted = sorted_probs.cumsum(-1) - sorted_probs >= top_p
            drop = drop_sorted.scatter(-1, order, drop_sorted)
            logits = logits.masked_fill(drop, float("-inf"))
    return logits.softmax(-1)


def pick(probs: torch.Tensor, greedy: bool, generator: torch.Generator | None) -> torch.Tensor:
    """One token id per row of probs (..., V): argmax when greedy, else a seeded sample."""
    if greedy:
        return probs.argmax(-1)
    flat = probs.reshape(-1, probs.shape[-1])
    return torch.multinomial(flat, 1, generator=generator).reshape(probs.shape[:-1])


def residual(p: torch.Tensor, q: torch.Tensor | None, token: int) -> torch.Tensor:
    """Distribution to resample from after rejecting `token`: norm(max(0, p - q)).

    With a one-hot q (no draft distribution, e.g. n-gram lookup) that is p with `token` zeroed.
    When p == q numerically the residual is empty; p itself is then the exact answer.
    """
    if q is None:
        r = p.clone()
        r[token] = 0.0
    else:
        r = (p - q).clamp_min(0.0)
    total = r.sum()
    return r / total if total > 0 else p


@dataclass
class Verdict:
    """Outcome of judging one draft against the target."""

    n_accepted: int  # drafted tokens kept (0..gamma)
    next_id: int  # corrected token (n_accepted < gamma) or bonus token (all accepted)
    accept_prob: list  # min(1, p/q) per drafted token (greedy: 1.0 / 0.0 for argmax match)
    p_draft: list  # p of each drafted token
    next_p: float  # p of next_id
    u: list | None = None  # sampling: the uniform draw each drafted token was tested with (None when greedy)
    dist: torch.Tensor | None = None  # sampling: the distribution next_id was drawn from, (V,)


def accept_greedy(draft: torch.Tensor, p: torch.Tensor) -> Verdict:
    """Greedy rule: keep drafts while they equal argmax p; the first mismatch becomes argmax p.

    draft (γ,) ids; p (γ+1, V) target probabilities at each drafted position plus one.
    """
    gamma = draft.shape[0]
    best = p.argmax(-1)  # (γ+1,)
    match = (draft == best[:gamma]).int()
    n = int(match.cumprod(0).sum())
    p_draft = p[torch.arange(gamma, device=p.device), draft]
    next_id = int(best[n])
    return Verdict(n, next_id, match.float().tolist(), p_draft.tolist(), float(p[n, next_id]))


def accept_sample(
    draft: torch.Tensor, q: torch.Tensor | None, p: torch.Tensor, generator: torch.Generator | None
) -> Verdict:
    """Rejection sampling (Leviathan Alg. 1, Chen Thm 1): the output is distributed exactly as p.

    Accept draft token x_i with probability min(1, p_i(x)/q_i(x)) left to right; at the first
    rejection sample from norm(max(0, p_i - q_i)); if all γ are accepted, sample a bonus from p_γ.
    q (γ, V) or None for a one-hot draft (accept with probability p_i(x)).
    """
    gamma = draft.shape[0]
    rows = torch.arange(gamma, device=p.device)
    p_draft = p[rows, draft]  # (γ,)
    q_draft = q[rows, draft] if q is not None else torch.ones_like(p_draft)
    ratio = (p_draft / q_draft).clamp(max=1.0)
    u = torch.rand(gamma, generator=generator, device=p.device)  # (γ,) one uniform draw per drafted token
    ok = (u < ratio).int()
    n = int(ok.cumprod(0).sum())
    if n < gamma:
        dist = residual(p[n], q[n] if q is not None else None, int(draft[n]))
    else:
        dist = p[gamma]
    next_id = int(torch.multinomial(dist, 1, generator=generator))
    return Verdict(n, next_id, ratio.tolist(), p_draft.tolist(), float(p[n, next_id]), u.tolist(), dist)


def topk_list(probs: torch.Tensor, k: int) -> list[list]:
    """(..., V) probs -> per row the top-k as [[id, prob], ...] (plain Python)."""
    values, ids = torch.topk(probs, k, dim=-1)
    return [[[i, v] for i, v in zip(row_i, row_v)] for row_i, row_v in zip(ids.tolist(), values.tolist())]
