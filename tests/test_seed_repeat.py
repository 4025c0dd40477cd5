"""A seeded sampled run repeats exactly, however many nodes its drafter put in each round (issue 52): the acceptance
rule's draws are keyed by position (engine/sampling/draws.py), and where every candidate is a deterministic guess
the token a position commits is its own draw from p, whatever was drafted there (engine/sampling/chain.py, judge)."""

import itertools
import random
import threading

import pytest
import torch

from engine import Engine, GenerationConfig, costmodel, load_model
from engine.drafters.base import Factory
from engine.drafters.lookahead import LookaheadDrafter
from engine.drafters.recycle import RecycleDrafter
from engine.drafters.suffix import History
from engine.sampling import Draws, draw_token
from engine.sampling.chain import Judged, judge, residual
from tests.test_sampling import CHI2_999, chi_square

SAMPLED = dict(temperature=0.8, seed=12)
SIZED = ["suffix", "recycle", "lookahead", "union"]  # trees sized on measured verify times


def test_draws_are_keyed_by_absolute_position():
    """draws(i) is position start + i's own uniform in [0, 1): the same on every call, shifted by `at`, and another
    seed's differ."""
    draws = Draws(12)
    assert draws(7) == Draws(12)(7) == draws.at(5)(2) == draws.at(3).at(4)(0)
    values = [draws(i) for i in range(1000)]
    assert all(0.0 <= u < 1.0 for u in values) and len(set(values)) == 1000
    assert Draws(13)(7) != draws(7)


def test_one_hot_candidates_commit_the_position_draw_whatever_was_drafted():
    """With one-hot candidates (none, one, several, repeated, holding the draw or not) the committed token is
    draw_token(r, u); each tried candidate's acceptance probability is the sequential rule's and its u is below
    it exactly when it is accepted."""
    rng = random.Random(0)
    gen = torch.Generator().manual_seed(0)
    r = torch.softmax(torch.randn(12, generator=gen) * 2, -1)
    r[5] = 0.0  # a token the target never emits
    r = r / r.sum()
    draws = Draws(3)
    for i in range(2000):
        u = draws(i)
        y = draw_token(r, u)
        tokens = [rng.randrange(12) for _ in range(rng.randrange(5))]
        if tokens and rng.random() < 0.5:
            tokens[rng.randrange(len(tokens))] = y
        at = judge(r, tokens, [None] * len(tokens), u)
        committed = tokens[at.accepted] if at.accepted is not None else at.next_id
        assert committed == y != 5
        assert all((uj < t) == (j == at.accepted) for j, (uj, t) in enumerate(zip(at.u, at.tried)))
        left = 1.0
        for j, t in enumerate(at.tried):  # r(x) ÷ the mass the earlier rejected candidates left
            mass = 0.0 if tokens[j] in tokens[:j] else float(r[tokens[j]])
            assert t == pytest.approx(mass / left, abs=1e-6)
            left -= mass


def test_one_hot_rule_keeps_the_law_and_its_u_are_uniform():
    """4000 positions, candidates [0, 3]: the committed token follows r (chi-square, 5 df, p = 0.001, fixed seed),
    and the second candidate's u, given the first was rejected, is uniform (10 bins, 9 df, critical 27.88)."""
    r = torch.tensor([0.35, 0.05, 0.20, 0.25, 0.10, 0.05])
    counts, bins = torch.zeros(6), torch.zeros(10)
    draws = Draws(2024)
    for i in range(4000):
        at = judge(r, [0, 3], [None, None], draws(i))
        counts[[0, 3][at.accepted] if at.accepted is not None else at.next_id] += 1
        if len(at.u) == 2:
            bins[min(int(at.u[1] * 10), 9)] += 1
    assert chi_square(counts, r) < CHI2_999[5]
    assert chi_square(bins, torch.full((10,), 0.1)) < 27.88


def reused_draw(r, tokens, q, u):
    """A wrong rule: every candidate tested with the raw draw u, never its leftover after a rejection."""
    for j, (x, qj) in enumerate(zip(tokens, q)):
        if u < min(1.0, float(r[x]) / (float(qj[x]) if qj is not None else 1.0)):
            return Judged(j, [], [], None, None)
        r = residual(r, qj, x)
    return Judged(None, [], [], draw_token(r, u), r)


