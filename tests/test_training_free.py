"""Lookahead decoding and token recycling (engine/drafters/lookahead.py, recycle.py), the verify forward's extra
rows, and the lossy typical acceptance with its drift meter (engine/sampling/typical.py, engine/decode/drift.py)."""

import json

import pytest
import torch

from engine import Engine, GenerationConfig, load_model
from engine.decode import drift
from engine.drafters.base import Factory, Needs
from engine.drafters.lookahead import LookaheadDrafter, window_rows
from engine.drafters.recycle import TEMPLATES, RecycleDrafter, template_parents
from engine.drafters.registry import drafter_factory
from engine.drafters.suffix import SuffixDrafter
from engine.drafters.union import UnionDrafter, merge
from engine.events import trace_from_json, trace_to_json
from engine.runtime.cache import KVCache
from engine.sampling import tree
from engine.sampling.typical import accept_typical, threshold
from engine.specs import ModelLoadError, parse_draft
from tests.rounds import saw, timed

PROMPTS = ["a b c a b d a b c a b", "Tell me about the sea", "def fib(n):", "1, 2, 3, 4,"]
SPECS = [
    "lookahead",
    "lookahead:3,3,2",
    "lookahead:1,2,1",
    "lookahead:4,4,4,static",
    "recycle",
    "recycle:8,wide",
    "recycle:2",
    "recycle:8,small,static",
    "union",
    "union:3,2",
    "auto",
]
CHI2_15DF_999 = 37.70  # chi-square critical value, 15 degrees of freedom, significance 0.001


def ids_of(engine, prompt, cfg, mode="speculative"):
    return list(engine.generate(prompt, cfg, mode=mode))[-1].token_ids


def test_window_rows_see_a_contiguous_run_of_positions():
    """Level l, column i sits at root + 1 + i + l and sees level 0 up to its column, then its own column below it:
    one position each, 1 .. i + l (so its next-token prediction is a Jacobi update of the position after it)."""
    offsets, sees = window_rows(3, 3)
    assert offsets == [1, 2, 3, 2, 3, 4, 3, 4, 5]
    assert sees[0] == [] and sees[2] == [0, 1]  # level 0: a sequence of guesses
    assert sees[4] == [0, 1]  # level 1, column 1: level 0 columns 0..1
    assert sees[8] == [0, 1, 2, 5]  # level 2, column 2: level 0 columns 0..2, level 1 column 2
    for row, seen in enumerate(sees):  # the positions seen, plus the row's own, are exactly 1 .. offset
        assert sorted([offsets[s] for s in seen] + [offsets[row]]) == list(range(1, offsets[row] + 1))


def test_extra_rows_are_invisible_to_the_tree_and_see_no_node():
    """with_extra: nodes never see an extra row; an extra row sees the prefix, the root, its own list, never a node."""
    mask, pos = tree.tree_inputs([-1, 0], prefix=2, device="cpu")
    full, full_pos = tree.with_extra(mask, pos, offsets=[1, 2], sees=[[], [0]])
    m = full[0, 0].int().tolist()
    assert full.shape == (1, 1, 5, 7) and full_pos.tolist() == [[2, 3, 4, 3, 4]]
    assert [row[5:] for row in m[:3]] == [[0, 0]] * 3  # root and nodes: no extra column
    assert m[3] == [1, 1, 1, 0, 0, 1, 0] and m[4] == [1, 1, 1, 0, 0, 1, 1]


@pytest.fixture(scope="module")
def target(tiny_dirs):
    return load_model(tiny_dirs["target"])


def test_extra_rows_leave_the_verified_rows_unchanged_and_compute_their_own_sequence(target):
    """The same forward with the window's rows appended gives the tree's rows the same logits, and each window row
    the logits a plain forward over the sequence it sees would give (the mask means what it says)."""
    model, prefix, nodes, parents = target.model, [11, 12, 13, 14], [21, 22, 23], [-1, 0, -1]
    window = [31, 32, 33, 34]  # W = 2, two levels
    offsets, sees = window_rows(2, 2)

    def run(extra):
        cache = KVCache.for_model(model, 32)
        with torch.inference_mode():
            model(torch.tensor([prefix[:-1]]), past_key_values=cache)
            mask, pos = tree.tree_inputs(parents, 3, "cpu")
            tokens = [prefix[-1]] + nodes
            if extra:
                mask, pos = tree.with_extra(mask, pos, offsets, sees)
                tokens += window
            return model(
                torch.tensor([tokens]), past_key_values=cache, attention_mask=mask, position_ids=pos
            ).logits[0]

    plain, both = run(False), run(True)
    assert torch.allclose(plain, both[:4], atol=1e-4)
    with torch.inference_mode():
        for row, seen in enumerate(sees):
            seq = prefix + [window[s] for s in sorted(seen, key=lambda s: offsets[s])] + [window[row]]
            ref = model(torch.tensor([seq])).logits[0, -1]
            assert torch.allclose(both[4 + row], ref, atol=1e-4), row


