"""Batched speculation (engine/decode/batch.py, runtime/rowcache.py, drafters/batched.py): per-row identity with solo
runs, the target's law per row, rows ending early, the per-row cache, goodput's γ, bad input, the events."""

import pytest
import torch

from engine import Engine, GenerationConfig, costmodel, load_model
from engine.config import MAX_BATCH
from engine.decode import batch as batch_mod
from engine.decode import step as step_mod
from engine.events import trace_from_json, trace_to_json
from engine.runtime.cache import KVCache
from engine.runtime.lean import forward_fn
from engine.runtime.rowcache import RowsKVCache, ragged_inputs
from tests.test_training_free import CHI2_15DF_999, joint_chi_square
from tests.tiny import tiny_llama

WORDS = "the sea is wide and the sea is deep and the sky is wide and blue and the wind is cold".split()


def prompts(n: int) -> list[str]:
    """n prompts of different lengths, some with repeats for n-gram lookup to find."""
    return [" ".join(WORDS[(3 * b) % 7 : (3 * b) % 7 + 4 + (5 * b) % 11]) for b in range(n)]


def solo_ids(engine, prompt, cfg, mode="speculative"):
    return list(engine.generate(prompt, cfg, mode=mode))[-1].token_ids


def batch_ids(events, rows: int) -> list:
    done = {e.row: e.token_ids for e in events if e.kind == "finished"}
    assert sorted(done) == list(range(rows))
    return [done[b] for b in range(rows)]


@pytest.fixture(scope="module")
def target(tiny_dirs):
    return load_model(tiny_dirs["target"])


# -- the per-row cache ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("fast", [True, False])
def test_ragged_forward_gives_each_row_its_solo_logits(monkeypatch, fast):
    """Rows of different lengths, new tokens of different counts (chains and a tree), one forward: each row's
    logits equal a one-row forward over its own sequence; then a row drops out and the rest still agree. Through
    the lean forward and transformers' own."""
    monkeypatch.setenv("SPECVIZ_FAST_FORWARD", "1" if fast else "0")
    model = tiny_llama(seed=4, vocab=300, max_position_embeddings=128)
    forward = forward_fn(model)
    torch.manual_seed(0)
    seqs = [torch.randint(0, 300, (n,)).tolist() for n in (9, 17, 4)]
    with torch.inference_mode():
        cache = RowsKVCache.for_model(model, 64, 3)
        x, mask, pos = ragged_inputs([0, 0, 0], [(s[:-3], None, None) for s in seqs], "cpu")
        forward(x, cache, attention_mask=mask, position_ids=pos)
        cache.set_lengths([len(s) - 3 for s in seqs])
        parents = [-1, 0, -1]  # row 2: a tree (two children of the root, one grandchild)
        tmask, offsets = step_mod.tree.tree_inputs(parents, 0, "cpu")
        new = [
            (seqs[0][-3:], None, None),
            (seqs[1][-3:-1], None, None),
            ([seqs[2][-3], 7, 8, 9], tmask, offsets),
        ]
        x, mask, pos = ragged_inputs(cache.lengths, new, "cpu")
        logits = forward(x, cache, attention_mask=mask, position_ids=pos)
        assert mask.shape == (3, 1, 4, max(cache.lengths))
        for r, (s, n) in enumerate(zip(seqs[:2], (3, 2))):
            ref = forward(torch.tensor([s[: len(s) - 3 + n]]), KVCache.for_model(model, 64))[0, -n:]
            torch.testing.assert_close(logits[r, :n], ref, atol=1e-4, rtol=1e-4)
        root = seqs[2][:-2]
        for node, path in ((1, [7]), (2, [7, 8]), (3, [9])):  # each node sees the root and its own ancestors
            ref = forward(torch.tensor([root + path]), KVCache.for_model(model, 64))[0, -1]
            torch.testing.assert_close(logits[2, node], ref, atol=1e-4, rtol=1e-4)
        # rollback per row, then row 0 drops out
        for r, keep in enumerate((len(seqs[0]), len(seqs[1]) - 1, len(seqs[2]) - 2)):
            cache.truncate_row(r, keep)
        cache.keep_rows([1, 2])
        x, mask, pos = ragged_inputs(cache.lengths, [([seqs[1][-1]], None, None), ([5], None, None)], "cpu")
        logits = forward(x, cache, attention_mask=mask, position_ids=pos)
        ref = forward(torch.tensor([seqs[1]]), KVCache.for_model(model, 64))[0, -1]
        torch.testing.assert_close(logits[0, 0], ref, atol=1e-4, rtol=1e-4)
        ref = forward(torch.tensor([seqs[2][:-2] + [5]]), KVCache.for_model(model, 64))[0, -1]
        torch.testing.assert_close(logits[1, 0], ref, atol=1e-4, rtol=1e-4)
        assert not torch.isnan(logits).any()


