"""Beam search (engine/decode/beam.py): plain beam search equals transformers' generate(num_beams=B), and the
speculative one returns exactly the plain one's beams and scores with a good, a random and a `self` drafter."""

from __future__ import annotations

import random

import pytest
import torch

from engine import Engine, GenerationConfig
from engine.decode.beam import beam_run
from engine.decode.loop import cache_slots
from engine.drafters.base import Draft, Drafter
from engine.events import read_trace, write_trace

COPY = "Copy this text exactly: the quick brown fox jumps over the lazy dog, the quick brown fox jumps over the lazy dog."
PROMPTS = [COPY, "Write a haiku about the sea.", "What is 12 times 7?"]


class RandomDrafter(Drafter):
    """Proposes γ random tokens: almost never on a beam's path (every round should fall back to one step)."""

    name = "random"

    def __init__(self, vocab: int, seed: int = 0):
        self.vocab, self.rng = vocab, random.Random(seed)

    def propose(self, ids, gamma):
        return Draft(
            torch.tensor([self.rng.randrange(self.vocab) for _ in range(gamma)], dtype=torch.long), None
        )


def run(engine, ids, cfg, speculative, drafter=None):
    events = list(beam_run(engine, ids, cfg, speculative, None, cache_slots(len(ids), cfg), drafter))
    return events, next(e for e in events if e.kind == "beam_result")


def hf_beams(model, ids, num_beams, max_new, eos, early_stopping=False):
    """transformers' beam search: every returned hypothesis (cut after its first EOS) and its score."""
    out = model.generate(
        torch.tensor([ids]),
        attention_mask=torch.ones(1, len(ids), dtype=torch.long),
        num_beams=num_beams,
        num_return_sequences=num_beams,
        do_sample=False,
        max_new_tokens=max_new,
        early_stopping=early_stopping,
        length_penalty=1.0,
        eos_token_id=sorted(eos),
        pad_token_id=sorted(eos)[0],
        return_dict_in_generate=True,
        output_scores=True,
    )
    seqs = []
    for row in out.sequences[:, len(ids) :].tolist():
        cut = next((i + 1 for i, t in enumerate(row) if t in eos), len(row))
        seqs.append(row[:cut])
    return seqs, out.sequences_scores.tolist()


def same_beams(a, b, atol=1e-4):
    assert a.token_ids == b.token_ids
    assert a.scores == pytest.approx(b.scores, abs=atol)


@pytest.fixture(scope="module")
def tiny(tiny_dirs):
    return Engine.load(tiny_dirs["target"], draft="self")


@pytest.fixture(scope="module")
def small(embedded):
    from engine.decode.engine import Engine as E

    return E(embedded, draft="ngram")


@pytest.mark.parametrize("num_beams", [2, 4])
def test_plain_beam_search_equals_transformers_tiny(tiny, num_beams):
    """Plain beam search is transformers' beam search: same hypotheses, same scores (tiny random target)."""
    for prompt in PROMPTS:
        ids = tiny.encode(prompt, raw=True)
        cfg = GenerationConfig(num_beams=num_beams, max_new_tokens=10)
        _, res = run(tiny, ids, cfg, False)
        seqs, scores = hf_beams(tiny.target.model, ids, num_beams, 10, tiny.target.eos_ids)
        assert res.token_ids == seqs
        assert res.scores == pytest.approx(scores, abs=1e-4)


@pytest.mark.parametrize("num_beams", [2, 4])
def test_plain_beam_search_equals_transformers_embedded(small, num_beams):
    """On the real embedded model (chat template, real EOS), beams and scores equal generate(num_beams=B)."""
    for prompt in PROMPTS[:2]:
        ids = small.encode(prompt)
        cfg = GenerationConfig(num_beams=num_beams, max_new_tokens=16)
        _, res = run(small, ids, cfg, False)
        seqs, scores = hf_beams(small.target.model, ids, num_beams, 16, small.target.eos_ids)
        assert res.token_ids == seqs
        assert res.scores == pytest.approx(scores, abs=1e-4)


@pytest.mark.parametrize("num_beams", [2, 4])
def test_speculative_equals_plain_tiny(tiny, num_beams):
    """Speculative beam search returns the plain beams and scores with `self` and a random drafter (tiny)."""
    saved = 0
    for prompt in PROMPTS:
        ids = tiny.encode(prompt, raw=True)
        cfg = GenerationConfig(num_beams=num_beams, max_new_tokens=12, gamma=3)
        plain_events, plain = run(tiny, ids, cfg, False)
        for drafter in (None, RandomDrafter(tiny.target.vocab_size)):  # None: the engine's `self`
            events, spec = run(tiny, ids, cfg, True, drafter)
            same_beams(spec, plain)
            # the same search, step by step
            assert [e.token_ids for e in events if e.kind == "beam_step"] == [
                e.token_ids for e in plain_events if e.kind == "beam_step"
            ]
            saved += events[-1].summary["forwards_saved"]
    assert saved > 0  # `self` drafts some beams' paths: fewer forwards than steps somewhere


