"""auto's rounds as the host runs them (issue 64): a round is priced whole but for its drafting (the decision, the
forward, the acceptance rule, the feedback and the events), earlier runs price the sizes a new run has not verified,
a plain decision is read again while nothing it was priced on moves, a lookup that keeps finding nothing worth
verifying rests, and a tree drafter priced out is rechecked less and less often. Forced costs throughout: nothing
here times the host."""

import random
from dataclasses import replace
from types import SimpleNamespace

import torch

from engine import costmodel
from engine.drafters import auto as auto_module
from engine.drafters.auto import HELD, MAX_GAP, MAX_REST, QUIET, RECHECK, AutoDrafter, Memory
from engine.drafters.base import Drafter, Lookup, Settled
from engine.drafters.ngram import NgramDrafter
from specviz import tree as tree_view
from tests.test_auto_confidence import Head, Tree, probe_run

CPU = torch.device("cpu")


class Counting(Drafter):
    """A free drafter whose proposal is `tokens` (variant n=1), counting how often it is looked up."""

    name = "ngram"

    def __init__(self, tokens=(4, 5, 6)):
        self.tokens, self.looked = list(tokens), 0

    def propose(self, ids, gamma):
        return self.lookup(ids, gamma).draft(CPU, self.name)

    def lookup(self, ids, gamma):
        self.looked += 1
        return Lookup("n=1" if self.tokens else "", self.tokens[:gamma])


def plain_settled(round_s: float, verify_s: float = 0.5, events_s: float = 0.0) -> Settled:
    return Settled(
        round=1, n_accepted=0, ids=[1, 2, 3], verify_s=verify_s, round_s=round_s, events_s=events_s, rows=1
    )


def nothing_pays(auto: AutoDrafter) -> None:
    """Costs under which the lookup's 3 tokens at α 0.3 never beat plain decoding."""
    auto.cost = {"ngram": 0.0, **{name: 0.05 for name in auto.trees}}
    auto.trials, auto.hits = {"n=1": 10.0}, {"n=1": 3.0}
    auto.verify = {1: 1.0, 2: 2.0, 3: 2.8, 4: 3.5}


def test_a_round_is_priced_whole_but_for_its_drafting():
    """t(n) is what a round of n verified rows took on the run's clock up to its feedback (Settled.round_s), less the
    drafters' asking (priced apart, c), plus auto's own last feedback and the events a round of that size builds
    (they are timed after the feedback, so a round hears the last one's). The control: a row of a batch, timed
    without round_s, is priced on its forward and acceptance rule alone, as before."""
    auto = AutoDrafter(Counting(), CPU)
    auto.asked_s, auto.settle_s = 0.002, 0.001
    auto.settle(plain_settled(round_s=0.009))
    assert auto.verify[1] == 0.009 - 0.002 + 0.001  # no events timed yet
    auto.asked_s, auto.settle_s = 0.0, 0.0
    auto.settle(
        plain_settled(round_s=0.008, events_s=0.0005)
    )  # the first round's events, by its size (1 row)
    assert auto.events == {1: 0.0005}
    assert auto.verify[1] == auto_module.DECAY * 0.008 + (1 - auto_module.DECAY) * (0.008 + 0.0005)
    batch_row = AutoDrafter(Counting(), CPU)
    batch_row.asked_s = 0.002
    batch_row.settle(Settled(round=1, n_accepted=0, ids=[1, 2, 3], verify_s=0.005, rows=0))
    assert batch_row.verify[1] == 0.005


