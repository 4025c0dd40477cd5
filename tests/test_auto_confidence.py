"""auto and the trained heads: a head's chain is cut where its own confidence (max q at a position) says
verifying stops paying, acceptance is learnt per confidence bin, and asking a head that was often unsure is
priced as such. The cut depends on the draft distributions only, never on the sampled tokens (the sampling
law stays exact); the numbers go through the one cost model."""

import pytest
import torch

from engine import GenerationConfig, costmodel
from engine.drafters.auto import AutoDrafter, confidence_variant
from engine.drafters.base import Draft, Drafter, empty_draft
from tests.rounds import kept

V = 16


class Nothing(Drafter):
    """A free drafter that never has a proposal (n-gram on open text)."""

    name = "ngram"

    def propose(self, ids, gamma):
        return empty_draft(torch.device("cpu"), self.name)


class Head(Drafter):
    """A costly drafter whose chain has the given confidences: row i puts `conf[i]` on token `picks[i]`."""

    def __init__(self, name="eagle"):
        self.name, self.conf, self.picks, self.asked = name, [], [], 0

    def propose(self, ids, gamma):
        self.asked += 1
        conf, picks = self.conf[:gamma], (self.picks or [0] * len(self.conf))[:gamma]
        q = torch.full((len(conf), V), 0.0)
        for i, c in enumerate(conf):
            q[i] = (1 - c) / (V - 1)
            q[i, 0] = c  # the mode is token 0; the sampled token may be another
        return Draft(torch.tensor(picks), q, self.name)


def auto_with(head, verify=None):
    auto = AutoDrafter(Nothing(), torch.device("cpu"), costly=(head,))
    auto.verify = dict(verify or {1: 1.0, 2: 1.1, 3: 1.2, 4: 1.3})  # seconds to verify n tokens
    auto.cost = {"ngram": 0.0, head.name: 0.02}
    return auto


def test_expected_tokens_each_generalises_the_equal_alpha_case():
    for a in (0.0, 0.3, 0.9, 1.0):
        for g in range(5):
            assert costmodel.expected_tokens_each([a] * g) == pytest.approx(costmodel.expected_tokens(a, g))
    assert costmodel.expected_tokens_each([0.9, 0.5, 0.0, 1.0]) == pytest.approx(1 + 0.9 + 0.45)
    assert costmodel.predicted_speedup_asked(0.6, 3, 0.05, 1.4, 1.0) == pytest.approx(
        costmodel.predicted_speedup(0.6, 3, 0.05, 1.4)
    )
    # paid, not used
    assert costmodel.predicted_speedup_asked(0.6, 3, 0.05, 1.4, 0.0) == pytest.approx(1 / 1.15)


def test_confidence_bins_and_their_priors():
    assert confidence_variant("eagle", 0.95) == ("eagle@0.8-1.0", pytest.approx(0.9))
    assert confidence_variant("eagle", 0.05) == ("eagle@0.0-0.2", pytest.approx(0.1))
    assert confidence_variant("medusa", 0.4)[0] == "medusa@0.4-0.6"
    measured = [[400, 0.05], [300, 0.2], [200, 0.41], [100, 0.55], [120, 0.83]]  # a training record's table
    assert confidence_variant("eagle", 0.95, measured)[1] == pytest.approx(0.83)
    assert confidence_variant("eagle", 0.7, measured)[1] == pytest.approx(0.55)
    few = [[400, 0.05], [300, 0.2], [200, 0.41], [100, 0.55], [12, 0.5]]  # too few guesses: the bin's middle
    assert confidence_variant("eagle", 0.95, few)[1] == pytest.approx(0.9)


