"""Token recycling (Luo et al. 2024) as a drafter: the target's own top-k next tokens, seen in every earlier verify
forward, fill a static token tree each round. Training-free, no draft model.

State: an adjacency table M (V × k, token ids, −1 = not seen yet): M[x] = the target's k most likely next tokens
at the latest position whose input token was x. Every verify forward updates it for all its rows (the root, the
accepted drafts and the rejected ones alike: the target computed them anyway), so candidates the target threw
away are recycled as next round's guesses. The run's prompt seeds it: M[a][0] = the token after a in the user's
text, where the target has not spoken yet.

Each round the tree template (ranks, root to node) is filled breadth first from the root, the last committed
token: node (r1, .., rd) = M[token of (r1, .., rd−1)][rd]. A node whose parent is missing, or whose entry is not
seen yet, is left out with its subtree. The nodes are chosen deterministically, so the engine's tree rule
verifies them losslessly (greedy: the target's own output; sampling: the multi-candidate rule).

Sized (the default): the filled template is the pool, and only the nodes that pay on this host are drafted
(costmodel.grow_tree on the verify times this drafter measured, as suffix speculation sizes its trees). A node's
score is the chance its path is accepted: the product along the path of each template position's rate, learned
in this run: of the rounds its parent's path matched what the target then committed, how often its own token
did too ((hits + w·prior) ÷ (tries + w), prior 1 ÷ (rank + 2), w = PRIOR_WEIGHT), counted whether or not the tree
was verified (auto asks every round). `recycle:k,TEMPLATE,static` drafts the whole filled template every round.
"""

from __future__ import annotations

import torch

from .. import costmodel
from ..sampling.tree import depths
from ..specs import DraftSpec
from .base import Draft, Drafter, Factory, Needs, Seen, Settled, sized_draft
from .ngram import template_mask, template_reader


def template(budget: tuple) -> list[tuple]:
    """A static tree as rank paths from the root, breadth first (parents first): a node at depth d whose ranks sum
    to S gets budget[d] − S children (ranks 0, 1, …), so the likelier a path, the wider it branches (the shape of
    the paper's template: wide near the root, a deep spine of rank-0 guesses)."""
    level, nodes = [()], []
    for width in budget:
        level = [path + (r,) for path in level for r in range(max(0, width - sum(path)))]
        nodes += level
    return nodes


TEMPLATES = {  # name -> rank paths; its size is the verify forward's rows (the root excluded)
    "small": template((4, 2, 2, 1, 1)),  # 13 nodes, depth 5: sized for a CPU's verify costs
    "wide": template((8, 4, 3, 2, 2, 1)),  # 40 nodes, depth 6: the paper's shape, for a GPU
}
DEFAULT_TEMPLATE = "small"
DEFAULT_K = 8
PRIOR_WEIGHT = 2.0  # pseudo-rounds behind a template position's prior rate 1 ÷ (rank + 2)


def template_parents(template: list[tuple]) -> list[int]:
    """Parent index of each template node (−1 = the root); the template lists parents first."""
    index = {path: i for i, path in enumerate(template)}
    return [index[path[:-1]] if len(path) > 1 else -1 for path in template]


UNLEARNED = 64  # forwards' rows kept before they are written into the table unasked


