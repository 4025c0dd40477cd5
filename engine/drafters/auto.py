"""`auto`: hardware-aware speculation. Each round it asks its drafter (n-gram lookup, free to ask) what
it has, and picks the γ with the best predicted tokens per second, from costs measured online on this
machine, or plain decoding (a lookup's draft only where it pays at the low end of its α, at the γ best at its
measured α):

    rate(γ) = E(α, γ) / (γ·c + t(γ+1))      plain decoding: 1 / t(1)

c = seconds per drafted token, t(n) = seconds a round verifying n tokens costs but for its drafting, measured
whole on the run's clock (the decision, the verify forward, the acceptance rule, the feedback and the round's
events: Settled.round_s and events_s; t(1) as measured, larger sizes on the least-squares line through the sizes
seen so far, sizes not yet verified entering it at the ratio earlier runs measured), α = the drafter's acceptance
rate (decayed counts),
E(α, γ) = (1 - α^(γ+1)) / (1 - α). When nothing beats plain decoding it decodes plainly (γ = 0)
and probes the best drafter again after `probe_every` plain rounds, doubling that gap (up to 64) while
probes find nothing. A plain decision is kept and read again, not repriced, while nothing it was priced on moves
(_still_plain); after QUIET lookups that were not worth verifying since a draft was last accepted, the lookup
rests (asked every other round, then every 4th) until a draft is accepted again; a plain round's feedback waits
until a drafter is asked (_feed). Acceptance is tracked per variant (n-gram: per match length), from the drafts
verified and from the lookup's proposals a plain round did not verify, checked against the token it committed
(_unasked); a variant of the free drafter that was never tried is tried once when it has a proposal, even
where another drafter is priced higher (its α is a prior until then, and a long match in copied text is accepted
far more often than the prior says). Every choice is returned with the numbers behind it, so the UI can explain
why.

Tree drafters that are cheap to ask (`trees`: token recycling, suffix speculation) are priced from the accepted
drafts per round their trees earned (a prior until tried) over their asking time and the verify forward of the
tree's size (costmodel.round_rate): first from a forecast (the size they have been building), and asked only when
that beats every option priced so far (and to keep learning after RECHECK rounds of the engine's runs, the gap
doubling while such a recheck leaves it unchosen), since on fast weights asking one costs a tenth of a forward
(issue 64); every round's `settle` brings them its forward's rows and its time (suffix sizes its tree on it),
chosen or not. Suffix speculation reads the session's history when the run has one.

Drafters that cost compute to ask (`costly`: the trained heads, heads.py) are priced *before* they are
asked, next to what the free drafter has, from their own measured c, their α (a prior until tried) and the share
of their drafts that were worth verifying; one is asked only when it beats both plain decoding and the free
drafter's best γ. Its chain is then cut by its confidence (max q per position, `_by_confidence`): α per
confidence bin, starting at the hit rate the heads measured on held-out text. (Offered next to every n-gram
match at a flat prior α = 0.5, before this pricing, they cost the grounded prompts 10%: README, "Trained draft
heads".) They see the target's features every round (their `settle`), so they stay in step.
"""

from __future__ import annotations

import math
import time
from dataclasses import replace

import torch

from .. import costmodel
from ..config import MAX_GAMMA
from ..costmodel import CONFIDENCE_EDGES
from ..events import Decided
from ..sampling.tree import depths
from ..specs import DraftSpec
from .base import Draft, Drafter, Factory, Lookup, Needs, Note, Settled, empty_draft
from .heads import heads_fit

PRIOR_ALPHA = 0.5  # acceptance assumed before a drafter is tried
# a tree drafter its forecast keeps unasked is asked again after this many rounds (its forecast is learnt only when
# it is asked), the gap doubling up to MAX_GAP while such asks leave it unchosen (as probes back off)
RECHECK = 16
MAX_GAP = 64  # the most plain rounds between two probes, or between two asks of a tree drafter priced out
# after this many lookups whose proposals were not worth verifying since a draft was last accepted, the lookup rests:
# it is asked every other round, then every 4th after as many more (MAX_REST), until a draft is accepted again (any
# drafter's: one that was rejected leaves it resting); a resting round reads the last plain decision again (issue 64:
# a lookup and its check cost a plain round ~1% of a step)
QUIET = 8
MAX_REST = 4
DECAY = 0.9  # weight of older rounds in acceptance and cost estimates
# a run's probes may cost at most this share of its target steps beyond what plain rounds would have: a probe that
# finds nothing costs its drafting and its verify forward less the one token a plain step gives (a trained head's
# 4 drafted tokens and a 2-row verify, ~2 steps on the blocks); on text where nothing pays (issue 64: Spec-Bench's
# qa) the probes then keep auto within this share of plain decoding, beside the lookup's and the decisions' host
# work, which take another 2-3% of a step there
PROBE_SHARE = 0.01
# pricing keeps the verify curve it fitted until a measured t(n) moves by more than this share (the average of whole
# rounds moves with the host's load every round; each refit reprices every drafter and every lookup's proposal
# afresh, ~0.15 ms a decision after a forward on the blocks: at 2% one round in ten refitted on Spec-Bench's qa)
REFIT = 0.05
PLAIN = "no drafter beats plain decoding"  # the reason of a plain round when something was priced
MEMOS = 256  # price lists auto keeps by what they were priced from (_memo)
# plain rounds a drafter may not have heard yet (settle holds them until one is asked, then hands them over at once:
# their feedback ran at ~20 µs a round after each forward on the blocks, where a run of them costs a few µs each)
HELD = 64
MIN_CALIBRATION = 50  # held-out guesses a bin needs before its measured hit rate is the prior


def confidence_variant(name: str, confidence: float, calibration: list | None = None) -> tuple[str, float]:
    """(variant, prior α) of one drafted position by its draft distribution's confidence, max q: acceptance is
    tracked per bin, and an untried bin starts at the hit rate the drafter measured for it on held-out data
    (`calibration`: [guesses, hit rate] per bin, from its training record), else at the bin's middle.
    max q is a property of the distribution the token is drawn from, not of the token, so cutting a chain
    by it keeps the min(1, p/q) test exact."""
    edges = (0.0, *CONFIDENCE_EDGES, 1.0)
    i = sum(confidence >= e for e in CONFIDENCE_EDGES)
    prior = (edges[i] + edges[i + 1]) / 2
    if calibration and len(calibration) == len(edges) - 1 and calibration[i][0] >= MIN_CALIBRATION:
        prior = float(calibration[i][1])
    return f"{name}@{edges[i]:.1f}-{edges[i + 1]:.1f}", prior


