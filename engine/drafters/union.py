"""`union[:N,k]`: suffix speculation's and token recycling's candidates in one tree, sized once on this host's
verify curve. Training-free, no draft model.

Why: on Spec-Bench with SmolLM2-135M, context retrieval and recycling each commit at most ~1.85 tokens per
forward at γ 4 even with every candidate verified for free, and their union 2.16
(benchmarks/probes/ceiling.py): they are right on different tokens, so one tree holding both's likeliest
paths commits more per forward than either, for the rows the sizing rule lets in.

Each round both pools are built as their own drafters build them (suffix: the frequency trie after the longest
match, each path's score its empirical probability with a pseudo-occurrence; recycling: the filled template,
each path's score the product of its positions' learned rates). They are merged by path (a path in both keeps
the larger score: both estimate the same event, so they are not added), and the merged pool is sized with
costmodel.grow_tree on the verify times this drafter measured, as each of them sizes its own. Nodes are chosen
deterministically (q one-hot): the engine's tree rule verifies them losslessly.
"""

from __future__ import annotations

import torch

from .. import costmodel
from ..sampling.tree import trie
from ..specs import DraftSpec
from .base import Draft, Drafter, Factory, Needs, Settled, sized_draft
from .ngram import template_reader
from .recycle import DEFAULT_TEMPLATE, TEMPLATES, RecycleDrafter
from .suffix import MAX_NODES, SuffixDrafter, path_scores


def merge(pools: list[tuple[list, list, list]]) -> tuple[list[int], list[int], list[float]]:
    """One trie of several (tokens, parents, scores) pools, parents first: a path in more than one keeps its
    largest score (a child's never exceeds its parent's, so the merged scores stay monotone along paths)."""
    tokens, parents, scores, index = [], [], [], {}  # index: (merged parent, token) -> merged node
    for toks, pars, scs in pools:
        mine: list[int] = []  # this pool's node -> merged node
        for tok, par, sc in zip(toks, pars, scs):
            key = (-1 if par < 0 else mine[par], tok)
            if key in index:
                j = index[key]
                scores[j] = max(scores[j], sc)
            else:
                j = index[key] = len(tokens)
                tokens.append(tok)
                parents.append(key[0])
                scores.append(sc)
            mine.append(j)
    return tokens, parents, scores


class UnionDrafter(Drafter):
    """union[:N,k]: suffix speculation's and token recycling's pools merged into one sized tree."""

    def __init__(
        self, suffix: SuffixDrafter, recycle: RecycleDrafter, device: torch.device, name: str, budget: int
    ):
        self.suffix, self.recycle, self.device, self.name, self.budget = suffix, recycle, device, name, budget
        self.timed = costmodel.VerifyTimes()  # forward rows -> measured verify seconds

    def prepare(self, prompt_ids: list[int], cfg) -> None:
        self.suffix.prepare(prompt_ids, cfg)
        self.recycle.prepare(prompt_ids, cfg)

    def history_source(self, ids: list[int]) -> list[int]:
        """What a session's history keeps of this run (suffix speculation's masked sequence)."""
        return self.suffix.history_source(ids)

    def suffix_pool(self, ids: list[int], gamma: int) -> tuple[list, list, list]:
        """Suffix speculation's candidates as its own propose builds them, before sizing: (tokens, parents,
        scores), parents first."""
        _, conts, _ = self.suffix.continuations(self.suffix.source(ids), gamma)
        if not conts:
            return [], [], []
        tokens, parents, counts, _ = trie(conts, counted=True)
        return tokens, parents, path_scores(parents, counts, len(conts))

    def propose(self, ids: list[int], gamma: int) -> Draft:
        pools = [self.suffix_pool(ids, gamma), self.recycle.pool(ids, gamma)]
        # even with nothing drafted the forward hands back its top-k: recycling's table learns from every round
        return sized_draft(
            self.name, self.device, merge(pools), self.timed, self.recycle.k, budget=self.budget
        )

    def settle(self, r: Settled) -> None:
        """The verify forward's time over its rows (the engine's, or auto's for every round); recycling's table
        learns its top-k rows."""
        if r.rows:
            self.timed.observe(r.rows, r.verify_s)
        if r.seen is not None:
            self.recycle.learn_rows(r.seen)


def build(spec: DraftSpec, target, ctx):
    """The per-run constructor of union[:N,k] (registry.py calls it); its Needs: rows for its trees and
    the session's history."""
    special, text_of = template_reader(target.tokenizer)
    vocab = target.model.get_output_embeddings().weight.shape[0]
    template = TEMPLATES[DEFAULT_TEMPLATE]

    def make(cfg, gen, max_len, cache, history):
        budget = min(MAX_NODES, cfg.tree_budget) if cfg.tree_budget else MAX_NODES
        suffix = SuffixDrafter(spec["N"], target.device, spec.text, False, special, text_of, history, budget)
        recycle = RecycleDrafter(spec["k"], template, vocab, target.device, spec.text, special, text_of)
        return UnionDrafter(suffix, recycle, target.device, spec.text, budget)

    return Factory(make, Needs(rows=MAX_NODES, history=True))