def test_earlier_runs_price_the_sizes_a_new_run_has_not_verified():
    """The engine's runs share each size's cost in plain rounds (Memory.ratios): a new run, once its first plain round
    measured t(1), prices 3 rows at the ratio earlier runs measured, not at the prior slope. The control: a fresh
    Memory leaves t(3) to the prior."""
    memory = Memory()
    first = AutoDrafter(Counting(), CPU, memory=memory)
    first.settle(plain_settled(round_s=0.010))
    first.last = (2, ["n=1", "n=1"], "ngram")  # a round that verified 2 drafts (3 rows)
    first.settle_s = 0.0  # its own last feedback, forced
    first.settle(Settled(round=2, n_accepted=0, ids=[1, 2, 3], verify_s=0.01, round_s=0.015, rows=3))
    assert memory.ratios[3] == 0.015 / 0.010
    second = AutoDrafter(Counting(), CPU, memory=memory)
    second.settle(plain_settled(round_s=0.004))
    assert second.verify[3] == 0.004 * 1.5 and second.verify_s(3) == 0.004 * 1.5
    fresh = AutoDrafter(Counting(), CPU, memory=Memory())
    fresh.settle(plain_settled(round_s=0.004))
    assert 3 not in fresh.verify and fresh.verify_s(3) < 0.004 * 1.5
    # the run's own first measure of a seeded size replaces the seed (then the decay runs from it)
    second.last, second.settle_s = (2, ["n=1", "n=1"], "ngram"), 0.0
    second.settle(Settled(round=2, n_accepted=0, ids=[1, 2, 3], verify_s=0.004, round_s=0.009, rows=3))
    assert second.verify[3] == 0.009
    # a batch's row (its whole batch's forward, no round_s) teaches the shared ratios nothing
    ratios = dict(memory.ratios)
    second.last = (2, ["n=1", "n=1"], "ngram")
    second.settle(Settled(round=3, n_accepted=0, ids=[1, 2, 3], verify_s=0.004, rows=0))
    assert memory.ratios == ratios


def test_a_plain_decision_is_read_again_until_what_it_was_priced_on_moves(monkeypatch):
    """A plain decision made in full for the lookup's proposal is read again by the next rounds with a proposal of
    the same variant and length: nothing is repriced (_ask_free is not called), the decision shows the same
    candidates and reason. A count every decision reads moving (Memory.version) or another γ decides in full again;
    its variant's own count moving (Memory.moved), or a proposal of another length, reprices the lookup's candidates
    only (_derived); another variant's count moving reprices nothing (the control)."""
    lookup = Counting()
    auto = AutoDrafter(lookup, CPU)
    nothing_pays(auto)
    full, ask_free = [], auto._ask_free
    monkeypatch.setattr(auto, "_ask_free", lambda *a: full.append(1) or ask_free(*a))
    decided = [auto.propose([1, 2, 3], 3).note("decided") for _ in range(5)]
    assert len(full) == 1 and {d["reason"] for d in decided} == {"no drafter beats plain decoding"}
    assert all(d["candidates"] == decided[0]["candidates"] and d["gamma"] == 0 for d in decided)
    auto.memory.version += 1  # what the engine's runs learnt moved
    auto.propose([1, 2, 3], 3)
    assert len(full) == 2
    auto._count(["n=2"], 1, free=True)  # another variant of the lookup's moved: this decision read none of it
    auto.propose([1, 2, 3], 3)
    assert len(full) == 2
    auto._count(["n=1"], 1, free=True)  # its own variant's count moved: its candidates are priced again
    again = auto.propose([1, 2, 3], 3).note("decided")
    assert len(full) == 2 and again["candidates"] != decided[0]["candidates"]
    assert again["candidates"][0]["measured_alpha"] > decided[0]["candidates"][0]["measured_alpha"]
    auto._count(["eagle"], 1)  # a count any decision reads (a costly drafter's)
    auto.propose([1, 2, 3], 3)
    assert len(full) == 3
    auto.propose([1, 2, 3], 2)  # γ moved
    assert len(full) == 4
    auto.propose([1, 2, 3], 3)  # back to γ 3: its decision is kept beside γ 2's
    assert len(full) == 4
    lookup.tokens = [4]  # a proposal of another length: made from γ 2's decision, its own candidates priced
    shorter = auto.propose([1, 2, 3], 2).note("decided")
    assert len(full) == 4 and shorter["reason"] == auto_module.PLAIN
    assert [x["gamma"] for x in shorter["candidates"]] == [1]


