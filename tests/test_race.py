"""The interleaved race, the recorded random draw u, honest counts at an accepted EOS, the oracle drafter,
the time limit and the cache size: on tiny random models and on the real embedded model."""

import pytest
import torch

from engine import Engine, GenerationConfig, ModelLoadError
from engine.decode.loop import cache_slots
from engine.runtime.models import load_model
from engine.runtime.threads import _race_threads, torch_threads
from tests.test_sampling import CHI2_999, chi_square


def _ids(events):
    return [t for e in events if e.kind == "committed" for t in e.token_ids]


@pytest.mark.parametrize("temperature", [0.0, 0.9])
def test_race_lanes_equal_separate_runs(tiny_dirs, temperature):
    """Interleaving changes nothing but timing: each lane's tokens equal the same run made on its own."""
    engine = Engine(load_model(tiny_dirs["target"]), f"model:{tiny_dirs['other']}", measure_step=False)
    cfg = GenerationConfig(gamma=3, max_new_tokens=30, temperature=temperature, seed=7)
    lanes = {"speculative": [], "ar": []}
    for lane, event in engine.race("Tell me about the sea", cfg):
        lanes[lane].append(event)
    with torch_threads(1):  # the race computes on one thread: compare like with like
        alone = {
            mode: list(engine.generate("Tell me about the sea", cfg, mode)) for mode in ("speculative", "ar")
        }
    for mode in lanes:
        assert _ids(lanes[mode]) == _ids(alone[mode]) == lanes[mode][-1].token_ids
    if temperature == 0:
        assert _ids(lanes["speculative"]) == _ids(lanes["ar"])


def test_race_interleaves_round_by_round(tiny_dirs):
    """Both lanes advance before either finishes, and each lane's events stay in its own order."""
    engine = Engine(load_model(tiny_dirs["target"]), "self", measure_step=False)
    order = [
        (lane, e.kind) for lane, e in engine.race("1, 2, 3,", GenerationConfig(gamma=2, max_new_tokens=24))
    ]
    first_finish = next(i for i, (_, kind) in enumerate(order) if kind == "finished")
    before = {lane for lane, kind in order[:first_finish] if kind == "committed"}
    assert before == {"speculative", "ar"}
    switches = sum(1 for a, b in zip(order, order[1:]) if a[0] != b[0])
    assert switches >= 4  # not one lane after the other
    for lane in ("speculative", "ar"):
        kinds = [kind for name, kind in order if name == lane]
        assert kinds[0] == "run_started" and kinds[-1] == "finished" and kinds.count("finished") == 1


def test_race_threads_stay_inside_the_lanes(tiny_dirs):
    """Both lanes compute on the race's thread count; the caller's threads, on whichever OS thread resumes
    the race (Gradio resumes a generator from worker threads), are what they were before each step."""
    from concurrent.futures import ThreadPoolExecutor

    engine = Engine(load_model(tiny_dirs["target"]), "self", measure_step=False)
    race = engine.race("1, 2, 3,", GenerationConfig(gamma=2, max_new_tokens=16), threads=1)

    def step():
        before = torch.get_num_threads()
        item = next(race, None)
        return item, before, torch.get_num_threads()

    started, steps = {}, 0
    with ThreadPoolExecutor(max_workers=3) as pool, torch_threads(2):
        while True:
            item, before, after = pool.submit(step).result()
            assert before == after and torch.get_num_threads() == 2
            if item is None:
                break
            steps += 1
            lane, event = item
            if event.kind == "run_started":
                started[lane] = event.threads
    assert started == {"speculative": 1, "ar": 1} and steps > 10
    with torch_threads(2):
        mine = [
            e.threads
            for _, e in engine.race("1, 2,", GenerationConfig(gamma=2, max_new_tokens=4), threads=None)
            if e.kind == "run_started"
        ]
    assert mine == [2, 2]
    summary = engine.run(
        "1, 2,", GenerationConfig(gamma=2, max_new_tokens=4), compare_ar=True, race_threads=1
    ).summary
    assert summary["threads"] == 1


@pytest.mark.parametrize("bad", [0, -1, 10_000, 1.5])
def test_race_threads_out_of_range_is_refused(tiny_dirs, bad):
    engine = Engine(load_model(tiny_dirs["target"]), "self", measure_step=False)
    with pytest.raises(ValueError, match=r"race threads must be 1\.\.256"):
        next(engine.race("1, 2,", GenerationConfig(max_new_tokens=4), threads=bad))