@pytest.mark.parametrize("spec", SPECS)
def test_greedy_is_the_target_own_output_on_a_random_model(target, spec):
    """Greedy lookahead / recycling / union / auto with recycling: token-identical to AR, and every trace
    round-trips."""
    engine = Engine(target, spec, measure_step=False)
    for prompt in PROMPTS:
        cfg = GenerationConfig(gamma=4, max_new_tokens=40)
        events = list(engine.generate(prompt, cfg))
        assert events[-1].token_ids == ids_of(engine, prompt, cfg, "ar")
        assert trace_from_json(trace_to_json(events)) == events


def test_lookahead_emits_its_window_every_round_and_fills_its_pool(target):
    """One lookahead_window per drafted round (the last token of a budget is a plain step), (N − 1) × W guesses;
    the pool grows; the window's rows are in the forward's cost."""
    engine = Engine(target, "lookahead:3,3,2", measure_step=False)
    events = list(engine.generate("a b c a b d a b c a b", GenerationConfig(gamma=4, max_new_tokens=30)))
    windows = [e for e in events if e.kind == "lookahead_window"]
    rounds = [e for e in events if e.kind == "round_timed"]
    drafted = {w.round for w in windows}
    assert len(windows) >= len(rounds) - 1 and all(
        len(w.token_ids) == 2 and len(w.token_ids[0]) == 3 for w in windows
    )
    assert windows[-1].pool > windows[0].pool >= 1 and all(w.added <= 3 for w in windows)
    assert all(r.verified >= 1 + 6 for r in rounds if r.round in drafted)  # the window's rows are in its cost
    # the next round's top level is what the target predicted from this round's top level
    assert all(b.token_ids[-1] == a.next_ids for a, b in zip(windows, windows[1:]))


def test_recycle_fills_its_template_from_the_forwards_it_saw(target):
    """After a forward, M[x] holds that row's top-k; the next tree is the template filled breadth first from it
    (static: the whole filled template)."""
    make = drafter_factory("recycle:4,small,static", target)
    d = make(GenerationConfig(), None, 64, None)
    assert make.needs.rows == len(TEMPLATES["small"])
    d.settle(
        saw(type("Seen", (), {"inputs": [5, 7], "topk": [[7, 8, 9, 10], [1, 2, 3, 4]], "extra_next": []})())
    )
    draft = d.propose([3, 5], 4)
    tokens, parents = draft.token_ids.tolist(), draft.parents
    assert tokens[:4] == [7, 8, 9, 10] and parents[:4] == [-1] * 4  # the root's four guesses
    # M[7] under rank 0 (the template's (0, 0), (0, 1))
    assert tokens[4:6] == [1, 2] and parents[4:6] == [0, 0]
    assert all(p < i for i, p in enumerate(parents))
    assert d.propose([3, 99], 4).token_ids.numel() == 0  # nothing seen after 99 yet


def test_recycle_writes_the_rows_it_saw_in_order_when_its_table_is_next_read(target):
    """Rows a forward hands back wait until the table is read: then the latest row of a token is the one the tree
    is filled from, as if each had been written at once; a run that never asks writes them after UNLEARNED."""
    from engine.drafters.base import Seen
    from engine.drafters.recycle import UNLEARNED

    make = drafter_factory("recycle:4,small,static", target)
    d = make(GenerationConfig(), None, 64, None)
    for top in ([1, 2, 3, 4], [7, 8, 9, 10]):
        d.settle(saw(Seen(inputs=[5], topk=[top], extra_next=[])))
    assert d.unlearned and d._table[5].tolist() == [-1] * 4  # nothing read the table yet
    assert d.propose([3, 5], 4).token_ids.tolist()[:4] == [7, 8, 9, 10]
    for i in range(UNLEARNED):
        d.settle(saw(Seen(inputs=[6], topk=[[i, i + 1, i + 2, i + 3]], extra_next=[])))
    assert not d.unlearned and d._table[6].tolist() == [UNLEARNED - 1 + j for j in range(4)]


