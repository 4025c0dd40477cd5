"""Another engine's rounds -> specviz's own events: the one place a recorder's observations become a trace.

A recorder (hf.py: transformers' assisted generation; llama_cpp.py: llama-cpp-python's draft model) sees, per
round, what was proposed, how many of those the target kept, the token the target added, and the probabilities
it could read; `Recording` turns each into the events specviz's own engine emits for a chain round (drafted,
verified, rolled_back, committed, round_timed; a round that proposed nothing is a plain step), and the run's
run_started (with `engine`: who produced it and what the recording could not see) and finished (its summary
from the same RunStats as every run). Nothing here runs a model.
"""

from __future__ import annotations

import dataclasses
import time
import uuid
from dataclasses import dataclass, field

from ..config import GenerationConfig
from ..decode.record import TokenText
from ..decode.step import next_kind
from ..events import Committed, Drafted, Finished, RolledBack, RoundTimed, RunStarted, Verified
from ..metrics import RunStats


@dataclass(frozen=True, kw_only=True)
class Round:
    """What a recorder saw of one round (ids in the target's vocabulary)."""

    proposal: list  # the drafted ids the target verified (may be empty: a plain target step)
    kept: int  # how many of them the target kept (0 .. len(proposal))
    next_id: int  # the token the target added after the kept ones (corrected when kept < len(proposal))
    p: list  # the target's probability of each proposed token
    next_p: float  # the target's probability of next_id
    accept_prob: (
        list  # per proposed token: greedy 1.0 if it is the target's argmax else 0.0; sampled min(1, p/q)
    )
    q: list | None = (
        None  # the drafter's probability of each proposed token; None: chosen deterministically (1.0)
    )
    draft_s: float = 0.0  # seconds drafting
    verify_s: float = 0.0  # seconds in the target's forward and the acceptance
    total_s: float = 0.0  # the whole round (0: draft_s + verify_s)
    target_topk: list = field(default_factory=list)  # per verified position: [[id, prob], ...] ([] not read)
    u: list | None = (
        None  # sampled: the uniform draw each proposal was tested with, where the engine exposes it
    )


class Recording:
    """The events of one recorded run, built round by round; `events` holds them in order."""

    def __init__(
        self,
        *,
        engine: dict,
        target: str,
        draft: str,
        tokenizer,
        prompt_ids: list,
        cfg: GenerationConfig,
        device: str = "cpu",
        dtype: str = "float32",
        threads: int = 0,
    ):
        self.text, self.cfg = TokenText(tokenizer), cfg
        self.ids = [int(i) for i in prompt_ids]
        self.prompt_len = len(self.ids)
        self.round = 0
        self.elapsed = 0.0
        self.stats = RunStats()
        self.events: list = []
        self._add(
            RunStarted(
                round=0,
                run_id=uuid.uuid4().hex[:12],
                mode="speculative",
                target=target,
                draft=draft,
                device=device,
                dtype=dtype,
                config=cfg.to_dict(),
                prompt_text=tokenizer.decode(self.ids),
                prompt_ids=list(self.ids),
                prompt_tokens=self.text.many(self.ids),
                pos=len(self.ids),
                threads=threads,
                engine=dict(engine),
            )
        )
        self.t0 = time.perf_counter()

    def _add(self, event) -> None:
        self.stats.add(event)
        self.events.append(event)

    def _topk(self, rows: list) -> list:
        return [[[int(i), self.text(int(i)), float(v)] for i, v in row] for row in rows]

    def add(self, r: Round) -> list:
        """One round's events, appended to `events` and returned."""
        g, k = len(r.proposal), int(r.kept)
        if not 0 <= k <= g:
            raise ValueError(f"a round kept {k} of {g} proposed tokens")
        if not (len(r.p) == len(r.accept_prob) == g and (r.q is None or len(r.q) == g)):
            raise ValueError("a round's p, accept_prob and q must hold one value per proposed token")
        self.round += 1
        pos, proposal = len(self.ids), [int(i) for i in r.proposal]
        kind = next_kind(g, k) if g else "ar"
        out: list = []
        if g:
            out.append(
                Drafted(
                    round=self.round,
                    pos=pos,
                    token_ids=proposal,
                    tokens=self.text.many(proposal),
                    q=[1.0] * g if r.q is None else [float(x) for x in r.q],
                    draft_topk=[],
                    drafter=self.events[0].draft,
                )
            )
            out.append(
                Verified(
                    round=self.round,
                    pos=pos,
                    p=[float(x) for x in r.p],
                    accept_prob=[float(x) for x in r.accept_prob],
                    accepted=[i < k for i in range(g)],
                    first_rejected=k if k < g else None,
                    next_id=int(r.next_id),
                    next_token=self.text(int(r.next_id)),
                    next_p=float(r.next_p),
                    next_kind=kind,
                    target_topk=self._topk(r.target_topk),
                    greedy=self.cfg.greedy,
                    u=r.u,
                )
            )
            if k < g:  # the forward wrote the last token and every draft; the cache keeps the kept ones
                out.append(
                    RolledBack(
                        round=self.round,
                        positions=list(range(pos + k, pos + g)),
                        cache_before=pos + g,
                        cache_after=pos + k,
                    )
                )
        new = proposal[:k] + [int(r.next_id)]
        out.append(
            Committed(
                round=self.round,
                pos=pos,
                token_ids=new,
                tokens=self.text.many(new),
                origins=["accepted"] * k + [kind],
                p=[float(x) for x in r.p[:k]] + [float(r.next_p)],
            )
        )
        self.ids += new
        total = r.total_s or (r.draft_s + r.verify_s)
        self.elapsed += total
        out.append(
            RoundTimed(
                round=self.round,
                pos=len(self.ids),
                draft_s=float(r.draft_s),
                verify_s=float(r.verify_s),
                total_s=float(total),
                elapsed_s=self.elapsed,
                gamma=g,
                verified=g + 1,
            )
        )
        for e in out:
            self._add(e)
        return out

    def finish(
        self, stop_reason: str, text: str, target_step_s: float | None = None, wall_s: float | None = None
    ) -> Finished:
        """The run's last event: its text (the engine's own decoding of the new ids, special tokens skipped) and
        the summary of every round (target_step_s: a plain target step's time measured beside the run, if any;
        wall_s: the engine's whole call, prefill and its bookkeeping included; else the rounds' sum)."""
        new = self.ids[self.prompt_len :]
        done = Finished(
            round=self.round,
            pos=len(self.ids),
            stop_reason=stop_reason,
            token_ids=new,
            text=text,
            summary=self.stats.summary(max(wall_s or 0.0, self.elapsed) or None, target_step_s),
        )
        self._add(done)
        return done

    @property
    def new_ids(self) -> list:
        return self.ids[self.prompt_len :]


def with_plain(events: list, *, plain_s: float, assisted_s: float, plain_ids: list) -> list:
    """The events with what the recorder measured of the same engine's plain decoding on the same prompt kept in the
    Finished summary, under "plain": {"plain_s", "assisted_s" (both the engine's whole generate call), "plain_tokens",
    "identical" (the speculative run's new ids equal the plain run's)}. The page shows this comparison for an
    imported run, which cannot be raced here."""
    *rest, done = events
    plain = {
        "plain_s": float(plain_s),
        "assisted_s": float(assisted_s),
        "plain_tokens": len(plain_ids),
        "identical": list(done.token_ids) == [int(i) for i in plain_ids],
    }
    return [*rest, dataclasses.replace(done, summary={**done.summary, "plain": plain})]
