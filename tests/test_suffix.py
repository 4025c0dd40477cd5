"""Suffix speculation (engine/drafters/suffix.py): the frequency trie of continuations, the tree sized on the
measured verify curve, the session history (bounded, never across its separators), greedy identity and the exact
sampled law through the tree rule (with the typical rule as the negative control)."""

import json

import pytest
import torch

from engine import Engine, GenerationConfig, load_model
from engine.drafters.registry import drafter_factory
from engine.drafters.suffix import MAX_NODES, History, SuffixDrafter, pick
from engine.events import trace_from_json, trace_to_json
from engine.sampling import tree
from engine.specs import ModelLoadError, parse_draft
from tests.test_training_free import CHI2_15DF_999, PROMPTS, ids_of, joint_chi_square, pair_counts


@pytest.fixture(scope="module")
def target(tiny_dirs):
    return load_model(tiny_dirs["target"])


def test_the_trie_counts_the_occurrences_through_each_node():
    tokens, parents, counts = tree.trie([[5, 6, 7], [5, 6, 8], [5, 9], [4]], counted=True)
    assert tokens == [5, 6, 7, 8, 9, 4] and parents == [-1, 0, 1, 1, 0, -1] and counts == [3, 2, 1, 1, 1, 1]


def test_the_tree_grows_while_a_node_pays_on_the_measured_curve():
    """A free forward (t flat) takes every node up to the budget; a steep one only the likely ones; chain one per
    depth; the nodes come parents first and form a tree."""
    tokens, parents, counts = tree.trie([[1, 2, 3]] * 6 + [[1, 2, 4]] * 3 + [[5]], counted=True)
    scores = [c / 10 for c in counts]  # 1: 0.9, 2: 0.9, 3: 0.6, 4: 0.3, 5: 0.1
    assert pick(tokens, parents, scores, lambda n: 1.0) == [0, 1, 2, 3, 4]
    assert pick(tokens, parents, scores, lambda n: 1.0, budget=2) == [0, 1]
    steep = pick(tokens, parents, scores, lambda n: 1 + 0.25 * (n - 1))  # a node costs a quarter step
    assert steep == [0, 1, 2]  # 0.9, 0.9, 0.6 pay; 0.3 and 0.1 do not
    assert pick(tokens, parents, scores, lambda n: 1.0, chain=True) == [0, 1, 2]
    assert pick(tokens, parents, scores, lambda n: 1 + 10 * (n - 1)) == []  # nothing pays: a plain step
    chosen = pick(tokens, parents, scores, lambda n: 1.0)
    assert all(parents[i] < 0 or parents[i] in chosen for i in chosen)


def test_history_is_bounded_and_matches_never_cross_runs():
    h = History(max_n=3, max_tokens=10)
    h.add([1, 2, 3, 4])
    h.add([3, 4, 9, 9])
    assert [seq[s : s + 3] for seq, s in h.occurrences((3, 4), 8)] == [[3, 4, 9], [3, 4, -(10**9)]]
    h.add([7, 7, 7, 7, 7])  # 13 tokens > 10: the oldest run goes
    assert len(h.runs) == 2 and h.runs[0] == [3, 4, 9, 9]
    assert all(seq[s] == 3 for seq, s in h.occurrences((3, 4), 8))
    assert not h.occurrences((4, 7), 8)  # the separator: no match spans two runs


def test_the_spec_parses_and_refuses_out_of_range():
    assert parse_draft("suffix").values == (8, None) or parse_draft("suffix").values == (8, "")
    assert parse_draft("suffix:4,chain").values == (4, "chain")
    with pytest.raises(ModelLoadError, match="suffix"):
        parse_draft("suffix:40")
    with pytest.raises(ModelLoadError):
        parse_draft("suffix:4,bush")


@pytest.mark.parametrize("spec", ["suffix", "suffix:4,chain", "suffix:2"])
def test_greedy_is_the_target_own_output_on_a_random_model(target, spec):
    """Greedy suffix speculation, tree and chain, with a session history growing run to run: token-identical to
    AR; traces round-trip; the history holds every run."""
    engine = Engine(target, spec, measure_step=False)
    history = History()
    trees = 0
    for prompt in PROMPTS * 2:  # the second pass drafts from the first's outputs too
        cfg = GenerationConfig(gamma=4, max_new_tokens=40)
        events = list(engine.generate(prompt, cfg, history=history))
        assert events[-1].token_ids == ids_of(engine, prompt, cfg, "ar")
        assert trace_from_json(trace_to_json(events)) == events
        trees += sum(1 for e in events if e.kind == "draft_tree" and len(set(e.parents)) < len(e.parents))
    assert len(history.runs) == 2 * len(PROMPTS)
    if spec == "suffix":
        assert trees > 0  # some round drafted siblings