class Varying(Drafter):
    """A free drafter whose proposals cycle through `proposals`: (variant, tokens)."""

    name = "ngram"

    def __init__(self, proposals):
        self.proposals, self.at = proposals, 0

    def propose(self, ids, gamma):
        return self.lookup(ids, gamma).draft(CPU, self.name)

    def lookup(self, ids, gamma):
        variant, tokens = self.proposals[self.at % len(self.proposals)]
        self.at += 1
        return Lookup(variant, tokens[:gamma])


def test_a_plain_decision_made_from_another_is_what_deciding_in_full_makes(monkeypatch):
    """A proposal of a variant or length the stretch has not decided gets the plain decision made from one it has
    (_derived: the lookup's own candidates priced, the rest read): over rounds of changing proposals, γ, t(1), hits
    and misses, tree rechecks and a head priced out, every decision equals the one deciding in full makes (the
    control, _derived disabled), in fewer full decisions."""

    def run(derive: bool) -> tuple[list, int]:
        proposals = [
            ("n=1", [4, 5, 6]),
            ("n=2", [7, 8]),
            ("n=1", [4]),
            ("", []),
            ("n=3", [1, 2, 3]),
            ("n=2", [7]),
        ]
        head = Head()
        auto = AutoDrafter(Varying(proposals), CPU, costly=(head,), trees=(Tree(),))
        nothing_pays(auto)
        auto.cost = {**auto.cost, "eagle": 0.5}
        (
            auto.trials.update({"eagle": 50.0, "n=2": 20.0, "n=3": 5.0}),
            auto.hits.update({"eagle": 5.0, "n=2": 4.0}),
        )
        full, ask_free = [], auto._ask_free
        monkeypatch.setattr(auto, "_ask_free", lambda *a: full.append(1) or ask_free(*a))
        if not derive:
            monkeypatch.setattr(auto, "_derived", lambda *a: None)
        decisions, rng = [], random.Random(7)
        for i in range(120):
            draft = auto.propose([1, 2, 3], 3 if i % 40 < 30 else 2)
            decisions.append(draft.note("decided"))
            committed = rng.choice(
                [4, 7, 1, 9]
            )  # the lookup's first token now and then: a hit moves its variant
            auto.settle(replace(plain_settled(1.0 + 0.02 * rng.random()), round=i + 1, ids=[1, 2, committed]))
        return decisions, len(full)

    derived, fewer = run(True)
    whole, every = run(False)
    assert derived == whole and all(d["gamma"] == 0 for d in derived)
    assert fewer < every


def test_the_lookup_rests_while_its_proposals_are_not_worth_verifying():
    """After QUIET lookups whose proposals ended in plain rounds, the lookup is asked every other round, after as many
    more every MAX_REST-th; a resting round says so and reads the last decision. Once a draft is accepted, it is
    asked every round again (a rejected one leaves it resting). The controls: a lookup whose proposal pays, and one
    that finds nothing, are asked every round."""
    lookup = Counting()
    auto = AutoDrafter(lookup, CPU)
    nothing_pays(auto)
    reasons = [auto.propose([1, 2, 3], 3).note("decided")["reason"] for _ in range(QUIET)]
    assert lookup.looked == QUIET and not any("rests" in r for r in reasons)
    for _ in range(2 * QUIET):
        auto.propose([1, 2, 3], 3)
    assert lookup.looked == QUIET + QUIET  # every other round: QUIET more lookups in 2·QUIET rounds
    assert auto.rest == MAX_REST == 4
    # an unverified proposal the round committed: no news at the α that priced it out
    auto._unasked("n=1", 4, 4)
    assert auto.rest == MAX_REST
    resting = [auto.propose([1, 2, 3], 3).note("decided")["reason"] for _ in range(MAX_REST)]
    assert lookup.looked == 2 * QUIET + 1 and sum("the lookup rests" in r for r in resting) == MAX_REST - 1
    auto.verify = {1: 1.0, 2: 1.05, 3: 1.1, 4: 1.15}  # now its proposal pays
    auto.trials, auto.hits = {"n=1": 10.0}, {"n=1": 9.0}
    # the costs moved: the last decision no longer holds, so the resting lookup is asked; its draft rejected, it
    # rests on (the control); accepted, it wakes
    for accepted in (0, 2):
        draft = auto.propose([1, 2, 3], 3)
        assert len(draft.token_ids) and auto.rest == MAX_REST
        auto.settle(Settled(round=2, n_accepted=accepted, ids=[1, 2, 3], verify_s=1.1, round_s=1.1, rows=4))
        auto.verify = {1: 1.0, 2: 1.05, 3: 1.1, 4: 1.15}
    assert auto.rest == 1
    looked = lookup.looked
    for _ in range(5):
        auto.propose([1, 2, 3], 3)
        auto.last = (0, [], "")
    assert lookup.looked == looked + 5
    # a lookup that finds nothing found nothing not worth verifying: it is asked every round (a copied stretch may
    # start at the next)
    empty = Counting([])
    auto = AutoDrafter(empty, CPU)
    nothing_pays(auto)
    for _ in range(4 * QUIET):
        auto.propose([1, 2, 3], 3)
    assert empty.looked == 4 * QUIET and auto.rest == 1