class AutoDrafter(Drafter):
    """Wraps one drafter that is free to ask (n-gram lookup), and each round decides whether
    drafting pays and with which γ. It asks the drafter first, so it prices only what the drafter has."""

    name = "auto"

    def __init__(
        self,
        drafter: Drafter,
        device: torch.device,
        probe_every: int = 8,
        costly: tuple = (),
        trees: tuple = (),
        memory: "Memory | None" = None,
    ):
        self.drafter, self.device, self.probe_every = drafter, device, probe_every
        # free-to-ask tree drafters (token recycling), priced per round
        self.trees = {d.name: d for d in trees}
        # recycling reads every forward's top-k, chosen or not
        self.topk = max((getattr(d, "k", 0) for d in trees), default=0)
        self.memory = memory if memory is not None else Memory()  # what the engine's earlier runs learnt
        # tree drafter -> accepted drafts per round it was chosen (EMA); nodes of the trees it built when asked (EMA)
        self.tree_accepted, self.tree_nodes = self.memory.tree_accepted, self.memory.tree_nodes
        self.tree_found = self.memory.tree_found  # tree drafter -> share of asks that brought a tree (EMA)
        self.rounds = 0  # rounds proposed so far in this run
        # tree drafter -> the round it was last asked in, and its recheck gap: the engine's runs' (Memory.tree_gap)
        self.tree_asked, self.tree_gap = self.memory.tree_asked, self.memory.tree_gap
        self.recheck_at = 0  # the first round (Memory.rounds) a tree drafter's recheck falls due (_due)
        self.rechecked: set = set()  # the tree drafters this round asked for their recheck
        # lookups that ended in a plain round since a draft was last accepted; rounds between two lookups (QUIET,
        # MAX_REST); rounds since the last; the lookup's (variant, length, γ) at the last plain decision
        self.quiet, self.rest, self.rested, self._last_look = 0, 1, 0, None
        self.seeded: set = set()  # sizes priced at earlier runs' ratios the run has not measured itself yet
        self.costly = {d.name: d for d in costly}  # drafters priced before asked (trained heads), by name
        # variant -> decayed Bernoulli trials seen, and accepted tokens among them
        self.trials, self.hits = self.memory.trials, self.memory.hits
        self.used = self.memory.used  # costly drafter -> share of its drafts worth verifying (EMA, prior 1)
        self.verify: dict[int, float] = {}  # n verified tokens -> seconds (EMA)
        # the verify curve the rounds are priced on: the points it was fitted on, t(n) read from it, fits so far;
        # and each drafter's last candidates by what they were priced from (_priced_on, _memo)
        self._fitted, self._curve, self._at, self._fits = {}, None, {}, 0
        self._memos: dict[tuple, list] = {}
        # drafter -> the seconds per drafted token its prices read (_c); moves of a drafter's measured cost past that
        # price (_moves_price, cost's setter)
        self._costs_at, self._repriced = {}, 0
        # plain rounds in a row; plain rounds before the next probe (doubles while probes fail)
        self.plain_streak, self.probe_gap = 0, probe_every
        self.probing = False  # the round in flight is a probe
        # the run's last position (from prepare) and the tokens left before it at the round being decided (_late)
        self.end, self.left = math.inf, math.inf
        # this run's target steps so far (verify forwards ÷ t(1)), what its probes cost beyond plain rounds (steps,
        # less the tokens they brought), and the drafting steps of the probe in flight
        self.steps, self.spent, self.probe_draft = 0.0, 0.0, 0.0
        self.last: tuple[int, list, str] = (0, [], "")  # (γ, variant per drafted position, drafter) in flight
        # seconds this round spent asking drafters, and the last settle's own time: a round is priced whole but for
        # its drafting (settle)
        self.asked_s, self.settle_s = 0.0, 0.0
        # seconds handing one held round to the drafters (_feed, EMA): what a plain round is priced with for the
        # feedback it left for later, not the round the hand-over ran in
        self.feed_each = 0.0
        # n verified tokens -> seconds building a round's events (EMA; they are timed after its feedback, so a round
        # hears the last one's), and the size of the last round settled
        self.events, self.sized = {}, 0
        # plain decisions made in full, read again while nothing they were priced on moves (_still_plain): (what they
        # were priced on, {the lookup's (variant, length, γ): Kept})
        self._stretch: tuple | None = None
        # a plain round's draft has no tokens; id(note) -> the plain round's draft made with it (_plain_round)
        self._empty, self._plain_drafts = torch.empty(0, dtype=torch.long, device=device), {}
        # what a probe could try, and the step it fits from (_pick)
        self._hopeful, self._probe_due = None, math.inf
        self.listening = self._listeners(drafter)
        self.held, self._free_listens = [], drafter in self.listening
        # the lookup's (variant, first token) this round, checked against the token a plain round commits (_unasked)
        self.unverified: tuple | None = None

    def _listeners(self, drafter: Drafter) -> list:
        """The drafters that read the rounds (a settle of their own): a plain round's feedback waits until one of them
        is asked (or HELD rounds wait in `held`), then they hear the held rounds in order (_feed)."""
        return [
            d
            for d in (*self.trees.values(), drafter, *self.costly.values())
            if d is not None and getattr(d.settle, "__func__", None) is not Drafter.settle
        ]

    @property
    def cost(self) -> dict[str, float]:
        """Seconds per drafted token of each drafter asked (Memory.seconds)."""
        return self.memory.seconds

    @cost.setter
    def cost(self, seconds: dict[str, float]) -> None:
        self.memory.seconds = dict(seconds)
        self._repriced += 1

    def prepare(self, prompt_ids: list[int], cfg) -> None:
        if cfg is not None:
            self.end = len(prompt_ids) + cfg.max_new_tokens
        self.drafter.prepare(prompt_ids, cfg)  # n-gram: which prompt positions the chat template wrote
        for d in (*self.costly.values(), *self.trees.values()):
            d.prepare(prompt_ids, cfg)

    # -- estimates ------------------------------------------------------------------------
    def alpha(self, variant: str = "", prior: float = PRIOR_ALPHA) -> float:
        """Acceptance of the drafter's proposals of this variant (e.g. n-gram match length), with a prior."""
        hits, trials = self.hits.get(variant, 0.0), self.trials.get(variant, 0.0)
        # the cost model's α (accepted / tested) with one pseudo-trial worth the prior
        return costmodel.alpha(hits + prior, trials - hits + 1.0 - prior)

    def priced_alpha(self, variant: str = "", prior: float = PRIOR_ALPHA) -> tuple[float, float, float]:
        """(α a lookup's draft of this variant is priced at, its measured α, the positions that measure counts: its
        decayed trials and the prior's one): the measure less one standard error (costmodel.priced_alpha)."""
        measured, tested = self.alpha(variant, prior), self.trials.get(variant, 0.0) + 1.0
        return costmodel.priced_alpha(measured, tested), measured, tested

    def verify_s(self, n: int) -> float | None:
        """t(n) in seconds as the round is priced: t(1) measured, every larger size on the cost model's least-squares
        line through the multi-token points (measured, or priced at earlier runs' ratios) of the last fit
        (_priced_on): one size's noisy average does not pick γ."""
        if 1 not in self.verify:
            return None
        at = self._priced_on()
        if n not in at:
            at[n] = self._curve(n)
        return at[n]

    def _priced_on(self) -> dict:
        """The t(n) values of the verify curve this round is priced on ({n: seconds}, filled as asked). The curve is
        refitted when a measured point moved more than REFIT from the value it was fitted on, or a size was
        measured for the first time; until then every round reads the same curve, so a run of plain rounds (which
        move only t(1)'s average) reprices nothing (_memo)."""
        if self._off_fit():
            self._fitted, self._curve = dict(self.verify), costmodel.verify_curve(self.verify, fitted=True)
            self._at, self._fits = {}, self._fits + 1
            self._memos.clear()
        return self._at

    def _off_fit(self) -> bool:
        """A measured point moved past REFIT from the value the curve was fitted on, or is not on it yet."""
        fitted = self._fitted
        if len(fitted) != len(self.verify):
            return True
        for n, t in self.verify.items():
            f = fitted.get(n)
            if f is None or abs(t - f) > REFIT * f:
                return True
        return False

    def _t(self, n: int) -> float:
        """t(n) on the verify curve this round is priced on (propose checks the fit once a round, through verify_s;
        a price asked outside a round fits it first)."""
        at = self._at if self._curve is not None else self._priced_on()
        if n not in at:
            at[n] = self._curve(n)
        return at[n]

    def _c(self, d: str, t1: float) -> float:
        """Seconds per drafted token drafter d is priced at: its measured cost (Memory.seconds; a tenth of t(1)
        before it was asked) as last repriced. Like the verify curve, the price moves only when the measure moved
        by more than REFIT of a target step over γ = MAX_GAMMA drafts (the n-gram's lookup moves by 10-50% a round
        and is a hundredth of a step), so a run of plain rounds reprices nothing (_memo)."""
        live = self.memory.seconds.get(d)
        if live is None:
            return 0.1 * t1
        kept = self._costs_at.get(d)
        if kept is None or abs(live - kept) * MAX_GAMMA > REFIT * t1:
            kept = self._costs_at[d] = live
        return kept

    def _moves_price(self, d: str) -> bool:
        """Drafter d's measured cost has moved past what its price reads (_c would reprice it)."""
        live, kept, t1 = self.memory.seconds.get(d), self._costs_at.get(d), self._at.get(1)
        return live is not None and (kept is None or t1 is None or abs(live - kept) * MAX_GAMMA > REFIT * t1)

    def _memo(self, key: tuple, price, *args):
        """The candidates price(*args) makes, kept for the next round that asks with the same key: the drafter, what its
        price reads (its priced cost, α counts, yield) and the verify curve's fit. The same numbers make the same
        list. At most MEMOS keys are kept (a new fit or a full memo starts again)."""
        key = (*key, self._fits)
        kept = self._memos.get(key)
        if kept is None:
            if len(self._memos) >= MEMOS:
                self._memos.clear()
            kept = self._memos[key] = price(*args)
        return kept

    # -- the two methods ------------------------------------------------------------------
    def propose(self, ids: list[int], gamma: int) -> Draft:
        t1, still, look = self._begin(ids, gamma)
        if still is not None:
            return still
        plain_rate = 1.0 / t1
        trees, candidates, unasked = self._ask_free(look, ids, gamma, t1)
        variant, d = look.variant, self.drafter.name
        best, reason, trying = self._pick(candidates, d, plain_rate)
        self._rechecked(best)
        # what the decision shows: the options not asked too, with their forecast
        candidates = candidates + unasked
        if best is None:  # with no tree asked, the next rounds may read this decision again (_still_plain)
            return self._plain(
                reason, candidates, plain_rate, None if trees else (variant, len(look.tokens), gamma)
            )
        draft = look.draft(self.device, d)
        keep, variants, confidence, unsure = best["gamma"], None, None, ""
        if best["drafter"] in self.trees:  # a whole tree: γ is its depth, already cut when it was built
            draft, d = trees[best["drafter"]], best["drafter"]
            variant, keep = d, gamma
        elif best["drafter"] in self.costly:
            fallback = max(
                (x for x in candidates if x["drafter"] == d and _pays(x, plain_rate)), key=_rate, default=None
            )
            free = (draft, variant, d, fallback)
            d = variant = best["drafter"]
            draft = self._ask(self.costly[d], ids, gamma)  # all γ: its confidence says below how many to keep
            if not len(draft.token_ids):
                return self._plain(f"{d} had no proposal", candidates, plain_rate)
            # a chain: keep the positions it is sure enough of
            if draft.q is not None and draft.parents is None:
                confidence = [round(float(x), 3) for x in draft.q.max(-1).values.tolist()]
                keep, variants, rate = self._by_confidence(d, confidence, t1)
                self._asked(d, used=bool(keep))
                # the free drafter's proposal is still the better bet
                if reason is None and fallback and _rate(fallback) > max(rate if keep else 0.0, plain_rate):
                    unsure = f"{d} was less sure (confidence {confidence}) than "
                    draft, variant, d, best = free
                    keep, variants, confidence = best["gamma"], None, None
                elif not keep and reason is None:
                    return self._plain(
                        f"{d} was unsure (confidence {confidence}): verifying its draft would not "
                        f"beat plain decoding",
                        candidates,
                        plain_rate,
                    )
                elif keep:
                    if reason is not None and keep > best["gamma"]:  # a probe verifies what it was priced at
                        keep = best["gamma"]
                        rate = costmodel.expected_tokens_each(
                            self._bin_alphas(d, confidence)[:keep]
                        ) / self._t(keep + 1)
                    best = dict(best, gamma=keep, predicted_tokens_per_s=round(rate, 3))
                keep = keep or 1  # a probe tries the first position anyway
        draft = _cut(draft, keep)
        draft.topk = max(draft.topk, self.topk)
        self.plain_streak = 0
        n = len(draft.token_ids)
        self.last = (n, (variants or [variant] * n)[:n], d)
        self.probing = reason is not None
        self.probe_draft = draft_steps(best) if self.probing else 0.0
        draft.drafter = d
        sure = f" of the {len(confidence)} it drafted (confidence {confidence})" if confidence else ""
        why = reason or (
            f"{trying}{unsure}{d} with γ={best['gamma']}{sure} predicts "
            f"{_rate(best):.1f} tok/s{_low_end(best)} vs {plain_rate:.1f} plain"
        )
        shown = max(depths(draft.parents)) if draft.parents and n else n  # a tree's γ is its depth
        decision = {
            "drafter": d,
            "gamma": shown,
            "reason": why,
            "plain_tokens_per_s": round(plain_rate, 3),
            "candidates": candidates,
        }
        draft.notes.insert(0, Note("decided", decision, _decided))  # before the chosen drafter's own notes
        return draft

    def _pick(self, candidates: list, d: str, plain_rate: float) -> tuple[dict | None, str | None, str]:
        """The candidate this round verifies: of those that beat plain decoding as priced (a lookup's at the low end
        of its α), the best rate at what was measured (_rate: a lookup's γ is chosen at its measured α); when none
        does, a plain round or, after enough of them, a probe at the smallest γ; the free drafter d's variant once
        when it was never verified (free to ask, and its prior may be far off: a long match in copied text).
        Returns (the candidate, None for a plain round; the plain round's or the probe's reason; the note that a
        variant is tried once)."""
        best = max((x for x in candidates if _pays(x, plain_rate)), key=_rate, default=None)
        # the candidates a probe could try, when they were looked for, and the step the cheapest fits from
        self._hopeful, self._probe_due = None, math.inf
        if not candidates:
            return None, "no drafter has a proposal", ""
        if best is None:
            if self._late():
                late = f"; no probe with fewer than {self.probe_every} tokens left in the run"
                return None, PLAIN + late, ""
            if self.plain_streak < self.probe_gap:
                return None, PLAIN, ""
            # a chain the lookup proposed is not probed: each plain round checks its first token for free (_unasked),
            # what a probe at the smallest γ would learn
            free = d if self.unverified is not None else None
            hopeful = self._hopeful = [
                x
                for x in candidates
                if x.get("asked") is not False and x["drafter"] != free and self._could_pay(x)
            ]
            affordable = [x for x in hopeful if self.spent + probe_excess(x) <= PROBE_SHARE * self.steps]
            if not affordable:
                why, self._probe_due = self._over_budget(hopeful)
                return None, PLAIN + why, ""
            best = affordable[0]  # probe with the smallest γ of a drafter that could pay
            kind = f" ({best['variant']})" if best["variant"] not in ("", best["drafter"]) else ""
            return best, f"probing {best['drafter']}{kind} after {self.plain_streak} plain rounds", ""
        untried = [x for x in candidates if x["drafter"] == d and x["variant"] not in self.trials]
        if best["drafter"] != d and untried:
            # sized at the low end (a prior's one pseudo-trial: one draft), as it has not been verified
            best = max(untried, key=lambda x: x["predicted_tokens_per_s"])
            return best, None, f"trying {d} ({best['variant']}) once, since its α is a prior until verified: "
        return best, None, ""

    def _ask_free(self, look: Lookup, ids: list[int], gamma: int, t1: float) -> tuple[dict, list, list]:
        """Price every option beside the n-gram lookup's proposal `look` (free to ask: only what it has): the costly
        drafters from what they cost and earned before (they are asked only if one wins), each tree drafter first from
        its forecast (its asking time, the tree size it built and the tokens per round it earned, all measured; a
        prior until it was chosen) and asked only when that forecast beats plain decoding and every option priced
        so far (asking one costs as much as a tenth of a 4-bit forward: issue 64) or its recheck is due; a tree
        never asked is asked.
        Returns (the tree drafts by name, the candidates, the forecasts of the trees not asked)."""
        plain_rate = 1.0 / t1
        candidates, trees, unasked = self._lookup_priced(look.variant, len(look.tokens), gamma, t1), {}, []
        for name in self.costly:  # priced from what only asking them changes
            asked = (self._c(name, t1), self.hits.get(name), self.trials.get(name), self.used.get(name))
            candidates += self._memo((name, gamma, *asked), self._price, name, name, gamma, t1)
        bar = _bar(candidates, plain_rate)  # the best rate priced so far, of the options that pay
        for name, tree_drafter in self.trees.items():  # priced by what their trees earned per round
            earned = (self.tree_nodes.get(name), self.tree_found.get(name), self.tree_accepted.get(name))
            forecast = self._memo(
                (name, gamma, self._c(name, t1), *earned), self._forecast_tree, name, gamma, t1
            )
            if forecast is not None and _rate(forecast) <= bar:
                if self.memory.rounds < self._due(name):
                    unasked.append(forecast)
                    continue
                self.rechecked.add(name)  # asked only to keep its forecast learning
            self.tree_asked[name] = self.memory.rounds
            trees[name] = self._ask(tree_drafter, ids, gamma, per_token=False)
            n = len(trees[name].token_ids)
            old, found = self.tree_nodes.get(name), self.tree_found.get(name)
            self.tree_nodes[name] = n if old is None else DECAY * old + (1 - DECAY) * n
            self.tree_found[name] = float(n > 0) if found is None else DECAY * found + (1 - DECAY) * (n > 0)
            self.memory.version += 1
            priced = self._price_tree(name, trees[name], t1)
            candidates += priced
            bar = max(bar, _bar(priced, plain_rate))
        return trees, candidates, unasked

    def _lookup_priced(self, variant: str, cap: int, gamma: int, t1: float) -> list[dict]:
        """The lookup's candidates for a proposal of `cap` tokens of this variant (a new list): a lookup's price at γ = g
        does not depend on how long its proposal is, so one pricing up to γ (_memo) serves every length."""
        d = self.drafter.name
        # its cost is read with or without a proposal: every decision reads it (_moves_price)
        asked = (self._c(d, t1), self.hits.get(variant), self.trials.get(variant), self.used.get(d))
        if cap < 1:
            return []
        top = max(cap, gamma)
        return self._memo((d, variant, top, *asked), self._price, d, variant, top, t1)[:cap]

    def _ask(self, drafter: Drafter, ids: list[int], gamma: int, per_token: bool = True) -> Draft:
        """drafter's proposal, its asking time counted into the round's (asked_s) and into its measured cost
        (seconds per drafted token, or per proposal for a tree)."""
        self.asked_s += self._feed()  # the held rounds' feedback: theirs, not this round's (feed_each)
        t = time.perf_counter()
        draft = drafter.propose(ids, gamma)
        self._cost(drafter.name, time.perf_counter() - t, max(len(draft.token_ids), 1) if per_token else 1)
        return draft

    def _rechecked(self, best: dict | None) -> None:
        """A tree drafter asked for its recheck waits twice as long for the next (up to MAX_GAP rounds); one chosen,
        on a recheck or on its forecast, is rechecked after RECHECK rounds again. Then the first round a recheck falls
        due (recheck_at: a plain decision is read again before it)."""
        for name in self.rechecked:
            self.tree_gap[name] = min(2 * self.tree_gap.get(name, RECHECK), MAX_GAP)
        self.rechecked.clear()
        if best is not None and best["drafter"] in self.trees:
            self.tree_gap[best["drafter"]] = RECHECK
        self.recheck_at = min(map(self._due, self.trees), default=math.inf)

    def _due(self, name: str) -> int:
        """The round (of the engine's runs: Memory.rounds) tree drafter `name` is asked again however its forecast
        prices it: the first after the gap (tree_gap) of rounds that follows the one it was last asked in."""
        return self.tree_asked.get(name, 0) + self.tree_gap.get(name, RECHECK) + 1

    def _look(self, ids: list[int], gamma: int) -> Lookup:
        """The free drafter's proposal as lists (its Draft is built only when auto drafts with it), its asking time
        counted as _ask counts it."""
        if self.held and self._free_listens:
            self.asked_s += self._feed()
        t = time.perf_counter()
        look = self.drafter.lookup(ids, gamma)
        self._cost(self.drafter.name, time.perf_counter() - t, max(len(look.tokens), 1))
        return look

    def _begin(self, ids: list[int], gamma: int) -> tuple[float | None, Draft | None, Lookup | None]:
        """A round's start: (t(1); a plain round's Draft when no decision is needed, else None; the lookup's
        proposal, None when it was not asked). The first round is a plain step (it measures what everything is
        compared with); then a resting lookup (QUIET) is not asked while the last plain decision holds; else it is
        asked (free: only what it has) and the decision made earlier for a proposal like its own is looked for
        (_still_plain)."""
        t1 = self.verify_s(1)
        self.left = self.end - len(ids)
        if t1 is None:
            return None, self._plain("measuring one plain target step first", [], None), None
        self.rounds += 1  # rounds decided (the measuring one is not), in this run and in the engine's
        self.memory.rounds += 1
        if self.rested + 1 < self.rest and (still := self._still_plain(None, gamma, t1)) is not None:
            return t1, still, None
        look = self._look(ids, gamma)
        if look.tokens and look.parents is None:
            self.unverified = (look.variant, look.tokens[0])
        return t1, self._still_plain(look, gamma, t1), look

    def _still_plain(self, look: Lookup | None, gamma: int, t1: float) -> Draft | None:
        """A plain decision made in full earlier for a proposal of this variant and length at this γ, again: while
        nothing else it was priced on moved (the verify curve's fit, what the engine's runs learnt: Memory.version and
        its variant's own count, Memory.moved; each drafter's priced cost, _c), no tree drafter is due its recheck
        and no probe is due (Kept.read): the same decision, its event's data unchanged. A chain of a variant or length
        the stretch has not decided at this γ, or whose variant's count moved, gets the decision made from one it
        has (_derived). look None: a resting lookup's round (QUIET), which reads the last plain decision (at the same
        γ). None: decide in full (with a lookup). A run of plain rounds (issue 64: Spec-Bench's qa) then costs the
        lookup and this check a round."""
        state = (self._fits, self.memory.version, self._repriced)
        if self._stretch is None or self._stretch[0] != state:
            self._stretch = (state, {})
            return None
        key = self._last_look if look is None else (look.variant, len(look.tokens), gamma)
        kept = self._stretch[1].get(key) if key is not None and key[2] == gamma else None
        if self.memory.rounds >= self.recheck_at:
            return None
        fresh = kept is not None and kept.moved == self.memory.moved.get(key[0])
        # a chain new to the stretch, or whose variant moved: its decision made from the stretch's
        if not fresh and look is not None and look.parents is None:
            kept, fresh = self._derived(key, t1), True
        if kept is None or not fresh:
            return None
        note = kept.read(self)
        if note is None:
            return None
        if look is None:
            self.rested += 1
            return self._plain_round(kept.resting(self.quiet))
        self._quiet(key)
        return self._plain_round(note)

    def _derived(self, key: tuple, t1: float) -> "Kept | None":
        """The plain decision for a lookup chain of a (variant, length, γ) this stretch has not decided, made from one
        it decided in full at that γ (its base): nothing else they are priced on moved, so the costly drafters' and
        the trees' candidates, the probe's reason and when one falls due are the base's, and only the chain's own
        candidates are priced (_memo). Where none of them pays, the decision is the base's with them in place of the
        base's lookup candidates: what deciding in full makes (a test compares the two), for a fraction of its host
        time (issue 64: a third of Spec-Bench's qa rounds decided in full, most for a proposal new to the stretch).
        None: decide in full."""
        base = next((k for at, k in self._stretch[1].items() if at[2] == key[2] and k.probes), None)
        d, variant = self.drafter.name, key[0]
        if base is None or base.read(self) is None:
            return None
        mine = self._lookup_priced(variant, key[1], key[2], t1)
        if any(_pays(x, 1.0 / t1) for x in mine):
            return None
        data = base.note.data
        candidates = list(mine) + [x for x in data["candidates"] if x["drafter"] != d]
        if not candidates:
            return None
        note = Note("decided", dict(data, candidates=candidates), _decided)
        kept = self._stretch[1][key] = Kept(
            note, base.hopeful, base.due, self.memory.moved.get(variant), base.late
        )
        return kept

    def _late(self) -> bool:
        """Too few tokens are left in the run's budget for a probe to pay back: a drafter it found paying would have
        fewer than `probe_every` rounds to draft in (issue 64: Spec-Bench's qa probed a head at round 62 of 64, at
        ~1.7 target steps a probe). Memory keeps what a probe learns for the next run, which probes for itself."""
        return self.left < self.probe_every

    def _over_budget(self, hopeful: list) -> tuple[str, float]:
        """(Why a drafter that could pay is not probed: its probe would take the run's probes past PROBE_SHARE of
        its steps ("" when none could pay); the run's step from which the cheapest such probe fits in the share).
        Both hold until a probe or a new decision: plain rounds move only the run's steps."""
        if not hopeful:
            return "", math.inf
        x = min(hopeful, key=probe_excess)
        due = (self.spent + probe_excess(x)) / PROBE_SHARE if PROBE_SHARE > 0 else math.inf
        return (
            f"; a probe of {x['drafter']} would cost {probe_excess(x):.2f} steps more than a plain round, past the "
            f"{PROBE_SHARE:.0%} of this run's steps its probes may use ({self.spent:.2f} used: it fits from step "
            f"{due:.1f})",
            due,
        )

    def _could_pay(self, candidate: dict) -> bool:
        """A probe's candidate: it would beat plain decoding at the top of what its α may still be (the measured
        α + 1 / √(n + 1) after n tested positions, where a draft is priced at its low end: priced_alpha; a tree:
        every node accepted), for its drafting and its verify forward (c and v in target steps). A drafter measured
        poor often enough (a head whose asking costs half a step a token) is never probed again; a new or rarely seen
        variant is."""
        g, cost = candidate.get("gamma", 0), draft_steps(candidate) + candidate["v"]
        if "nodes" in candidate:
            return g > 0 and g + 1 > cost
        n = self.trials.get(candidate["variant"], 0.0)
        top = min(1.0, candidate.get("measured_alpha", candidate["alpha"]) + 1.0 / math.sqrt(n + 1.0))
        return g > 0 and costmodel.expected_tokens(top, g) > cost

    def _forecast_tree(self, d: str, gamma: int, t1: float) -> dict | None:
        """A tree drafter's price before it is asked (the candidate _price_tree would make of a tree of the size
        it has been building), marked asked: False; None when it was never asked (no size to go by)."""
        nodes = self.tree_nodes.get(d)
        if nodes is None:
            return None
        found = self.tree_found.get(d, 1.0)  # the share of asks that brought a tree at all
        n = max(1, round(nodes / found)) if found > 0 else 1  # the size of a tree when there is one
        earned = self.tree_accepted.get(d, costmodel.expected_tokens(PRIOR_ALPHA, gamma) - 1.0)
        tokens = 1.0 + found * earned
        # asked, it costs its asking time; with no tree the round is a plain step
        v = found * self._t(n + 1) + (1.0 - found) * t1
        return dict(self._tree_candidate(d, min(gamma, n), n, tokens, v, t1), asked=False)

    def _tree_candidate(self, d: str, depth: int, n: int, tokens: float, v: float, t1: float) -> dict:
        """A tree drafter's candidate: `tokens` committed a round for its asking time and a verify forward of v
        seconds (costmodel.round_rate), c and v printed in target steps."""
        c = self._c(d, t1)
        return {
            "drafter": d,
            "variant": d,
            "gamma": depth,
            "nodes": n,
            "tokens_per_round": round(tokens, 4),
            "c": round(c / t1, 4),
            "v": round(v / t1, 4),
            "predicted_tokens_per_s": round(costmodel.round_rate(tokens, c, v), 3),
        }

    def _by_confidence(self, d: str, confidence: list, t1: float) -> tuple[int, list, float]:
        """The prefix of a costly drafter's chain worth verifying: each position's α from its confidence bin,
        E from the cost model, and the γ with the most tokens per second of verify time (the drafting is paid
        already). Returns (γ, the positions' variants, predicted tokens/s); γ = 0 when none beats plain."""
        pairs = self._bins(d, confidence)
        alphas = self._bin_alphas(d, confidence)
        best_g, best_rate = 0, 1.0 / t1
        for g in range(1, len(alphas) + 1):
            rate = costmodel.expected_tokens_each(alphas[:g]) / self._t(g + 1)
            if rate > best_rate:
                best_g, best_rate = g, rate
        return best_g, [v for v, _ in pairs], best_rate

    def _bins(self, d: str, confidence: list) -> list[tuple[str, float]]:
        """(confidence bin, its prior α) of each position of costly drafter d's chain."""
        calibration = getattr(self.costly[d], "calibration", None)
        return [confidence_variant(d, x, calibration) for x in confidence]

    def _bin_alphas(self, d: str, confidence: list) -> list[float]:
        """Each position's α from its confidence bin (what _by_confidence prices a chain with)."""
        return [self.alpha(v, prior) for v, prior in self._bins(d, confidence)]

    def _price(self, d: str, variant: str, cap: int, t1: float) -> list[dict]:
        """One candidate per γ = 1..cap for drafter d: the cost model's predicted tokens per second. A costly
        drafter is priced with the share of its drafts that were worth verifying (the rest cost a plain round), and
        with all the `cap` tokens it drafts when asked (its confidence cuts the chain afterwards: verifying γ of them
        still paid for cap; the candidate says so in "drafted")."""
        if cap < 1:
            return []
        c, used, out = self._c(d, t1), self.used.get(d, 1.0), []
        # the lookup's variants at the low end of their α (a handful of trials, some on other text); a costly
        # drafter's at its measure, as its confidence bins price its chain (their priors are calibrated)
        low = d not in self.costly
        alpha, measured, tested = self.priced_alpha(variant) if low else (self.alpha(variant), None, None)

        def rate(a: float, g: int, drafted: int, v: float) -> float:  # tokens/s at acceptance a
            return costmodel.predicted_speedup_asked(a, g, c * drafted / g / t1, v / t1, used) / t1

        for g in range(1, cap + 1):
            v = self._t(g + 1)
            drafted = g if low else cap
            out.append(
                {
                    "drafter": d,
                    "variant": variant,
                    "gamma": g,
                    "alpha": round(alpha, 4),
                    "c": round(c / t1, 4),
                    "v": round(v / t1, 4),
                    "predicted_tokens_per_s": round(rate(alpha, g, drafted, v), 3),
                }
            )
            if low:  # γ is chosen at the measured α (_rate), among the candidates that pay at the low end
                out[-1].update(
                    measured_alpha=round(measured, 4),
                    tested=round(tested, 2),
                    expected_tokens_per_s=round(rate(measured, g, drafted, v), 3),
                )
            else:
                out[-1]["used"] = round(used, 4)
                out[-1]["drafted"] = drafted
        return out

    def _price_tree(self, d: str, tree_draft: Draft, t1: float) -> list[dict]:
        """One candidate for a tree drafter's proposal: its accepted drafts per round (measured, decayed; before it
        is tried, a chain's E at the prior α over the tree's depth) plus the target's token, over its asking time
        and the verify forward of its size (costmodel.round_rate)."""
        n = len(tree_draft.token_ids)
        if not n:
            return []
        depth = max(depths(tree_draft.parents)) if tree_draft.parents else n
        tokens = 1.0 + self.tree_accepted.get(d, costmodel.expected_tokens(PRIOR_ALPHA, depth) - 1.0)
        return [self._tree_candidate(d, depth, n, tokens, self._t(n + 1), t1)]

    def _asked(self, d: str, used: bool) -> None:
        self.used[d] = DECAY * self.used.get(d, 1.0) + (1 - DECAY) * float(used)
        self.memory.version += 1  # its price moved

    def settle(self, r: Settled) -> None:
        """The round to every drafter it holds: the prompt's and each round's features to the heads; to the tree
        drafters every forward's rows and time, chosen or not (recycling learns from every forward, suffix sizes
        on every round's time); accepted counts only to the one it chose; its own estimates learn the round."""
        if r.round == 0:  # the prefill: the prompt's features
            for d in self.costly.values():
                d.settle(r)
            return
        start = time.perf_counter()
        g, variants, chosen = self.last
        n_accepted = r.n_accepted
        verify_s = self._round_cost(r, g)
        t1 = self.verify.get(1)
        steps = verify_s / t1 if t1 else 1.0
        self.steps += steps
        if g and n_accepted:  # a draft was accepted: the lookup is asked every round again
            self.quiet, self.rest = 0, 1
        if not g and self.unverified is not None and r.ids:
            self._unasked(*self.unverified, r.ids[-1])
        self.unverified = None
        if g and self.probing:  # back off while probes find nothing, reset when one pays
            self.probe_gap = min(self.probe_gap * 2, MAX_GAP) if n_accepted == 0 else self.probe_every
            self.spent += self.probe_draft + steps - (1 + n_accepted)  # beyond a plain round's step and token
        old = self.verify.get(g + 1)
        if (
            g + 1 in self.seeded
        ):  # the run's own first measure of a size earlier runs priced replaces their price
            old = None
            self.seeded.discard(g + 1)
        self.verify[g + 1] = verify_s if old is None else DECAY * old + (1 - DECAY) * verify_s
        if (
            r.round_s is not None
        ):  # a whole round of this sequence (a batch's row is its whole batch's forward)
            self._ratios(g, old is None, verify_s, t1)
        if g and chosen in self.trees:  # a tree is priced by what it committed per round, not per position
            old = self.tree_accepted.get(chosen)
            self.tree_accepted[chosen] = n_accepted if old is None else DECAY * old + (1 - DECAY) * n_accepted
            self.memory.version += 1
        elif g:
            self._count(variants, n_accepted, free=chosen == self.drafter.name)
            if chosen in self.costly and variants[0] != chosen:  # the drafter's overall α prices asking it
                self._count([chosen] * g, n_accepted)
        # every drafter hears a drafted round now (one that was not chosen, no accepted drafts); a plain round waits
        # until a drafter is asked (_feed)
        fed = 0.0
        if g:
            fed = self._feed()
            none = replace(r, n_accepted=0) if r.n_accepted else r
            for d in self.listening:
                d.settle(r if chosen == d.name else none)
        else:
            self.held.append(r)
            if len(self.held) >= HELD:
                fed = self._feed()
        self.last = (0, [], "")
        self.settle_s = time.perf_counter() - start - fed  # the held rounds' feedback is theirs (feed_each)

    def _round_cost(self, r: Settled, g: int) -> float:
        """Seconds the round of g drafts is priced at: the round whole but for its drafting (asking drafters is
        priced apart, c): the decision, the forward, the acceptance rule, this feedback (the last one's time), the
        events (a round of its size's, so far) and, for a plain round, the feedback it left for later (feed_each); a
        batch's row has its forward and acceptance only."""
        verify_s = r.verify_s
        if r.round_s is not None:
            if self.sized:  # the last round's events, by its size
                old = self.events.get(self.sized)
                self.events[self.sized] = (
                    r.events_s if old is None else DECAY * old + (1 - DECAY) * r.events_s
                )
            events = self.events.get(g + 1, self.events.get(1, 0.0))
            verify_s = r.round_s - self.asked_s + self.settle_s + events + (0.0 if g else self.feed_each)
        self.asked_s, self.sized = 0.0, g + 1
        return verify_s

    def _ratios(self, g: int, first: bool, verify_s: float, t1: float | None) -> None:
        """A whole round's size ratio to a plain round, into what the engine's runs share (Memory.ratios); the run's
        first plain round prices every size it has not verified at the ratio earlier runs measured (`seeded` until
        the run measures it itself)."""
        if g and t1:
            self.memory.add_ratio(g + 1, verify_s / t1)
        elif not g and first and not self.seeded:
            for n, ratio in self.memory.ratios.items():
                if n not in self.verify:
                    self.verify[n] = ratio * verify_s
                    self.seeded.add(n)

    def _count(self, variants: list, n_accepted: int, moved: bool = True, free: bool = False) -> None:
        """One round's tested positions: the accepted ones are successes, the first rejection (if any) the one
        failure; each variant's older counts decay once per round it is tested in (a position after the first
        rejection brings no news). `moved`: the counts may change a
        kept plain decision: `free`, variants of the lookup's own (only a decision for a proposal of that variant
        read them: Memory.moved), else any decision (Memory.version)."""
        tested = variants[: n_accepted + 1]
        if moved and free:
            for v in set(tested):
                self.memory.moved[v] = self.memory.moved.get(v, 0) + 1
        elif moved:
            self.memory.version += 1
        for v in set(tested):
            self.trials[v] = DECAY * self.trials.get(v, 0.0)
            self.hits[v] = DECAY * self.hits.get(v, 0.0)
        for i, v in enumerate(tested):
            self.trials[v] += 1
            self.hits[v] += 1 if i < n_accepted else 0

    def _unasked(self, variant: str, token: int, committed: int) -> None:
        """A plain round's lookup proposal, never verified, checked against the token the round committed: its first
        position would have been accepted iff that token is the one proposed (greedy: the target's argmax; sampled:
        a draw from the target's p, so a hit's chance is p(token), what the acceptance rule gives a proposal sure of
        its token). One trial of the variant, as a verified first position counts (_count), so a variant priced out
        on another text learns this one's acceptance without a probe. A miss only lowers α: every plain decision
        still holds (Memory.moved unmoved); a hit may change one: the lookup's next proposal of the variant is
        priced in full (a resting lookup is not woken: a hit at the α that priced it out is no news)."""
        hit = committed == token
        self._count([variant], int(hit), moved=hit, free=True)

    def history_source(self, ids: list[int]) -> list[int] | None:
        """What a session's history keeps of this run: the suffix drafter's view (template positions masked)."""
        self._feed()
        return next((kept for d in self.trees.values() if (kept := d.history_source(ids)) is not None), None)

    # -- helpers --------------------------------------------------------------------------
    def _plain(
        self, reason: str, candidates: list, plain_rate: float | None, key: tuple | None = None
    ) -> Draft:
        """A plain round's draft (nothing) with the decision made in full; `key`: the lookup's (variant, length, γ) on
        a round that asked it, the decision kept for later rounds to read again (_still_plain)."""
        decision = {
            "drafter": "",
            "gamma": 0,
            "reason": reason,
            "candidates": candidates,
            "plain_tokens_per_s": None if plain_rate is None else round(plain_rate, 3),
        }
        note = Note("decided", decision, _decided)
        if key is not None:
            if self._stretch is not None:
                self._stretch[1][key] = Kept(
                    note, self._hopeful, self._probe_due, self.memory.moved.get(key[0]), self._late()
                )
            self._quiet(key)
        return self._plain_round(note)

    def _plain_round(self, note: Note) -> Draft:
        """A plain round's draft: no tokens, the top-k rows recycling reads, the decision's note (one Draft per kept
        note: nothing changes a plain round's draft once made)."""
        self.plain_streak += 1
        self.last = (0, [], "")
        made = self._plain_drafts.get(id(note))
        if made is None or made.notes[0] is not note:
            if len(self._plain_drafts) >= MEMOS:
                self._plain_drafts.clear()
            made = self._plain_drafts[id(note)] = Draft(
                self._empty, None, "auto", topk=self.topk, notes=[note]
            )
        return made

    def _quiet(self, key: tuple) -> None:
        """A round whose lookup ended plain: after each QUIET of them since a draft was last accepted, the lookup
        rests longer (_begin)."""
        self._last_look, self.rested = key, 0
        if not key[1]:  # no proposal: nothing was found not worth verifying
            return
        self.quiet += 1
        if self.quiet % QUIET == 0:
            self.rest = min(2 * self.rest, MAX_REST)

    def _feed(self) -> float:
        """The plain rounds held since a drafter was last asked (settle), to every drafter that reads rounds, in
        the order they came: what each has heard when asked is what hearing every round at once would have left
        (a held round's `ids` is the engine's sequence as it is when handed over, longer than at its round: the
        drafters auto holds rounds for read its rows, times, top-k and features, not `ids`). Returns the seconds
        it took; each held round's share is what a plain round is priced with for its feedback (feed_each)."""
        held = self.held
        if not held:
            return 0.0
        start = time.perf_counter()
        for r in held:
            for d in self.listening:
                d.settle(r)
        seconds = time.perf_counter() - start
        each = seconds / len(held)
        self.feed_each = each if not self.feed_each else DECAY * self.feed_each + (1 - DECAY) * each
        held.clear()
        return seconds

    def _cost(self, name: str, seconds: float, tokens: int) -> None:
        """An ask of drafter `name` that took `seconds` for `tokens`: into the round's asking time (asked_s, priced
        apart from the round) and the drafter's measured cost."""
        self.asked_s += seconds
        self.memory.add(name, seconds / tokens)
        if self._moves_price(name):  # a kept plain decision read the price it had (_still_plain)
            self._repriced += 1


