"""The drafting contract (transformers' candidate generators): one call proposes (`propose` -> `Draft`), one call
learns from the settled round (`settle(Settled)`), and the family's `Factory` declares what its drafters need from
the engine (`Needs`: cache rows, the session's history, the target's features). Nothing else passes between them.

Every strategy (a draft model, n-gram lookup, layer skip, a tree, auto, the trained heads) implements `Drafter`;
beam search asks the same object for every beam (`propose_beams`). Every drafter module in this room imports this
one; the registry (engine/specs.py) names them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from .. import costmodel
from ..config import GenerationConfig
from ..events import TreeSized


@dataclass
class Draft:
    """What a drafter proposes for one round (possibly nothing: the round is then a plain target step)."""

    token_ids: torch.Tensor  # (γ,) int64 on the target's device, γ may be 0
    q: torch.Tensor | None  # (γ, V) draft probabilities, shaped like p; None = one-hot (no distribution)
    drafter: str = ""  # which drafter proposed it (auto names the one it picked)
    variant: str = ""  # a sub-kind whose acceptance differs (n-gram: the match length), for auto's estimates
    # a token tree: parent index of each token (-1 = last committed); None = chain
    parents: list | None = None
    # tree: per node its draft distribution (V,) or None when chosen deterministically
    node_q: list | None = None
    # rows the verify forward also computes that are not judged (lookahead's window)
    extra: "Extra | None" = None
    topk: int = 0  # the target's top-k next tokens at every row of the verify forward, handed back (`Seen`)
    # what this drafter family records of the round for its own view (auto's decision, lookahead's window, a
    # cross-vocabulary draft's two tokenisations): Notes, each built into its event by the family's own code
    notes: list = field(default_factory=list)

    def note(self, kind: str) -> dict | None:
        """The data of this draft's note of that kind (its event's kind), None when it has none."""
        return next((n.data for n in self.notes if n.kind == kind), None)


@dataclass
class Lookup:
    """A proposal as plain lists (`Drafter.lookup`): auto asks its free drafter this every round and builds the Draft
    only when it drafts with it (a tensor made right after a forward costs tens of µs, a share of a round that plain
    decoding does not pay)."""

    variant: str  # as Draft.variant
    tokens: list  # a chain's ids, or a tree's node ids (parents first)
    parents: list | None = None  # a tree's parent indices (None: a chain)
    made: "Draft | None" = None  # the Draft itself, when the drafter built one (the default lookup)

    def draft(self, device, name: str) -> "Draft":
        """The Draft of this proposal (made once)."""
        if self.made is None:
            self.made = (
                Draft(
                    torch.tensor(self.tokens, device=device),
                    None,
                    name,
                    parents=self.parents,
                    variant=self.variant,
                )
                if self.tokens
                else empty_draft(device, name)
            )
        return self.made


@dataclass
class Note:
    """A drafter family's own record of a round: plain `data`, and `build(round, pos, text, data)`, the family's
    function that makes its event (`text` turns ids into token strings; None: nothing to record this round).
    Recorded before the round's draft events, or right after the drafted event when `after_drafted`. A drafter
    with its own view adds a Note in its file and a renderer for the event: nothing between them changes."""

    kind: str  # the event's kind ("decided", "lookahead_window", "retokenized")
    data: dict
    build: Callable  # (round, pos, text, data) -> the event or None
    after_drafted: bool = False


@dataclass
class Extra:
    """Rows a drafter adds to the verify forward for its own use (lookahead's Jacobi window): they are not
    judged, they never enter the committed sequence, and their cache slots are dropped with the rollback.
    Each row sees the committed prefix, the root (the last committed token) and the earlier extra rows
    `sees[i]` lists, never a draft node; position = root's position + offsets[i]."""

    token_ids: list  # (R,) the rows' input tokens
    offsets: list  # (R,) position of each row after the root's, >= 1
    sees: list  # (R,) indices of earlier extra rows each row attends to (besides itself)


@dataclass
class Seen:
    """What the verify forward computed that a drafter asked for (Draft.topk, Draft.extra), plain lists."""

    inputs: list  # the forward's input tokens: [root, draft nodes..., extra rows...]
    topk: list  # per input row: the target's top-k next token ids (Draft.topk of them), [] when not asked
    extra_next: list  # per extra row: the target's most likely next token there


@dataclass(frozen=True)
class Needs:
    """What a drafter family declares it needs from the engine (its Factory's `needs`); a drafter that declares
    nothing gets nothing: no history, no features, a cache sized for chains and budget trees only."""

    rows: int = (
        0  # verify rows besides the root its forward can write beyond γ / tree_budget (a template, a window)
    )
    history: bool = False  # the session's earlier runs (a History): its constructor takes `history`
    features: bool = (
        False  # the target's final-norm feature of every position the cache keeps (Settled.features)
    )


@dataclass(frozen=True, kw_only=True)
class Settled:
    """One settled round, the drafter's one feedback (`Drafter.settle`): what the target kept and what its verify
    forward cost and computed. Round 0 is the prefill: only `features` is set (the prompt's, for a drafter that
    declared Needs.features)."""

    round: int  # 0: the prefill
    n_accepted: (
        int  # drafted tokens the target accepted (0 for a plain step, or when another drafter drafted)
    )
    ids: list  # the committed sequence after the round, prompt included
    verify_s: float  # the verify forward's time
    rows: (
        int  # positions that forward computed for this sequence alone (root, nodes, extra rows); 0 in a batch
    )
    # the round's time on the run's clock up to this feedback: its drafting, its forward and the acceptance rule
    # (None: not timed whole, a batch's row)
    round_s: float | None = None
    events_s: float = 0.0  # the previous round's events' building time (a round's events follow its feedback)
    seen: Seen | None = None  # what it computed that the draft asked for (Draft.topk, Draft.extra)
    features: torch.Tensor | None = (
        None  # (n, H) features of the n positions the cache now keeps (Needs.features)
    )


@dataclass(frozen=True)
class Factory:
    """A drafter family's per-run constructor with what its drafters need: `build(cfg, generator, max_len, cache)`,
    plus `history` when needs.history. The registry's builders return one; the engine reads `needs` (the cache's
    rows, whether to pass the history, whether to collect features) and calls it once per run."""

    build: Callable  # (cfg, generator, max_len, cache[, history]) -> Drafter
    needs: Needs = Needs()

    def __call__(self, cfg: GenerationConfig, generator, max_len: int, cache, history=None) -> "Drafter":
        return self.build(cfg, generator, max_len, cache, *((history,) if self.needs.history else ()))


class Drafter:
    """Interface: propose up to γ tokens after `ids`; settle: learn how the target judged them."""

    name = "drafter"

    def propose(self, ids: list[int], gamma: int) -> Draft:
        raise NotImplementedError

    def lookup(self, ids: list[int], gamma: int) -> Lookup:
        """What propose would draft, as plain lists (a free drafter of auto's: n-gram lookup builds no tensor here);
        by default propose's own Draft."""
        draft = self.propose(ids, gamma)
        return Lookup(draft.variant, draft.token_ids.tolist(), draft.parents, made=draft)

    def settle(self, r: Settled) -> None:
        """The round as the target settled it (Settled): every round, plain steps included, after its commit."""

    def prepare(self, prompt_ids: list[int], cfg: GenerationConfig) -> None:
        """Work done once per run before its clock starts (the oracle's reference pass); most need none."""

    def history_source(self, ids: list[int]) -> list[int] | None:
        """What the session's history keeps of this run (a drafter that declared Needs.history: its own view of
        the sequence, the chat template's positions masked); None: the sequence as it is."""
        return None

    def propose_beams(self, beams: list[list[int]], gamma: int) -> list[list[int]]:
        """Beam search's drafts: up to γ token ids after each running beam (committed ids, prompt included).
        This default asks `propose` once per beam: right for a drafter whose state follows the ids it is
        given (n-gram lookup rebuilds its index when a call is not a continuation of the last). One on the target's
        B-row cache drafts every beam in one batch (ModelDrafter). Only families marked `beams` in engine/specs.py
        are asked."""
        return [self.propose(ids, gamma).token_ids.tolist() for ids in beams]


def empty_draft(device, name: str) -> Draft:
    """A draft of no tokens: the round is a plain target step."""
    return Draft(torch.empty(0, dtype=torch.long, device=device), None, name)


def size_tree(tokens: list, parents: list, scores: list, t, chain: bool = False, budget: int = 10**9) -> dict:
    """The nodes of a candidate tree (parents first) that pay on the verify curve t (costmodel.grow_tree), as the
    fields a sizing record holds: keep (the candidates' indices), token_ids, parents (re-indexed), scores,
    verify (t(n) ÷ t(1) for n = 1 .. nodes + 2) and next_score (the best node left out; None: none was).
    Suffix speculation, token recycling and lookahead size their trees with it."""
    keep = costmodel.grow_tree(parents, scores, t, chain, budget)
    new = {old: k for k, old in enumerate(keep)}
    left = [s for j, (s, par) in enumerate(zip(scores, parents)) if j not in new and (par < 0 or par in new)]
    return {
        "keep": keep,
        "token_ids": [tokens[j] for j in keep],
        "parents": [-1 if parents[j] < 0 else new[parents[j]] for j in keep],
        "scores": [round(scores[j], 6) for j in keep],
        "verify": [round(t(n) / t(1), 4) for n in range(1, len(keep) + 3)],
        "next_score": round(max(left), 6) if left else None,
    }


def sized_draft(
    name: str,
    device,
    pool: tuple,
    timed,
    topk: int,
    sized: bool = True,
    budget: int = 10**9,
    extra: "Extra | None" = None,
    notes: tuple = (),
) -> Draft:
    """A tree drafter's Draft of the nodes of `pool` (tokens, parents, scores; parents first) that pay on its
    measured verify times `timed` (costmodel.VerifyTimes of whole forwards; every node when not `sized`), with
    its tree_sized Note after `notes`. `extra`: rows every forward carries besides root and nodes (lookahead's
    window), so a node's cost is t(R + k + 2) against t(R + k + 1). The verify forward hands back the target's
    top-k (topk) even when nothing is drafted. Token recycling, lookahead and the union draft through it."""
    tokens, parents, scores = pool
    notes, rows = list(notes), len(extra.token_ids) if extra is not None else 0
    if sized and tokens:
        curve = timed.curve()
        kept = size_tree(tokens, parents, scores, lambda n: curve(n + rows), budget=budget)
        notes.append(tree_sized_note(name, len(tokens), kept, timed, rows))
        tokens, parents = kept["token_ids"], kept["parents"]
    return Draft(
        torch.tensor(tokens, dtype=torch.long, device=device),
        None,
        name,
        parents=parents,
        extra=extra,
        topk=topk,
        notes=notes,
    )


def sized_event(round_: int, pos: int, text, m: dict) -> TreeSized:
    """A tree_sized event from its Note's data (token recycling's and lookahead's)."""
    return TreeSized(round=round_, pos=pos, **m)


def tree_sized_note(drafter: str, pool: int, sized: dict, timed, extra_rows: int = 0) -> Note:
    """The tree_sized Note of a size_tree result: the drafter, its pool of candidates, the sizes it had timed."""
    fields = {k: v for k, v in sized.items() if k != "keep"}
    data = {
        "drafter": drafter,
        "pool": pool,
        **fields,
        "measured": timed.measured(),
        "extra_rows": extra_rows,
    }
    return Note("tree_sized", data, sized_event)