def test_a_tree_recheck_that_leaves_it_unchosen_waits_twice_as_long():
    """A tree drafter priced out by its forecast is asked again after RECHECK rounds to keep learning; a recheck
    after which it is still not chosen doubles the wait, up to MAX_GAP rounds."""
    tree = Tree()
    auto = AutoDrafter(Counting([]), CPU, trees=(tree,))
    nothing_pays(auto)
    auto.tree_accepted["suffix"] = 0.0  # its trees earned nothing: its forecast never beats plain decoding
    auto.propose([1, 2, 3], 3)  # asked once: nothing to forecast from before
    asks = []
    for r in range(1, 16 * RECHECK):
        before = tree.asked
        auto.propose([1, 2, 3], 3)
        auto.last = (0, [], "")
        if tree.asked > before:
            asks.append(r)
    gaps = [b - a for a, b in zip([0] + asks, asks)]
    assert gaps[:3] == [RECHECK + 1, 2 * RECHECK + 1, 4 * RECHECK + 1] and max(gaps) == MAX_GAP + 1
    auto._rechecked({"drafter": "suffix"})  # chosen (on its forecast): rechecked after RECHECK rounds again
    assert auto.tree_gap["suffix"] == RECHECK


def test_a_tree_priced_out_waits_its_gap_across_runs():
    """The rounds a priced-out tree drafter waits for its recheck, and the round it was last asked in, are the engine's
    runs' (Memory): a new run on a memory whose rechecks grew the gap to MAX_GAP does not ask it in its first RECHECK + 1
    rounds; on a memory with the same forecast but no gap yet (the control) it does."""
    tree = Tree()
    first = AutoDrafter(Counting([]), CPU, trees=(tree,))
    nothing_pays(first)
    first.tree_accepted["suffix"] = 0.0  # its trees earned nothing: its forecast never beats plain decoding
    for _ in range(8 * RECHECK):
        first.propose([1, 2, 3], 3)
    assert first.memory.tree_gap["suffix"] == MAX_GAP
    fresh = Memory()
    for name in ("tree_nodes", "tree_found", "tree_accepted", "seconds"):
        setattr(fresh, name, dict(getattr(first.memory, name)))
    for memory, asked in ((first.memory, False), (fresh, True)):
        nxt = AutoDrafter(Counting([]), CPU, trees=(tree,), memory=memory)
        nothing_pays(nxt)
        before = tree.asked
        for _ in range(RECHECK + 1):
            nxt.propose([1, 2, 3], 3)
        assert (tree.asked > before) == asked