class Kept:
    """A plain decision auto made in full, for later rounds with a proposal of the same kind to read again
    (_still_plain): its note, and when a probe was looked for (`hopeful`: the candidates that could pay), the
    run's step from which the cheapest of their probes fits in the probe budget (PROBE_SHARE); `moved`: its
    variant's count of moves when it was made (Memory.moved); `late`: made where no probe is made any more (_late)."""

    def __init__(self, note: Note, hopeful: list | None, due: float, moved: int | None, late: bool = False):
        self.note, self.hopeful, self.due, self.moved, self.late = note, hopeful, due, moved, late
        self.probes = note.data["reason"].startswith(PLAIN)  # a probe falling due changes this decision
        self._resting: dict[int, Note] = {}

    def read(self, auto: "AutoDrafter") -> Note | None:
        """The decision's note while it holds; None when a probe may be due (the full decision makes it): its plain
        rounds reached the probe gap, or, where a probe was over budget, the run's steps reached `due`. Where no probe
        is made any more, a decision made before (which may say when its probe comes) is made once again."""
        if not self.probes:
            return self.note
        if auto._late():
            return self.note if self.late else None
        if self.hopeful is None:
            return self.note if auto.plain_streak < auto.probe_gap else None
        return self.note if auto.steps < self.due else None

    def resting(self, quiet: int) -> Note:
        """The note of a round the lookup rests in: the decision, saying so."""
        note = self._resting.get(quiet)
        if note is None:
            rests = (
                f" (the lookup rests: {quiet} of its proposals since a draft was last accepted were not worth "
                "verifying)"
            )
            data = dict(self.note.data, reason=self.note.data["reason"] + rests)
            note = self._resting[quiet] = Note("decided", data, _decided)
        return note