def test_row_pointers_move_alone():
    cache = RowsKVCache(2, 32, 3)
    cache.set_lengths([0, 0, 0])
    for layer in cache.layers:
        layer.lengths = [5, 9, 2]
    cache.truncate_row(1, 4)
    assert cache.lengths == [5, 4, 2] and cache.length == 5
    with pytest.raises(ValueError, match="cannot truncate row 2"):
        cache.truncate_row(2, 3)
    with pytest.raises(ValueError, match="at least one row"):
        cache.keep_rows([])


# -- lossless per row ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("rows", [2, 5, 16])
@pytest.mark.parametrize("spec", ["ngram", "self", "eagle"])
def test_each_row_is_its_solo_run_with_the_embedded_model(embedded, spec, rows):
    """Greedy, prompts of different lengths: every row of the batch is token-identical to its own solo run (and
    so to the target's greedy decoding, which the solo run is: tests/test_engine.py)."""
    engine = Engine(embedded, spec, measure_step=False)
    cfg = GenerationConfig(gamma=4, max_new_tokens=24 if rows < 16 else 12, record_topk=0)
    ps = prompts(rows)
    assert len({len(engine.encode(p)) for p in ps}) > 1
    got = batch_ids(list(engine.generate_batch(ps, cfg)), rows)
    assert got == [solo_ids(engine, p, cfg, "ar") for p in ps]


@pytest.mark.parametrize("rows", [2, 5, pytest.param(16, marks=pytest.mark.slow)])  # 16 rows: ~5 s each
@pytest.mark.parametrize("draft", ["other", "sharp"])
def test_each_row_is_its_solo_run_with_a_random_model_draft(tiny_dirs, target, draft, rows):
    """A separate random-weight draft model, batched on its own per-row cache: every row equals its solo run."""
    engine = Engine(target, f"model:{tiny_dirs[draft]}", measure_step=False)
    cfg = GenerationConfig(gamma=3, max_new_tokens=16, record_topk=0, raw=True)
    ps = prompts(rows)
    got = batch_ids(list(engine.generate_batch(ps, cfg)), rows)
    assert got == [solo_ids(engine, p, cfg) for p in ps]
    assert got == [solo_ids(engine, p, cfg, "ar") for p in ps]


@pytest.mark.parametrize(
    "spec", ["ngram", "self", "auto", "oracle:0.6", "layerskip:1", "recycle", "lookahead:2,3,2"]
)
def test_tiny_batches_match_solo_runs_for_every_batchable_drafter(target, spec):
    """Every drafter family a batch runs (per-row state, the batched causal-LM draft, trees, extra rows)."""
    engine = Engine(target, spec, measure_step=False)
    cfg = GenerationConfig(gamma=3, max_new_tokens=14, record_topk=2, raw=True)
    ps = prompts(5)
    events = list(engine.generate_batch(ps, cfg))
    assert batch_ids(events, 5) == [solo_ids(engine, p, cfg, "ar") for p in ps]
    assert trace_from_json(trace_to_json(events)) == events  # a batch's trace validates and reads back equal


class WithEos:
    """The target with another end-of-text set (everything else its own)."""

    def __init__(self, base, eos):
        self.base, self.eos_ids = base, eos

    def __getattr__(self, name):
        return getattr(self.base, name)


