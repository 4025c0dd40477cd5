"""Drafting across vocabularies (engine/drafters/crossvocab.py): lossless greedy and sampling, both tokenisations shown.

Tiny random Llamas over two toy vocabularies (characters vs a byte-level BPE trained here) make the
statistics fast; the real pair, SmolLM2-135M drafting for Gemma-3-270M, checks greedy identity.
"""

import pytest
import torch

from engine import Engine, GenerationConfig, sampling
from engine.drafters.crossvocab import decode_tail, retokenize, spans
from engine.events import trace_from_json, trace_to_json
from engine.runtime.models import EMBEDDED_GEMMA, load_model
from tests.test_engine import CHI2_7DF_999, chi_square

CORPUS = [
    "the cat sat on the mat. the dog sat on the log.",
    "once upon a time there was a little boat",
    "def fib(n): return n if n < 2 else fib(n - 1) + fib(n - 2)",
    "1, 2, 3, 4, 5, 6, 7, 8, 9, 10",
] * 20
SPECIALS = ["<pad>", "<s>", "</s>"]
ALPHABET = sorted(
    set("".join(CORPUS))
    | set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 .,:;!?()+-=<>'\"\n")
)
PROMPTS = ["once upon a time", "def fib(n):", "1, 2, 3,"]


def char_tokenizer():
    """One token per character (82 tokens)."""
    from tokenizers import Tokenizer, decoders, models
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(vocab={t: i for i, t in enumerate(SPECIALS + ALPHABET)}, merges=[]))
    tok.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", pad_token="<pad>")


def bpe_tokenizer():
    """A byte-level BPE of 330 tokens trained on CORPUS: whole words, and bytes for anything else."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(
        CORPUS,
        trainers.BpeTrainer(
            vocab_size=400, special_tokens=SPECIALS, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
        ),
    )
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", pad_token="<pad>")


def tiny(path, tokenizer, seed: int) -> str:
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=1024,
        initializer_range=0.2,
        eos_token_id=2,
        bos_token_id=1,
        pad_token_id=0,
    )
    LlamaForCausalLM(config).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return str(path)


@pytest.fixture(scope="module")
def toy(tmp_path_factory):
    base = tmp_path_factory.mktemp("crossvocab")
    return {"chars": tiny(base / "chars", char_tokenizer(), 1), "bpe": tiny(base / "bpe", bpe_tokenizer(), 2)}


def run(engine, prompt, cfg, mode="speculative"):
    return list(engine.generate(prompt, cfg, mode=mode))


@pytest.mark.parametrize("target,draft", [("chars", "bpe"), ("bpe", "chars")])
@pytest.mark.parametrize("gamma", [1, 4])
def test_greedy_identity_across_vocabularies(toy, target, draft, gamma):
    """A draft with another tokenizer (one draft token -> many target tokens, and the reverse): greedy = AR."""
    engine = Engine(load_model(toy[target]), f"model:{toy[draft]}", measure_step=False)
    for prompt in PROMPTS:
        cfg = GenerationConfig(gamma=gamma, max_new_tokens=30, raw=True)
        events = run(engine, prompt, cfg)
        assert events[-1].token_ids == run(engine, prompt, cfg, "ar")[-1].token_ids
        assert any(e.kind == "retokenized" for e in events)


def first_token_law(engine, ids, n):
    counts = torch.zeros(engine.target.vocab_size)
    for seed in range(n):
        cfg = GenerationConfig(gamma=3, max_new_tokens=2, temperature=1.0, top_k=8, seed=seed, raw=True)
        counts[list(engine.generate(None, cfg, prompt_ids=ids))[-1].token_ids[0]] += 1
    with torch.inference_mode():
        p = sampling.shape_probs(engine.target.model(torch.tensor([ids])).logits[0, -1], 1.0, 8, 1.0)
    return counts, p


def test_sampling_is_lossless_across_vocabularies(toy):
    """600 seeded runs, a BPE draft for a character-level target: the first token follows p's top-8 law."""
    engine = Engine(load_model(toy["chars"]), f"model:{toy['bpe']}", measure_step=False)
    ids = engine.encode("once upon a", True)
    counts, p = first_token_law(engine, ids, 600)
    assert chi_square(counts, p) < CHI2_7DF_999


def test_wrong_rule_fails_fidelity_across_vocabularies(toy, monkeypatch):
    """Negative control: accepting every re-tokenised proposal (no test against p) emits the draft's law."""
    engine = Engine(load_model(toy["chars"]), f"model:{toy['bpe']}", measure_step=False)
    ids = engine.encode("once upon a", True)
    monkeypatch.setattr(
        sampling,
        "accept_sample",
        lambda d, q, p_, draws: sampling.Verdict(
            len(d),
            sampling.draw_token(p_[-1], draws(len(d))),
            [1.0] * len(d),
            p_[torch.arange(len(d)), d].tolist(),
            0.0,
        ),
    )
    counts, p = first_token_law(engine, ids, 600)
    with pytest.raises(AssertionError):
        assert chi_square(counts, p) < CHI2_7DF_999