class Memory:
    """What auto learns that outlives a run, shared by the runs of one engine (the factory holds it): the
    seconds per drafted token of each drafter it asked (the host's cost, not the text's), each variant's
    decayed acceptance counts, each costly drafter's share of asks worth verifying and each tree drafter's
    yield and size. A new run starts from them, not from the priors: on a host where a verify forward of 5
    rows costs two plain steps, the prior α 0.5 prices a 4-token lookup below plain decoding, and a 64-token
    answer ends before the run has learnt otherwise (issue 64). Each keeps decaying as runs go on. A drafter's
    first cost includes its one-time work (loading a head, its first kernels), so its second measurement
    replaces it outright; the decay runs from there."""

    def __init__(self):
        self.seconds: dict[str, float] = {}
        self.seen: dict[str, int] = {}
        self.trials: dict[str, float] = {}
        self.hits: dict[str, float] = {}
        self.tree_accepted: dict[str, float] = {}
        self.tree_nodes: dict[str, float] = {}
        self.tree_found: dict[str, float] = {}
        # costly drafter -> share of its asks whose draft was worth verifying: a new run does not ask a head the recent
        # runs found unsure (issue 64: on Spec-Bench's qa a head asked, unsure, in each run cost ~1.4%); a probe that
        # finds it sure raises the share again (a share regained each run cost qa ~3%: each ask runs a head over the
        # features pending since its last)
        self.used: dict[str, float] = {}
        # rounds decided by the engine's runs; tree drafter -> the one it was last asked in, and its recheck gap: a
        # tree priced out waits its gap across runs (a gap restarted at RECHECK each run rechecked both trees twice
        # in each of Spec-Bench's 64-token qa answers, ~25 µs a round with the full decisions each ask brings)
        self.rounds = 0
        self.tree_asked: dict[str, int] = {}
        self.tree_gap: dict[str, int] = {}
        # moves with every change of the counts and yields above (what auto's prices read) but those of the lookup's
        # variants, which move their own count (variant -> moves): a decision for one variant's proposal reads no other
        self.version = 0
        self.moved: dict[str, int] = {}
        # n verified tokens -> a round of that size ÷ a plain round, both whole but for the drafting (decayed): a new
        # run's t(n) before it verified n tokens itself (a fresh run's prior slope priced 2 rows at 1.17 plain rounds
        # where the blocks' rounds cost 1.37: its first lookups of one token lost, every run)
        self.ratios: dict[int, float] = {}

    def add_ratio(self, n: int, ratio: float) -> None:
        old = self.ratios.get(n)
        self.ratios[n] = ratio if old is None else DECAY * old + (1 - DECAY) * ratio

    def add(self, name: str, per: float) -> None:
        n = self.seen.get(name, 0)
        self.seen[name] = n + 1
        old = self.seconds.get(name)
        self.seconds[name] = per if old is None or n == 1 else DECAY * old + (1 - DECAY) * per


