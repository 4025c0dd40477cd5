"""Suffix speculation (SuffixDecoding, Oliaro et al. 2025): the continuations seen after the longest match of the
context's suffix, in this run's prompt and output and the session's earlier ones, drafted as a tree of the most
frequent paths. Training-free, no draft model.

Each round:
1. match: the longest n <= N such that the last n tokens occurred earlier (NgramIndex over this run; another over
   the session's history); up to OCCURRENCES of their latest occurrences, this run's first;
2. count: the continuations after them (up to γ tokens, cut at the chat template) form a trie whose node counts
   are how many occurrences passed through it; a node's score is its empirical path probability,
   count ÷ occurrences (SuffixDecoding's scoring);
3. size: nodes are taken best first while the next one still pays on this host: with E = 1 + Σ scores taken,
   a node of score s is added when (E + s) ÷ t(k + 2) > E ÷ t(k + 1), t(n) the verify forward's time over n
   positions as this drafter measured it (costmodel.verify_curve of its medians; PRIOR_SLOPE before two sizes
   are seen). Where t(9) ≈ t(1) a 9-node tree is free; where t(9) ≈ 1.8·t(1) only likely nodes pay.
   `suffix:N,chain` takes only the most frequent child at each depth.

The nodes are chosen deterministically (q one-hot), so the engine's tree rule verifies them losslessly: greedy
gives the target's own output, sampling the multi-candidate rule's exact law.

The session history (`History`) is the earlier runs' prompts and outputs, template positions masked, bounded by
MAX_HISTORY_TOKENS (the oldest runs are dropped): the app keeps one per visitor's session, never shared.
"""

from __future__ import annotations

import statistics
import threading

import torch

from .. import costmodel
from ..sampling.tree import trie
from ..specs import DraftSpec
from .base import Draft, Drafter, empty_draft
from .ngram import NgramIndex, template_mask, template_reader

OCCURRENCES = 64  # latest occurrences of the match whose continuations are counted
MAX_NODES = 24  # the largest tree (verify rows besides the root); the cache is sized for it
MAX_HISTORY_TOKENS = 16384  # a session's earlier prompts and outputs kept: its index holds ≈ 8 n-grams per
# token, about 30 MB at the cap (tracemalloc, 16,227 tokens)


class History:
    """Earlier sequences of one session (template positions as negative ids), indexed for matching; the oldest
    are dropped past MAX_HISTORY_TOKENS. Thread-safe: a session's runs may overlap in the app."""

    def __init__(self, max_n: int = 8, max_tokens: int = MAX_HISTORY_TOKENS):
        self.max_n, self.max_tokens = max_n, max_tokens
        self.runs: list[list[int]] = []
        self.lock = threading.Lock()
        self._index, self._flat = NgramIndex(max_n), []

    def add(self, source: list[int]) -> None:
        """Keep one finished run's sequence (its last max_tokens tokens at most)."""
        with self.lock:
            self.runs.append(list(source[-self.max_tokens :]))
            while sum(map(len, self.runs)) > self.max_tokens and len(self.runs) > 1:
                self.runs.pop(0)
            self._flat, self._index = [], NgramIndex(self.max_n)  # rebuilt on the next match
            for k, run in enumerate(self.runs):
                self._flat += run + [-(10**9) - k]  # a separator nothing matches across

    @property
    def tokens(self) -> int:
        return len(self._flat)

    def occurrences(self, suffix: tuple, limit: int) -> list[tuple[list[int], int]]:
        """(sequence, start) of the latest occurrences of `suffix` in the history, at most `limit`."""
        with self.lock:
            if not self._flat:
                return []
            self._index._extend(self._flat)
            starts = self._index.starts.get(suffix, [])
            return [(self._flat, s) for s in reversed(starts[-limit:])]


def pick(tokens, parents, scores, t, chain: bool = False, budget: int = MAX_NODES) -> list[int]:
    """Trie nodes to draft, parents first: best first by score among the children of nodes taken, while the
    next node pays on the measured forward times t(n) (see the module docstring); chain: one child per depth."""
    children: dict[int, list[int]] = {}
    for i, par in enumerate(parents):
        children.setdefault(par, []).append(i)
    frontier, taken, expected = list(children.get(-1, [])), [], 1.0
    while frontier and len(taken) < budget:
        best = max(frontier, key=lambda i: (scores[i], -i))
        n = len(taken) + 1  # rows of the forward now (root + nodes)
        if (expected + scores[best]) * t(n) <= expected * t(n + 1):
            break
        taken.append(best)
        expected += scores[best]
        frontier = [] if chain else [i for i in frontier if i != best]
        frontier += children.get(best, [])
    return sorted(taken)