def test_a_chain_is_cut_where_verifying_stops_paying():
    """Confidences 0.95, 0.9, 0.1: E per verify second is best at γ = 2 (2.71/1.2 vs 1.9/1.1 and 2.79/1.3)."""
    head = Head()
    head.conf = [0.95, 0.9, 0.1]
    auto = auto_with(head)
    draft = auto.propose([1, 2, 3], 3)
    assert len(draft.token_ids) == 2 and draft.note("decided")["drafter"] == "eagle"
    assert "γ=2 of the 3 it drafted (confidence [0.95, 0.9, 0.1])" in draft.note("decided")["reason"]
    assert auto.last[1] == ["eagle@0.8-1.0", "eagle@0.8-1.0"]


def test_an_unsure_chain_is_a_plain_round_and_makes_asking_dearer():
    head = Head()
    head.conf = [0.1, 0.1, 0.1]  # α 0.1 each: 1.1 tokens for 1.1 s never beats plain's 1 for 1 s
    auto = auto_with(head)
    before = max(c["predicted_tokens_per_s"] for c in auto._price("eagle", "eagle", 3, 1.0))
    draft = auto.propose([1, 2, 3], 3)
    assert len(draft.token_ids) == 0 and draft.note("decided")["reason"].startswith("eagle was unsure")
    assert auto.used["eagle"] < 1.0
    after = max(c["predicted_tokens_per_s"] for c in auto._price("eagle", "eagle", 3, 1.0))
    assert after < before


def test_acceptance_is_learnt_per_confidence_bin():
    """A rejected sure position lowers that bin's α (and the head's overall α), not the other bins'."""
    head = Head()
    head.conf = [0.95, 0.9, 0.1]
    auto = auto_with(head)
    sure, unsure = auto.alpha("eagle@0.8-1.0", 0.9), auto.alpha("eagle@0.0-0.2", 0.1)
    auto.propose([1, 2, 3], 3)
    auto.settle(kept(0, [1, 2, 3, 4], 1.1))
    assert auto.alpha("eagle@0.8-1.0", 0.9) < sure
    assert auto.alpha("eagle@0.0-0.2", 0.1) == unsure
    assert auto.trials["eagle@0.8-1.0"] == 1 and auto.hits["eagle@0.8-1.0"] == 0
    assert auto.trials["eagle"] == 1  # the overall α that prices asking counts the same tested position
    auto.propose([1, 2, 3, 4], 3)
    auto.settle(kept(2, [1, 2, 3, 4, 5, 6, 7], 1.2))  # both kept positions accepted
    assert auto.hits["eagle@0.8-1.0"] == pytest.approx(2) and auto.trials["eagle@0.8-1.0"] == pytest.approx(
        2.9
    )


@pytest.mark.parametrize("picks", [[0, 0, 0], [5, 7, 9], [0, 11, 3]])
def test_the_cut_never_looks_at_the_sampled_tokens(picks):
    """The γ kept depends on the draft distributions only: the same q rows with other sampled tokens (tokens the
    rows make unlikely) keep the same γ. Cutting by q(sampled token) instead would bias the min(1, p/q) test."""
    head = Head()
    head.conf, head.picks = [0.95, 0.9, 0.1], picks
    draft = auto_with(head).propose([1, 2, 3], 3)
    assert draft.token_ids.tolist() == picks[:2]


class Lookup(Drafter):
    """A free drafter (n-gram lookup) with a 3-token proposal of one variant."""

    name = "ngram"

    def propose(self, ids, gamma):
        return Draft(torch.tensor([4, 5, 6][:gamma]), None, self.name, variant="n=1")