def test_a_plain_round_builds_no_tensor_from_the_lookup():
    """The n-gram lookup answers auto as lists (Drafter.lookup): its Draft is built only when auto drafts with it;
    propose builds the same Draft the lookup describes."""
    ngram = NgramDrafter(3, CPU)
    ids = [5, 6, 7, 8, 5, 6]
    look = ngram.lookup(ids, 3)
    assert (look.variant, look.tokens, look.made) == ("n=2", [7, 8, 5], None)
    draft = ngram.propose(ids, 3)
    assert draft.token_ids.tolist() == [7, 8, 5] and draft.variant == "n=2"
    auto = AutoDrafter(ngram, CPU)
    nothing_pays(auto)
    auto.trials, auto.hits = {"n=2": 10.0}, {"n=2": 1.0}
    seen = []
    real = ngram.lookup
    ngram.lookup = lambda *a: seen.append(real(*a)) or seen[-1]
    plain = auto.propose(ids, 3)
    assert len(plain.token_ids) == 0 and seen[-1].made is None


def test_the_engine_hands_each_round_its_time_and_the_last_rounds_events(embedded, monkeypatch):
    """Settled.round_s is the round on the run's clock up to its feedback (its drafting and its verify step: what
    round_timed reports as draft_s + verify_s), and Settled.events_s the previous round's events, built after its
    feedback (round_timed's total less its drafting, verify step and feedback); the first round hears none."""
    import pytest

    from engine import Engine, GenerationConfig

    heard = []
    monkeypatch.setattr(NgramDrafter, "settle", lambda self, r: heard.append(r))
    engine = Engine(embedded, "ngram", measure_step=False)
    cfg = GenerationConfig(gamma=3, max_new_tokens=12)
    timed = [e for e in engine.generate("Count: 1, 2, 3, 4,", cfg) if e.kind == "round_timed"]
    assert len(heard) == len(timed) >= 3
    assert heard[0].events_s == 0.0
    for r, t in zip(heard, timed):
        assert r.round_s == pytest.approx(t.draft_s + t.verify_s, abs=1e-9) and r.round_s >= r.verify_s
    for r, last in zip(heard[1:], timed):
        events = last.total_s - last.draft_s - last.verify_s - last.feedback_s
        assert r.events_s == pytest.approx(events, abs=1e-9) and r.events_s > 0


class Heard:
    """A drafter that reads every round (a settle of its own): what it had heard each time it was asked (`asks`),
    beside the rounds the test had settled by then (`settled`)."""

    def __init__(self, *args):
        super().__init__(*args)
        self.heard, self.asks, self.settled = [], [], 0

    def settle(self, r):
        self.heard.append((r.round, r.n_accepted))

    def note_ask(self):
        self.asks.append((list(self.heard), self.settled))


class Listening(Heard, Tree):
    """A tree drafter that reads every round."""

    def propose(self, ids, gamma):
        self.note_ask()
        return super().propose(ids, gamma)


class ListeningLookup(Heard, Counting):
    """A free drafter that reads every round."""

    def lookup(self, ids, gamma):
        self.note_ask()
        return super().lookup(ids, gamma)


def plain_rounds(auto: AutoDrafter, listeners: list, rounds: int) -> None:
    """`rounds` plain rounds of auto, each settled; the listeners told how many were settled before each."""
    for round_ in range(1, rounds + 1):
        for d in listeners:
            d.settled = round_ - 1
        auto.propose([1, 2, 3], 3)
        auto.settle(Settled(round=round_, n_accepted=0, ids=[1, 2, 3], verify_s=1.0, round_s=1.0, rows=1))
        assert len(auto.held) < HELD