def test_a_row_that_ends_early_leaves_the_others_unchanged(target):
    """A row whose end-of-text comes first drops out (its cache row too); the other rows are their solo runs."""
    engine = Engine(target, "ngram", measure_step=False)
    cfg = GenerationConfig(gamma=3, max_new_tokens=20, record_topk=0, raw=True)
    ps = prompts(4)
    solo = [solo_ids(engine, p, cfg, "ar") for p in ps]
    eos = solo[1][3]  # make row 1's 4th token the end of text
    engine.target = WithEos(target, frozenset({eos}))
    ended = [solo_ids(engine, p, cfg, "ar") for p in ps]
    events = list(engine.generate_batch(ps, cfg))
    got = batch_ids(events, 4)
    assert got == ended and len(got[1]) <= 4 and got[1][-1] == eos
    assert any(len(ended[b]) > len(got[1]) for b in (0, 2, 3))  # the others ran on past it
    stops = {e.row: e.stop_reason for e in events if e.kind == "finished"}
    assert stops[1] == "eos"
    rounds = [e for e in events if e.kind == "batch_round"]
    assert 1 not in rounds[-1].rows and rounds[-1].forward_shape[0] < 4  # later forwards are smaller


# -- the target's law per row -------------------------------------------------------------------------------


def batch_pair_counts(engine, ids_by_row, runs, cfg):
    """{row's prompt: pair counts}: `runs` batches, each row seeded by the run (its generator: seed + row)."""
    counts = [dict() for _ in ids_by_row]
    for run in range(runs):
        c = GenerationConfig(
            **{**cfg.to_dict(), "seed": run * MAX_BATCH, "max_new_tokens": 2, "record_topk": 0}
        )
        events = list(engine.generate_batch(None, c, prompt_ids=ids_by_row))
        for b, out in enumerate(batch_ids(events, len(ids_by_row))):
            pair = tuple(out[:2])
            counts[b][pair] = counts[b].get(pair, 0) + 1
    return counts


@pytest.mark.slow  # statistical: make test runs it, the inner loop does not
def test_sampled_rows_keep_the_target_joint_law_and_a_row_mixup_does_not(target, tiny_dirs):
    """Two prompts alternating over 16 rows, 120 batches: each prompt's first two tokens, pooled over its 8 rows
    (960 samples), follow the target's exact top-4 × top-4 law (chi-square, p = 0.001), a random model draft
    proposing. Negative control: a loop that judged each row with its neighbour's logits fails the same test."""
    engine = Engine(target, f"model:{tiny_dirs['other']}", measure_step=False)
    cfg = GenerationConfig(gamma=2, temperature=1.0, top_k=4, raw=True)
    a, b = engine.encode("a b c a b", True), engine.encode("the sea is", True)
    rows = [a, b] * 8

    def check(counts):
        stats = []
        for k, ids in enumerate((a, b)):
            pooled = {}
            for row in range(k, 16, 2):
                for pair, n in counts[row].items():
                    pooled[pair] = pooled.get(pair, 0) + n
            stats.append(joint_chi_square(engine, ids, pooled, cfg)[0])
        return stats

    assert all(s < CHI2_15DF_999 for s in check(batch_pair_counts(engine, rows, 120, cfg)))
    forward = engine.forward
    # row r judged by row r − 1's
    engine.forward = lambda x, cache, **kw: forward(x, cache, **kw).roll(1, dims=0)
    wrong = batch_pair_counts(engine, rows, 40, cfg)
    try:  # the check fails either way: tokens outside the prompt's top-4 support, or a chi-square far above
        assert max(check(wrong)) > CHI2_15DF_999
    except AssertionError as e:
        assert "outside the target's top-k" in str(e)


# -- goodput --------------------------------------------------------------------------------------------------


def test_batch_forward_curve_is_measured_where_seen_and_a_line_in_total_rows_elsewhere():
    curve = costmodel.batch_forward_curve({(1, 1): 0.010, (4, 1): 0.012, (4, 5): 0.030})
    assert curve(4, 5) == 0.030 and curve(1, 1) == 0.010
    # the line through the multi-row points (n = 4: 12 ms, n = 20: 30 ms) is 1.125 ms per row
    assert curve(8, 5) == pytest.approx(0.012 + (40 - 4) * (0.018 / 16))
    assert costmodel.batch_forward_curve({})(2, 2) is None


