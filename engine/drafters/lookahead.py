"""Lookahead decoding (Fu et al., ICML 2024) as a drafter: the target's own Jacobi iterations fill an n-gram
pool, and the pool's n-grams that start with the last committed token are verified as a token tree, in the SAME
target forward that advances the Jacobi window.

The window is N − 1 levels × W columns of guesses. Level l, column i guesses the token at position
root + 1 + i + l (the root is the last committed token). In the forward each window row sees the committed prefix,
the root, the level-0 guesses of columns 0..i and its own column's levels 1..l: a contiguous run of positions,
so the target's most likely next token there is one Jacobi update of the position after it (the window's mask,
as lade's figure draws it). After the forward:
  * every column i yields an N-gram: its N − 1 guesses, then what the target predicted from the top one; it goes
    into the pool under its first token (the most recent G per token are kept);
  * the window moves up one level: level 0 is dropped, the top level's predictions become the new top level.
The window never waits for the verdict: it advances one level a round however many tokens were committed (lade's
choice too), so its guesses drift by the extra commits and re-converge. The verification branch is an ordinary
token tree of deterministic nodes: the engine's tree rule keeps it lossless (greedy: exactly the target's
output; sampling: the multi-candidate rule, the target's law).

The window's rows are `Draft.extra`: computed, never judged, dropped with the rollback. Each round's window
rides in a Note for the debugger's grid (a `lookahead_window` event).

Sized (the default): of the candidates' tree only the nodes that pay on this host are verified
(costmodel.grow_tree, as suffix speculation and recycling size theirs), scored as suffix scores its paths
(suffix.path_scores: Π c ÷ (c_parent + 1) over the candidates), on the verify times this drafter measured, with
the window's R rows in every forward: a node's cost is t(R + k + 2) against t(R + k + 1) (a `tree_sized` event
records it). `lookahead:W,N,G,static` verifies every candidate.
"""

from __future__ import annotations

import torch

from .. import costmodel
from ..config import WHOLE_SETTINGS
from ..events import LookaheadWindow
from ..sampling.tree import trie
from ..specs import DraftSpec, ModelLoadError
from .base import Draft, Drafter, Extra, Factory, Needs, Note, Seen, Settled, sized_draft
from .suffix import path_scores

# window rows, and verification nodes, per forward (a tree's bound)
MAX_ROWS = WHOLE_SETTINGS["tree_budget"][1]


def window_rows(width: int, levels: int) -> tuple[list[int], list[list[int]]]:
    """(offsets, sees) of the window's rows in level-major order (row l·W + i = level l, column i): its position
    after the root's and the earlier rows it attends to (the level-0 guesses up to its column, its column below)."""
    offsets, sees = [], []
    for lv in range(levels):
        for i in range(width):
            offsets.append(1 + i + lv)
            row = list(range(i)) if lv == 0 else list(range(i + 1))  # level 0, columns before (and at) i
            row += [k * width + i for k in range(1, lv)]  # its own column, levels 1 .. l − 1
            sees.append(row)
    return offsets, sees