def test_a_plain_rounds_feedback_waits_until_a_drafter_is_asked():
    """A plain round is held (a list append) and handed to every drafter that reads rounds, in order, before any of
    them is asked (a tree drafter's ask, the lookup of a free drafter that reads rounds), at a drafted round, or once
    HELD rounds wait: when asked, a drafter has heard every round settled before, each once, in order. A drafter whose
    settle is Drafter's (it reads nothing) is not fed."""
    tree = Listening()
    auto = AutoDrafter(Counting([]), CPU, trees=(tree,))
    assert auto.listening == [tree]
    nothing_pays(auto)
    auto.tree_accepted["suffix"] = 0.0  # its forecast never pays: asked on its rechecks only
    plain_rounds(auto, [tree], 4 * RECHECK)
    assert len(tree.asks) >= 3 and auto.held  # asked once first, then on rechecks; rounds held since the last
    for heard, settled in tree.asks:
        assert heard == [(r, 0) for r in range(1, settled + 1)]
    assert tree.heard + [(r.round, 0) for r in auto.held] == [(r, 0) for r in range(1, 4 * RECHECK + 1)]
    # a drafted round: every held round, then the round itself to all (the chosen one with its accepted count)
    auto.last = (2, ["suffix", "suffix"], "suffix")
    auto.settle(
        Settled(round=4 * RECHECK + 1, n_accepted=2, ids=[1, 2, 3], verify_s=1.0, round_s=1.0, rows=3)
    )
    assert not auto.held and tree.heard[-1] == (4 * RECHECK + 1, 2) and len(tree.heard) == 4 * RECHECK + 1
    # HELD plain rounds with no ask: handed over at once
    for round_ in range(1, HELD + 1):
        auto.settle(Settled(round=round_, n_accepted=0, ids=[1, 2, 3], verify_s=1.0, round_s=1.0, rows=1))
    assert not auto.held and len(tree.heard) == 4 * RECHECK + 1 + HELD
    # a free drafter that reads rounds hears them all before each lookup, while the lookup is asked every round
    free = ListeningLookup()
    lookups = AutoDrafter(free, CPU)
    assert lookups.listening == [free]
    nothing_pays(lookups)
    plain_rounds(lookups, [free], QUIET)
    assert len(free.asks) == QUIET
    for heard, settled in free.asks:
        assert heard == [(r, 0) for r in range(1, settled + 1)]


def test_a_plain_round_is_priced_with_the_feedback_it_left_for_later():
    """The time handing the held rounds over takes is theirs: each plain round is priced with a held round's share
    (feed_each), and the round the hand-over ran in (a tree drafter's ask: asked_s) is not."""
    tree = Listening()
    auto = AutoDrafter(Counting([]), CPU, trees=(tree,))
    nothing_pays(auto)
    auto.held = [plain_settled(round_s=1.0)] * 10
    tree.settle = lambda r: sum(range(2000))  # a feedback that takes time
    auto.listening = [tree]
    auto.asked_s = 0.0
    auto._ask(tree, [1, 2, 3], 3, per_token=False)
    fed = auto.feed_each * 10
    assert fed > 0 and auto.asked_s >= fed
    auto.last, auto.settle_s, auto.asked_s = (0, [], ""), 0.0, 0.0
    auto.verify = {1: 0.005}
    auto.settle(plain_settled(round_s=0.005))
    assert auto.verify[1] == auto_module.DECAY * 0.005 + (1 - auto_module.DECAY) * (0.005 + auto.feed_each)


def test_a_probe_over_budget_says_the_step_it_fits_from_and_comes_there():
    """A decision that holds a probe back for the probe budget names the run's step from which the probe fits, from
    the numbers it prints beside it (the steps used and the probe's cost, over PROBE_SHARE); that decision is read
    again until then (plain rounds move only the run's steps), and the probe comes at the first round decided at
    that step or later."""
    import re

    auto, seen = probe_run(800)
    held = [
        (
            j,
            re.search(
                r"would cost ([0-9.]+) steps .* \(([0-9.]+) used: it fits from step ([0-9.]+)\)", reason
            ),
        )
        for j, (*_, reason) in enumerate(seen)
    ]
    probes = [j for j, (_, _, probed, _) in enumerate(seen) if probed]
    checked = 0
    for j in probes:
        _, named = held[j - 1]
        if not named:
            continue
        cost, used, due = float(named.group(1)), float(named.group(2)), float(named.group(3))
        # the printed figures are rounded to 0.01 steps, the step to 0.1
        assert abs(due - (used + cost) / auto_module.PROBE_SHARE) <= 0.01 / auto_module.PROBE_SHARE + 0.05
        # round j was decided at the steps after round j - 1, round j - 1 at those after j - 2
        assert seen[j - 1][0] >= due - 0.05 and seen[j - 2][0] < due + 0.05
        checked += 1
    assert checked >= 2