def _rate(x: dict) -> float:
    """A candidate's tokens per second at what was measured (what auto ranks the candidates that pay by): a lookup's
    at its measured α (expected_tokens_per_s), any other's as priced."""
    return x.get("expected_tokens_per_s", x["predicted_tokens_per_s"])


def _bar(candidates: list, plain_rate: float) -> float:
    """The best rate (_rate) of the candidates that pay, plain_rate when none does."""
    return max([plain_rate] + [_rate(x) for x in candidates if _pays(x, plain_rate)])


def _pays(x: dict, plain_rate: float) -> bool:
    """Candidate x beats plain decoding as priced: a lookup's draft at the low end of its α."""
    return x["predicted_tokens_per_s"] > plain_rate


def _low_end(x: dict) -> str:
    """The words on a lookup's price at the low end of its α, in a decision's reason ("" for other candidates)."""
    if "expected_tokens_per_s" not in x:
        return ""
    return f" at its measured α {x['measured_alpha']} ({x['predicted_tokens_per_s']:.1f} at the low end α {x['alpha']})"


def draft_steps(x: dict) -> float:
    """Candidate x's drafting in target steps: a chain's drafted tokens at c each, a tree's one ask."""
    return x["c"] if "nodes" in x else x.get("drafted", x["gamma"]) * x["c"]