@pytest.mark.parametrize("raw, expected", [("1", 1), ("0", None), (" 3 ", 3)])
def test_race_threads_setting(monkeypatch, raw, expected):
    monkeypatch.setenv("SPECVIZ_RACE_THREADS", raw)
    assert _race_threads() == expected


@pytest.mark.parametrize("raw", ["many", "-2", "999", ""])
def test_race_threads_setting_names_its_range(monkeypatch, raw):
    monkeypatch.setenv("SPECVIZ_RACE_THREADS", raw)
    with pytest.raises(ValueError, match=r"SPECVIZ_RACE_THREADS must be a whole number 0\.\.256"):
        _race_threads()


def test_run_compare_ar_uses_the_race(tiny_dirs):
    """Engine.run(compare_ar=True) reports the race's verdict from the cost model's summary."""
    engine = Engine(load_model(tiny_dirs["target"]), "self", measure_step=False)
    result = engine.run("def fib(n):", GenerationConfig(gamma=3, max_new_tokens=20), compare_ar=True)
    s = result.summary
    assert s["identical_to_ar"] is True and s["race_done"] is True and s["speedup"] > 0
    assert s["ar_token_ids"] == result.token_ids and s["step_source"] == "the AR lane"
    assert [e.kind for e in result.events].count("run_started") == 2


def test_sampling_records_u_and_the_residual(tiny_dirs):
    """Every tested draft token carries its draw u: accepted iff u < min(1, p/q); a corrected token carries
    the top-k of norm(max(0, p − q)), which holds the token drawn when it is among the top-k."""
    engine = Engine(load_model(tiny_dirs["target"]), f"model:{tiny_dirs['sharp']}", measure_step=False)
    cfg = GenerationConfig(gamma=4, max_new_tokens=60, temperature=1.0, seed=3, record_topk=20)
    events = list(engine.generate("Once upon a time", cfg))
    verified = [e for e in events if e.kind == "verified"]
    tested = 0
    for v in verified:
        assert v.u is not None and len(v.u) == len(v.accept_prob)
        stop = v.first_rejected if v.first_rejected is not None else sum(v.accepted)
        for i in range(stop):
            assert v.accepted[i] and v.u[i] < v.accept_prob[i]
            tested += 1
        if v.first_rejected is not None:
            assert v.u[v.first_rejected] >= v.accept_prob[v.first_rejected]
            # a distribution's top-k
            assert v.residual_topk and abs(sum(r[2] for r in v.residual_topk) - 1) < 1.01
            ids = [r[0] for r in v.residual_topk]
            if v.next_id in ids:
                assert v.residual_topk[ids.index(v.next_id)][2] > 0
        else:
            assert v.residual_topk == []
    assert tested and any(v.first_rejected is not None for v in verified)
    greedy = list(engine.generate("Once upon a time", GenerationConfig(gamma=4, max_new_tokens=20)))
    assert all(e.u is None and e.residual_topk == [] for e in greedy if e.kind == "verified")


def test_corrected_tokens_follow_the_residual_law():
    """At one fixed position, tokens drawn after a rejection follow norm(max(0, p − q)) (chi-square, fixed
    seed); the same counts fail against p itself (negative control)."""
    from engine import sampling

    p = torch.tensor([[0.10, 0.20, 0.30, 0.40], [0.25, 0.25, 0.25, 0.25]])
    q = torch.tensor([[0.40, 0.30, 0.20, 0.10]])
    # the same for every rejected token: max(0, p − q) ∝ [0, 0, .1, .3]
    residual = sampling.residual(p[0], q[0], 0)
    gen, rounds = torch.Generator().manual_seed(11), 0
    counts = torch.zeros(4)
    while counts.sum() < 3000:
        draft = torch.multinomial(q[0], 1, generator=gen)
        v = sampling.accept_sample(draft, q, p, sampling.Draws(11).at(2 * rounds))
        rounds += 1
        if v.n_accepted == 0:
            assert (v.u[0] >= v.accept_prob[0]) and torch.allclose(v.dist, residual)
            counts[v.next_id] += 1
        else:
            assert v.u[0] < v.accept_prob[0]
    assert chi_square(counts, residual) < CHI2_999[3]
    assert chi_square(counts, p[0]) > CHI2_999[3] * 5


