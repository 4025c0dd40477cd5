"""Engine behaviour on tiny random-weight models: losslessness, events, rollback, bad input."""

import json
import re

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from engine import Engine, GenerationConfig, ModelLoadError, read_trace, sampling, write_trace
from engine.events import trace_from_json, trace_to_json
from engine.runtime.cache import KVCache
from engine.runtime.models import load_model
from tests.conftest import make_tiny_model

PROMPTS = ["Tell me about the sea", "def fib(n):", "1, 2, 3,"]


def outputs(engine, prompt, cfg, mode):
    return list(engine.generate(prompt, cfg, mode=mode))[-1].token_ids


@pytest.mark.parametrize("draft", ["self", "other"])
@pytest.mark.parametrize("gamma", [1, 3, 8])
def test_greedy_matches_ar(tiny_dirs, draft, gamma):
    """Greedy speculative output equals greedy AR token for token, with a perfect and a random draft."""
    spec = "self" if draft == "self" else f"model:{tiny_dirs['other']}"
    engine = Engine(load_model(tiny_dirs["target"]), spec, measure_step=False)
    for prompt in PROMPTS:
        cfg = GenerationConfig(gamma=gamma, max_new_tokens=40)
        assert outputs(engine, prompt, cfg, "speculative") == outputs(engine, prompt, cfg, "ar")


def test_self_draft_accepts_everything(tiny_dirs):
    """The target drafting for itself is the upper bound: every drafted token is accepted."""
    engine = Engine(load_model(tiny_dirs["target"]), "self", measure_step=False)
    summary = list(engine.generate("hello", GenerationConfig(gamma=4, max_new_tokens=30)))[-1].summary
    assert summary["drafted"] > 0 and summary["accepted"] == summary["drafted"]
    assert summary["mean_accepted_length"] == 5.0  # 30 tokens in 6 rounds of 4 drafts + 1 bonus


def first_token_counts(engine, ids, n):
    counts = torch.zeros(engine.target.vocab_size)
    for seed in range(n):
        cfg = GenerationConfig(gamma=1, max_new_tokens=2, temperature=1.0, top_k=8, seed=seed)
        counts[list(engine.generate(None, cfg, prompt_ids=ids))[-1].token_ids[0]] += 1
    return counts


def target_first_token_probs(engine, ids):
    with torch.inference_mode():
        logits = engine.target.model(torch.tensor([ids])).logits[0, -1]
    return sampling.shape_probs(logits, 1.0, 8, 1.0)


CHI2_7DF_999 = 24.32  # chi-square critical value, 7 degrees of freedom, significance 0.001


def chi_square(counts, probs):
    keep = probs > 0
    assert counts[~keep].sum() == 0, "a token outside the target's top-k was emitted"
    expected = probs[keep] * counts.sum()
    return float(((counts[keep] - expected) ** 2 / expected).sum())


@pytest.mark.slow  # statistical / real-model: make test runs it, the inner loop does not
def test_sampling_is_lossless_end_to_end(tiny_dirs):
    """1200 seeded runs with a sharpened draft: the first token follows the target's exact top-8 law."""
    engine = Engine(load_model(tiny_dirs["target"]), f"model:{tiny_dirs['sharp']}", measure_step=False)
    ids = engine.encode("Once upon a time", False)
    p = target_first_token_probs(engine, ids)
    assert chi_square(first_token_counts(engine, ids, 1200), p) < CHI2_7DF_999


@pytest.mark.slow  # statistical / real-model: make test runs it, the inner loop does not
def test_broken_acceptance_fails_fidelity(tiny_dirs, monkeypatch):
    """Accepting every draft emits q, not p: the fidelity test must notice."""
    engine = Engine(load_model(tiny_dirs["target"]), f"model:{tiny_dirs['sharp']}", measure_step=False)
    ids = engine.encode("Once upon a time", False)
    p = target_first_token_probs(engine, ids)
    monkeypatch.setattr(
        sampling,
        "accept_sample",
        lambda d, q, p_, g: sampling.Verdict(
            len(d), int(p_[-1].argmax()), [1.0] * len(d), p_[torch.arange(len(d)), d].tolist(), 0.0
        ),
    )
    assert chi_square(first_token_counts(engine, ids, 600), p) > CHI2_7DF_999


def test_seeded_sampling_is_reproducible(tiny_dirs):
    """Same seed, same output; another seed, (almost surely) another output."""
    engine = Engine(load_model(tiny_dirs["target"]), f"model:{tiny_dirs['sharp']}", measure_step=False)
    run = lambda s: outputs(
        engine, "hi", GenerationConfig(gamma=3, max_new_tokens=20, temperature=1.0, seed=s), "speculative"
    )
    assert run(7) == run(7) and run(7) != run(8)