def test_the_history_is_what_the_next_run_drafts_from(target):
    """A prompt the run has never seen in its own text: with the history of an earlier run that wrote what
    follows, the first rounds draft from it; without, they cannot."""
    engine = Engine(target, "suffix", measure_step=False)
    cfg = GenerationConfig(gamma=4, max_new_tokens=24, raw=True)
    first = list(engine.generate("x y", cfg))[-1]
    history = History()
    history.add(engine.encode("x y", True) + first.token_ids)
    with_history = [
        e for e in engine.generate("x y", cfg, history=history) if e.kind in ("drafted", "draft_tree")
    ]
    without = [e for e in engine.generate("x y", cfg) if e.kind in ("drafted", "draft_tree")]
    assert with_history and with_history[0].round == 1
    assert not without or without[0].round > 1


def primed(engine, ids):
    """A suffix drafter whose history holds, after the prompt's last two tokens, the target's top-4 first tokens
    and each one's top-4 seconds, least likely first: round 1 drafts a tree with siblings that are often wrong."""
    with torch.inference_mode():
        first = engine.target.model(torch.tensor([ids])).logits[0, -1].topk(4).indices.tolist()
        second = (
            engine.target.model(torch.tensor([ids + [x] for x in first]))
            .logits[:, -1]
            .topk(4)
            .indices.tolist()
        )
    history = History()
    for x, nxt in zip(first[::-1], second[::-1]):
        for y in nxt[::-1]:
            history.add(ids[-2:] + [x, y])
    real = engine.make_drafter

    def make(cfg, gen, max_len, cache, history_=None):
        return real(cfg, gen, max_len, cache, history)

    make.rows, make.takes_history = real.rows, True
    engine.make_drafter = make
    return engine


@pytest.mark.slow  # statistical: make test runs it, the inner loop does not
def test_sampling_keeps_the_target_joint_law_and_the_lossy_rule_does_not(target):
    """1500 seeded runs: the first two tokens follow the target's exact top-4 × top-4 law (chi-square, p = 0.001);
    the negative control, the same drafter under typical acceptance, fails the same test."""
    engine = Engine(target, "suffix", measure_step=False)
    ids = engine.encode("p q", True)
    primed(engine, ids)
    cfg = GenerationConfig(gamma=2, temperature=1.0, top_k=4, raw=True)
    trees = [
        e
        for e in engine.generate(
            None, GenerationConfig(**{**cfg.to_dict(), "seed": 0, "max_new_tokens": 2}), prompt_ids=ids
        )
        if e.kind == "draft_tree"
    ]
    assert trees and len(trees[0].parents) >= 4 and trees[0].parents.count(-1) >= 2  # siblings at depth 1
    stat, cells = joint_chi_square(engine, ids, pair_counts(engine, ids, 1500, cfg), cfg)
    assert cells == 16 and stat < CHI2_15DF_999
    lossy = GenerationConfig(gamma=2, temperature=1.0, top_k=4, raw=True, accept="typical:0.05,0.05")
    stat, _ = joint_chi_square(engine, ids, pair_counts(engine, ids, 600, lossy), lossy)
    assert stat > CHI2_15DF_999


@pytest.mark.parametrize("spec", ["suffix", "suffix:8,chain"])
def test_greedy_is_identical_to_ar_on_the_benchmark_prompts(embedded, spec):
    """The embedded SmolLM2 on every fourth benchmark prompt, one session: suffix commits exactly AR's tokens."""
    engine = Engine(embedded, spec, measure_step=False)
    history = History()
    rows = [json.loads(line) for line in open("engine/prompts/bench.jsonl", encoding="utf-8")][::4]
    cfg = GenerationConfig(gamma=4, max_new_tokens=40)
    for row in rows:
        spec_ids = list(engine.generate(row["prompt"], cfg, history=history))[-1].token_ids
        assert spec_ids == ids_of(engine, row["prompt"], cfg, "ar"), row["prompt"][:40]


def test_a_tree_fits_the_cache_the_factory_sized(target):
    make = drafter_factory("suffix", target)
    assert make.rows == MAX_NODES and make.takes_history
    d = make(GenerationConfig(tree_budget=5), None, 100, None)
    assert isinstance(d, SuffixDrafter) and d.budget == 5
    assert tree.depths([-1, 0, 0, 1]) == [1, 2, 2, 3]