def test_negative_control_a_replay_off_the_drafted_paths_differs(tiny, monkeypatch):
    """The equality tests can fail: a replay that reads rows off the drafted paths (a wrong rule) returns
    other scores than plain beam search."""
    import engine.decode.beam as beam

    ids = tiny.encode(PROMPTS[1], raw=True)
    cfg = GenerationConfig(num_beams=2, max_new_tokens=12, gamma=3)
    _, plain = run(tiny, ids, cfg, False)
    monkeypatch.setattr(beam, "on_drafted_path", lambda draft, depth, token: depth < len(draft))
    _, wrong = run(tiny, ids, cfg, True, RandomDrafter(tiny.target.vocab_size))
    assert wrong.token_ids != plain.token_ids or wrong.scores != pytest.approx(plain.scores, abs=1e-4)


@pytest.mark.parametrize("num_beams", [2, 4])
def test_speculative_equals_plain_embedded(small, num_beams):
    """On the embedded model: n-gram on a copy prompt, a random drafter and `self` all return the plain
    beams and scores; at B = 2 n-gram on the copy prompt saves target forwards (at B = 4 the 4 kept beams
    are rarely all on drafted chains: README, "Beam search"). B = 4 runs 12 tokens: twice B = 2's rows a step."""
    self_engine = Engine(small.target, draft="self")
    for prompt in PROMPTS[:2]:
        ids = small.encode(prompt)
        cfg = GenerationConfig(num_beams=num_beams, max_new_tokens=24 if num_beams == 2 else 12, gamma=4)
        _, plain = run(small, ids, cfg, False)
        for engine, drafter in (
            (small, None),
            (small, RandomDrafter(small.target.vocab_size)),
            (self_engine, None),
        ):
            events, spec = run(engine, ids, cfg, True, drafter)
            same_beams(spec, plain)
            if prompt == COPY and drafter is None and engine is small and num_beams == 2:
                assert events[-1].summary["forwards_saved"] > 0


def test_beam_events(tiny, tmp_path):
    """Beam events: B survivors per step with valid parents, scores that never rise along a beam's parent,
    the verified rounds account for every step, and the run round-trips through a JSON trace."""
    cfg = GenerationConfig(num_beams=3, max_new_tokens=8, gamma=2)
    events = list(tiny.generate(COPY, cfg, "speculative"))
    steps = [e for e in events if e.kind == "beam_step"]
    assert steps and all(len(e.parents) == len(e.token_ids) == len(e.scores) == 3 for e in steps)
    prev = None
    for e in steps:
        assert all(0 <= p < 3 for p in e.parents)
        if prev is not None:
            assert all(s <= prev.scores[p] + 1e-6 for s, p in zip(e.scores, e.parents))
        prev = e
    assert sum(e.steps for e in events if e.kind == "beam_verified") == len(steps)
    result = next(e for e in events if e.kind == "beam_result")
    assert result.scores == sorted(result.scores, reverse=True)
    assert events[-1].token_ids == result.token_ids[0]
    write_trace(tmp_path / "beam.json", events)
    assert read_trace(tmp_path / "beam.json") == events


def test_beam_race(tiny):
    """The race runs speculative and plain beam search of one width interleaved, and both end with the same beams."""
    cfg = GenerationConfig(num_beams=2, max_new_tokens=8, gamma=2)
    lanes, order = {"speculative": [], "ar": []}, []
    for lane, event in tiny.race(COPY, cfg):
        lanes[lane].append(event)
        order.append(lane)
    results = {k: next(e for e in v if e.kind == "beam_result") for k, v in lanes.items()}
    same_beams(results["speculative"], results["ar"])
    last_spec_step = max(i for i, lane in enumerate(order) if lane == "speculative")
    assert order.index("ar") < last_spec_step  # interleaved, not one lane after the other


def test_bad_beam_settings(tiny):
    """A width out of 1..8, sampling or trees with beams, and a drafter beams cannot use: messages naming them."""
    with pytest.raises(ValueError, match="num_beams must be 1 \\(off\\) or between 2 and 8"):
        GenerationConfig(num_beams=9)
    with pytest.raises(ValueError, match="needs temperature 0"):
        GenerationConfig(num_beams=2, temperature=0.7)
    engine = Engine(tiny.target, draft="auto")
    with pytest.raises(ValueError, match="drafts with 'ngram\\[:N\\]' or 'self'"):
        engine.generate(COPY, GenerationConfig(num_beams=2))


def test_a_round_that_would_end_past_the_deadline_is_not_started(tiny, monkeypatch):
    """On a clock where every beam round takes 1.0 s and the run has 2.5 s, the search does 2 rounds and stops with
    "time_limit": a third would end at 3 s (the deadline was checked only between rounds, so a B = 8 search on a
    long prompt overran a 30 s limit by 4 s). Negative control: with 10 s it runs on."""
    import engine.decode.beam as beam

    clock = {"t": 1000.0}
    monkeypatch.setattr(beam.time, "monotonic", lambda: clock["t"])
    real = beam._beam_round

    def slow_round(*args, **kwargs):
        clock["t"] += 1.0
        return real(*args, **kwargs)

    monkeypatch.setattr(beam, "_beam_round", slow_round)

    def rounds_and_reason(limit_s):
        cfg = GenerationConfig(num_beams=2, max_new_tokens=8, gamma=2, time_limit_s=limit_s)
        events = list(tiny.generate(COPY, cfg))
        finished = next(e for e in events if e.kind == "finished")
        return len([e for e in events if e.kind == "beam_verified"]), finished.stop_reason

    assert rounds_and_reason(2.5) == (2, "time_limit")
    rounds, reason = rounds_and_reason(10.0)
    assert rounds > 2 and reason != "time_limit"
