"""`auto`: hardware-aware speculation. Each round it picks the drafter and γ with the best predicted
tokens per second, from costs measured online on this machine:

    rate(d, γ) = E(α_d, γ) / (γ·c_d + t(γ+1))      plain decoding: 1 / t(1)

c_d = seconds per drafted token of drafter d, t(n) = seconds to verify n tokens in one target
forward (fitted on the rounds seen so far), α_d = drafter d's acceptance rate (decayed counts),
E(α, γ) = (1 - α^(γ+1)) / (1 - α). When nothing beats plain decoding it decodes plainly (γ = 0)
and probes the best drafter again after `probe_every` plain rounds, doubling that gap (up to 64) while
probes find nothing. Acceptance is tracked per drafter variant (n-gram: per match length). Every choice is returned with
the numbers behind it, so the UI can explain why.
"""
from __future__ import annotations

import time

import torch

from .draft import Draft, Drafter, empty_draft
from . import costmodel
from .tree import depths

PRIOR_ALPHA = 0.5  # acceptance assumed before a drafter is tried
DECAY = 0.9  # weight of older rounds in acceptance and cost estimates


class AutoDrafter(Drafter):
    name = "auto"

    def __init__(self, drafters: dict[str, Drafter], device: torch.device, probe_every: int = 8):
        self.drafters, self.device, self.probe_every = drafters, device, probe_every
        self.trials: dict[tuple, float] = {}  # (drafter, variant) -> decayed Bernoulli trials seen
        self.hits: dict[tuple, float] = {}  # (drafter, variant) -> decayed accepted tokens
        self.cost = {d: None for d in drafters}  # seconds per drafted token (EMA)
        self.verify: dict[int, float] = {}  # n verified tokens -> seconds (EMA)
        self.plain_streak = 0
        self.probe_gap = probe_every  # plain rounds before the next probe; doubles while probes fail
        self.probing = False  # the round in flight is a probe
        self.last: tuple[str, int, str] = ("", 0, "")  # (drafter, γ, variant) of the round in flight

    # -- estimates ------------------------------------------------------------------------
    def alpha(self, d: str, variant: str = "") -> float:
        """Acceptance of drafter d's proposals of this variant (e.g. n-gram match length), with a prior."""
        key = (d, variant)
        hits, trials = self.hits.get(key, 0.0), self.trials.get(key, 0.0)
        # the cost model's α (accepted / tested) with one pseudo-trial worth PRIOR_ALPHA
        return costmodel.alpha(hits + PRIOR_ALPHA, trials - hits + 1.0 - PRIOR_ALPHA)

    def verify_s(self, n: int) -> float | None:
        """t(n) in seconds: measured when seen, else the cost model's line through the multi-token points."""
        if 1 not in self.verify:
            return None
        return costmodel.verify_curve(self.verify)(n)

    # -- the two methods ------------------------------------------------------------------
    def propose(self, ids: list[int], gamma: int) -> Draft:
        t1 = self.verify_s(1)
        if t1 is None:  # first round: a plain step measures what everything is compared with
            return self._plain("measuring one plain target step first", [], None)
        peeked: dict[str, Draft] = {}
        candidates = []
        for d, drafter in self.drafters.items():
            cap, variant = gamma, ""
            if getattr(drafter, "peekable", False):  # free to ask (n-gram): only what it has
                t = time.perf_counter()
                peeked[d] = drafter.propose(ids, gamma)
                cap, variant = len(peeked[d].token_ids), peeked[d].variant
                self._cost(d, time.perf_counter() - t, max(cap, 1))
            c = self.cost[d] if self.cost[d] is not None else 0.1 * t1
            for g in range(1, cap + 1):
                v = self.verify_s(g + 1)
                alpha = self.alpha(d, variant)
                rate = costmodel.predicted_speedup(alpha, g, c / t1, v / t1) / t1  # tokens per second
                candidates.append({"drafter": d, "variant": variant, "gamma": g, "alpha": round(alpha, 4),
                                   "c": round(c / t1, 4), "v": round(v / t1, 4),
                                   "predicted_tokens_per_s": round(rate, 3)})
        plain_rate = 1.0 / t1
        best = max(candidates, key=lambda x: x["predicted_tokens_per_s"], default=None)
        reason = None
        if best is None:
            return self._plain("no drafter has a proposal", candidates, plain_rate)
        if best["predicted_tokens_per_s"] <= plain_rate:
            if self.plain_streak < self.probe_gap:
                return self._plain("no drafter beats plain decoding", candidates, plain_rate)
            best = min((x for x in candidates if x["drafter"] == best["drafter"]), key=lambda x: x["gamma"])
            variant = f" ({best['variant']})" if best["variant"] else ""
            reason = f"probing {best['drafter']}{variant} after {self.plain_streak} plain rounds"
        d, g = best["drafter"], best["gamma"]
        if d in peeked:
            draft = _cut(peeked[d], g)
        else:
            t = time.perf_counter()
            draft = self.drafters[d].propose(ids, g)
            self._cost(d, time.perf_counter() - t, max(len(draft.token_ids), 1))
        self.plain_streak = 0
        self.last = (d, len(draft.token_ids), draft.variant)
        self.probing = reason is not None
        draft.drafter = d
        draft.decision = {"drafter": d, "gamma": len(draft.token_ids),
                          "reason": reason or f"{d} with γ={g} predicts {best['predicted_tokens_per_s']:.1f} tok/s "
                                              f"vs {plain_rate:.1f} plain",
                          "plain_tokens_per_s": round(plain_rate, 3), "candidates": candidates}
        return draft

    def learn(self, n_accepted: int, ids: list[int], verify_s: float) -> None:
        d, g, variant = self.last
        if g and self.probing:  # back off while probes find nothing, reset when one pays
            self.probe_gap = min(self.probe_gap * 2, 64) if n_accepted == 0 else self.probe_every
        n_verified = g + 1
        old = self.verify.get(n_verified)
        self.verify[n_verified] = verify_s if old is None else DECAY * old + (1 - DECAY) * verify_s
        if g:
            # accepted tokens are successes; a rejection (if any) is the one failure observed
            key = (d, variant)
            self.trials[key] = DECAY * self.trials.get(key, 0.0) + n_accepted + (1 if n_accepted < g else 0)
            self.hits[key] = DECAY * self.hits.get(key, 0.0) + n_accepted
        for drafter in self.drafters.values():
            drafter.learn(n_accepted if drafter is self.drafters.get(d) else 0, ids, verify_s)
        self.last = ("", 0, "")

    # -- helpers --------------------------------------------------------------------------
    def _plain(self, reason: str, candidates: list, plain_rate: float | None) -> Draft:
        self.plain_streak += 1
        self.last = ("", 0, "")
        draft = empty_draft(self.device, "auto")
        draft.decision = {"drafter": "", "gamma": 0, "reason": reason, "candidates": candidates,
                          "plain_tokens_per_s": None if plain_rate is None else round(plain_rate, 3)}
        return draft

    def _cost(self, d: str, seconds: float, tokens: int) -> None:
        per = seconds / tokens
        self.cost[d] = per if self.cost[d] is None else DECAY * self.cost[d] + (1 - DECAY) * per


def _cut(draft: Draft, gamma: int) -> Draft:
    """The draft limited to γ tokens: a chain's first γ, or a tree's nodes of depth <= γ."""
    if draft.parents is None:
        draft.token_ids = draft.token_ids[:gamma]
        draft.q = None if draft.q is None else draft.q[:gamma]
        return draft
    keep = [i for i, depth in enumerate(depths(draft.parents)) if depth <= gamma]  # parents come first
    new_index = {old: new for new, old in enumerate(keep)}
    draft.parents = [new_index.get(draft.parents[i], -1) for i in keep]
    draft.token_ids = draft.token_ids[keep]
    if draft.node_q is not None:
        draft.node_q = [draft.node_q[i] for i in keep]
    return draft
