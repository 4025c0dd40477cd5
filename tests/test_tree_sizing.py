"""Tree size from the host's measured verify curve (engine/costmodel.py grow_tree and VerifyTimes,
drafters/base.py size_tree) for token recycling and lookahead: what pays is drafted, recycling learns which template
positions the target takes, the tree_sized record, and the engine's timing of every forward at its own rows."""

import json

import pytest
import torch

from engine import Engine, GenerationConfig, load_model
from engine.drafters.lookahead import LookaheadDrafter
from engine.drafters.recycle import TEMPLATES, RecycleDrafter
from engine.events import trace_from_json, trace_to_json
from tests.rounds import saw, timed


@pytest.fixture(scope="module")
def target(tiny_dirs):
    return load_model(tiny_dirs["target"])


def ids_of(engine, prompt, cfg, mode="speculative"):
    return list(engine.generate(prompt, cfg, mode=mode))[-1].token_ids


def _seen(inputs, topk):
    return type("Seen", (), {"inputs": inputs, "topk": topk, "extra_next": []})()


def test_sized_recycle_drafts_what_pays_on_the_measured_verify_curve():
    """Sized (the default): where verify forwards cost the same at every size the whole filled template is
    drafted; where each row costs a step, none (a plain step); in between, the likelier nodes first."""
    d = RecycleDrafter(4, TEMPLATES["small"], 100, torch.device("cpu"))
    d.settle(saw(_seen([5, 7, 8], [[7, 8, 9, 10], [1, 2, 3, 4], [11, 12, 13, 14]])))
    static = RecycleDrafter(4, TEMPLATES["small"], 100, torch.device("cpu"), sized=False)
    static.table = d.table.clone()
    pool = static.propose([3, 5], 4).token_ids.tolist()
    for rows in range(1, 15):  # free: every size timed alike
        d.settle(timed(rows, 0.02))
    assert d.propose([3, 5], 4).token_ids.tolist() == pool and len(pool) > 6
    steep = RecycleDrafter(4, TEMPLATES["small"], 100, torch.device("cpu"))
    steep.table = d.table
    for rows in range(1, 15):  # each position costs a whole step: no guess pays
        steep.settle(timed(rows, 0.02 * rows))
    assert steep.propose([3, 5], 4).token_ids.numel() == 0


def test_recycle_records_how_it_sized_each_tree(embedded):
    """On the embedded model: each sized round's tree_sized event holds the drafted tree (the draft_tree's tokens
    and parents), a score per node, the curve it was sized on; it validates and round-trips, Explain prints the
    sizing line, and hostile scores or curves are refused by name. The output stays the target's own."""
    from specviz.explain import render_explain
    from specviz.tree import render_tree

    engine = Engine(embedded, "recycle", measure_step=False)
    cfg = GenerationConfig(gamma=4, max_new_tokens=48)
    events = list(engine.generate("Count from one to twenty in words, comma separated.", cfg))
    sized = [e for e in events if e.kind == "tree_sized"]
    trees = {e.round: e for e in events if e.kind == "draft_tree"}
    assert len(sized) >= 3 and any(e.next_score is not None for e in sized)
    for e in sized:
        if e.token_ids:
            assert e.token_ids == trees[e.round].token_ids and e.parents == trees[e.round].parents
        assert len(e.scores) == len(e.token_ids) <= e.pool and len(e.verify) == len(e.token_ids) + 2
        assert all(0 <= s <= 1 for s in e.scores) and e.verify[0] == 1.0
    assert events[-1].token_ids == ids_of(
        engine, "Count from one to twenty in words, comma separated.", cfg, "ar"
    )
    assert trace_from_json(trace_to_json(events)) == events
    assert "How recycle sized its trees" in render_explain(events)
    assert "the learned rates along it" in render_tree(events)
    k = next(
        i
        for i, e in enumerate(json.loads(trace_to_json(events))["events"])
        if e["kind"] == "tree_sized" and e["scores"]
    )
    for field, bad, message in (
        ("scores", [1.5], "tree_sized.scores"),
        ("verify", [1.0], "tree_sized.verify must hold"),
    ):
        trace = json.loads(trace_to_json(events))
        event = trace["events"][k]
        event[field] = bad * (len(event["scores"]) if field == "scores" else 1)
        with pytest.raises(ValueError, match=message):
            trace_from_json(json.dumps(trace))


def test_recycle_learns_which_template_positions_the_target_takes():
    """Each template position's rate is counted against what the target committed after the proposal: when the
    target keeps taking the root's rank-1 guess, that position's rate rises above rank 0's, and on a curve where
    only one node pays it is the one drafted. Negative control: a drafter that saw rank 0 taken drafts rank 0."""
    drafted = {}
    for taken in (8, 7):  # the root's rank-1 guess, then (control) its rank-0 guess
        d = RecycleDrafter(4, TEMPLATES["small"], 100, torch.device("cpu"))
        d.settle(saw(_seen([5, 7, 8], [[7, 8, 9, 10], [1, 2, 3, 4], [11, 12, 13, 14]])))
        for rows in range(1, 15):
            d.settle(timed(rows, 0.02 * (1 + 0.6 * (rows - 1))))  # a node pays only when likely
        ids = [3, 5]
        for _ in range(12):
            d.propose(ids, 4)
            ids = ids + [taken, 60, 5]  # the target took `taken` after 5, then came back to 5
        rank = {path: i for i, path in enumerate(d.template)}
        rates = d.rates()
        assert (rates[rank[(1,)]] > rates[rank[(0,)]]) == (taken == 8)
        drafted[taken] = d.propose(ids, 4).token_ids.tolist()
    assert drafted[8][:1] == [8] and drafted[7][:1] == [7]


