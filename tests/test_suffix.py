"""Suffix speculation (engine/drafters/suffix.py): the frequency trie of continuations, the tree sized on the
measured verify curve, the session history (bounded, never across its separators), greedy identity and the exact
sampled law through the tree rule (with the typical rule as the negative control)."""

import json

import pytest
import torch

from engine import Engine, GenerationConfig, load_model
from engine.costmodel import grow_tree
from engine.drafters.base import Factory, Needs
from engine.drafters.registry import drafter_factory
from engine.drafters.suffix import MAX_NODES, History, SuffixDrafter, path_scores
from engine.events import trace_from_json, trace_to_json
from engine.sampling import tree
from engine.specs import ModelLoadError, parse_draft
from tests.test_training_free import CHI2_15DF_999, PROMPTS, ids_of, joint_chi_square, pair_counts


@pytest.fixture(scope="module")
def target(tiny_dirs):
    return load_model(tiny_dirs["target"])


def test_the_trie_counts_the_occurrences_through_each_node():
    tokens, parents, counts, first = tree.trie([[5, 6, 7], [5, 6, 8], [5, 9], [4]], counted=True)
    assert tokens == [5, 6, 7, 8, 9, 4] and parents == [-1, 0, 1, 1, 0, -1] and counts == [3, 2, 1, 1, 1, 1]
    assert first == [0, 0, 0, 1, 2, 3]  # the sequence that made each node: the first through it


def test_the_tree_grows_while_a_node_pays_on_the_measured_curve():
    """A free forward (t flat) takes every node up to the budget; a steep one only the likely ones; chain one per
    depth; the nodes come parents first and form a tree."""
    tokens, parents, counts, _ = tree.trie([[1, 2, 3]] * 6 + [[1, 2, 4]] * 3 + [[5]], counted=True)
    scores = [c / 10 for c in counts]  # 1: 0.9, 2: 0.9, 3: 0.6, 4: 0.3, 5: 0.1
    assert grow_tree(parents, scores, lambda n: 1.0) == [0, 1, 2, 3, 4]
    assert grow_tree(parents, scores, lambda n: 1.0, budget=2) == [0, 1]
    steep = grow_tree(parents, scores, lambda n: 1 + 0.25 * (n - 1))  # a node costs a quarter step
    assert steep == [0, 1, 2]  # 0.9, 0.9, 0.6 pay; 0.3 and 0.1 do not
    assert grow_tree(parents, scores, lambda n: 1.0, chain=True) == [0, 1, 2]
    assert grow_tree(parents, scores, lambda n: 1 + 10 * (n - 1)) == []  # nothing pays: a plain step
    chosen = grow_tree(parents, scores, lambda n: 1.0)
    assert all(parents[i] < 0 or parents[i] in chosen for i in chosen)


def test_history_is_bounded_and_matches_never_cross_runs():
    h = History(max_tokens=10)
    h.add([1, 2, 3, 4])
    h.add([3, 4, 9, 9])
    found = h.view().occurrences((3, 4), 8)
    assert [seq[s : s + 3] for seq, s, _, _ in found] == [[3, 4, 9], [3, 4, -(10**9)]]
    assert [(ago, s - offset) for _, s, ago, offset in found] == [(1, 0), (2, 2)]  # runs back, position in it
    h.add([7, 7, 7, 7, 7])  # 13 tokens > 10: the oldest run goes
    assert len(h.runs) == 2 and list(h.runs[0]) == [3, 4, 9, 9]
    assert all(seq[s] == 3 for seq, s, _, _ in h.view().occurrences((3, 4), 8))
    assert not h.view().occurrences((4, 7), 8)  # the separator: no match spans two runs