def test_templates_are_trees_and_k_cuts_them():
    """Each template lists parents first; recycle:k keeps only ranks below k (with their prefixes)."""
    for name, tpl in TEMPLATES.items():
        parents = template_parents(tpl)
        assert all(p < i for i, p in enumerate(parents)), name
    d = RecycleDrafter(2, TEMPLATES["wide"], 100, torch.device("cpu"))
    assert all(max(path) < 2 for path in d.template) and len(d.template) < len(TEMPLATES["wide"])
    assert all(p < i for i, p in enumerate(d.parents))


def test_specs_parse_with_commas_or_colons_and_refuse_out_of_range():
    """lookahead:5,4,5 is lookahead:5:4:5; bounds and the window's size are refused with the setting named."""
    assert parse_draft("lookahead:5,4,5").values == parse_draft("lookahead:5:4:5").values == (5, 4, 5, None)
    assert parse_draft("lookahead:5,4,5,static").values == (5, 4, 5, "static")
    assert parse_draft("recycle:8,wide").values[:2] == (8, "wide")
    assert parse_draft("recycle:8,wide,static").values == (8, "wide", "static")
    with pytest.raises(ModelLoadError, match="W <= 16"):
        parse_draft("lookahead:17")
    with pytest.raises(ModelLoadError, match="template must be small or wide"):
        parse_draft("recycle:4,huge")


def test_lookahead_refuses_a_window_too_large_for_one_forward(target):
    """W·(N − 1) > 64 rows is refused at build time, naming the rule."""
    with pytest.raises(ModelLoadError, match=r"W·\(N − 1\) <= 64"):
        drafter_factory("lookahead:16,8,4", target)


# -- sampling: the 2-token joint law ----------------------------------------------------------------------------


def pair_counts(engine, ids, n, cfg):
    counts = {}
    for seed in range(n):
        run = GenerationConfig(**{**cfg.to_dict(), "seed": seed, "max_new_tokens": 2, "record_topk": 0})
        pair = tuple(list(engine.generate(None, run, prompt_ids=ids))[-1].token_ids[:2])
        counts[pair] = counts.get(pair, 0) + 1
    return counts


def joint_chi_square(engine, ids, counts, cfg):
    """Chi-square of the pair counts against the target's exact p(x1)·p(x2|x1) on the cells it gives mass to,
    the rare ones (expected < 5) pooled into one cell."""
    law = drift.target_pair_law(engine, ids, cfg, list(counts))
    x1s = sorted({p[0] for p in counts})
    n = sum(counts.values())
    # every cell of the target's top-k × top-k support among the x1 seen (unseen cells count 0)
    with torch.inference_mode():
        first = drift.sampling.shape_probs(
            engine.target.model(torch.tensor([ids])).logits[0, -1], cfg.temperature, cfg.top_k, cfg.top_p
        )
    support = torch.nonzero(first).flatten().tolist()
    assert set(x1s) <= set(support), "a first token outside the target's top-k"
    rows = torch.tensor([ids + [x] for x in support])
    with torch.inference_mode():
        second = drift.sampling.shape_probs(
            engine.target.model(rows).logits[:, -1], cfg.temperature, cfg.top_k, cfg.top_p
        )
    cells = [
        ((x, y), float(first[x] * second[k, y]))
        for k, x in enumerate(support)
        for y in torch.nonzero(second[k]).flatten().tolist()
    ]
    assert all(pair in dict(cells) or len(pair) < 2 for pair in counts), "a pair outside the target's support"
    stat, pooled_obs, pooled_exp = 0.0, 0, 0.0
    for pair, p in cells:
        obs, exp = counts.get(pair, 0), p * n
        if exp < 5:
            pooled_obs, pooled_exp = pooled_obs + obs, pooled_exp + exp
        else:
            stat += (obs - exp) ** 2 / exp
    if pooled_exp > 0:
        stat += (pooled_obs - pooled_exp) ** 2 / pooled_exp
    exact = dict(cells)
    # joint_tv's law
    assert all(law[pair] == pytest.approx(exact[pair], rel=1e-4) for pair in counts if len(pair) == 2)
    return stat, len(cells)