def test_event_invariants_and_trace_round_trip(tiny_dirs, tmp_path):
    """Each draft gets one verification; commits rebuild the output; discarded = drafted - accepted."""
    engine = Engine(load_model(tiny_dirs["target"]), f"model:{tiny_dirs['other']}")
    events = list(engine.generate("Tell me a story", GenerationConfig(gamma=4, max_new_tokens=40)))
    kinds = [e.kind for e in events]
    assert kinds[0] == "run_started" and kinds[-1] == "finished"
    rounds = {}
    for e in events[1:-1]:
        rounds.setdefault(e.round, []).append(e)
    committed = []
    for evs in rounds.values():
        by = {e.kind: e for e in evs}
        kinds = [e.kind for e in evs]
        committed += by["committed"].token_ids
        if by["round_timed"].gamma == 0:  # the budget left room for one token: a plain target step
            assert "drafted" not in by and "verified" not in by
            continue
        assert kinds.count("drafted") == 1 and kinds.count("verified") == 1
        drafted, verified = by["drafted"], by["verified"]
        n_acc = sum(verified.accepted)
        discarded = len(by["rolled_back"].positions) if "rolled_back" in by else 0
        assert discarded == len(drafted.token_ids) - n_acc
        assert by["committed"].pos == drafted.pos == verified.pos
    assert committed == events[-1].token_ids
    assert events[-1].summary["drafted"] == sum(len(e.token_ids) for e in events if e.kind == "drafted")
    write_trace(tmp_path / "t.json", events)
    assert read_trace(tmp_path / "t.json") == events
    assert trace_from_json(json.dumps(json.loads(trace_to_json(events)))) == events