def test_a_long_session_stays_under_its_memory_bound():
    """300 runs of 1,000 tokens into a history capped at 16,384: it keeps at most the cap (the newest runs), and
    at rest what suffix.py holds (tracemalloc, its own lines only) is the tokens at 8 bytes each plus a little; a
    run's view is its own and is freed with it. A copy (the app's per-session state) and a pickled one (a ZeroGPU worker's argument)
    are independent histories with their own lock."""
    import copy
    import pickle
    import tracemalloc

    import engine.drafters.suffix as suffix_module

    def held() -> (
        int
    ):  # bytes still allocated from suffix.py's own lines (other threads' allocations do not count)
        only = [tracemalloc.Filter(True, suffix_module.__file__)]
        return sum(st.size for st in tracemalloc.take_snapshot().filter_traces(only).statistics("filename"))

    tracemalloc.start()
    h = History(max_tokens=16384)
    for k in range(300):
        h.add([(k * 1000 + j) % 50000 for j in range(1000)])
        assert h.tokens <= 16384
    at_rest = held()
    view = h.view()
    assert view.occurrences(tuple(h.runs[-1][:3]), 4)
    while_running = held()
    del view
    after = held()
    tracemalloc.stop()
    assert h.tokens == 16000 and list(h.runs[-1][:2]) == [299000 % 50000, 299001 % 50000]
    assert at_rest <= 16384 * 8 + 32 * 1024, at_rest
    assert while_running > at_rest + 16000 * 8 and after <= at_rest + 1024, (
        while_running,
        after,
    )  # freed with it
    for twin in (copy.deepcopy(h), pickle.loads(pickle.dumps(h))):
        twin.add([1, 2, 3])
        assert twin.tokens == h.tokens + 3 and twin.lock is not h.lock
    assert h.tokens == 16000


def test_the_spec_parses_and_refuses_out_of_range():
    """suffix's arguments: N (default 8) and the shape (None: the tree); out of range or unknown: refused by name."""
    assert parse_draft("suffix").values == (8, None)
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
    follows, the first rounds draft from it; without, no round drafts (the random model's output repeats nothing
    the run has seen)."""
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
    assert without == []


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

    def make(cfg, gen, max_len, cache, _history):
        return real(cfg, gen, max_len, cache, history)

    engine.make_drafter = Factory(make, real.needs)
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
    assert make.needs == Needs(rows=MAX_NODES, history=True)
    d = make(GenerationConfig(tree_budget=5), None, 100, None)
    assert isinstance(d, SuffixDrafter) and d.budget == 5
    assert tree.depths([-1, 0, 0, 1]) == [1, 2, 2, 3]


def test_auto_offers_suffix_with_the_session_history(target, monkeypatch):
    """auto prices suffix speculation beside n-gram lookup and recycling: with a history of an earlier run that
    wrote what follows, a suffix tree is among its candidates from the first drafted round and auto picks it;
    the output is AR's; the history gains the run, its template positions masked like suffix's own. Asking a
    drafter is priced as free here: a busy machine's one slow ask priced suffix out of a 32-token run."""
    from engine.drafters import auto as auto_module

    cost = auto_module.AutoDrafter._cost
    monkeypatch.setattr(
        auto_module.AutoDrafter, "_cost", lambda self, name, seconds, tokens: cost(self, name, 1e-7, tokens)
    )
    engine = Engine(target, "auto", measure_step=False)
    assert engine.make_drafter.needs.history
    built = engine.make_drafter(GenerationConfig(), None, 64, None, History())
    assert set(built.trees) == {"recycle", "suffix"} and built.drafter.name.startswith("ngram")
    free = Engine(target, "auto:free", measure_step=False).make_drafter(GenerationConfig(), None, 64, None)
    assert set(free.trees) == {"recycle", "suffix"} and not free.costly
    only = Engine(target, "auto:ngram", measure_step=False).make_drafter(GenerationConfig(), None, 64, None)
    assert not only.trees and not only.costly
    cfg = GenerationConfig(gamma=4, max_new_tokens=32, raw=True)
    first = list(engine.generate("x y", cfg))[-1]
    history = History()
    history.add(engine.encode("x y", True) + first.token_ids)
    events = list(engine.generate("x y", cfg, history=history))
    assert events[-1].token_ids == first.token_ids
    decided = [e for e in events if e.kind == "decided"]
    assert "suffix" in {c["drafter"] for e in decided for c in e.candidates}
    assert any(e.drafter == "suffix" for e in decided)
    assert len(history.runs) == 2


