"""Suffix speculation (SuffixDecoding, Oliaro et al. 2025): the continuations seen after the longest match of the
context's suffix, in this run's prompt and output and the session's earlier ones, drafted as a tree of the most
frequent paths. Training-free, no draft model.

Each round:
1. match: the longest n <= N such that the last n tokens occurred earlier (NgramIndex over this run; a numpy
   search over the session's history, HistoryView); up to OCCURRENCES of their latest occurrences, this run's first;
2. count: the continuations after them (up to γ tokens, cut at the chat template) form a trie whose node counts
   are how many occurrences passed through it; a node's score is its path's empirical probability with one
   pseudo-occurrence per step, Π c ÷ (c_parent + 1) (SuffixDecoding's scoring, shrunk: `path_scores`);
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

import bisect
import threading
from array import array

import numpy as np
import torch

from .. import costmodel
from ..events import SuffixMatched
from ..sampling.tree import depths, trie
from ..specs import DraftSpec
from .base import Draft, Drafter, Factory, Needs, Note, Settled, empty_draft, size_tree
from .ngram import Masked, NgramIndex, template_mask, template_reader

OCCURRENCES = 64  # latest occurrences of the match whose continuations are counted
MAX_NODES = 24  # the largest tree (verify rows besides the root); the cache is sized for it
# a session's earlier prompts and outputs kept: 8 bytes a token at rest; a run's view adds a Python list and a numpy
# copy of them (~0.7 MB at the cap) while it runs
MAX_HISTORY_TOKENS = 16384
SEPARATOR = -(10**9)  # between two runs in a flattened history (minus the run's number): nothing matches it


def load_corpus(path) -> list[list[int]]:
    """A datastore's token sequences: a torch file of a list of token-id lists (the target's own answers to
    prompts disjoint from every benchmark, training/datastore.py), read without unpickling code."""
    seqs = torch.load(path, weights_only=True)
    ok = isinstance(seqs, list) and all(
        isinstance(s, list) and all(type(t) is int and t >= 0 for t in s) for s in seqs
    )
    if not ok:  # a negative id would act as a template mark, a float would fail mid-run
        raise ValueError(f"{path}: a corpus is a list of token-id lists (ints >= 0)")
    return seqs


class History:
    """Earlier sequences of one session (template positions as negative ids); the oldest are dropped past
    max_tokens. At rest it holds only the tokens (8 bytes each); each run matches against its own snapshot
    (`view`), taken on first use and freed with the run's drafter.
    Thread-safe: a session's runs may overlap in the app. A copy (the app's per-session state) gets its own lock."""

    def __init__(self, max_tokens: int = MAX_HISTORY_TOKENS):
        self.max_tokens = max_tokens
        self.runs: list[array] = []
        self.lock = threading.Lock()

    def add(self, source: list[int]) -> None:
        """Keep one finished run's sequence (its last max_tokens tokens at most)."""
        with self.lock:
            self.runs.append(array("q", source[-self.max_tokens :]))
            while sum(map(len, self.runs)) > self.max_tokens and len(self.runs) > 1:
                self.runs.pop(0)

    @property
    def tokens(self) -> int:
        """Tokens kept, over all runs."""
        return sum(map(len, self.runs))

    def view(self) -> "HistoryView":
        """The history as it is now, flattened for one run's matching."""
        with self.lock:
            flat, starts = [], []
            for k, run in enumerate(self.runs):
                starts.append(len(flat))
                flat += [*run, SEPARATOR - k]
            return HistoryView(flat, starts)

    def __deepcopy__(self, memo) -> "History":
        copy = History(self.max_tokens)
        with self.lock:
            copy.runs = [array("q", run) for run in self.runs]
        return copy

    def __getstate__(self) -> dict:  # pickled (a ZeroGPU worker's argument): without the lock
        return {"max_tokens": self.max_tokens, "runs": self.runs}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self.lock = threading.Lock()