def test_sized_lookahead_verifies_the_candidates_that_pay_beside_its_window():
    """With the window's rows in every forward: where a forward costs the same at every size every candidate node
    is verified (the static tree); where each row costs a step only a node likelier than the row's share of the
    forward; where each row doubles it, none; the tree_sized record counts the window's rows and its curve is the
    forward over them plus n, over the one over them plus 1."""
    from engine.sampling.tree import trie

    def drafter(sized, cost):
        d = LookaheadDrafter(2, 3, 4, torch.device("cpu"), sized=sized)
        d.prepare([1, 2, 3], None)
        d.pool = {9: [(4, 5), (4, 6), (7, 8)]}  # three candidates after token 9 (two share their first token)
        for rows in range(1, 20):
            d.timed.observe(rows, cost(rows))
        return d

    static = drafter(False, lambda rows: 0.02).propose([1, 9], 4)
    assert (static.token_ids.tolist(), static.parents) == trie([[4, 5], [4, 6], [7, 8]])
    flat = drafter(True, lambda rows: 0.02).propose([1, 9], 4)
    assert flat.token_ids.tolist() == static.token_ids.tolist() and flat.parents == static.parents
    sized = flat.note("tree_sized")
    assert sized["extra_rows"] == 4 and sized["pool"] == 5 and sized["verify"] == [1.0] * 7
    # a row costs a step: with the window's 4 rows paid anyway, a node pays when its score beats
    # t(6) ÷ t(5) − 1 = 0.2 (at E = 1): 0.5 did; then 0.25 at E = 1.5 did not
    draft = drafter(True, lambda rows: 0.02 * rows).propose([1, 9], 4)
    assert draft.token_ids.tolist() == [4] and len(draft.extra.token_ids) == 4
    doubling = drafter(True, lambda rows: 0.02 * 2**rows)  # each row doubles the forward: none pays
    assert doubling.propose([1, 9], 4).token_ids.numel() == 0
    curve = drafter(True, lambda rows: 0.02 * (1 + 0.3 * (rows - 1))).propose([1, 9], 4).note("tree_sized")
    k = len(curve["token_ids"])
    assert curve["verify"][1] == pytest.approx((1 + 0.3 * 5) / (1 + 0.3 * 4), abs=1e-4)  # t(4 + 2) ÷ t(4 + 1)
    assert 0 < k < 5 and curve["next_score"] is not None


@pytest.mark.parametrize("spec", ["lookahead:3,3,2", "recycle", "suffix", "auto"])
def test_the_engine_times_each_forward_at_the_rows_it_computed(target, spec, monkeypatch):
    """Every round's verify time reaches the tree drafters at the forward's own rows (root, nodes, lookahead's
    window; a plain step: 1), through auto too, whichever drafter it chose: the curve their trees are sized on
    (auto hands a plain round over when a drafter is next asked: at the run's end, the plain rounds since)."""
    from engine.drafters.auto import HELD
    from engine.drafters.suffix import SuffixDrafter

    seen = []
    for cls in (LookaheadDrafter, RecycleDrafter, SuffixDrafter):
        monkeypatch.setattr(cls, "settle", lambda self, r: seen.append((self.name, r.rows)))
    engine = Engine(target, spec, measure_step=False)
    events = list(engine.generate("a b c a b d a b c a b", GenerationConfig(gamma=4, max_new_tokens=24)))
    rows = [e.verified for e in events if e.kind == "round_timed"]
    names = {n for n, _ in seen}
    for name in names:  # each tree drafter saw every round's forward, in order
        heard = [r for n, r in seen if n == name]
        assert heard == rows[: len(heard)] and len(rows) - len(heard) < HELD
        assert set(rows[len(heard) :]) <= {1} and (spec == "auto" or heard == rows)
    assert names and (len(names) == 2 if spec == "auto" else len(names) == 1)


def test_union_records_its_sizing_and_explain_says_how_it_scores(embedded):
    """On the embedded model the union's tree_sized events hold its drafted trees, its output is the target's
    own, and Explain describes both of its pools (control: recycling's Explain names only its template)."""
    from specviz.explain import render_explain
    from specviz.tree import render_tree

    prompt = "Count from one to twenty in words, comma separated."
    cfg = GenerationConfig(gamma=4, max_new_tokens=48)
    engine = Engine(embedded, "union", measure_step=False)
    events = list(engine.generate(prompt, cfg))
    sized = [e for e in events if e.kind == "tree_sized"]
    trees = {e.round: e for e in events if e.kind == "draft_tree"}
    assert len(sized) >= 3 and all(e.drafter == "union" for e in sized)
    assert all(e.token_ids == trees[e.round].token_ids for e in sized if e.token_ids)
    assert events[-1].token_ids == ids_of(engine, prompt, cfg, "ar")
    assert trace_from_json(trace_to_json(events)) == events
    explain = render_explain(events)
    assert "How union sized its trees" in explain and "merges two pools by path" in explain
    assert "the larger of its suffix and recycling scores" in render_tree(events)
    recycled = list(Engine(embedded, "recycle", measure_step=False).generate(prompt, cfg))
    assert "merges two pools by path" not in render_explain(recycled)