def test_an_unsure_head_falls_back_to_the_lookups_proposal():
    """The head priced above the lookup's short match, but once asked it was unsure: the round verifies the
    lookup's proposal (it still beats plain decoding), not nothing; a sure head keeps its own chain."""
    head = Head()
    auto = AutoDrafter(Lookup(), torch.device("cpu"), costly=(head,))
    auto.verify, auto.cost = {1: 1.0, 2: 1.1, 3: 1.2, 4: 1.3}, {"ngram": 0.0, "eagle": 0.02}
    auto.trials, auto.hits = {"n=1": 10.0, "eagle": 10.0}, {"n=1": 4.0, "eagle": 8.0}  # α 0.4 vs 0.8
    head.conf = [0.1, 0.1, 0.1]
    draft = auto.propose([1, 2, 3], 3)
    assert (
        head.asked == 1
        and draft.note("decided")["drafter"] == "ngram"
        and draft.token_ids.tolist()[:1] == [4]
    )
    assert draft.note("decided")["reason"].startswith("eagle was less sure")
    assert auto.last[1][0] == "n=1"  # the lookup's variant learns from this round
    head.conf = [0.95, 0.9, 0.9]
    draft = auto.propose([1, 2, 3], 3)
    assert draft.note("decided")["drafter"] == "eagle" and len(draft.token_ids) == 3


def test_a_lookup_match_kind_never_verified_is_tried_once_before_it_is_outbid():
    """A free drafter's variant (an n-gram match length) that was never verified is priced at a prior that may be far
    off (a long match in copied text is accepted far more often): it gets one round even where another drafter is
    priced higher, then competes on what it measured. Once tried and poor, the better-priced drafter wins."""
    head = Head()
    head.conf = [0.95, 0.95, 0.95]
    auto = AutoDrafter(Lookup(), torch.device("cpu"), costly=(head,))
    auto.verify, auto.cost = {1: 1.0, 2: 1.1, 3: 1.2, 4: 1.3}, {"ngram": 0.0, "eagle": 0.02}
    auto.trials, auto.hits = {"eagle": 10.0}, {"eagle": 9.0}  # the head measured α 0.9; n=1 never verified
    draft = auto.propose([1, 2, 3], 3)
    assert draft.note("decided")["drafter"] == "ngram" and head.asked == 0
    assert draft.note("decided")["reason"].startswith("trying ngram (n=1) once")
    auto.settle(kept(0, [1, 2, 3, 9], 1.1))  # its first token was rejected: n=1 is measured now
    assert auto.trials["n=1"] == 1.0 and auto.hits["n=1"] == 0.0
    draft = auto.propose([1, 2, 3, 9], 3)
    assert (
        draft.note("decided")["drafter"] == "eagle"
        and head.asked == 1
        and "trying" not in draft.note("decided")["reason"]
    )


class Tree(Drafter):
    """A tree drafter that is cheap to ask (suffix speculation): a two-node chain-shaped tree, counted."""

    name = "suffix"

    def __init__(self):
        self.asked = 0

    def propose(self, ids, gamma):
        self.asked += 1
        return Draft(torch.tensor([7, 8]), None, self.name, parents=[-1, 0])


def test_auto_decodes_plainly_when_the_measured_costs_say_nothing_pays():
    """Forced costs: verifying 4 tokens costs 3.5 target steps and the lookup's match is accepted 30% of the time,
    so E = 1.42 tokens for 3.5 steps never beats plain decoding's 1 for 1: a plain round, the decision says so and
    shows the candidate it priced. The control: the same proposal at a cheap verify forward is verified."""
    auto = AutoDrafter(Lookup(), torch.device("cpu"))
    auto.cost = {"ngram": 0.0}
    auto.trials, auto.hits = {"n=1": 10.0}, {"n=1": 3.0}
    auto.verify = {1: 1.0, 2: 2.0, 3: 2.8, 4: 3.5}
    draft = auto.propose([1, 2, 3], 3)
    decided = draft.note("decided")
    assert len(draft.token_ids) == 0 and decided["gamma"] == 0
    assert decided["reason"] == "no drafter beats plain decoding"
    best = max(c["predicted_tokens_per_s"] for c in decided["candidates"])
    assert best < decided["plain_tokens_per_s"] == 1.0
    auto.verify = {1: 1.0, 2: 1.05, 3: 1.1, 4: 1.15}
    draft = auto.propose([1, 2, 3], 3)
    assert len(draft.token_ids) > 0 and draft.note("decided")["drafter"] == "ngram"