class LookaheadDrafter(Drafter):
    """lookahead[:W,N,G]: a W × (N − 1) Jacobi window and a pool of N-grams, G of them verified per round."""

    def __init__(
        self,
        width: int,
        ngram: int,
        guesses: int,
        device: torch.device,
        name: str = "lookahead",
        seed: int = 0,
        sized: bool = True,
    ):
        self.width, self.levels, self.guesses = width, ngram - 1, guesses
        self.device, self.name, self.sized = device, name, sized
        self.timed = costmodel.VerifyTimes()  # whole forwards: root + nodes + the window's rows
        self.offsets, self.sees = window_rows(width, self.levels)
        self.window: list[list[int]] = []  # (N − 1) × W guesses, level 0 first
        self.pool: dict[
            int, list[tuple]
        ] = {}  # first token -> the latest N-grams' other N − 1 tokens, newest first
        # the window's first guesses (its own: never the run's)
        self.gen = torch.Generator().manual_seed(seed)
        self.last: dict | None = None  # the window dict of the round in flight (settle completes it)

    def prepare(self, prompt_ids: list[int], cfg) -> None:
        """The window starts as guesses drawn from the prompt's tokens (lade does the same)."""
        source = torch.tensor(prompt_ids or [0])
        pick = torch.randint(len(source), (self.levels, self.width), generator=self.gen)
        self.window = source[pick].tolist()

    def propose(self, ids: list[int], gamma: int) -> Draft:
        if not self.window:
            self.prepare(ids, None)
        found = [list(g[:gamma]) for g in self.pool.get(ids[-1], [])[: self.guesses]]
        tokens, parents, counts, _ = trie(found, counted=True) if found else ([], [], [], [])
        flat = [t for level in self.window for t in level]
        self.last = {"levels": [list(level) for level in self.window], "candidates": len(found)}
        # sized with the window's rows in every forward; topk 1: the root row's argmax predicts guess (0, 0)
        return sized_draft(
            self.name,
            self.device,
            (tokens, parents, path_scores(parents, counts, len(found))),
            self.timed,
            1,
            self.sized,
            extra=Extra(token_ids=flat, offsets=self.offsets, sees=self.sees),
            notes=[Note("lookahead_window", self.last, _window_event)],
        )

    def settle(self, r: Settled) -> None:
        """The verify forward's time over its rows (the root, the nodes and the window's), and its window rows."""
        if r.rows:
            self.timed.observe(r.rows, r.verify_s)
        if r.seen is not None:
            self.slide(r.seen)

    def slide(self, seen: Seen) -> None:
        """Collect each column's N-gram into the pool and move the window up one level."""
        w, top = self.width, self.levels - 1
        nxt = seen.extra_next  # per window row: the target's most likely next token
        root_next = seen.topk[0][0] if seen.topk else None
        added = 0
        for i in range(w):
            gram = tuple(self.window[lv][i] for lv in range(1, self.levels)) + (nxt[top * w + i],)
            bucket = self.pool.setdefault(self.window[0][i], [])
            if gram in bucket:
                bucket.remove(gram)
            else:
                added += 1
            bucket.insert(0, gram)
            del bucket[self.guesses :]
        if self.last is not None:  # the grid's last facts: what the target made of each guess this round
            self.last["next"] = [nxt[top * w + i] for i in range(w)]
            self.last["fixed"] = [
                [_fixed(self.window, nxt, w, lv, i, root_next) for i in range(w)] for lv in range(self.levels)
            ]
            self.last["added"], self.last["pool"] = added, sum(len(v) for v in self.pool.values())
        self.window = self.window[1:] + [[nxt[top * w + i] for i in range(w)]]


def _window_event(round_: int, pos: int, text, w: dict) -> LookaheadWindow | None:
    """The round's Jacobi window and what the target made of it (None before settle completed it)."""
    if "next" not in w:
        return None
    return LookaheadWindow(
        round=round_,
        pos=pos,
        token_ids=w["levels"],
        tokens=[text.many(level) for level in w["levels"]],
        fixed=w["fixed"],
        next_ids=w["next"],
        next_tokens=text.many(w["next"]),
        candidates=w["candidates"],
        added=w["added"],
        pool=w["pool"],
    )


def _fixed(window: list, nxt: list, w: int, lv: int, i: int, root_next: int | None) -> bool | None:
    """Whether guess (l, i) is a Jacobi fixed point: the target, given the guesses before it in its column,
    predicts exactly it. None for (0, 0), whose predictor is the root's row (the tree's business)."""
    if lv == 0:
        return None if i == 0 and root_next is None else window[0][i] == (root_next if i == 0 else nxt[i - 1])
    below = (lv - 1) * w + i  # level l − 1 (level 0 when l = 1), same column
    return window[lv][i] == nxt[below]


def build(spec: DraftSpec, target, ctx):
    """The per-run constructor of lookahead[:W[,N[,G]]] (registry.py calls it); its Needs.rows sizes the cache."""
    width, ngram, guesses = spec["W"], spec["N"], spec["G"]
    if width * (ngram - 1) > MAX_ROWS or guesses * (ngram - 1) > MAX_ROWS:
        raise ModelLoadError(
            f"lookahead:W,N,G needs W·(N − 1) <= {MAX_ROWS} and G·(N − 1) <= {MAX_ROWS} (the window's "
            f"rows and the verification branch's nodes), got {spec.text!r}"
        )
    sized = spec["sizing"] != "static"
    return Factory(
        lambda cfg, gen, max_len, cache: LookaheadDrafter(
            width, ngram, guesses, target.device, spec.text, sized=sized
        ),
        Needs(rows=width * (ngram - 1) + guesses * (ngram - 1)),  # the window and the largest branch
    )