def unasked_rounds(auto: AutoDrafter, committed, rounds: int, reasons: list | None = None) -> list[int]:
    """`rounds` rounds of auto in which the target commits `committed(i)` after a plain round (the proposal's first
    token at a hit); returns how many tokens each round drafted (0: plain), each decision's reason into `reasons`.
    A drafted round is settled rejected."""
    drafted = []
    for i in range(rounds):
        draft = auto.propose([1, 2, 3], 3)
        g = len(draft.token_ids)
        drafted.append(g)
        if reasons is not None:
            reasons.append(draft.note("decided")["reason"])
        rows, ids = g + 1, [1, 2, 3, committed(i)]
        auto.settle(
            Settled(round=i + 1, n_accepted=0, ids=ids, verify_s=1.0, round_s=auto.verify[rows], rows=rows)
        )
    return drafted


def test_a_proposal_left_unverified_is_checked_against_the_token_its_round_committed():
    """A plain round's lookup proposal is one trial of its variant, a hit when the round committed its first token:
    a variant priced out on other text (α 0.3) whose proposals the target keeps committing earns the α that makes it
    pay, and auto drafts it without a probe. A miss is a trial that lowers α and leaves the plain decision standing
    (read again, not repriced). The control: a target that commits other tokens keeps it plain, its α falling."""
    hits = AutoDrafter(Counting([4, 5, 6]), CPU)
    nothing_pays(hits)
    # a curve on which α 0.3 never pays and the most ten decayed trials can earn does
    hits.verify = {1: 1.0, 2: 1.5, 3: 2.0, 4: 2.5}
    hits.probe_gap = 10**6  # no probes: what it learns is the plain rounds' tokens alone
    drafted = unasked_rounds(hits, lambda i: 4, 40)
    first = next(i for i, g in enumerate(drafted) if g)
    assert 0 < first < 40  # plain until its α, learnt from plain rounds alone, made the proposal pay
    misses = AutoDrafter(Counting([4, 5, 6]), CPU)
    nothing_pays(misses)
    misses.verify = {1: 1.0, 2: 1.5, 3: 2.0, 4: 2.5}
    misses.probe_gap = 10**6
    version = misses.memory.version
    assert not any(unasked_rounds(misses, lambda i: 7, 40))
    assert misses.alpha("n=1") < 0.1 and misses.hits["n=1"] < 0.5  # from 3 hits in 10 trials
    assert misses.memory.version == version  # misses moved no plain decision
    # a drafted round's first token is counted once, by the acceptance rule, not again as unverified
    auto = AutoDrafter(Counting([4, 5, 6]), CPU)
    auto.cost = {"ngram": 0.0}
    auto.trials, auto.hits = {"n=1": 10.0}, {"n=1": 10.0}
    auto.verify = {1: 1.0, 2: 1.0, 3: 1.0, 4: 1.0}
    assert len(auto.propose([1, 2, 3], 3).token_ids) == 3
    auto.settle(Settled(round=1, n_accepted=0, ids=[1, 2, 3, 4], verify_s=1.0, round_s=1.0, rows=4))
    assert (
        auto.trials["n=1"] == auto_module.DECAY * 10.0 + 1.0 and auto.hits["n=1"] == auto_module.DECAY * 10.0
    )


def curse_run(auto: AutoDrafter, alpha: float, rounds: int, seed: int) -> tuple[float, int]:
    """`rounds` rounds of a lookup whose every proposed token the target keeps with probability `alpha`, on a host
    where a round verifying one draft costs 1.3 plain rounds (t(n) on a fixed curve). Returns (tokens per plain
    round's time, rounds drafted)."""
    rng = random.Random(seed)
    curve = {1: 1.0, 2: 1.3, 3: 1.6, 4: 1.9, 5: 2.2}
    tokens, cost, drafted, ids = 0, 0.0, 0, [1, 2, 3]
    for i in range(rounds):
        auto.verify = dict(curve)
        g = len(auto.propose(ids, 1).token_ids)
        hit = rng.random() < alpha
        ids = ids + ([4] if hit else [7])  # the lookup proposes 4: kept, or another token committed
        n = int(hit) if g else 0
        auto.settle(
            Settled(round=i + 1, n_accepted=n, ids=ids, verify_s=1.0, round_s=curve[g + 1], rows=g + 1)
        )
        tokens, cost, drafted = tokens + 1 + n, cost + curve[g + 1], drafted + bool(g)
    return tokens / cost, drafted