class SuffixDrafter(Drafter):
    """suffix[:N,SHAPE]: the frequency tree of what followed the longest match of the context's suffix."""

    def __init__(
        self,
        max_n: int,
        device: torch.device,
        name: str = "suffix",
        chain: bool = False,
        special: frozenset = frozenset(),
        text_of=None,
        history: History | None = None,
        budget: int = MAX_NODES,
    ):
        self.max_n, self.device, self.name, self.chain, self.budget = max_n, device, name, chain, budget
        self.special, self.text_of = special, text_of or str
        self.history = history
        self.mask: list[bool] = []
        self.index = NgramIndex(max_n)
        self.times: dict[int, list[float]] = {}  # forward rows -> measured verify seconds
        self.last_rows = 0

    def prepare(self, prompt_ids: list[int], cfg) -> None:
        self.mask = template_mask(prompt_ids, self.special, self.text_of) if self.special else []

    def source(self, ids: list[int]) -> list[int]:
        """ids with the chat template's positions as distinct negative numbers (nothing matches them)."""
        if not any(self.mask):
            return list(ids)
        n = len(self.mask)
        return [-1 - j if m else t for j, (t, m) in enumerate(zip(ids[:n], self.mask))] + list(ids[n:])

    def verify_time(self, n: int) -> float:
        """t(n) in units of the cheapest measured forward: medians where measured, else the cost model's curve."""
        points = {k: statistics.median(v) for k, v in self.times.items() if v}
        if not points:
            return 1.0 + costmodel.PRIOR_SLOPE * (n - 1)
        base = min(points.values())
        curve = costmodel.verify_curve(
            {1: points.get(1, base) / base, **{k: v / base for k, v in points.items() if k >= 2}}
        )
        return curve(n)

    def continuations(self, src: list[int], gamma: int) -> tuple[int, list[list[int]]]:
        """(match length n, continuations after its latest occurrences: this run's, then the history's)."""
        self.index._extend(src)
        for n in range(min(self.max_n, len(src) - 1), 0, -1):
            suffix = tuple(src[-n:])
            if any(t < 0 for t in suffix):
                continue
            found = [(src, s) for s in reversed(self.index.starts.get(suffix, [])) if s + n < len(src)][
                :OCCURRENCES
            ]
            if self.history is not None and len(found) < OCCURRENCES:
                found += self.history.occurrences(suffix, OCCURRENCES - len(found))
            conts = []
            for seq, s in found:
                cont = seq[s + n : s + n + gamma]
                cont = cont[: next((k for k, t in enumerate(cont) if t < 0), len(cont))]
                if cont:
                    conts.append(cont)
            if conts:
                return n, conts
        return 0, []

    def propose(self, ids: list[int], gamma: int) -> Draft:
        n, conts = self.continuations(self.source(ids), gamma)
        if not conts:
            self.last_rows = 1
            return empty_draft(self.device, self.name)
        tokens, parents, counts = trie(conts, counted=True)
        scores = [c / len(conts) for c in counts]
        keep = pick(tokens, parents, scores, self.verify_time, self.chain, self.budget)
        if not keep:
            self.last_rows = 1
            return empty_draft(self.device, self.name)
        new = {old: k for k, old in enumerate(keep)}
        self.last_rows = len(keep) + 1
        return Draft(
            torch.tensor([tokens[i] for i in keep], device=self.device),
            None,
            self.name,
            parents=[new[parents[i]] if parents[i] >= 0 else -1 for i in keep],
            variant=f"n={n}",
        )

    def learn(self, n_accepted: int, ids: list[int], verify_s: float) -> None:
        """The verify forward's time at the size just proposed (a plain step: size 1), the last 32 kept."""
        if verify_s and verify_s > 0 and self.last_rows:
            kept = self.times.setdefault(self.last_rows, [])
            kept.append(verify_s)
            del kept[:-32]


def build(spec: DraftSpec, target, ctx):
    """The per-run constructor of suffix[:N,SHAPE] (registry.py calls it); `rows` sizes the cache for its trees.
    The constructor takes the session's History when the caller has one (Engine.generate(history=...))."""
    special, text_of = template_reader(target.tokenizer)
    chain = spec["shape"] == "chain"

    def make(cfg, gen, max_len, cache, history=None):
        budget = min(MAX_NODES, cfg.tree_budget) if cfg.tree_budget else MAX_NODES
        return SuffixDrafter(spec["N"], target.device, spec.text, chain, special, text_of, history, budget)

    make.rows = MAX_NODES
    make.takes_history = True
    return make