def test_a_tree_drafter_is_asked_only_when_its_forecast_could_win():
    """A tree drafter is asked the first time (no tree size to forecast from); once its trees earned little for
    their cost, it is priced from its forecast and not asked while the lookup's proposal is priced higher (the
    decision lists it as not asked); when its forecast beats every option again, it is asked."""
    tree = Tree()
    auto = AutoDrafter(Lookup(), torch.device("cpu"), trees=(tree,))
    auto.verify, auto.cost = {1: 1.0, 2: 1.1, 3: 1.2, 4: 1.3}, {"ngram": 0.0, "suffix": 0.05}
    auto.trials, auto.hits = {"n=1": 10.0}, {"n=1": 8.0}  # the lookup's α 0.8
    auto.propose([1, 2, 3], 3)
    assert tree.asked == 1 and auto.tree_nodes["suffix"] == 2
    auto.last = (0, [], "")
    auto.tree_accepted["suffix"] = 0.1  # its trees earned 0.1 accepted drafts a round
    draft = auto.propose([1, 2, 3], 3)
    assert tree.asked == 1 and draft.note("decided")["drafter"] == "ngram"
    forecast = [c for c in draft.note("decided")["candidates"] if c.get("asked") is False]
    assert [c["drafter"] for c in forecast] == ["suffix"]
    c = auto.cost["suffix"]  # its measured asking time (the forced 0.05 and the first ask, averaged)
    assert forecast[0]["predicted_tokens_per_s"] == pytest.approx(1.1 / (c + 1.2), abs=1e-3)
    auto.tree_accepted["suffix"] = 1.9  # its trees now earn nearly all their nodes
    auto.propose([1, 2, 3], 3)
    assert tree.asked == 2


def test_asking_costs_outlive_a_run_and_a_first_load():
    """What asking a drafter costs is the host's, kept across the runs of one engine (the factory's Memory): a new
    run prices a head it has not asked yet at the cost measured before, not at the 0.1 t(1) prior; the first
    measurement (a head's load) is replaced by the second, the decay runs from there."""
    from engine.drafters.auto import DECAY, Memory

    costs = Memory()
    costs.add("eagle", 0.5)  # the first ask: the head loads
    costs.add("eagle", 0.01)
    assert costs.seconds["eagle"] == 0.01
    costs.add("eagle", 0.02)
    assert costs.seconds["eagle"] == pytest.approx(DECAY * 0.01 + (1 - DECAY) * 0.02)
    head = Head()
    head.conf = [0.95, 0.95, 0.95]
    auto = AutoDrafter(Nothing(), torch.device("cpu"), costly=(head,), memory=costs)
    auto.verify = {1: 1.0, 2: 1.1, 3: 1.2, 4: 1.3}
    auto.trials, auto.hits = {"eagle": 10.0}, {"eagle": 9.0}
    assert auto._price("eagle", "eagle", 1, 1.0)[0]["c"] == round(costs.seconds["eagle"], 4)
    costs.seconds["eagle"] = 5.0  # asking it costs five target steps a token: it cannot pay
    draft = auto.propose([1, 2, 3], 3)
    assert head.asked == 0 and len(draft.token_ids) == 0


class Sometimes(Tree):
    """A tree drafter that seldom has a tree (recycling before its table knows the last token)."""

    name = "recycle"

    def propose(self, ids, gamma):
        self.asked += 1
        if self.asked % 10:
            return empty_draft(torch.device("cpu"), self.name)
        return Draft(torch.tensor([7, 8]), None, self.name, parents=[-1, 0])