def test_retokenized_event_shows_both_tokenisations(toy):
    """Each cross-vocabulary round says which draft tokens each target token came from; traces round-trip."""
    engine = Engine(load_model(toy["chars"]), f"model:{toy['bpe']}", measure_step=False)
    events = run(engine, "the cat sat on", GenerationConfig(gamma=4, max_new_tokens=20, raw=True))
    retok = [e for e in events if e.kind == "retokenized"]
    drafted = {e.round: e for e in events if e.kind == "drafted"}
    assert retok
    for e in retok:
        assert e.target_token_ids == drafted[e.round].token_ids
        assert len(e.spans) == len(e.target_token_ids) and len(e.draft_tokens) == len(e.draft_token_ids)
        covered = [i for first, last in e.spans if first >= 0 for i in range(first, last + 1)]
        assert covered == sorted(covered)  # the two tokenisations read the same text left to right
    # a BPE word -> several characters
    assert any(len(e.draft_token_ids) < len(e.target_token_ids) for e in retok)
    assert [e.kind for e in trace_from_json(trace_to_json(events))] == [e.kind for e in events]


def test_retokenize_keeps_boundary_and_partial_characters():
    """Re-tokenising continues the committed ids in context; a draft token ending inside a character is not text."""
    chars, bpe = char_tokenizer(), bpe_tokenizer()
    committed = chars("the cat", add_special_tokens=False)["input_ids"]
    assert retokenize(chars, committed, " sat") == chars(" sat", add_special_tokens=False)["input_ids"]
    ids = bpe("é", add_special_tokens=False)["input_ids"]  # two byte tokens
    assert (
        len(ids) == 2
        and decode_tail(bpe, [], ids[:1]).endswith("\ufffd")
        and decode_tail(bpe, [], ids) == "é"
    )
    word = bpe(" cat", add_special_tokens=False)["input_ids"]
    assert (
        spans(bpe, word, chars, chars(" cat", add_special_tokens=False)["input_ids"], [], []) == [[0, 0]] * 4
    )


@pytest.fixture(scope="module")
def gemma_pair():
    return Engine(load_model(EMBEDDED_GEMMA), "model:embedded", measure_step=False)


GEMMA_PROMPTS = [
    "The water cycle describes how water moves between the oceans, the air and the land.",
    "Monday, Tuesday, Wednesday,",
    "def add(a, b):\n    return",
]


def test_real_pair_greedy_identity(gemma_pair):
    """SmolLM2-135M drafting for Gemma-3-270M (49k vs 262k tokens): token-identical to Gemma's greedy AR."""
    accepted = 0
    for prompt in GEMMA_PROMPTS[:2]:
        cfg = GenerationConfig(gamma=4, max_new_tokens=16, raw=True)
        events = run(gemma_pair, prompt, cfg)
        assert events[-1].token_ids == run(gemma_pair, prompt, cfg, "ar")[-1].token_ids
        accepted += events[-1].summary["accepted"]
    assert accepted > 0  # the pair agrees on some text: drafting across vocabularies does something


def test_gemma_greedy_matches_transformers_generate(gemma_pair):
    """The engine's Gemma-3 AR (pointer cache, transformers' forward) equals transformers' own greedy generate."""
    gemma = gemma_pair.target
    for prompt in GEMMA_PROMPTS[1:]:
        ids = gemma_pair.encode(prompt, raw=True)
        ours = run(gemma_pair, prompt, GenerationConfig(max_new_tokens=24, raw=True), "ar")[-1].token_ids
        with torch.inference_mode():
            ref = gemma.model.generate(torch.tensor([ids]), max_new_tokens=24, do_sample=False)[
                0, len(ids) :
            ].tolist()
        assert ours == ref[: len(ours)]


def test_gemma_beyond_its_sliding_window(gemma_pair):
    """A prompt longer than Gemma's 512-token window: the pointer cache keeps every key, transformers' sliding
    mask hides the far ones, and the engine still equals transformers' generate (a DynamicCache that drops them)."""
    gemma = gemma_pair.target
    text = " ".join(f"Item {i}: the {i}th line of a long numbered list." for i in range(60))
    ids = gemma_pair.encode(text, raw=True)
    assert len(ids) > gemma.model.config.sliding_window + 16
    cfg = GenerationConfig(gamma=4, max_new_tokens=12, raw=True)
    ours = list(gemma_pair.generate(None, cfg, prompt_ids=ids))[-1].token_ids
    with torch.inference_mode():
        ref = gemma.model.generate(torch.tensor([ids]), max_new_tokens=12, do_sample=False)[
            0, len(ids) :
        ].tolist()
    assert ours == ref[: len(ours)]