def primed(engine, family, ids, cfg):
    """The engine's drafter with state that proposes from round 1: recycle's table rows for the root and every
    likely first token, lookahead's pool under the root; both hold the target's top tokens in reverse order
    (the least likely first), so the tree's siblings are often wrong and the multi-candidate rule does work."""
    with torch.inference_mode():
        first = engine.target.model(torch.tensor([ids])).logits[0, -1].topk(4).indices.tolist()
        rows = torch.tensor([ids + [x] for x in first])
        second = engine.target.model(rows).logits[:, -1].topk(4).indices.tolist()
    if family in ("recycle", "union"):

        def make(cfg_, gen, max_len, cache):
            d = RecycleDrafter(4, TEMPLATES["small"], engine.target.vocab_size, engine.target.device)
            d.table[ids[-1]] = torch.tensor(first[::-1])
            for x, nxt in zip(first, second):
                d.table[x] = torch.tensor(nxt[::-1])
            if family == "union":  # recycling's primed pool beside suffix's matches in the prompt
                return UnionDrafter(
                    SuffixDrafter(8, engine.target.device), d, engine.target.device, "union", 24
                )
            return d

        make = Factory(make, Needs(rows=24 if family == "union" else len(TEMPLATES["small"])))
    else:

        def make(cfg_, gen, max_len, cache):
            d = LookaheadDrafter(2, 3, 4, engine.target.device)
            d.pool[ids[-1]] = [(x, nxt[-1]) for x, nxt in zip(first[::-1], second[::-1])]
            return d

        make = Factory(make, Needs(rows=2 * 2 + 4 * 2))
    engine.make_drafter = make
    return engine


@pytest.mark.slow  # statistical: make test runs it, the inner loop does not
@pytest.mark.parametrize("family", ["recycle", "lookahead", "union"])
def test_sampling_keeps_the_target_joint_law_and_the_lossy_rule_does_not(target, family):
    """1500 seeded runs: the first two tokens follow the target's exact top-4 × top-4 law (chi-square, p = 0.001);
    the negative control, the same drafter under typical acceptance, fails the same test."""
    engine = Engine(target, family, measure_step=False)
    ids = engine.encode("a b c a b", True)
    cfg = GenerationConfig(gamma=2, temperature=1.0, top_k=4, raw=True)
    primed(engine, family, ids, cfg)
    stat, cells = joint_chi_square(engine, ids, pair_counts(engine, ids, 1500, cfg), cfg)
    assert cells == 16 and stat < CHI2_15DF_999
    lossy = GenerationConfig(gamma=2, temperature=1.0, top_k=4, raw=True, accept="typical:0.05,0.05")
    stat, _ = joint_chi_square(engine, ids, pair_counts(engine, ids, 600, lossy), lossy)
    assert stat > CHI2_15DF_999


# -- typical acceptance and the drift meter ---------------------------------------------------------------------


def test_typical_threshold_and_acceptance_by_hand():
    """p(x) > min(ε, δ·exp(−H(p))): with a uniform p over 4 tokens H = ln 4, δ e^−H = δ/4."""
    p = torch.tensor([[0.25, 0.25, 0.25, 0.25], [0.7, 0.1, 0.1, 0.1], [0.1, 0.2, 0.3, 0.4]])
    assert threshold(p[:1], 0.9, 0.8).item() == pytest.approx(0.2)
    assert threshold(p[:1], 0.1, 0.8).item() == pytest.approx(0.1)
    v = accept_typical(torch.tensor([2, 1]), p, 0.3, 0.8, greedy=True, draws=None)
    # 0.25 > 0.2 kept (not the argmax: lossy); row 1's bar is min(0.3, 0.8·e^−H) ≈ 0.31 > p = 0.1: rejected
    assert v.n_accepted == 1 and v.next_id == 0 and v.accept_prob == [1.0, 0.0]


def test_greedy_drift_counts_the_first_difference():
    """first = index of the first differing token; positions past the shorter run differ."""
    assert drift.greedy_drift([1, 2, 3], [1, 2, 3]) == {"first": None, "differ": 0, "tokens": 3}
    assert drift.greedy_drift([1, 5, 3, 4], [1, 2, 3]) == {"first": 1, "differ": 2, "tokens": 4}