def test_batch_drain_counts_rows_dropping_out_and_each_rows_draft_rate():
    """By hand: row 0 (α 0.5, always a draft) needs 10 / E(0.5, 1) = 6.67 rounds at γ = 1, row 1 (never a draft) 4;
    4 rounds of 2 × 2 tokens, then 2.67 of 1 × 2. At γ = 0: 4 rounds of 2 × 1, then 6 of 1 × 1."""
    curve = lambda b, t: 0.01 * b * t  # noqa: E731
    one = costmodel.batch_drain([0.5, 0.5], [1.0, 0.0], [10, 4], 1, curve, 0.0)
    assert one == pytest.approx(4 * 0.04 + (10 / 1.5 - 4) * 0.02)
    assert costmodel.batch_drain([0.5, 0.5], [1.0, 0.0], [10, 4], 0, curve, 0.003) == pytest.approx(
        4 * 0.02 + 6 * 0.01
    )
    assert costmodel.batch_drain([0.5], [1.0], [3], 2, curve, 0.001) == pytest.approx(
        3 / 1.75 * (0.03 + 0.001)
    )
    assert costmodel.batch_drain([0.5], [1.0], [3], 2, lambda b, t: None, 0.0) is None


def test_goodput_drafts_when_verifying_is_cheap_and_stops_when_it_is_not():
    """The same α and drafts: a forward whose cost hardly grows with its rows gets γ > 0; one that grows with every
    row (compute-bound, a big batch) gets γ = 0. Its reason names the numbers."""
    lengths = [8] * 8
    for slope, want_draft in ((0.0005, True), (0.02, False)):
        chooser = batch_mod.Goodput(GenerationConfig(gamma=4))
        chooser.counts = {b: [6, 4, 10, 10] for b in range(8)}
        for t in (1, 5):
            chooser.forward_s[(8, t)] = [0.02 + slope * 8 * t]
        gamma, decided = chooser.choose(7, lengths, 0.0001, list(range(8)), [40] * 8)
        assert (gamma > 0) == want_draft, (slope, gamma)
        assert decided.row == -1 and decided.gamma == gamma and "goodput" in decided.reason
        best = max(decided.candidates, key=lambda c: c["predicted_tokens_per_s"])
        assert best["gamma"] == gamma


def test_auto_in_a_batch_probes_then_decides_and_stays_lossless(target):
    engine = Engine(target, "auto", measure_step=False)
    cfg = GenerationConfig(gamma=3, max_new_tokens=24, record_topk=0, raw=True)
    ps = prompts(4)
    events = list(engine.generate_batch(ps, cfg))
    decided = [e for e in events if e.kind == "decided"]
    rounds = [e for e in events if e.kind == "batch_round"]
    assert len(decided) == len(rounds) and all(d.row == -1 for d in decided)
    assert [d.gamma for d in decided] == [r.gamma for r in rounds]
    assert any("goodput" in d.reason for d in decided)
    assert batch_ids(events, 4) == [solo_ids(engine, p, cfg, "ar") for p in ps]


# -- input ----------------------------------------------------------------------------------------------------


def test_bad_batches_are_refused_naming_the_setting_and_its_range(target):
    engine = Engine(target, "ngram", measure_step=False)
    with pytest.raises(ValueError, match=f"batch size B must be between 1 and {MAX_BATCH} prompts, got 0"):
        engine.generate_batch([])
    with pytest.raises(ValueError, match=f"between 1 and {MAX_BATCH} prompts, got {MAX_BATCH + 1}"):
        engine.generate_batch(["a"] * (MAX_BATCH + 1))
    with pytest.raises(ValueError, match="prompt 1 of the batch: prompt is empty"):
        engine.generate_batch(["", "  "])
    with pytest.raises(ValueError, match="prompt 2 of the batch is empty"):
        engine.generate_batch(None, prompt_ids=[[1, 2], []])
    with pytest.raises(ValueError, match="mode must be"):
        engine.generate_batch(["a"], mode="fast")
    with pytest.raises(ValueError, match="num_beams must be 1 in a batched run"):
        engine.generate_batch(["a"], GenerationConfig(num_beams=2))
    events = list(engine.generate_batch(["a b a b"], GenerationConfig(max_new_tokens=3, raw=True)))
    assert events[-1].kind == "batch_finished" and events[-1].summary["rows"] == 1  # still works after


