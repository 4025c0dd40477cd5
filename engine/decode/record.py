"""Steps -> events: the one place where a round's outcome becomes plain data for renderers and traces.

The step (step.py) returns tensors and ids; here they become the frozen events of events.py,
with token texts and the top-k alternatives the config asks to record. Nothing here runs a model.
"""

from __future__ import annotations

import torch

from .. import sampling
from ..events import Committed, Drafted, DraftTree, RolledBack, Verified
from .step import Step


class TokenText:
    """id -> text through the tokenizer, memoised; top-k rows as [[id, text, prob], ...]."""

    def __init__(self, tokenizer):
        self.tokenizer, self.memo = tokenizer, {}

    def __call__(self, token_id: int) -> str:
        text = self.memo.get(token_id)
        if text is None:
            text = self.memo[token_id] = self.tokenizer.decode([token_id])
        return text

    def many(self, ids: list[int]) -> list[str]:
        return [self(i) for i in ids]

    def topk(self, probs: torch.Tensor | None, k: int) -> list:
        """(..., V) -> per row the top-k as [[id, text, prob], ...]; [] when k is 0 or there are no rows."""
        if not k or probs is None:
            return []
        return [[[i, self(i), v] for i, v in row] for row in sampling.topk_list(probs, k)]


def _noted(notes: list, after_drafted: bool, round_: int, pos: int, text: TokenText) -> list:
    """The events a drafter's notes make (drafters/base.Note), those before or after the drafted event."""
    built = (n.build(round_, pos, text, n.data) for n in notes if n.after_drafted == after_drafted)
    return [e for e in built if e is not None]


def round_events(s: Step, round_: int, text: TokenText, record_topk: int, greedy: bool, drafter: str) -> list:
    """The events of one round, in order: the drafter's own notes (auto's decided, lookahead's window), draft_tree,
    drafted, its notes after drafted (retokenized), verified, rolled_back, committed."""
    out, d = [], s.draft
    notes = d.notes if d is not None else []
    out += _noted(notes, False, round_, s.pos, text)  # the drafter family's own events
    if s.tree is not None:
        t = s.tree
        out.append(
            DraftTree(
                round=round_,
                pos=s.pos,
                token_ids=t.token_ids,
                tokens=text.many(t.token_ids),
                parents=t.parents,
                q=t.q,
                p=t.p,
                accept_prob=t.accept_prob,
                status=t.status,
                path=t.path,
                next_id=s.verdict.next_id,
                next_token=text(s.verdict.next_id),
                next_kind="corrected" if t.corrected else "bonus",
            )
        )
    if s.judged:
        v, n = s.verdict, s.n_accepted
        draft_rows = d.q if s.tree is None else None  # a tree's chain view has no q rows
        out.append(
            Drafted(
                round=round_,
                pos=s.pos,
                token_ids=s.judged,
                tokens=text.many(s.judged),
                q=s.q_judged,
                draft_topk=text.topk(draft_rows, record_topk),
                drafter=d.drafter or drafter,
            )
        )
        out += _noted(notes, True, round_, s.pos, text)
        residual = (
            text.topk(v.dist[None], record_topk)[0]
            if s.rejected and v.dist is not None and record_topk
            else []
        )
        out.append(
            Verified(
                round=round_,
                pos=s.pos,
                p=v.p_draft,
                accept_prob=v.accept_prob,
                accepted=[i < n for i in range(len(s.judged))],
                first_rejected=n if s.rejected else None,
                next_id=v.next_id,
                next_token=text(v.next_id),
                next_p=v.next_p,
                next_kind=s.next_kind,
                target_topk=text.topk(s.p_rows, record_topk),
                greedy=greedy,
                u=v.u,
                residual_topk=residual,
            )
        )
    if s.cache_kept != s.cache_verified:  # the rollback: a pointer move (a tree also compacted its path)
        out.append(
            RolledBack(
                round=round_,
                positions=list(range(s.cache_kept, s.cache_verified)),
                cache_before=s.cache_verified,
                cache_after=s.cache_kept,
            )
        )
    out.append(
        Committed(
            round=round_, pos=s.pos, token_ids=s.new, tokens=text.many(s.new), origins=s.origins, p=s.p_new
        )
    )
    return out