def test_a_tree_drafter_that_seldom_has_a_tree_is_forecast_as_such_and_rechecked():
    """Its forecast weighs what its trees earned by the share of asks that brought one (an empty ask is a plain
    round that paid the asking): once that share is learnt it is not asked while it cannot win, and it is asked
    again every RECHECK rounds, so the forecast keeps learning."""
    from engine.drafters.auto import RECHECK

    tree = Sometimes()
    auto = AutoDrafter(Nothing(), torch.device("cpu"), trees=(tree,))
    auto.verify, auto.cost = {1: 1.0, 2: 1.1, 3: 1.2, 4: 1.3}, {"ngram": 0.0, "recycle": 0.05}
    auto.tree_accepted["recycle"] = 1.0  # when it has a tree, it earns a token a round
    for _ in range(40):  # it is asked while its forecast says it may pay, learning how often it finds nothing
        auto.propose([1, 2, 3], 3)
        auto.last = (0, [], "")
    assert auto.tree_found["recycle"] < 0.5
    forecast = auto._forecast_tree("recycle", 3, 1.0)
    found = auto.tree_found["recycle"]
    assert forecast["tokens_per_round"] == pytest.approx(1 + found, abs=1e-3)
    asked = tree.asked
    for _ in range(RECHECK):
        auto.propose([1, 2, 3], 3)
        auto.last = (0, [], "")
    assert tree.asked == asked + 1  # skipped RECHECK − 1 rounds, then asked once


def probe_run(rounds: int, left: int | None = None) -> tuple[AutoDrafter, list]:
    """A head whose asking costs 0.4 target steps a token and whose drafts are never accepted, on text where the
    lookup has nothing: `rounds` rounds of auto, each settled at the forced verify cost of its size (`left`: the
    tokens the run's budget has left at every round, else no budget). Returns the drafter and, per round, (steps so
    far, probe steps spent so far, whether it probed, the decision's reason)."""
    head = Head()
    head.conf = [0.9, 0.9, 0.9, 0.9]
    auto = AutoDrafter(Nothing(), torch.device("cpu"), costly=(head,))
    if left is not None:
        auto.prepare([1, 2, 3], GenerationConfig(max_new_tokens=left))
    auto.cost = {"ngram": 0.0, "eagle": 0.4}
    cost = {1: 1.0, 2: 1.4, 3: 1.5, 4: 1.6, 5: 1.7}
    auto.verify = dict(cost)
    seen = []
    for _ in range(rounds):
        draft = auto.propose([1, 2, 3], 4)
        reason = draft.note("decided")["reason"]
        auto.settle(kept(0, [1, 2, 3], cost[len(draft.token_ids) + 1]))
        auto.verify = dict(cost)  # forced: no drift of the measured costs
        seen.append((auto.steps, auto.spent, reason.startswith("probing"), reason))
    return auto, seen


def test_a_runs_probes_cost_at_most_their_share_of_its_steps(monkeypatch):
    """A probe of a costly head that finds nothing costs its drafting and verify forward less a plain step's (here
    2.2 steps): a run's probes stay within PROBE_SHARE of its steps at every round, so auto is below plain decoding
    by at most that share where nothing pays (Spec-Bench's qa); it still probes once the run is long enough, and a
    decision that holds one back says so. The control: without the bound the probes of a 300-round run cost more."""
    from engine.drafters import auto as auto_module

    share = auto_module.PROBE_SHARE
    auto, seen = probe_run(300)
    assert all(spent <= share * steps + 1e-9 for steps, spent, *_ in seen)
    assert any(probed for _, _, probed, _ in seen)  # it still explores
    assert any(f"past the {share:.0%} of this run's" in reason for *_, reason in seen)
    monkeypatch.setattr(auto_module, "PROBE_SHARE", float("inf"))
    _, unbounded = probe_run(300)
    assert any(spent > share * steps for steps, spent, *_ in unbounded)