@pytest.mark.slow  # two drift runs
def test_the_exact_rule_has_no_greedy_drift_and_a_loose_typical_rule_has_some(target, tiny_dirs):
    """On the same prompt and drafter (an unrelated random model): exact acceptance is AR token for token;
    typical:0.001,0.001 (a bar its drafts clear) leaves AR's output, and the trace says which rule ran."""
    engine = Engine(target, f"model:{tiny_dirs['other']}", measure_step=False)
    found = False
    for prompt in PROMPTS:
        ar = ids_of(engine, prompt, GenerationConfig(max_new_tokens=40), "ar")
        exact = ids_of(engine, prompt, GenerationConfig(max_new_tokens=40))
        assert drift.greedy_drift(exact, ar)["first"] is None
        events = list(
            engine.generate(prompt, GenerationConfig(max_new_tokens=40, accept="typical:0.001,0.001"))
        )
        assert events[0].config["accept"] == "typical:0.001,0.001"
        found |= drift.greedy_drift(events[-1].token_ids, ar)["first"] is not None
    assert found


@pytest.mark.slow  # statistical: make test runs it, the inner loop does not
def test_sampled_drift_meter_sees_the_lossy_law_above_the_exact_rule_noise(target):
    """joint_tv at the same n and seeds: the exact rule's TV is sampling noise, the lossy rule's is well above it."""
    engine = Engine(target, "recycle", measure_step=False)
    ids = engine.encode("a b c a b", True)
    cfg = GenerationConfig(gamma=2, temperature=1.0, top_k=4, raw=True, accept="typical:0.05,0.05")
    primed(engine, "recycle", ids, cfg)
    report = drift.drift_report(engine, "a b c a b", cfg, n=600)
    assert report["exact"]["tv"] < 0.12 and report["lossy"]["tv"] > report["exact"]["tv"] + 0.15
    with pytest.raises(ValueError, match="temperature must be > 0"):
        drift.joint_tv(engine, "a b", GenerationConfig())


def test_the_accept_setting_is_checked_with_its_range():
    """accept is 'exact' or 'typical[:EPS,DELTA]' with both in (0, 1]; beams refuse the lossy rule."""
    assert GenerationConfig(accept="TYPICAL").accept == "typical:0.09,0.3"
    for bad in ("fast", "typical:0,1", "typical:0.1", "typical:a,b", None):
        with pytest.raises(ValueError, match="accept must be 'exact'"):
            GenerationConfig(accept=bad)
    with pytest.raises(ValueError, match="num_beams 1"):
        GenerationConfig(accept="typical", num_beams=2)


# -- the real model --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("spec", ["lookahead", "recycle", "recycle:8,wide"])
def test_greedy_is_identical_to_ar_on_the_benchmark_prompts(embedded, spec):
    """The embedded SmolLM2 on every fourth benchmark prompt: lookahead and recycling commit exactly AR's tokens."""
    engine = Engine(embedded, spec, measure_step=False)
    rows = [json.loads(line) for line in open("engine/prompts/bench.jsonl", encoding="utf-8")][::4]
    cfg = GenerationConfig(gamma=4, max_new_tokens=40)
    for row in rows:
        assert ids_of(engine, row["prompt"], cfg) == ids_of(engine, row["prompt"], cfg, "ar"), row["prompt"][
            :40
        ]


# -- the renderers ----------------------------------------------------------------------------------------------


def test_the_grid_draws_each_window_escaped_with_its_fixed_points(target):
    """A lookahead run's Tree view has one grid per windowed round, (N − 1) rows of W cells plus the target's row,
    token text escaped, fixed points marked as the event says."""
    import dataclasses

    import specviz

    engine = Engine(target, "lookahead:3,3,2", measure_step=False)
    events = list(engine.generate("a b c a b d a b c", GenerationConfig(max_new_tokens=20)))
    windows = [e for e in events if e.kind == "lookahead_window"]
    html = specviz.render_tree(events)
    assert html.count('class="la-window"') == len(windows) > 0
    w = windows[0]
    hostile = dataclasses.replace(
        w, tokens=[["<b>x</b>"] + row[1:] for row in w.tokens], fixed=[[True] + row[1:] for row in w.fixed]
    )
    grid = specviz.render_tree([e if e is not w else hostile for e in events])
    assert "<b>x</b>" not in grid and "&lt;b&gt;x&lt;/b&gt;" in grid
    assert 'la-cell la-fixed" data-level="0" data-col="0"' in grid