class HistoryView:
    """One run's snapshot of a session's history: the runs flattened with separators, searched with numpy (one
    vectorised comparison per matched token: ~10 µs over 16,384 tokens), so a run pays no index build (a Python
    n-gram index of a full history took 0.16-0.27 s per run, ~15% of a 64-token answer)."""

    def __init__(self, flat: list[int], starts: list[int]):
        self.flat, self.starts = flat, starts
        self.array = np.asarray(flat, dtype=np.int64)

    def occurrences(self, suffix: tuple, limit: int) -> list[tuple[list[int], int, int, int]]:
        """(sequence, start, runs_ago, run's offset in the sequence) of the latest occurrences of `suffix`, at most
        `limit`: runs_ago 1 is the most recent earlier run, and start − offset the position in it."""
        n, h = len(suffix), self.array
        if not n or len(h) <= n:
            return []
        found = np.flatnonzero(h[: len(h) - n] == suffix[0])  # starts with a token after the match
        for j in range(1, n):
            found = found[h[found + j] == suffix[j]]
        out = []
        for s in found[::-1][:limit].tolist():
            k = bisect.bisect_right(self.starts, s) - 1
            out.append((self.flat, s, len(self.starts) - k, self.starts[k]))
        return out


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
        self.seen: HistoryView | None = None  # the history as this run matches it
        # ids with the chat template's positions as distinct negative numbers (nothing matches them)
        self.source = Masked()
        self.index = NgramIndex(max_n)
        self.timed = costmodel.VerifyTimes()  # forward rows -> measured verify seconds

    def prepare(self, prompt_ids: list[int], cfg) -> None:
        self.source = Masked(template_mask(prompt_ids, self.special, self.text_of) if self.special else [])

    def history_source(self, ids: list[int]) -> list[int]:
        """What the session's history keeps of this run: its masked sequence (source), a copy."""
        return list(self.source(ids))

    def continuations(self, src: list[int], gamma: int) -> tuple[int, list[list[int]], list[list[int]]]:
        """(match length n, continuations after its latest occurrences: this run's, then the history's, and per
        continuation [runs_ago, position of its first token in its run]: 0 = this run)."""
        self.index._extend(src)
        for n in range(min(self.max_n, len(src) - 1), 0, -1):
            suffix = tuple(src[-n:])
            if any(t < 0 for t in suffix):
                continue
            found = [(src, s, 0, 0) for s in reversed(self.index.starts.get(suffix, [])) if s + n < len(src)][
                :OCCURRENCES
            ]
            if self.history is not None and len(found) < OCCURRENCES:
                self.seen = self.seen or self.history.view()  # this run's snapshot, taken on first use
                found += self.seen.occurrences(suffix, OCCURRENCES - len(found))
            conts, origins = [], []
            for seq, s, ago, offset in found:
                cont = seq[s + n : s + n + gamma]
                cont = cont[: next((k for k, t in enumerate(cont) if t < 0), len(cont))]
                if cont:
                    conts.append(cont)
                    origins.append([ago, s + n - offset])
            if conts:
                return n, conts, origins
        return 0, [], []

    def propose(self, ids: list[int], gamma: int) -> Draft:
        src = self.source(ids)
        n, conts, origins = self.continuations(src, gamma)
        if not conts:
            return empty_draft(self.device, self.name)
        tokens, parents, counts, first = trie(conts, counted=True)  # first: each node's latest occurrence
        scores = path_scores(parents, counts, len(conts))
        sized = size_tree(tokens, parents, scores, self.timed.curve(), self.chain, self.budget)
        keep = sized["keep"]
        if not keep:
            return empty_draft(self.device, self.name)
        match = {  # the suffix_match event's fields (_match_event)
            "match": n,
            "match_ids": src[-n:],  # never a template position (continuations() skips those)
            "occurrences": len(conts),
            **{k: sized[k] for k in ("token_ids", "parents", "scores", "verify")},
            "counts": [counts[i] for i in keep],
            # a node at depth d sits d − 1 tokens after its continuation's first token
            "origins": [
                [origins[first[i]][0], origins[first[i]][1] + d - 1]
                for i, d in zip(keep, depths(sized["parents"]))
            ],
            "measured": self.timed.measured(),
            # in a chain a node's siblings were never candidates: none was left out by the rule
            "next_score": None if self.chain else sized["next_score"],
        }
        return Draft(
            torch.tensor(match["token_ids"], device=self.device),
            None,
            self.name,
            parents=match["parents"],
            variant=f"n={n}",
            notes=[Note("suffix_match", match, _match_event)],
        )

    def settle(self, r: Settled) -> None:
        """The verify forward's time over its rows, the last 32 per size kept (the engine's, or auto's for every
        round whichever drafter it chose, so the tree is sized on the same curve auto prices with)."""
        if r.rows:
            self.timed.observe(r.rows, r.verify_s)


def path_scores(parents: list, counts: list, occurrences: int) -> list[float]:
    """Each trie node's score, the chance its path is accepted: the product along the path of c ÷ (c_parent + 1),
    c the occurrences through a node, c_parent those through its parent (the occurrences at the root). This is
    SuffixDecoding's empirical path probability with one pseudo-occurrence that continued otherwise at each step:
    a path seen once is not taken as certain (count ÷ occurrences scores 1.0 at every depth, and a γ of 16 then
    drafted 16-deep chains after one-token matches: 1.02× AR against 1.27× with this score, Spec-Bench, 12
    questions, AMD EPYC)."""
    scores: list[float] = []
    for c, par in zip(counts, parents):
        scores.append((1.0 if par < 0 else scores[par]) * c / ((occurrences if par < 0 else counts[par]) + 1))
    return scores


def _match_event(round_: int, pos: int, text, m: dict) -> SuffixMatched:
    """The round's match, where each node was seen and the curve the tree was sized on (a `suffix_match` event)."""
    fields = {k: v for k, v in m.items() if k != "match_ids"}
    return SuffixMatched(round=round_, pos=pos, match_tokens=text.many(m["match_ids"]), **fields)


def build(spec: DraftSpec, target, ctx):
    """The per-run constructor of suffix[:N,SHAPE] (registry.py calls it); its Needs: rows for its trees,
    and the session's History (the engine passes the caller's, Engine.generate(history=...), or None)."""
    special, text_of = template_reader(target.tokenizer)
    chain = spec["shape"] == "chain"

    def make(cfg, gen, max_len, cache, history):
        budget = min(MAX_NODES, cfg.tree_budget) if cfg.tree_budget else MAX_NODES
        return SuffixDrafter(spec["N"], target.device, spec.text, chain, special, text_of, history, budget)

    return Factory(make, Needs(rows=MAX_NODES, history=True))
