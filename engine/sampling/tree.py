"""Tree speculation: verify a whole token tree in ONE target forward and accept a path (the cache then keeps
it: KVCache.compact).

Nodes are in topological order (a parent comes before its children); parent -1 is the root, the
last committed token. Verification feeds [root, nodes...] with a tree attention mask (each node
sees the committed prefix and its own ancestors) and position ids = prefix length + depth.
A chain is the one-branch case: its mask is the causal mask.

Acceptance walks down from the root. Greedy: follow the child equal to argmax p. Sampling
(lossless, SpecInfer / EAGLE multi-candidate rule): try the children in turn; a child sampled
from q is accepted with min(1, r(x)/q(x)) and on rejection r <- norm(max(0, r - q)); a child
chosen deterministically (one-hot q) is accepted with r(x) and on rejection r <- r without x,
renormalised. When no child is accepted, the next token is sampled from what is left of r.
Children all chosen deterministically are judged in the equivalent exact-match form: the position
draws its token from p and the child equal to it is accepted (chain.judge).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .chain import judge
from .draws import Draws
from .rows import as_rows


def depths(parents: list[int]) -> list[int]:
    """Depth of each node (children of the root have depth 1)."""
    out: list[int] = []
    for par in parents:
        out.append(1 if par < 0 else out[par] + 1)
    return out


def tree_inputs(parents: list[int], prefix: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    """Attention mask (1, 1, N+1, prefix+N+1) bool and position ids (1, N+1) for [root, nodes...].

    `prefix` = tokens already in the cache (every committed token but the root).
    """
    n = len(parents) + 1  # root + nodes
    allowed = torch.zeros(n, n, dtype=torch.bool)
    allowed[0, 0] = True
    for i, par in enumerate(parents, start=1):
        allowed[i] = allowed[par + 1]  # everything the parent sees (root's row for top-level nodes)
        allowed[i, i] = True
    mask = torch.cat([torch.ones(n, prefix, dtype=torch.bool), allowed], dim=1)  # (N+1, prefix+N+1)
    pos = torch.tensor([0] + depths(parents)) + prefix
    return mask[None, None].to(device), pos[None].to(device)


def with_extra(mask: torch.Tensor, positions: torch.Tensor, offsets: list[int], sees: list[list[int]]):
    """tree_inputs' mask and positions with R extra rows after the nodes (a drafter's own rows: lookahead's
    window): extra row j sees the cached prefix, the root and the extra rows sees[j] and itself, never a node; no
    node sees it. Its position is the root's + offsets[j]. Returns ((1, 1, N+1+R, prefix+N+1+R), (1, N+1+R))."""
    n_rows, width = mask.shape[2], mask.shape[3]
    prefix, r = width - n_rows, len(offsets)
    extra = torch.zeros(r, width + r, dtype=torch.bool)
    extra[:, : prefix + 1] = True  # the cached prefix and the root
    for j, row in enumerate(sees):
        extra[j, [width + i for i in row] + [width + j]] = True
    top = torch.cat([mask[0, 0].cpu(), torch.zeros(n_rows, r, dtype=torch.bool)], dim=1)
    full = torch.cat([top, extra], dim=0)[None, None].to(mask.device)
    pos = torch.cat([positions, positions[:, :1] + torch.tensor([offsets], device=positions.device)], dim=1)
    return full, pos


def children_of(parents: list[int]) -> dict[int, list[int]]:
    kids: dict[int, list[int]] = {}
    for i, par in enumerate(parents):
        kids.setdefault(par, []).append(i)
    return kids


@dataclass
class TreeVerdict:
    path: list[int]  # accepted node indices, root to leaf
    next_id: int  # corrected (some child was rejected) or bonus (leaf reached) token
    next_p: float  # its target probability at the position it was emitted
    accept_prob: dict  # node index -> acceptance probability it was tested with (unvisited nodes absent)
    corrected: bool  # next_id replaces rejected children (False: bonus after a leaf)
    u: dict | None = None  # sampling: node index -> the uniform draw it was tested with
    dist: torch.Tensor | None = None  # sampling: the distribution next_id was drawn from, (V,)


def accept_tree_greedy(tokens: list[int], parents: list[int], p) -> TreeVerdict:
    """Longest root-to-node path agreeing with each row's most probable token. p: the N+1 rows' distributions
    (rows.py Rows, or a (N+1, V) probability tensor), row 0 = root."""
    rows = as_rows(p)
    best = rows.best()
    kids = children_of(parents)
    node, path, tried = -1, [], {}
    while True:
        want = best[node + 1]
        nxt = None
        for child in kids.get(node, []):
            tried[child] = 1.0 if tokens[child] == want else 0.0
            if tokens[child] == want:
                nxt = child
                break
        if nxt is None:
            return TreeVerdict(path, want, rows.p(node + 1, want), tried, bool(kids.get(node)))
        path.append(nxt)
        node = nxt


def accept_tree_sample(
    tokens: list[int], parents: list[int], q: list, p: torch.Tensor, draws: Draws
) -> TreeVerdict:
    """Multi-candidate rejection sampling down the tree; q[i] is node i's draft distribution (V,) or None (one-hot).
    At depth d the children are judged with the draw of the round's d-th position (chain.judge), so a tree of
    one-hot nodes commits, at each position, that position's own draw from p whatever the tree held."""
    kids = children_of(parents)
    node, path, tried, draws_of = -1, [], {}, {}
    while True:
        children = kids.get(node, [])
        at = judge(p[node + 1], [tokens[c] for c in children], [q[c] for c in children], draws(len(path)))
        for child, ratio, u in zip(children, at.tried, at.u):
            tried[child], draws_of[child] = ratio, u
        if at.accepted is None:
            next_id = at.next_id
            return TreeVerdict(
                path, next_id, float(p[node + 1, next_id]), tried, bool(children), draws_of, at.dist
            )
        node = children[at.accepted]
        path.append(node)


def trie(branches: list[list[int]], counted: bool = False) -> tuple:
    """Merge token sequences into a tree (shared prefixes become one node): (tokens, parents), parents first;
    counted: (tokens, parents, counts, first), counts[i] = how many sequences pass through node i, first[i] = the
    index of the first sequence that does (the one that made the node)."""
    tokens, parents, counts, first, index = [], [], [], [], {}
    for b, seq in enumerate(branches):
        par = -1
        for tok in seq:
            key = (par, tok)
            if key not in index:
                index[key] = len(tokens)
                tokens.append(tok)
                parents.append(par)
                counts.append(0)
                first.append(b)
            par = index[key]
            counts[par] += 1
    return (tokens, parents, counts, first) if counted else (tokens, parents)