class RecycleDrafter(Drafter):
    """recycle[:k,TEMPLATE,SIZING]: the adjacency table of the target's top-k and a tree template to fill from it,
    sized on this host's verify costs (or static)."""

    def __init__(
        self,
        k: int,
        template: list[tuple],
        vocab: int,
        device: torch.device,
        name: str = "recycle",
        special: frozenset = frozenset(),
        text_of=None,
        sized: bool = True,
    ):
        self.k, self.device, self.name, self.sized = k, device, name, sized
        self.template = [path for path in template if max(path) < k]  # ranks the table holds (prefixes stay)
        self.parents = template_parents(self.template)
        self._table = torch.full((vocab, k), -1, dtype=torch.long)  # (V, k) M[x]: next-token guesses after x
        self.special, self.text_of = special, text_of or str
        self.hits = [0.0] * len(self.template)  # per template position: rounds its token matched the target's
        self.tries = [0.0] * len(self.template)  # rounds it was drafted with its parent's path matched
        self.last: tuple | None = None  # (committed length, {template position: token} of the last pool)
        self.unlearned: list[Seen] = []  # forwards' top-k rows the table takes before its next read (_learn)
        self.timed = costmodel.VerifyTimes()

    @property
    def table(self) -> torch.Tensor:
        """The adjacency table (V, k), every row a forward handed back written in (_learn)."""
        self._learn()
        return self._table

    @table.setter
    def table(self, table: torch.Tensor) -> None:
        self._learn()
        self._table = table

    def rates(self) -> list[float]:
        """Per template position: the chance its token is the target's, given its parent's path was."""
        return [
            (h + PRIOR_WEIGHT / (path[-1] + 2)) / (n + PRIOR_WEIGHT)
            for h, n, path in zip(self.hits, self.tries, self.template)
        ]

    def _score_last(self, ids: list[int]) -> None:
        """Count the last pool against what the target committed since (positions deeper than that: unknown)."""
        if self.last is None:
            return
        at, pool = self.last
        said = ids[at:]
        matched = {-1}
        for i, tok in sorted(pool.items()):  # parents first
            d = len(self.template[i])
            if self.parents[i] not in matched or d > len(said):
                continue
            self.tries[i] += 1
            if said[d - 1] == tok:
                self.hits[i] += 1
                matched.add(i)

    def prepare(self, prompt_ids: list[int], cfg) -> None:
        """Seed the table with the user's text: M[a][0] = the token that followed a (the template's tokens skipped)."""
        mask = (
            template_mask(prompt_ids, self.special, self.text_of)
            if self.special
            else [False] * len(prompt_ids)
        )
        table = self.table
        for j in range(len(prompt_ids) - 1):
            a, b = prompt_ids[j], prompt_ids[j + 1]
            if not (mask[j] or mask[j + 1]) and a < len(table) and b < len(table):
                table[a, 0] = b

    def pool(self, ids: list[int], gamma: int) -> tuple[list[int], list[int], list[float]]:
        """The filled template (tokens, parents, scores: the product of the learned rates along each path),
        counting the last pool against what the target committed since. Parents first."""
        self._score_last(ids)
        table = self.table
        tokens, parents, kept = [], [], {}  # kept: template index -> draft node index
        limit = depths(self.parents)
        for i, (path, par) in enumerate(zip(self.template, self.parents)):
            if limit[i] > gamma:
                continue
            source = ids[-1] if par < 0 else (tokens[kept[par]] if par in kept else None)
            if source is None or source >= len(table):
                continue
            tok = int(table[source, path[-1]])
            if tok < 0:
                continue
            kept[i] = len(tokens)
            tokens.append(tok)
            parents.append(-1 if par < 0 else kept[par])
        self.last = (len(ids), {i: tokens[j] for i, j in kept.items()})
        rates, at = self.rates(), list(kept)  # at[j]: node j's template position
        scores: list[float] = []
        for j, par in enumerate(parents):
            scores.append((1.0 if par < 0 else scores[par]) * rates[at[j]])
        return tokens, parents, scores

    def propose(self, ids: list[int], gamma: int) -> Draft:
        return sized_draft(self.name, self.device, self.pool(ids, gamma), self.timed, self.k, self.sized)

    def settle(self, r: Settled) -> None:
        """The verify forward's time over its rows (the engine's, or auto's for every round, chosen or not), and
        its top-k rows (when it asked)."""
        if r.rows:
            self.timed.observe(r.rows, r.verify_s)
        if r.seen is not None:
            self.learn_rows(r.seen)

    def learn_rows(self, seen: Seen) -> None:
        """Every row of the verify forward: M[its input token] = the target's top-k next tokens there. Kept in order
        and written when the table is next read (pool): a round where recycling is not asked (auto's plain rounds)
        costs a list append, and the table reads the same as if each had been written at once."""
        if seen.topk:
            self.unlearned.append(seen)
            if len(self.unlearned) >= UNLEARNED:  # a run that never asks keeps no more than this
                self._learn()

    def _learn(self) -> None:
        """The rows learn_rows kept, into the table in the order they came (a token seen twice keeps its latest)."""
        if not self.unlearned:
            return
        # the same memory (a CPU tensor): a row assigned from its list, no tensors made
        table = self._table.numpy()
        for seen in self.unlearned:
            for row, top in zip(seen.inputs, seen.topk):
                if row < len(table):
                    table[row] = top
        self.unlearned.clear()


def build(spec: DraftSpec, target, ctx):
    """The per-run constructor of recycle[:k,TEMPLATE] (registry.py calls it); its Needs.rows sizes the cache."""
    template = TEMPLATES[spec["template"] or DEFAULT_TEMPLATE]
    special, text_of = template_reader(target.tokenizer)
    vocab = target.model.get_output_embeddings().weight.shape[0]
    k = spec["k"]
    sized = spec["sizing"] != "static"
    return Factory(
        lambda cfg, gen, max_len, cache: RecycleDrafter(
            k, template, vocab, target.device, spec.text, special, text_of, sized
        ),
        Needs(rows=len(template)),
    )