def test_counts_agree_with_commits_at_an_accepted_eos(embedded):
    """ "Say exactly: Hello world." with self, γ = 8: drafts after an accepted EOS are neither accepted nor
    tested, the rollback covers them, and every count matches what was committed."""
    engine = Engine(embedded, "self", measure_step=False)
    events = list(engine.generate("Say exactly: Hello world.", GenerationConfig(gamma=8, max_new_tokens=32)))
    committed = [e for e in events if e.kind == "committed"]
    accepted_flags = sum(sum(e.accepted) for e in events if e.kind == "verified")
    accepted_origins = sum(e.origins.count("accepted") for e in committed)
    s = events[-1].summary
    assert events[-1].stop_reason == "eos"
    assert accepted_flags == accepted_origins == s["accepted"]
    assert s["new_tokens"] == len(_ids(events)) == len(events[-1].token_ids)
    cache_len = events[0].pos - 1  # the invariant: every committed token but the last is cached
    for e in events:
        if e.kind == "verified":
            cache_len_after_verify = e.pos + len(e.accepted)
        if e.kind == "rolled_back":
            assert e.cache_before == cache_len_after_verify
            cache_len = e.cache_after
        if e.kind == "committed":
            assert cache_len == e.pos + len(e.token_ids) - 1 or e.token_ids[-1] in embedded.eos_ids
    last_verified = [e for e in events if e.kind == "verified"][-1]
    assert last_verified.first_rejected is None and not all(last_verified.accepted)  # cut at the EOS


def test_oracle_accepts_at_its_rate_and_stays_lossless(embedded):
    """oracle:A proposes the target's greedy tokens corrupted with probability 1 − A: greedy α ≈ A, and the
    output is still the target's own greedy output."""
    engine = Engine(embedded, "oracle:0.6", measure_step=False)
    result = engine.run(
        "Write a short story about a lighthouse keeper.",
        GenerationConfig(gamma=4, max_new_tokens=96),
        compare_ar=True,
    )
    s = result.summary
    assert s["identical_to_ar"] is True
    assert 0.45 < s["alpha"] < 0.75  # 0.6 ± 3 standard errors over ~60 tested positions
    perfect = Engine(embedded, "oracle:1", measure_step=False).run(
        "Name three colours.", GenerationConfig(gamma=4, max_new_tokens=24)
    )
    assert perfect.summary["alpha"] == 1.0
    for bad in ("oracle:1.5", "oracle:x", "oracle:0.5:-1"):
        with pytest.raises(ModelLoadError, match="oracle:A"):
            Engine(embedded, bad)


def test_time_limit_stops_even_the_prefill(embedded):
    """A long prompt under a tiny time limit stops with stop_reason "time_limit" (the prefill checks it)."""
    engine = Engine(embedded, "ngram", measure_step=False)
    prompt = "The quick brown fox jumps over the lazy dog. " * 250  # ~2,500 tokens: several prefill chunks
    events = list(engine.generate(prompt, GenerationConfig(max_new_tokens=64, time_limit_s=0.001, raw=True)))
    assert events[-1].kind == "finished" and events[-1].stop_reason == "time_limit"
    assert len(events[-1].token_ids) < 64
    with pytest.raises(ValueError, match="time_limit_s"):
        GenerationConfig(time_limit_s=0)


@pytest.mark.parametrize("draft", ["ngram", "self"])
def test_tree_at_the_slider_extremes_fits_the_cache(embedded, draft):
    """γ = 16, a 64-node budget and branching 8 (the UI's maxima) never overflow the KV cache."""
    cfg = GenerationConfig(gamma=16, max_new_tokens=48, tree_budget=64, tree_branching=8)
    assert cache_slots(10, cfg) >= 10 + 48 + 64
    engine = Engine(embedded, draft, measure_step=False)
    events = list(engine.generate("1 2 3 1 2 3 1 2 3 1 2 4 1 2 5 1 2 3 1 2", cfg))
    assert events[-1].kind == "finished" and len(events[-1].token_ids) > 0
    assert (
        events[-1].token_ids
        == list(engine.generate("1 2 3 1 2 3 1 2 3 1 2 4 1 2 5 1 2 3 1 2", cfg, "ar"))[-1].token_ids
    )