def probe_excess(x: dict) -> float:
    """What probing candidate x costs beyond a plain round if it finds nothing, in target steps: its drafting and its
    verify forward, less the plain step's one."""
    return draft_steps(x) + x["v"] - 1.0


def _decided(round_: int, pos: int, text, c: dict) -> Decided:
    """auto's choice this round, and the numbers behind it (a `decided` event)."""
    return Decided(
        round=round_,
        pos=pos,
        drafter=c["drafter"],
        gamma=c["gamma"],
        reason=c["reason"],
        plain_tokens_per_s=c.get("plain_tokens_per_s"),
        candidates=c["candidates"],
    )


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


class _Nothing(Drafter):
    """The free drafter of auto:eagle and auto:medusa: it never proposes, so the head alone is priced each round."""

    name = "none"

    def __init__(self, device):
        self.device = device

    def propose(self, ids: list[int], gamma: int) -> Draft:
        return empty_draft(self.device, self.name)

    def lookup(self, ids: list[int], gamma: int) -> Lookup:
        return Lookup("", [])


def build(spec: DraftSpec, target, ctx):
    """The per-run constructor of auto[:ngram|free|eagle|medusa]: n-gram lookup and, unless auto:ngram, token
    recycling, suffix speculation (with the session's history when the run has one) and, unless auto:free (the
    training-free drafters only), where the shipped heads fit the target, eagle and medusa, each built through the
    registry (ctx.factory);
    auto:eagle / auto:medusa price that head alone (no lookup, no recycling): the head with its γ chosen each round
    by the same cost model, plain rounds where it does not pay."""
    offer = spec["offer"]
    alone = offer in ("eagle", "medusa")
    ngram = None if alone else ctx.factory("ngram", target)
    full = not offer  # plain `auto` (the offer left out)
    heads = (
        [ctx.factory(offer, target)]
        if alone
        else [ctx.factory(h, target) for h in ("eagle", "medusa")]
        if full and heads_fit(target)
        else []
    )
    trees = [ctx.factory("recycle", target), ctx.factory("suffix", target)] if full or offer == "free" else []

    memory = Memory()  # the engine's runs share what asking each drafter costs and what each variant earned

    def make(cfg, gen, max_len, cache, history):
        return AutoDrafter(
            _Nothing(target.device) if alone else ngram(cfg, gen, max_len, cache),
            target.device,
            costly=tuple(m(cfg, gen, max_len, cache) for m in heads),
            trees=tuple(m(cfg, gen, max_len, cache, history) for m in trees),
            memory=memory,
        )

    needs = Needs(
        rows=max((m.needs.rows for m in trees), default=0),
        history=True,
        features=any(m.needs.features for m in heads),
    )
    return Factory(make, needs)
