"""Drafting for a batched run (engine/decode/batch.py): one Draft per running row each round.

Two ways, chosen by what the spec's drafter is:
- `PerRow`: one drafter of the spec per row, each with its own state and its own random generator (n-gram
  lookup, the trained heads, the oracle, lookahead, recycling: their state follows their row's ids).
- `RowsModel`: a causal-LM draft (`self`, `layerskip:L`, `quant`, `model:<id>`) drafts every row in (B, ·)
  forwards: on the target's per-row cache (self, layer skip: the pointers move back afterwards, as a single run's
  shared-cache draft does) or on its own RowsKVCache. Row b samples from its own q with its own generator, so a row
  draws exactly what it would alone.
A batched run asks `propose(rows_ids, gammas)` and, after the verify forward, `settle(r, Settled)` per row (its
`rows` 0: a batch's forward is not one sequence's to time); rows that finish drop out through `keep`.
"""

from __future__ import annotations

import torch

from ..runtime.rowcache import RowsKVCache, ragged_inputs
from ..sampling import pick, shape_probs
from .base import Draft, Drafter, Settled
from .crossvocab import CrossVocabDrafter
from .model import ModelDrafter


class PerRow:
    """One drafter per row (state per row); a row's γ may be smaller than the batch's near its token budget."""

    def __init__(self, drafters: list[Drafter]):
        self.drafters = drafters
        self.name = drafters[0].name

    def prepare(self, rows_ids: list[list[int]], cfg) -> None:
        for drafter, ids in zip(self.drafters, rows_ids):
            drafter.prepare(ids, cfg)

    def propose(self, rows_ids: list[list[int]], gammas: list[int]) -> list[Draft | None]:
        return [d.propose(ids, g) if g else None for d, ids, g in zip(self.drafters, rows_ids, gammas)]

    def settle(self, r: int, settled: Settled) -> None:
        self.drafters[r].settle(settled)

    def keep(self, rows: list[int]) -> None:
        self.drafters = [self.drafters[r] for r in rows]


class RowsModel(PerRow):
    """A ModelDrafter's model drafting all rows at once: γ batched (B, ·) forwards per round."""

    def __init__(self, first: ModelDrafter, rows: int, generators: list, max_len: int):
        self.first, self.name = first, first.name
        self.forward, self.cfg, self.device = first.forward, first.cfg, first.device
        self.shared = first.shared
        # shared: the target's RowsKVCache (the builder was handed it); else an own one with a row per sequence
        self.cache = first.cache if self.shared else RowsKVCache.for_model(first.model, max_len, rows)
        self.generators = generators
        self.fed: list[list[int]] = [[] for _ in range(rows)]  # per row: the tokens its own cache holds

    def prepare(self, rows_ids, cfg) -> None:
        pass

    def propose(self, rows_ids: list[list[int]], gammas: list[int]) -> list[Draft | None]:
        top = max(gammas)
        if not top:
            return [None] * len(rows_ids)
        start = self.cache.lengths
        # every committed token a row's draft cache lacks (one normally; two after an all-accepted round; on a
        # shared cache always the last one)
        feeds = [ids[n:] for ids, n in zip(rows_ids, start)]
        tokens, qs = [], []
        last = self._forward([(f, None, None) for f in feeds], [len(f) - 1 for f in feeds])  # (B, V)
        for k in range(top):
            q = shape_probs(last, self.cfg.temperature, self.cfg.top_k, self.cfg.top_p)  # (B, V)
            tok = torch.stack([pick(q[r], self.cfg.greedy, g) for r, g in enumerate(self.generators)])  # (B,)
            tokens.append(tok)
            qs.append(q)
            if k < top - 1:
                last = self._forward([([int(t)], None, None) for t in tok.tolist()], [0] * len(feeds))
        chains = torch.stack(tokens, dim=1)  # (B, γ)
        q_all = torch.stack(qs, dim=1)  # (B, γ, V_draft)
        if self.shared:
            # the target's cache as it was: the verify forward rewrites these slots
            self.cache.set_lengths(start)
        else:
            self.fed = [ids + chain[:-1] for ids, chain in zip(rows_ids, chains.tolist())]
        return [self._draft(chains[r], q_all[r], g) if g else None for r, g in enumerate(gammas)]

    def _forward(self, rows: list[tuple], last: list[int]) -> torch.Tensor:
        """One batched draft forward of each row's new tokens; the logits at each row's index `last` (B, V).
        Every row's pointer ends just after its own tokens (padding dropped)."""
        before = self.cache.lengths
        x, mask, positions = ragged_inputs(before, rows, self.device)
        logits = self.forward(x, self.cache, attention_mask=mask, position_ids=positions)  # (B, T, V)
        self.cache.set_lengths([n + len(tokens) for n, (tokens, _, _) in zip(before, rows)])
        return logits[torch.arange(len(rows)), torch.tensor(last)]

    def _draft(self, chain: torch.Tensor, q: torch.Tensor, gamma: int) -> Draft:
        """Row's chain cut to its γ (and after the first token under p_min, as a single run's draft stops)."""
        chain, q = chain[:gamma], q[:gamma]
        if self.cfg.p_min > 0:
            unsure = (q.max(-1).values < self.cfg.p_min).nonzero()
            if len(unsure):
                cut = int(unsure[0]) + 1
                chain, q = chain[:cut], q[:cut]
        first = self.first
        q, chain = first.fit_vocab(q), chain.to(first.out_device)
        return first._tree(chain, q) if self.cfg.tree_budget else Draft(chain, q, self.name)

    def settle(self, r: int, settled: Settled) -> None:
        if self.shared:
            return  # the target's cache: the batched loop has already rolled the row back
        ids, fed, keep = settled.ids, self.fed[r], 0
        limit = min(len(fed), self.cache.lengths[r], len(ids) - 1)
        while keep < limit and fed[keep] == ids[keep]:
            keep += 1
        self.cache.truncate_row(r, keep)
        del fed[keep:]

    def keep(self, rows: list[int]) -> None:
        self.generators = [self.generators[r] for r in rows]
        self.fed = [self.fed[r] for r in rows]
        if not self.shared:
            self.cache.keep_rows(rows)


def row_drafters(factory, cfg, generators: list, max_len: int, cache: RowsKVCache) -> PerRow:
    """Drafters for B rows: a causal-LM draft batched over them (RowsModel), else one drafter per row."""
    first = factory(cfg, generators[0], max_len, cache)
    if isinstance(first, ModelDrafter) and not isinstance(first, CrossVocabDrafter):
        return RowsModel(first, cache.rows, generators, max_len)
    return PerRow([first] + [factory(cfg, g, max_len, cache) for g in generators[1:]])
