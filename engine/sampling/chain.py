"""The probability math of speculative decoding, as small pure functions on tensors.

Notation: p = target distribution, q = draft distribution (Leviathan et al. 2023).
Nothing here knows about models or caches.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from .draws import Draws, cdf_of, draw_token
from .rows import as_rows


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
    u: list | None = None  # sampling: each drafted token's uniform (None: never tested); None when greedy
    dist: torch.Tensor | None = None  # sampling: the distribution next_id was drawn from, (V,)


def accept_greedy(draft: torch.Tensor, p) -> Verdict:
    """Greedy rule: keep drafts while they equal the row's most probable token; the first mismatch becomes it.

    draft (γ,) ids; p: the target's distributions at each drafted position plus one (rows.py Rows, or a (γ+1, V)
    probability tensor).
    """
    rows, drafted = as_rows(p), draft.tolist()
    best = rows.best()
    match = [float(d == b) for d, b in zip(drafted, best)]
    n = 0
    while n < len(drafted) and match[n]:
        n += 1
    next_id = best[n]
    return Verdict(n, next_id, match, [rows.p(i, d) for i, d in enumerate(drafted)], rows.p(n, next_id))


@dataclass
class Judged:
    """How the target judged the candidates drafted at one position (a chain has one, a tree node its children)."""

    accepted: int | None  # index of the accepted candidate; None: every candidate was tried and rejected
    tried: list  # per candidate tried, in order: the acceptance probability it was tested with
    u: list  # per candidate tried: the uniform it was tested with (accepted iff u < tried)
    next_id: int | None  # none accepted: the token drawn in their place (with no candidates: the bonus)
    dist: torch.Tensor | None  # ... and the distribution it was drawn from, (V,)


def judge(r: torch.Tensor, tokens: list, q: list, u: float) -> Judged:
    """Multi-candidate rejection sampling at one position (SpecInfer / EAGLE; Leviathan's chain is the one-candidate
    case), driven by the position's one uniform draw u (draws.py). r (V,) the target's distribution there; tokens
    the candidates in order; q[j] candidate j's draft distribution (V,), or None when it was chosen deterministically.

    Every candidate one-hot (n-gram, suffix, recycling, lookahead, the heads' trees): the position's token is
    y = draw_token(r, u), and the candidate equal to y, if any, is accepted (Timor et al.'s exact match, as the
    cross-vocabulary draft's rule is described). That is the sequential rule's law exactly: candidate j is
    accepted with probability r(x_j) ÷ (1 − the mass of those rejected before it) once they were, and with none
    accepted y ~ r without the candidates. And y does not depend on what was drafted. Each candidate's u is the
    draw seen from its own interval of the CDF (_seen_from): uniform, and below its test's probability iff accepted.

    Some candidate sampled from q: the sequential rule, candidate j accepted with min(1, r(x)/q(x)) and on
    rejection r <- norm(max(0, r − q)) (one-hot: r without x, renormalised); after a rejection the draw's leftover
    (u − a) ÷ (1 − a) is uniform again and tests the next candidate; the token drawn when none is accepted comes
    from what is left of r, at what is left of u."""
    if all(qj is None for qj in q):
        return _judge_one_hot(r, tokens, u)
    tried, us = [], []
    for j, (x, qj) in enumerate(zip(tokens, q)):
        qx = float(qj[x]) if qj is not None else 1.0
        ratio = min(1.0, float(r[x]) / qx) if qx > 0 else float(r[x] > 0)  # q(x) = 0: p/q is 0/0 or infinite
        tried.append(ratio)
        us.append(u)
        if u < ratio:
            return Judged(j, tried, us, None, None)
        u = (u - ratio) / (1.0 - ratio)  # the leftover of a rejected test: uniform on [0, 1) again
        r = residual(r, qj, x)
    return Judged(None, tried, us, draw_token(r, u), r)


def _judge_one_hot(r: torch.Tensor, tokens: list, u: float) -> Judged:
    """judge's rule when every candidate is one-hot: the position draws y from r, the candidate equal to y wins."""
    cdf = cdf_of(r)
    y = draw_token(r, u, cdf)
    removed: list[tuple[float, float]] = []  # (start, mass) in the CDF of each candidate tried and rejected
    tried, us = [], []
    for j, x in enumerate(tokens):
        start = float(cdf[x - 1]) if x > 0 else 0.0
        repeated = x in tokens[:j]  # rejected already: no mass left
        mass = 0.0 if repeated else float(cdf[x]) - start
        left = 1.0 - sum(m for _, m in removed)
        tried.append(min(1.0, mass / left) if left > 0 else 0.0)
        us.append(_seen_from(u, start, removed, left, tried[-1], x == y))
        if x == y:
            return Judged(j, tried, us, None, None)
        removed.append((start, mass))
    dist = r.clone()
    dist[tokens] = 0.0
    total = dist.sum()
    return Judged(None, tried, us, y, dist / total if total > 0 else r)


def _seen_from(u: float, start: float, removed: list, left: float, tried: float, accepted: bool) -> float:
    """The position's draw u as the sequential rule's test of a candidate sees it: the CDF without the intervals
    of the candidates rejected before it (length `left`), rotated so the candidate's interval starts at 0, scaled
    to [0, 1). Uniform given those rejections, and < tried exactly when u falls in the candidate's interval."""

    def squeeze(v: float) -> float:  # v's place once the rejected intervals below it are cut out
        return v - sum(m for s, m in removed if s < v)

    seen = ((squeeze(u) - squeeze(start)) % left) / left if left > 0 else 0.0
    if accepted:  # rounding at an interval's edge must not contradict the verdict
        return min(seen, math.nextafter(tried, 0.0))
    return min(max(seen, tried), math.nextafter(1.0, 0.0))


def accept_sample(draft: torch.Tensor, q: torch.Tensor | None, p: torch.Tensor, draws: Draws) -> Verdict:
    """Rejection sampling (Leviathan Alg. 1, Chen Thm 1): the output is distributed exactly as p.

    Accept draft token x_i with probability min(1, p_i(x)/q_i(x)) left to right; at the first
    rejection sample from norm(max(0, p_i - q_i)); if all γ are accepted, sample a bonus from p_γ.
    q (γ, V) or None for a one-hot draft (accept with probability p_i(x): then the token each position
    commits is its own draw from p whatever was drafted, judge). draws(i): the uniform of the round's i-th position.
    """
    gamma = draft.shape[0]
    rows = torch.arange(gamma, device=p.device)
    p_draft = p[rows, draft]  # (γ,)
    q_draft = q[rows, draft] if q is not None else torch.ones_like(p_draft)
    ratio = (p_draft / q_draft).clamp(max=1.0).tolist()  # min(1, p/q) of every drafted token, tested or not
    u: list = [None] * gamma  # the uniform each drafted token was tested with (None: never tested)
    for i, x in enumerate(draft.tolist()):
        at = judge(p[i], [x], [q[i] if q is not None else None], draws(i))
        ratio[i], u[i] = at.tried[0], at.u[0]
        if at.accepted is None:  # 3. rejected at position i: the token drawn in its place
            return Verdict(i, at.next_id, ratio, p_draft.tolist(), float(p[i, at.next_id]), u, at.dist)
    next_id = draw_token(p[gamma], draws(gamma))  # every draft accepted: the bonus
    return Verdict(gamma, next_id, ratio, p_draft.tolist(), float(p[gamma, next_id]), u, p[gamma])


def topk_list(probs, k: int) -> list[list]:
    """Per row the top-k as [[id, prob], ...] (plain Python), of rows.py Rows or a (rows, V) probability tensor."""
    return as_rows(probs).topk(k)