def test_each_node_says_how_often_and_where_it_was_seen(target):
    """The suffix_match event: per node, its count within the occurrences and its latest occurrence, which holds
    the node's token (this run's text or the session's earlier run); it validates and round-trips; the tree
    tooltip and Explain print it; a count above the occurrences is refused."""
    from engine.drafters.suffix import OCCURRENCES
    from engine.validate import MAX_OCCURRENCES
    from specviz.explain import render_explain
    from specviz.tree import render_tree

    assert MAX_OCCURRENCES == OCCURRENCES
    engine = Engine(target, "suffix", measure_step=False)
    cfg = GenerationConfig(gamma=4, max_new_tokens=40, raw=True)
    history = History()
    list(engine.generate("x y", cfg, history=history))
    events = list(engine.generate("x y", cfg, history=history))
    ids = engine.encode("x y", True) + events[-1].token_ids
    matched = [e for e in events if e.kind == "suffix_match"]
    trees = {e.round: e for e in events if e.kind == "draft_tree"}
    assert matched and {m.round for m in matched} <= set(trees)
    sources = set()
    for m in matched:
        assert m.token_ids == trees[m.round].token_ids
        assert all(1 <= c <= m.occurrences for c in m.counts)
        for tok, (ago, at) in zip(m.token_ids, m.origins):
            seq = ids if ago == 0 else history.runs[-1 - ago]  # the run itself is the history's newest now
            assert seq[at] == tok
            sources.add(ago)
        assert len(m.verify) == len(m.token_ids) + 2 and m.verify[0] == 1.0
    assert 1 in sources  # the earlier run supplied some node
    assert trace_from_json(trace_to_json(events)) == events
    html = render_tree(events)
    assert "your previous run, position" in html and "occurrences of the" in html
    explain = render_explain(events)
    assert "How suffix sized its trees" in explain
    bad = json.loads(trace_to_json(events))
    k = next(i for i, e in enumerate(bad["events"]) if e["kind"] == "suffix_match")
    bad["events"][k]["counts"][0] = bad["events"][k]["occurrences"] + 1
    with pytest.raises(ValueError, match="suffix_match.counts"):
        trace_from_json(json.dumps(bad))
    bad = json.loads(trace_to_json(events))
    bad["events"][k]["scores"][0] = 1.5
    with pytest.raises(ValueError, match="suffix_match.scores"):
        trace_from_json(json.dumps(bad))


def test_explain_prints_the_sizing_rule_with_numbers_that_reproduce():
    """Explain's sizing line, from a hand-made round: E and the two rates recompute from the printed scores and
    times, and the verdict follows the rule (a node that would pay, left out, is the budget's doing)."""
    import re
    from types import SimpleNamespace

    from engine.events import SuffixMatched
    from specviz.explain import suffix_sizing

    def run_with(next_score, verify):
        m = SuffixMatched(
            round=1,
            pos=5,
            match=2,
            match_tokens=["a", "b"],
            occurrences=12,
            token_ids=[7, 8, 9],
            counts=[10, 7, 3],
            parents=[-1, 0, 0],
            scores=path_scores([-1, 0, 0], [10, 7, 3], 12),
            origins=[[0, 1], [0, 2], [1, 3]],
            verify=verify,
            measured=[1, 4],
            next_score=next_score,
        )
        return SimpleNamespace(rounds=[SimpleNamespace(round=1, suffix=m)])

    text = suffix_sizing(run_with(0.123456, [1.0, 1.05, 1.1, 1.2, 1.5]))
    scores, e, t, now = re.search(
        r"scored ([\d., ]+): E = ([\d.]+) tokens expected, E ÷ t\(4\) = \S+ ÷ ([\d.]+) = ([\d.]+)", text
    ).groups()
    scores = [float(x) for x in scores.split(", ")]
    assert len(scores) == 3 and float(e) == pytest.approx(1 + sum(scores), abs=1e-9)
    assert f"{float(e) / float(t):.2f}" == now
    nxt, t5, then = re.search(
        r"\(E \+ ([\d.]+)\) ÷ t\(5\) = \(\S+ \+ \S+\) ÷ ([\d.]+) = ([\d.]+)", text
    ).groups()
    assert f"{(float(e) + float(nxt)) / float(t5):.2f}" == then and float(then) <= float(now)
    assert "it did not pay" in text
    assert "node budget" in suffix_sizing(run_with(0.5, [1.0, 1.0, 1.0, 1.0, 1.0]))
    assert suffix_sizing(None) == ""


def test_a_path_seen_once_is_not_certain():
    """path_scores: Π c ÷ (c_parent + 1): one occurrence scores 1/2, 1/4, 1/8 down its path (count ÷ occurrences
    would score 1.0 at every depth); agreeing occurrences score near 1; a child never outscores its parent."""
    assert path_scores([-1, 0, 1], [1, 1, 1], 1) == [0.5, 0.25, 0.125]
    tokens, parents, counts, _ = tree.trie([[1, 2]] * 9 + [[1, 3]], counted=True)
    scores = path_scores(parents, counts, 10)
    assert scores[0] == pytest.approx(10 / 11) and scores[1] == pytest.approx(10 / 11 * 9 / 11)
    assert all(scores[i] <= scores[p] for i, p in enumerate(parents) if p >= 0)