@pytest.mark.parametrize("left", [7, 8])
def test_no_probe_where_too_few_tokens_are_left_for_it_to_pay(monkeypatch, left):
    """A drafter a probe found paying drafts in the rounds the run has left: with fewer than probe_every (8) tokens
    left in its budget no probe is made, the decision says so and is read again (one full decision per reset of the
    kept ones, not one a round); with 8 left it probes (the control)."""
    from engine.drafters import auto as auto_module

    full, ask_free = [], AutoDrafter._ask_free
    monkeypatch.setattr(AutoDrafter, "_ask_free", lambda self, *a: full.append(1) or ask_free(self, *a))
    auto, seen = probe_run(300, left)
    assert auto.probe_every == 8
    assert any(probed for _, _, probed, _ in seen) == (left >= 8)
    if left < 8:
        assert all(reason.startswith(auto_module.PLAIN) for *_, reason in seen)
        assert any("no probe with fewer than 8 tokens left in the run" in reason for *_, reason in seen)
        assert len(full) < 10


def test_a_head_its_runs_left_unsure_is_not_asked_at_the_next_runs_start():
    """The share of a head's asks worth verifying is learnt across runs (Memory.used): a run that found it unsure
    every time leaves the next run pricing it below plain decoding from its first round, where a fresh memory (the
    control) asks it again."""
    head = Head()
    head.conf = [0.1, 0.1, 0.1]
    first = auto_with(head)
    # a twentieth of a target step a token (the stub asks in microseconds)
    forced = {"ngram": 0.0, "eagle": 0.05}
    for _ in range(40):
        first.cost = forced
        first.propose([1, 2, 3], 3)
        first.settle(kept(0, [1, 2, 3], 1.0))
    assert 2 <= head.asked < 40  # it stopped asking within the run
    for memory, asks in ((first.memory, 0), (None, 1)):
        nxt = AutoDrafter(Nothing(), torch.device("cpu"), costly=(head,), memory=memory)
        nxt.verify = dict(first.verify)
        nxt.cost = forced
        before = head.asked
        nxt.propose([1, 2, 3], 3)
        assert head.asked - before == asks


@pytest.mark.parametrize("refit", [None, 0.0])
def test_plain_rounds_reprice_nothing_until_a_measured_cost_moves(monkeypatch, refit):
    """A head is priced once per fit of the verify curve: plain rounds whose t(1) drifts within REFIT reuse its
    candidates (the same numbers, beside the fit's t(1)); t(1) moving past REFIT refits and reprices it, and so does
    a change of what its price reads (its asking cost). Control (REFIT 0): every round reprices."""
    from engine.drafters import auto as auto_module

    if refit is not None:
        monkeypatch.setattr(auto_module, "REFIT", refit)
    head = Head()
    auto = auto_with(head, verify={1: 1.0, 2: 3.0, 3: 4.0, 4: 5.0})  # nothing pays
    priced, price = [], auto._price
    monkeypatch.setattr(auto, "_price", lambda d, *a: priced.append(d) or price(d, *a))

    def plain_round(t1):
        auto.verify[1] = t1
        auto.plain_streak = 0  # no probe falls due
        decided = auto.propose([1, 2, 3], 3).note("decided")
        assert decided["gamma"] == 0 and head.asked == 0
        return decided

    rounds = [plain_round(1.0 + 0.003 * i) for i in range(5)]  # t(1) within 1.2% of the fit's
    if refit == 0.0:
        assert priced.count("eagle") == 5
        return
    assert priced.count("eagle") == 1
    assert all(r["candidates"] == rounds[0]["candidates"] for r in rounds)
    assert {r["plain_tokens_per_s"] for r in rounds} == {1.0}  # the fit's t(1), beside the prices it made
    moved = plain_round(1.08)  # past REFIT (5%)
    assert priced.count("eagle") == 2 and moved["plain_tokens_per_s"] == round(1 / 1.08, 3)
    auto.cost = {**auto.cost, "eagle": 0.5}
    plain_round(1.08)
    assert priced.count("eagle") == 3