def test_a_lookup_is_priced_at_the_low_end_of_its_alpha():
    """A lookup whose drafts are kept at α 0.25, on a host where one draft pays only above α 0.3: priced at its
    measured α (ten decayed trials: it often reads above 0.3), auto drafts where the estimate happens to be high
    and loses to plain decoding; priced one standard error lower (costmodel.priced_alpha), it rarely drafts and
    keeps plain decoding's rate. The negative control prices at the measured α."""
    rates = {}
    for name, priced in (("low end", AutoDrafter.priced_alpha), ("measured", None)):
        auto = AutoDrafter(Counting([4]), CPU)
        auto.cost = {"ngram": 0.0}
        auto.probe_gap = 10**6  # no probes: only what the priced α decides
        if priced is None:
            auto.priced_alpha = lambda v, prior=0.5, a=auto: (a.alpha(v, prior), a.alpha(v, prior), 1.0)
        rates[name] = [curse_run(auto, 0.25, 3000, seed) for seed in range(3)]
    ours, control = rates["low end"], rates["measured"]
    assert all(rate > 0.985 for rate, _ in ours)
    assert all(c_n > 5 * o_n for (_, o_n), (_, c_n) in zip(ours, control))
    assert sum(r for r, _ in control) / 3 < sum(r for r, _ in ours) / 3 - 0.005 < 0.995  # the control loses
    d = AutoDrafter(Counting([4]), CPU)
    d.cost, d.verify = {"ngram": 0.0}, {1: 1.0, 2: 1.3}
    d.trials, d.hits = {"n=1": 10.0}, {"n=1": 4.0}  # measured (4 + 0.5) / 11 = 0.41: pays at its measure
    x = d.propose([1, 2, 3], 1).note("decided")["candidates"][0]
    assert x["measured_alpha"] == round(4.5 / 11, 4) and x["tested"] == 11.0
    assert x["alpha"] == round(costmodel.priced_alpha(4.5 / 11, 11.0), 4) < 0.3  # priced below what pays
    assert x["predicted_tokens_per_s"] == round(
        costmodel.predicted_speedup_asked(x["alpha"], 1, 0.0, 1.3, 1.0), 3
    )
    # the page's tooltip
    shown = tree_view._candidates(SimpleNamespace(candidates=[x], plain_tokens_per_s=1.0))
    assert (
        f"α {x['alpha']} (measured {x['measured_alpha']} over 11.0 positions, priced one standard error"
        in shown
    )


def unchecked(auto: AutoDrafter) -> None:
    """auto's rounds with no unverified proposal to check (what a tree of lookups leaves)."""
    begin = auto._begin

    def _begin(ids, gamma):
        out = begin(ids, gamma)
        auto.unverified = None
        return out

    auto._begin = _begin


def test_a_lookup_proposal_is_not_probed_where_plain_rounds_check_it():
    """A chain the lookup proposes, priced out but for the top of its α, is never probed: each plain round checks its
    first token against the committed one (_unasked), what a probe at the smallest γ would learn, for free. The
    control: where that check is not made (no unverified proposal), the same rounds probe it."""
    reasons = {}
    for name in ("checked", "unchecked"):
        auto = AutoDrafter(Counting([4, 5, 6]), CPU)
        nothing_pays(auto)
        auto.verify = {
            1: 1.0,
            2: 1.3,
            3: 1.6,
            4: 1.9,
        }  # one draft pays above α 0.3, where a low α's top may be
        if name == "unchecked":
            unchecked(auto)
        reasons[name] = []
        unasked_rounds(auto, lambda i: 7, 60, reasons[name])  # the target never commits the proposed token
    assert not any(r.startswith("probing") for r in reasons["checked"])
    assert any(r.startswith("probing ngram") for r in reasons["unchecked"])
