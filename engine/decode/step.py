"""One round's verify, accept, roll back and commit: the step after the draft.

`step(...)` takes the committed ids, the target's cache and a draft (a chain, a tree, or None for a
plain target step), runs the target's verify forward (it writes the cache), judges the draft, moves the
cache's length pointer back past what was rejected, and returns a `Step`: the tokens the target judged,
its verdict, what the cache keeps and what is committed. No events and no clocks in here: engine.py times
the step around it and record.py turns the Step into events. Chains and trees return the same Step; a
tree's *chain view* (its accepted path, then the first child rejected after it) fills the chain fields,
and the whole tree rides along in `Step.tree` for the tree view."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .. import sampling
from ..config import GenerationConfig
from ..drafters.base import Draft, Seen
from ..runtime import native
from ..runtime.cache import KVCache
from ..sampling import Draws, Verdict, tree
from ..sampling.rows import LogitRows, ProbRows, torch_stats
from ..sampling.typical import accept_tree_typical, accept_typical


@dataclass
class TreeStep:
    """Every node of a verified token tree and how the target judged it (plain data)."""

    token_ids: list  # node tokens, parents before children
    parents: list  # parent index per node (-1 = the last committed token)
    q: list  # draft probability of each node's token (1.0 when chosen deterministically)
    p: list  # target probability of each node's token given its ancestors
    accept_prob: list  # per node: the acceptance probability it was tested with, None if never reached
    status: list  # per node: "accepted", "rejected" or "unvisited"
    path: list  # accepted node indices, root to leaf
    corrected: bool  # the next token replaces rejected children (False: a bonus after a leaf)


@dataclass
class Step:
    """What one round did. `judged` is what the target judged, in order (a tree's chain view)."""

    pos: int  # position of the first token this round can add
    draft: Draft | None  # the drafter's proposal as made, maybe empty (None: no drafter asked)
    judged: (
        list  # the drafted ids the target judged, left to right (a tree: its chain view); [] for a plain step
    )
    q_judged: (
        list  # the draft's probability of each judged token (1.0: one-hot); Draft.q holds its whole rows
    )
    verdict: Verdict  # the target's judgement of `judged` and the next token
    n_accepted: int  # drafted tokens kept: the verdict's, cut just after an accepted end-of-text
    eos_accepted: bool  # an accepted draft was an end-of-text: the drafts after it were never tested
    p_rows: (
        object  # the target's distributions each judged token was judged with, len(judged)+1 rows (rows.py)
    )
    tree: TreeStep | None  # tree speculation: the whole tree; None for a chain
    cache_verified: int  # the target cache's length after the verify forward (before the rollback)
    cache_kept: int  # ... after the rollback: pos + n_accepted
    new: list  # committed ids: accepted drafts + the corrected / bonus / plain token, cut at EOS and budget
    origins: list  # per committed id: "accepted", "corrected", "bonus" or "ar"
    p_new: list  # target probability of each committed id
    seen: Seen | None = None  # what the verify forward computed that the draft asked for (Draft.topk / extra)

    @property
    def rejected(self) -> bool:
        """The target rejected a drafted token (after an accepted end-of-text nothing was tested)."""
        return self.n_accepted < len(self.judged) and not self.eos_accepted

    @property
    def kept_rows(self) -> list[int]:
        """Rows of the verify forward whose positions the cache keeps: the root, then the accepted drafts."""
        if self.tree is not None:
            return [0] + [i + 1 for i in self.tree.path[: self.n_accepted]]
        return list(range(self.n_accepted + 1))

    def kept_features(self, x: torch.Tensor, row: int = 0) -> torch.Tensor:
        """The verify forward's features (B, T, H) of this sequence's row at kept_rows, (n, H): a chain's are its
        first rows, a view."""
        if self.tree is None:
            return x[row, : self.n_accepted + 1]
        return x[row, self.kept_rows]

    @property
    def next_kind(self) -> str:
        """The token after the kept drafts: "corrected" (it replaces a draft) or "bonus"."""
        return next_kind(len(self.judged), self.n_accepted)


def parents_of(draft: Draft) -> list:
    """Each drafted node's parent (-1: the last committed token); a chain's are its predecessors."""
    return draft.parents if draft.parents is not None else list(range(-1, len(draft.token_ids) - 1))


def next_kind(judged: int, kept: int) -> str:
    """The token a round adds after the drafts it kept: "corrected" when it replaces a rejected one, "bonus" when
    every judged draft was kept (a plain step's token is "ar": its caller knows nothing was drafted)."""
    return "corrected" if kept < judged else "bonus"


def step(
    forward,
    ids: list[int],
    draft: Draft | None,
    cache: KVCache,
    cfg: GenerationConfig,
    draws: Draws | None,
    *,
    eos: frozenset,
    remaining: int,
    device: torch.device,
) -> Step:
    """One round on `cache`, which holds every committed token but the last (ids[-1]); `remaining` is the
    token budget left; draws: the run's uniform draws by absolute position (None when greedy). The caller drafted
    (phase 1) and appends `Step.new` to ids. = settle(verify(...)): engine.py times the two apart."""
    logits = verify(forward, ids, draft, cache, device)
    return settle(logits, ids, draft, cache, cfg, draws, eos=eos, remaining=remaining)


def verify(forward, ids: list[int], draft: Draft | None, cache: KVCache, device) -> torch.Tensor:
    """2. The verify forward: ONE target forward over [last committed token, drafts...] (a tree or extra rows: with
    a mask); it writes the cache. Returns its logits (T, V), rows as verify_rows lays them out."""
    tokens, mask, offsets = verify_rows(ids, draft, device)
    x = torch.tensor([tokens], device=device)
    if mask is None:
        return forward(x, cache)[0]  # (T, V)
    prefix = cache.length  # every committed token but the root
    mask = torch.cat([torch.ones(1, 1, len(tokens), prefix, dtype=torch.bool, device=device), mask], dim=-1)
    return forward(x, cache, attention_mask=mask, position_ids=offsets + prefix)[0]  # (T, V)


def usable(draft: Draft | None) -> Draft | None:
    """The draft the target verifies: None when the drafter had nothing (a plain target step)."""
    if draft is not None and not draft.token_ids.shape[0] and draft.extra is None:
        return None
    return draft


def verify_rows(
    ids: list[int], draft: Draft | None, device
) -> tuple[list, torch.Tensor | None, torch.Tensor | None]:
    """The verify forward's input tokens [root, nodes..., extra rows...], and for a tree or extra rows their own
    (1, 1, T, T) mask and (1, T) position offsets after the cached prefix; (tokens, None, None) for a chain (causal)."""
    draft = usable(draft)
    if draft is None:
        return [ids[-1]], None, None
    nodes = draft.token_ids.tolist()
    if draft.parents is None and draft.extra is None:
        return [ids[-1]] + nodes, None, None
    parents = parents_of(draft)
    mask, offsets = tree.tree_inputs(parents, 0, device)
    extra = draft.extra.token_ids if draft.extra is not None else []
    if extra:
        mask, offsets = tree.with_extra(mask, offsets, draft.extra.offsets, draft.extra.sees)
    return [ids[-1]] + nodes + list(extra), mask, offsets


def settle(
    logits: torch.Tensor,
    ids: list[int],
    draft: Draft | None,
    cache,
    cfg: GenerationConfig,
    draws: Draws | None,
    *,
    eos: frozenset,
    remaining: int,
) -> Step:
    """Phases 3.-5. on the verify forward's logits (T, V) (its rows as verify_rows laid them out): accept /
    resample, roll back, commit. `cache` (a KVCache, or one row of a batched cache) holds what the forward wrote."""
    pos, proposal = len(ids), draft
    draft = usable(draft)
    draws = draws.at(pos) if draws is not None else None  # draws(i): the uniform of position pos + i
    # 3. accept / resample (greedy: from each row's statistics, the softmax never formed; rows.py)
    # the top k of each row only as far as a reader asks: the events (record_topk) and the drafter (Draft.topk)
    k = max(cfg.record_topk, proposal.topk if proposal is not None else 0, 1)
    rows = LogitRows(logits, row_stats, k) if cfg.greedy and not cfg.typical else None
    if draft is not None and (draft.parents is not None or draft.extra is not None):
        drafted, q, verdict, p_rows, tree_step = _judge_tree(logits, ids, draft, cfg, draws, rows)
    else:
        drafted, q, verdict, p_rows = _judge_chain(logits, draft, cfg, draws, rows)
        tree_step = None
    seen = (
        _seen(proposal, ids[-1], logits, rows)
        if proposal is not None and (proposal.topk or proposal.extra)
        else None
    )
    ended = next((i + 1 for i in range(verdict.n_accepted) if drafted[i] in eos), None)  # an accepted EOS
    n = verdict.n_accepted if ended is None else ended  # the drafts after it are never kept
    # 4. rollback: keep the committed prefix and the accepted drafts (a tree first compacts its path;
    #    a drafter's extra rows sit after the nodes and go with the truncation)
    before = cache.length
    if tree_step is not None:
        cache.compact(pos - 1, tree_step.path)
    cache.truncate(pos + n)
    # 5. commit: accepted drafts + the corrected / bonus token, cut at EOS and at the token budget
    kind = "ar" if not drafted and tree_step is None else next_kind(len(drafted), n)
    new = drafted[:n] + [verdict.next_id]
    origins = ["accepted"] * n + [kind]
    p_new = verdict.p_draft[:n] + [verdict.next_p]
    cut = min(next((i + 1 for i, t in enumerate(new) if t in eos), len(new)), remaining)
    return Step(
        pos=pos,
        draft=proposal,
        judged=drafted,
        q_judged=q,
        verdict=verdict,
        n_accepted=n,
        eos_accepted=ended is not None,
        p_rows=p_rows,
        tree=tree_step,
        cache_verified=before,
        cache_kept=cache.length,
        new=new[:cut],
        origins=origins[:cut],
        p_new=p_new[:cut],
        seen=seen,
    )


def row_stats(x: torch.Tensor, k: int) -> tuple[list, list, list, list]:
    """Each row's argmax, log-sum-exp and top k (sampling/rows.py LogitRows): native.c's one pass where it runs
    (a CPU tensor), else torch's reductions."""
    if x.device.type == "cpu" and native.library() is not None:
        return native.row_stats(x, k)
    return torch_stats(x, k)


def _seen(draft: Draft, root: int, logits: torch.Tensor, rows: LogitRows | None) -> Seen:
    """The forward's rows as the drafter asked for them: top-k next ids per row, argmax at its extra rows."""
    extra = draft.extra.token_ids if draft.extra is not None else []
    inputs = [root] + (draft.token_ids.tolist() if draft.token_ids.shape[0] else []) + list(extra)
    if rows is not None:  # the row statistics have them already
        topk = rows.top_ids(draft.topk) if draft.topk else []
        extra_next = rows.best()[len(inputs) - len(extra) :] if extra else []
        return Seen(inputs=inputs, topk=topk, extra_next=extra_next)
    topk = torch.topk(logits, draft.topk, dim=-1).indices.tolist() if draft.topk else []  # (rows, k)
    extra_next = logits[len(inputs) - len(extra) :].argmax(-1).tolist() if extra else []
    return Seen(inputs=inputs, topk=topk, extra_next=extra_next)


def _judge_chain(logits, draft, cfg, draws, rows: LogitRows | None):
    """The chain rule on the verify forward's rows over [last committed token, d1..dγ]; rows: their statistics
    (greedy), else the shaped probabilities are formed."""
    p = rows if rows is not None else sampling.shape_probs(logits, cfg.temperature, cfg.top_k, cfg.top_p)
    if draft is None:  # a plain step draws the position's token as a drafted round would (draws.py)
        if rows is not None:
            next_id = rows.best()[0]
            return [], [], Verdict(0, next_id, [], [], rows.p(0, next_id)), rows
        next_id = int(p[0].argmax()) if cfg.greedy else sampling.draw_token(p[0], draws(0))
        return [], [], Verdict(0, next_id, [], [], float(p[0, next_id])), p
    drafted = draft.token_ids.tolist()
    if draft.q is not None:
        q = draft.q[torch.arange(len(drafted), device=draft.q.device), draft.token_ids].tolist()
    else:
        q = [1.0] * len(drafted)
    if cfg.typical:  # LOSSY (cfg.accept): Medusa-2's typical acceptance
        return drafted, q, accept_typical(draft.token_ids, p, *cfg.typical, cfg.greedy, draws), p
    if cfg.greedy:
        return drafted, q, sampling.accept_greedy(draft.token_ids, p), p
    return drafted, q, sampling.accept_sample(draft.token_ids, draft.q, p, draws), p


def _judge_tree(logits, ids, draft, cfg, draws, rows: LogitRows | None):
    """Walk the tree on the verify forward's rows over [root, nodes..., extra rows...]; return its chain view (a
    draft of no nodes with extra rows is a plain step whose forward also computed those rows). rows: every row's
    statistics (greedy), else the shaped probabilities are formed."""
    tokens = draft.token_ids.tolist()
    parents = parents_of(draft)
    if rows is not None:
        p = rows.take(range(len(tokens) + 1))
    else:
        p = ProbRows(sampling.shape_probs(logits[: len(tokens) + 1], cfg.temperature, cfg.top_k, cfg.top_p))
    node_q = draft.node_q if draft.node_q is not None else [None] * len(tokens)
    if cfg.typical:  # LOSSY (cfg.accept): Medusa-2's typical acceptance on the tree
        tv = accept_tree_typical(tokens, parents, p.probs, *cfg.typical, cfg.greedy, draws)
    elif cfg.greedy:
        tv = tree.accept_tree_greedy(tokens, parents, p)
    else:
        tv = tree.accept_tree_sample(tokens, parents, node_q, p.probs, draws)
    q_of = [float(q[tok]) if q is not None else 1.0 for tok, q in zip(tokens, node_q)]
    rejected = [
        c for c in tree.children_of(parents).get(tv.path[-1] if tv.path else -1, []) if c in tv.accept_prob
    ]
    chain = tv.path + rejected[:1]  # the chain view: the path, then the first child rejected after it
    rows = [0] + [i + 1 for i in tv.path]  # the p row each chain-view token was judged with
    p_chain = [p.p(rows[k], tokens[i]) for k, i in enumerate(chain)]
    verdict = Verdict(
        len(tv.path),
        tv.next_id,
        [tv.accept_prob[i] for i in chain],
        p_chain,
        tv.next_p,
        u=[tv.u[i] for i in chain] if tv.u is not None else None,
        dist=tv.dist,
    )
    status = [
        "accepted" if i in tv.path else ("rejected" if i in tv.accept_prob else "unvisited")
        for i in range(len(tokens))
    ]
    whole = (
        TreeStep(
            tokens,
            parents,
            q_of,
            [p.p(par + 1, tok) for tok, par in zip(tokens, parents)],
            [tv.accept_prob.get(i) for i in range(len(tokens))],
            status,
            tv.path,
            tv.corrected,
        )
        if tokens
        else None
    )
    return [tokens[i] for i in chain], [q_of[i] for i in chain], verdict, p.take(rows), whole