def test_a_sampled_candidate_then_one_hot_siblings_keep_the_law():
    """A model tree's node (its chain token drawn from q, then deterministic siblings) judged by one draw per
    position, each rejection's leftover testing the next candidate: the committed token follows r (4000 positions,
    chi-square, 5 df, p = 0.001, fixed seeds); the same counts with the raw draw reused (reused_draw) fail."""
    r = torch.tensor([0.35, 0.05, 0.20, 0.25, 0.10, 0.05])
    q = torch.tensor([0.05, 0.40, 0.10, 0.05, 0.30, 0.10])

    def counts_of(rule):
        gen, draws, counts = torch.Generator().manual_seed(5), Draws(5), torch.zeros(6)
        for i in range(4000):
            x = int(torch.multinomial(q, 1, generator=gen))
            tokens = [x] + [t for t in (0, 3) if t != x]
            at = rule(r, tokens, [q] + [None] * (len(tokens) - 1), draws(i))
            counts[tokens[at.accepted] if at.accepted is not None else at.next_id] += 1
            assert all((uj < t) == (j == at.accepted) for j, (uj, t) in enumerate(zip(at.u, at.tried)))
        return counts

    assert chi_square(counts_of(judge), r) < CHI2_999[5]
    assert chi_square(counts_of(reused_draw), r) > CHI2_999[5] * 5


@pytest.fixture(scope="module")
def tiny_target(tiny_dirs):
    return load_model(tiny_dirs["target"])


def knows(engine, text: list[int]) -> None:
    """The engine's drafters start each run knowing `text` (on a random model they find little by themselves):
    recycling's table (the union's too) holds the token after each of its tokens, lookahead's pool its n-grams."""
    make = engine.make_drafter

    def primed(cfg, gen, max_len, cache, *history):
        drafter = make(cfg, gen, max_len, cache, *history)
        recycle = getattr(drafter, "recycle", drafter)
        if isinstance(recycle, RecycleDrafter):
            for a, b in zip(text, text[1:]):
                recycle.table[a, 0] = b
        if isinstance(drafter, LookaheadDrafter):
            n = drafter.levels + 1
            for i in range(len(text) - n + 1):
                drafter.pool.setdefault(text[i], []).insert(0, tuple(text[i + 1 : i + n]))
        return drafter

    engine.make_drafter = Factory(primed, make.needs)


@pytest.mark.parametrize("spec", SIZED)
def test_seeded_run_repeats_whatever_the_trees_measured(tiny_target, spec, monkeypatch):
    """Each proposal sized on another verify curve (as a loaded machine's measurements move), the drafter
    given the AR run's text to draft from: three seeded runs give the AR baseline's tokens with that seed."""
    proposals = itertools.count()  # never restarts: each run sizes on other curves than the last

    def jittered(times):  # the forward's cost jumps at a size that moves every proposal: the trees stop there
        knee = 1 + next(proposals) * 7 % 16
        return lambda n: 1.0 if n <= knee else 10.0

    monkeypatch.setattr(costmodel.VerifyTimes, "curve", jittered)
    engine = Engine(tiny_target, spec, measure_step=False)
    cfg = GenerationConfig(gamma=8, max_new_tokens=24, raw=True, **SAMPLED)
    prompt = engine.encode("a b c a b d a b c a b", raw=True)
    ar = list(engine.generate(None, cfg, mode="ar", prompt_ids=prompt))[-1].token_ids
    runs = []
    knows(engine, prompt + ar)
    for _ in range(3):
        history = History()
        history.add(prompt + ar)  # suffix (and the union) draft the AR text back: deep trees, often accepted
        runs.append(list(engine.generate(None, cfg, prompt_ids=prompt, history=history)))
    assert [run[-1].token_ids for run in runs] == [ar] * 3
    sizes = {tuple(e.verified for e in run if e.kind == "round_timed") for run in runs}
    assert len(sizes) > 1, "the trees never changed size: the test tests nothing"


# -- the real embedded model, with a concurrent run loading the machine ------------------------------------------

PROMPT = "Write a short story about a robot who learns to paint."
REPEATS = {  # spec -> extra settings; the eagle tree is the trained heads' EAGLE-2 tree
    **{spec: {} for spec in SIZED},
    "ngram": {},
    "self": {},
    "eagle": {"tree_budget": 16, "tree_branching": 4},
}


@pytest.mark.parametrize("spec", list(REPEATS))
def test_seeded_sampled_runs_repeat_beside_a_concurrent_run(embedded, spec):
    """Temperature 0.8, seed 12, 28 tokens: two solo runs and one while another generation runs on a second
    thread give the same token ids; with one-hot drafts (all but self's chain) they are the AR run's too."""
    engine = Engine(embedded, spec, measure_step=False)
    cfg = GenerationConfig(max_new_tokens=28, **SAMPLED, **REPEATS[spec])
    ids = [list(engine.generate(PROMPT, cfg))[-1].token_ids for _ in range(2)]
    other, stop = Engine(embedded, "union", measure_step=False), threading.Event()

    def load():
        while not stop.is_set():
            for _ in other.generate("Tell me about the sea.", GenerationConfig(max_new_tokens=64)):
                if stop.is_set():
                    break

    thread = threading.Thread(target=load)
    thread.start()
    try:
        ids.append(list(engine.generate(PROMPT, cfg))[-1].token_ids)
    finally:
        stop.set()
        thread.join()
    assert ids[0] == ids[1] == ids[2]
    if spec != "self":
        assert ids[0] == list(engine.generate(PROMPT, cfg, mode="ar"))[-1].token_ids