def test_a_lossy_run_is_badged_in_every_view_and_an_exact_one_nowhere(target, tiny_dirs):
    """The badge in the summary, stream, tree, verify, race and explain views of a lossy race, with the greedy drift
    meter and a LOSSY verdict; none of it for the exact rule."""
    from specviz.runs import RunSet
    from ui.app_views import views

    engine = Engine(target, f"model:{tiny_dirs['other']}", measure_step=False)
    for accept, lossy in (("typical:0.001,0.001", True), ("exact", False)):
        cfg = GenerationConfig(max_new_tokens=20, accept=accept)
        events = RunSet()
        for lane, e in engine.race("Tell me about the sea", cfg):
            events.add(e, lane)
        v = views(events, figures=False)
        for name in ("summary", "stream", "tree", "verify", "race", "explain"):
            assert ('class="sv-lossy"' in getattr(v, name)) == lossy, (accept, name)
        assert ('data-drift="greedy"' in v.summary) == lossy and ('data-drift="greedy"' in v.race) == lossy
        assert ("LOSSY rule" in v.race) == lossy


def test_union_merges_pools_by_path_keeping_the_larger_score():
    """Two pools sharing a path merge into one trie: the shared path once, with the larger score of the two
    (control: a token under another parent stays a separate node); parents first, scores monotone."""
    a = ([5, 6, 7], [-1, 0, 0], [0.5, 0.25, 0.2])
    b = ([5, 6, 9, 6], [-1, 0, -1, 2], [0.4, 0.3, 0.6, 0.1])
    tokens, parents, scores = merge([a, b])
    assert tokens == [5, 6, 7, 9, 6] and parents == [-1, 0, 0, -1, 3]
    assert scores == [0.5, 0.3, 0.2, 0.6, 0.1]
    assert all(p < i and scores[i] <= scores[p] for i, p in enumerate(parents) if p >= 0)


def test_union_drafts_from_both_families_and_records_its_sizing(target):
    """On a flat verify curve the union drafts suffix's continuation and recycling's guesses in one tree (control:
    each family's own candidates are there), and its tree_sized note names the merged pool."""
    make = drafter_factory("union:4,2", target)
    d = make(GenerationConfig(), None, 64, None)
    ids = [3, 4, 5, 3, 4]  # suffix: after "3 4" came 5
    d.prepare(ids, GenerationConfig())
    for rows in (1, 2, 3, 5, 9):
        for _ in range(3):
            d.settle(timed(rows, 0.01))  # flat: every node pays
    d.settle(saw(type("Seen", (), {"inputs": [4, 8], "topk": [[8, 9], [10, 11]], "extra_next": []})()))
    draft = d.propose(ids, 4)
    tokens, parents = draft.token_ids.tolist(), draft.parents
    roots = {t for t, p in zip(tokens, parents) if p < 0}
    assert roots == {
        5,
        8,
        9,
    }  # suffix's 5 (then 3, 4) and recycling's top-2 after 4 (8, then 10 and 11 after it)
    paths = []
    for t, p in zip(tokens, parents):
        paths.append((paths[p] if p >= 0 else ()) + (t,))
    assert (5, 3, 4) in paths and (8, 10) in paths and (9,) in paths  # both families' candidates, merged
    note = draft.note("tree_sized")
    assert note["drafter"] == "union:4,2" and note["pool"] == len(tokens) and note["token_ids"] == tokens
    assert make.needs.rows >= len(tokens) and draft.topk == 2


def test_a_union_round_with_nothing_to_draft_still_asks_for_the_top_k(target):
    """With no match and an empty table the union drafts nothing, yet its forward hands back the top-k, so
    recycling's table learns from plain rounds as recycling alone does (control: the next round drafts from it)."""
    make = drafter_factory("union:4,2", target)
    d = make(GenerationConfig(), None, 64, None)
    d.prepare([7], GenerationConfig())
    draft = d.propose([7], 4)
    assert draft.token_ids.numel() == 0 and draft.topk == 2
    d.settle(saw(type("Seen", (), {"inputs": [7], "topk": [[12, 13]], "extra_next": []})()))
    for rows in (1, 2, 3):
        for _ in range(3):
            d.settle(timed(rows, 0.01))
    assert 12 in d.propose([7], 4).token_ids.tolist()