def test_events_carry_their_row_and_a_single_run_leaves_it_out(target):
    engine = Engine(target, "ngram", measure_step=False)
    cfg = GenerationConfig(gamma=2, max_new_tokens=6, raw=True)
    events = list(engine.generate_batch(prompts(3), cfg))
    assert {e.row for e in events if e.kind == "run_started"} == {0, 1, 2}
    assert all(e.row == -1 for e in events if e.kind in ("batch_round", "batch_finished"))
    single = list(engine.generate(prompts(1)[0], cfg))
    assert '"row"' not in trace_to_json(single) and all(e.row == 0 for e in single)
    bad = trace_to_json(events).replace('"row":2', '"row":99', 1)
    with pytest.raises(ValueError, match="row must be"):
        trace_from_json(bad)


# -- the views ------------------------------------------------------------------------------------------------


def test_lanes_and_summary_render_each_row_and_the_race_ratio(target):
    import specviz
    from specviz.batch_view import crossover

    engine = Engine(target, "ngram", measure_step=False)
    cfg = GenerationConfig(gamma=2, max_new_tokens=8, raw=True)
    ps = prompts(3)
    spec = list(engine.generate_batch(ps, cfg))
    ar = list(engine.generate_batch(ps, cfg, "ar"))
    html = specviz.render_batch_lanes(spec)
    assert html.count('class="batch-lane"') == 3 and 'data-rows="3"' in html
    for b in range(3):  # each lane holds its own row's tokens, and only those
        assert f'data-row="{b}"' in html
    line = specviz.batch_summary_html({"speculative": spec, "ar": ar})
    s, a = spec[-1].summary["decode_tokens_per_s"], ar[-1].summary["decode_tokens_per_s"]
    assert f'data-ratio="{s / a:.3f}"' in line and "3 of 3 rows token-identical to AR" in line
    assert f"{spec[-1].summary['tokens']} tokens" in line
    ups = [{"decode_tokens_per_s": v} for v in (10, 20, 40)]
    assert crossover([1, 2, 4], ups, [{"decode_tokens_per_s": v} for v in (12, 21, 30)]) == 4
    assert crossover([1, 2, 4], ups, [{"decode_tokens_per_s": v} for v in (12, 21, 41)]) is None
    # a dip that recovers
    assert crossover([1, 2, 4], ups, [{"decode_tokens_per_s": v} for v in (9, 21, 41)]) is None
    assert crossover([1, 2, 4], ups, [{"decode_tokens_per_s": v} for v in (9, 19, 39)]) == 1
    assert specviz.render_batch_lanes([]).count('batch-lane"') == 0


def test_the_batch_tab_refuses_a_bad_prompt_list_naming_the_range():
    from ui import tab_runs

    with pytest.raises(ValueError, match="write 1 to 16 prompts, one per line.*got 0"):
        tab_runs.batch_prompts("\n  \n")
    with pytest.raises(ValueError, match="got 17"):
        tab_runs.batch_prompts("\n".join("x" * (i + 1) for i in range(17)))
    assert tab_runs.batch_prompts(" a \n\n b ") == ["a", "b"]


def test_a_batched_trace_loads_into_the_single_run_views_as_its_first_row(target, tmp_path):
    from engine.events import write_trace
    from ui import app_views as av

    engine = Engine(target, "ngram", measure_step=False)
    events = list(engine.generate_batch(prompts(3), GenerationConfig(gamma=2, max_new_tokens=6, raw=True)))
    write_trace(tmp_path / "batch.json", events)
    loaded = av.load_trace(tmp_path / "batch.json")
    assert loaded == [e for e in events if e.row == 0] and loaded[0].kind == "run_started"
    assert av.controls_of(loaded)["gamma"] == 2


@pytest.mark.slow  # a whole (tiny) batch benchmark
def test_the_batch_benchmark_runs_to_its_report(tiny_dirs):
    """`python -m benchmarks batch` end to end on the tiny target: the report names the machine and keeps the
    roofline the runs recorded (its end read `host` as a function after the loop had bound it to a dict)."""
    from benchmarks.batch_bench import run

    report = run(tiny_dirs["target"], ["ngram"], [1, 2], [2], 6, 1, 400, "test")
    assert report["cpu"] and report["machine"]["cpu"] == report["cpu"]
    assert report["host"]["weight_bytes"] > 0 and report["host"]["bandwidth_best"] > 0
