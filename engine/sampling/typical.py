"""Medusa-2's *typical acceptance*: a LOSSY shortcut, off by default (GenerationConfig.accept).

A drafted token x is kept when the target finds it typical enough, p(x) > min(ε, δ·exp(−H(p))), with H(p) the
entropy of the target's distribution at that position, instead of the exact test (greedy: x = argmax p; sampling:
u < min(1, p/q)). At the first token that fails, the next token is argmax p (greedy) or drawn from p itself, not
from the residual norm(max(0, p − q)), so the output is neither the target's greedy text nor drawn from its law.
It exists to be measured against the exact rule (engine/decode/drift.py): faster, and not the target's output.
"""

from __future__ import annotations

import torch

from .chain import Verdict
from .draws import Draws, draw_token
from .tree import TreeVerdict, children_of


def threshold(p: torch.Tensor, eps: float, delta: float) -> torch.Tensor:
    """(..., V) -> (...,): min(ε, δ·exp(−H(p))), the probability a typical token must exceed."""
    entropy = -(p * p.clamp_min(1e-30).log()).sum(-1)
    return torch.minimum(torch.full_like(entropy, eps), delta * torch.exp(-entropy))


def accept_typical(
    draft: torch.Tensor, p: torch.Tensor, eps: float, delta: float, greedy: bool, draws: Draws | None
) -> Verdict:
    """Keep drafts while each is typical under p; the next token is argmax p (greedy) or a draw from p (with the
    draw of its position, draws(n)). draft (γ,), p (γ+1, V). accept_prob records 1.0 / 0.0 per drafted token (the
    test is a threshold)."""
    gamma = draft.shape[0]
    rows = torch.arange(gamma, device=p.device)
    p_draft = p[rows, draft]  # (γ,)
    ok = (p_draft > threshold(p[:gamma], eps, delta)).int()
    n = int(ok.cumprod(0).sum())
    dist = p[n]
    next_id = int(dist.argmax()) if greedy else draw_token(dist, draws(n))
    return Verdict(
        n, next_id, ok.float().tolist(), p_draft.tolist(), float(p[n, next_id]), dist=None if greedy else dist
    )


def accept_tree_typical(
    tokens: list[int],
    parents: list[int],
    p: torch.Tensor,
    eps: float,
    delta: float,
    greedy: bool,
    draws: Draws | None,
):
    """The same shortcut on a token tree: from the root, follow the first child (in draft order) that is typical
    under its parent's row; the next token is argmax p (greedy) or a draw from p at the last node kept."""
    kids, bar = children_of(parents), threshold(p, eps, delta).tolist()  # (N+1,)
    node, path, tried = -1, [], {}
    while True:
        row = p[node + 1]
        nxt = None
        for child in kids.get(node, []):
            ok = float(row[tokens[child]]) > bar[node + 1]
            tried[child] = 1.0 if ok else 0.0
            if ok:
                nxt = child
                break
        if nxt is None:
            next_id = int(row.argmax()) if greedy else draw_token(row, draws(len(path)))
            return TreeVerdict(
                path, next_id, float(row[next_id]), tried, bool(kids.get(node)), dist=None if greedy else row
            )
        path.append(nxt)
        node = nxt
