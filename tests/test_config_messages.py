"""GenerationConfig refuses every bad setting with a one-line message naming the setting and its range."""

import math

import pytest

from engine import Engine, GenerationConfig, load_model

INF, NAN = math.inf, math.nan
TEMPERATURE = "temperature must be 0 (greedy) or between 0.01 and 100"
SEED = "seed must be a whole number in 0..2**63-1"

BAD = [  # (setting, value, the start of the message)
    ("temperature", 1e-300, TEMPERATURE),
    ("temperature", 0.001, TEMPERATURE),
    ("temperature", 101.0, TEMPERATURE),
    ("temperature", -0.5, TEMPERATURE),
    ("temperature", INF, TEMPERATURE),
    ("temperature", NAN, "temperature must be a number 0 (greedy)"),
    ("temperature", "hot", "temperature must be a number 0 (greedy)"),
    ("seed", 2**64, SEED),
    ("seed", 2**63, SEED),
    ("seed", -1, SEED),
    ("seed", INF, SEED),
    ("seed", NAN, SEED),
    ("seed", 1.5, SEED),
    ("seed", "7", SEED),
    ("seed", True, SEED),
    ("gamma", INF, "gamma must be a whole number between 1 and 16"),
    ("gamma", -INF, "gamma must be a whole number between 1 and 16"),
    ("gamma", NAN, "gamma must be a number between 1 and 16"),
    ("gamma", "3", "gamma must be a number between 1 and 16"),
    ("gamma", 2.5, "gamma must be a whole number between 1 and 16"),
    ("gamma", 0, "gamma must be between 1 and 16"),
    ("gamma", 17, "gamma must be between 1 and 16"),
    ("max_new_tokens", INF, "max_new_tokens must be a whole number at least 1"),
    ("max_new_tokens", NAN, "max_new_tokens must be a number at least 1"),
    ("max_new_tokens", "10", "max_new_tokens must be a number at least 1"),
    ("max_new_tokens", [10], "max_new_tokens must be a number at least 1"),
    ("max_new_tokens", None, "max_new_tokens must be a number at least 1"),
    ("max_new_tokens", 0, "max_new_tokens must be at least 1"),
    ("top_k", INF, "top_k must be a whole number 0 (off) or positive"),
    ("top_k", NAN, "top_k must be a number 0 (off) or positive"),
    ("top_k", -1, "top_k must be 0 (off) or positive"),
    ("top_p", NAN, "top_p must be a number in (0, 1]"),
    ("top_p", INF, "top_p must be in (0, 1]"),
    ("top_p", 0.0, "top_p must be in (0, 1]"),
    ("p_min", NAN, "p_min must be a number in [0, 1)"),
    ("p_min", 1.0, "p_min must be in [0, 1)"),
    ("record_topk", 21, "record_topk must be between 0 and 20"),
    ("record_topk", INF, "record_topk must be a whole number between 0 and 20"),
    ("tree_budget", 65, "tree_budget must be between 0 (chain) and 64 nodes"),
    ("tree_budget", NAN, "tree_budget must be a number between 0 (chain) and 64 nodes"),
    ("tree_branching", 0, "tree_branching must be between 1 and 8"),
    ("tree_branching", INF, "tree_branching must be a whole number between 1 and 8"),
    ("adaptive", "sometimes", "adaptive must be 'fixed' or 'heuristic'"),
    ("raw", "yes", "raw must be true or false"),
]


@pytest.mark.parametrize("name,value,message", BAD, ids=[f"{n}={v!r}"[:40] for n, v, _ in BAD])
def test_bad_setting_message_names_the_setting_and_its_range(name, value, message):
    """Infinity, NaN, strings, lists and out-of-range numbers each get a ValueError that says what is allowed."""
    with pytest.raises(ValueError) as caught:
        GenerationConfig(**{name: value})
    text = str(caught.value)
    assert text.startswith(message) and text.startswith(f"{name} must be") and "\n" not in text


def test_huge_value_is_cut_in_the_message():
    """A pasted million-digit seed does not become a million-character message."""
    with pytest.raises(ValueError) as caught:
        GenerationConfig(seed=10**1000)
    assert str(caught.value).startswith(SEED) and len(str(caught.value)) < 120


@pytest.mark.parametrize("kwargs", [dict(temperature=0.01, seed=2**63 - 1), dict(temperature=100.0, seed=0)])
def test_the_edges_of_the_allowed_ranges_sample(tiny_dirs, kwargs):
    """The allowed extremes of temperature and seed really run: the ranges are not stricter than needed."""
    engine = Engine(load_model(tiny_dirs["target"]), f"model:{tiny_dirs['sharp']}", measure_step=False)
    cfg = GenerationConfig(gamma=3, max_new_tokens=8, **kwargs)
    finished = list(engine.generate("hi", cfg))[-1]
    assert finished.kind == "finished" and 1 <= len(finished.token_ids) <= 8


@pytest.mark.parametrize("spelling", [" typical : 0.09 , 0.3 ", "TYPICAL:0.09, 0.3", "\ttypical:0.09,0.3\n"])
def test_accept_is_normalised_like_drafter_specs(spelling):
    """Spaces anywhere in the acceptance rule are dropped, as in drafter specs (it was refused)."""
    assert GenerationConfig(accept=spelling).accept == "typical:0.09,0.3"


@pytest.mark.parametrize("spec", ["ngram:３", "ngram:1_0", "layerskip:٣"])
def test_drafter_numbers_must_be_ascii_digits(spec):
    """Python's int() takes full-width and Arabic-Indic digits and underscores; a spec must not."""
    from engine.specs import parse_draft

    with pytest.raises(ValueError, match="is not a whole number"):
        parse_draft(spec)


@pytest.mark.parametrize("accept", ["typical:0_1,0.3", "typical:０.1,0.3"])
def test_accept_numbers_must_be_ascii(accept):
    """float('0_1') is 1.0: the rule's ε and δ are written in ASCII or refused."""
    with pytest.raises(ValueError, match="accept must be"):
        GenerationConfig(accept=accept)