class CountOps(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.ops = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops += 1
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("context", [8, 1000])
def test_rollback_is_a_pointer_move(tiny_dirs, context):
    """Rollback runs zero tensor ops at any context length, keeps the buffers, and slots get overwritten."""
    model = load_model(tiny_dirs["target"]).model
    cache = KVCache.for_model(model, context + 16)
    with torch.inference_mode():
        model(torch.randint(0, 1000, (1, context + 8)), past_key_values=cache)
        ptr = cache.layers[0].keys.data_ptr()
        with CountOps() as counter:
            cache.truncate(context)
        assert counter.ops == 0 and cache.length == context and cache.get_seq_length() == context
        assert cache.layers[0].keys.data_ptr() == ptr
        model(torch.randint(0, 1000, (1, 1)), past_key_values=cache)
        assert cache.length == context + 1 and cache.layers[0].keys.data_ptr() == ptr


@pytest.mark.parametrize(
    "kwargs,message",
    [
        ({"gamma": 0}, "gamma must be between 1 and 16"),
        ({"gamma": 17}, "gamma must be between 1 and 16"),
        ({"temperature": -0.5}, "temperature must be 0"),
        ({"temperature": float("nan")}, "temperature must be a number"),
        ({"top_p": 0.0}, "top_p must be in (0, 1]"),
        ({"top_p": 1.5}, "top_p must be in (0, 1]"),
        ({"top_k": -1}, "top_k must be 0"),
        ({"max_new_tokens": 0}, "max_new_tokens must be at least 1"),
    ],
)
def test_bad_config_is_refused(kwargs, message):
    """Out-of-range settings fail fast with a message naming the setting and its range."""
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")):
        GenerationConfig(**kwargs)


def test_bad_prompt_and_models_are_refused(tiny_dirs, tmp_path):
    """Empty prompts, unknown models and a draft with another vocabulary give clear errors."""
    engine = Engine(load_model(tiny_dirs["target"]), "self")
    with pytest.raises(ValueError, match="prompt is empty"):
        engine.generate("   ", GenerationConfig())
    with pytest.raises(ModelLoadError, match="not a directory"):
        load_model(str(tmp_path / "missing"))
    with pytest.raises(ModelLoadError, match="cannot load model 'no-such-org/no-such-model'"):
        load_model("no-such-org/no-such-model")
    from transformers import T5Config

    T5Config(d_model=8, num_layers=1, num_heads=1, d_kv=8, d_ff=8).save_pretrained(tmp_path / "t5")
    with pytest.raises(ModelLoadError, match="is not a causal language model"):
        load_model(str(tmp_path / "t5"))
    with pytest.raises(ModelLoadError, match="unknown draft spec"):
        Engine(engine.target, "telepathy")
    with pytest.raises(ValueError, match="exceeds the target's context of 2048"):
        engine.generate("hi", GenerationConfig(max_new_tokens=5000))


def test_draft_with_other_vocabulary_drafts_through_text(tiny_dirs, tmp_path):
    """A draft whose tokenizer differs (here 3 whole-word tokens) is no longer refused: it drafts text that is
    re-tokenised for the target (engine/drafters/crossvocab.py), and greedy output still equals AR."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    raw = Tokenizer(models.WordLevel({"<unk>": 0, "hello": 1, "world": 2}, unk_token="<unk>"))
    raw.pre_tokenizer = pre_tokenizers.Whitespace()
    tok = PreTrainedTokenizerFast(tokenizer_object=raw, unk_token="<unk>")
    odd = make_tiny_model(tmp_path / "odd", seed=4, tokenizer=tok, vocab_size=3)
    engine = Engine(load_model(tiny_dirs["target"]), f"model:{odd}", measure_step=False)
    cfg = GenerationConfig(gamma=3, max_new_tokens=20)
    events = list(engine.generate("hello world", cfg))
    assert events[-1].token_ids == outputs(engine, "hello world", cfg, "ar")
    from engine.drafters.crossvocab import (
        CrossVocabDrafter,  # (a draft of <unk>s and EOS proposes little: lossless still)
    )

    assert isinstance(engine.make_drafter(cfg, None, 64, None), CrossVocabDrafter)


@pytest.mark.parametrize(
    "mutate,message",
    [
        (lambda t: t[: len(t) // 2], "not valid JSON"),
        (lambda t: json.dumps({"format": "other"}), "not a specviz trace"),
        (
            lambda t: t.replace('"kind":"committed"', '"kind":"exploded"', 1),
            "unknown event kind",
        ),  # compact JSON
        (lambda t: t.replace('"round":1,', '"round":"one",', 1), "round must be int"),
        (lambda t: re.sub(r'"elapsed_s":[0-9.e-]+', '"elapsed_s":1e300', t, count=1), "out of range"),
        (lambda t: t.replace('"stop_reason"', '"stop_reason_x"', 1), "unknown fields"),
        (lambda t: " " * (6 * 1024 * 1024) + t, "the limit is 5 MiB"),
    ],
)
def test_hostile_traces_are_refused(tiny_dirs, mutate, message):
    """Malformed, truncated, oversized or wrongly typed traces fail validation with a clear reason."""
    engine = Engine(load_model(tiny_dirs["target"]), "ngram", measure_step=False)
    text = trace_to_json(engine.generate("a b a b a", GenerationConfig(gamma=2, max_new_tokens=6)))
    with pytest.raises(ValueError, match=message):
        trace_from_json(mutate(text))


def test_html_in_trace_tokens_survives_as_data(tiny_dirs):
    """Token text is data: a `<script>` token round-trips unchanged (renderers escape it)."""
    from engine.events import Committed, RunStarted, event_to_dict

    events = [
        RunStarted(
            round=0,
            run_id="x",
            mode="ar",
            target="t",
            draft="",
            device="cpu",
            dtype="float32",
            config={},
            prompt_text="<b>",
            prompt_ids=[1],
            prompt_tokens=["<b>"],
            pos=1,
        ),
        Committed(
            round=1, pos=1, token_ids=[5], tokens=["<script>alert(1)</script>"], origins=["ar"], p=[0.5]
        ),
    ]
    assert trace_from_json(trace_to_json(events))[1].tokens == ["<script>alert(1)</script>"]
    assert event_to_dict(events[1])["kind"] == "committed"


def test_each_round_times_its_verify_forward_apart(tiny_dirs):
    """Every round_timed carries the verify forward alone (inside verify_s) and the drafter's feedback (inside
    total_s); the run's summary divides the rest of the rounds, the host's work, by the rounds timed so."""
    from engine import Engine, GenerationConfig, load_model

    engine = Engine(load_model(tiny_dirs["target"]), "ngram", measure_step=False)
    events = list(engine.generate("1 2 3 4 1 2 3 4 1 2 3", GenerationConfig(gamma=3, max_new_tokens=16)))
    timed = [e for e in events if e.kind == "round_timed"]
    assert timed and all(0 < e.forward_s <= e.verify_s <= e.total_s for e in timed)
    assert all(0 <= e.feedback_s <= e.total_s - e.verify_s - e.draft_s + 1e-9 for e in timed)
    summary = events[-1].summary
    assert summary["host_rounds"] == len(timed)
    assert summary["host_per_round_s"] == pytest.approx(
        sum(e.total_s - e.forward_s for e in timed) / len(timed)
    )
    assert summary["forward_per_round_s"] == pytest.approx(sum(e.forward_s for e in timed) / len(timed))
