"""Every compute path of the engine is bounded and stoppable inside a long prompt's prefill: a deadline that passes
while the prompt is read ends the run cleanly ("time_limit", no error), and a consumer that closes the run between
two prefill chunks stops it there (what a Gradio client that leaves does). Tiny random models; the deadlines run on
a fake clock that only a target forward moves, so where a deadline falls does not depend on the machine's load."""

from __future__ import annotations

import dataclasses
import time

import pytest

from engine import Engine, GenerationConfig, load_model
from engine.decode import beam, drift, loop
from engine.decode.loop import PREFILL_CHUNK

PROMPT = " ".join(["the sea is wide and the sky is blue"] * 160)  # ~1,450 tokens: several prefill chunks
TICK = 1.0  # seconds a target forward takes on the fake clock


@pytest.fixture(scope="module")
def target(tiny_dirs):
    return load_model(tiny_dirs["target"])


class FakeClock:
    """`time` for the engine's deadline checks (engine/decode/loop.py, beam.py, drift.py): its monotonic() moves
    only when a target forward runs, TICK a call; every other function is the real one."""

    def __init__(self):
        self.now = 0.0

    def monotonic(self) -> float:
        return self.now

    def __getattr__(self, name):
        return getattr(time, name)


@pytest.fixture
def clock(monkeypatch) -> FakeClock:
    fake = FakeClock()
    for module in (loop, beam, drift):
        monkeypatch.setattr(module, "time", fake)
    return fake


def slowed(engine: Engine, clock: FakeClock) -> list:
    """Each target forward of the engine takes TICK on the fake clock; returns the clock's reading as each began."""
    calls, forward = [], engine.forward

    def slow(*args, **kwargs):
        calls.append(clock.now)
        clock.now += TICK
        return forward(*args, **kwargs)

    engine.forward = slow
    return calls


def chunks(engine, rows: int = 1) -> int:
    """Prefill forwards the prompt needs (rows: a batch's, PREFILL_CHUNK tokens in all per forward)."""
    n = len(engine.encode(PROMPT, True)) - 1
    return -(-n // max(1, PREFILL_CHUNK // rows))


RUNS = {  # name -> (how to start it, how many prefill forwards it needs)
    "chain": (lambda e, cfg: e.generate(PROMPT, cfg), 1),
    "beams": (lambda e, cfg: e.generate(PROMPT, GenerationConfig(**{**cfg.to_dict(), "num_beams": 2})), 1),
    "batch": (lambda e, cfg: e.generate_batch([PROMPT, PROMPT + " and"], cfg), 2),
}


@pytest.mark.parametrize("name", RUNS)
def test_a_deadline_inside_the_prefill_ends_the_run_cleanly(target, name, clock):
    """The time limit passes while the prompt is read: every run (chain, beams, batch) ends with "time_limit" and no
    error; it read chunks until the deadline passed and began none after it, so the prompt was not read to its end
    (a batch whose deadline passed in its prefill must not raise "cannot truncate row 0")."""
    engine = Engine(target, "ngram", measure_step=False)
    start, rows = RUNS[name]
    calls = slowed(engine, clock)
    deadline = 3 * TICK
    cfg = GenerationConfig(max_new_tokens=8, raw=True, time_limit_s=deadline, record_topk=0)
    events = list(start(engine, cfg))
    done = [e for e in events if e.kind == "finished"]
    assert len(done) == rows and all(e.stop_reason == "time_limit" for e in done), [
        e.stop_reason for e in done
    ]
    assert calls == [
        k * TICK for k in range(len(calls))
    ]  # every forward was a prefill chunk, one after another
    assert calls[-1] <= deadline < calls[-1] + TICK, (
        calls
    )  # the last one began by the deadline and ended past it
    assert len(calls) < chunks(engine, rows), "the whole prompt was read past the deadline"


def test_a_deadline_before_the_first_chunk_ends_a_batch_cleanly(target):
    """A deadline already past when the batch starts: no forward, every row "time_limit" (it raised before)."""
    engine = Engine(target, "ngram", measure_step=False)
    events = list(
        engine.generate_batch(
            [PROMPT, "short"], GenerationConfig(max_new_tokens=8, raw=True, time_limit_s=1e-9)
        )
    )
    assert sorted(e.stop_reason for e in events if e.kind == "finished") == ["time_limit"] * 2


@pytest.mark.parametrize("name", RUNS)
def test_closing_a_run_inside_its_prefill_stops_it_there(target, name, clock):
    """A consumer that closes the run at its first Prefilling event: no forward runs after that (a client that
    leaves stops its run within one chunk, and frees its slot)."""
    engine = Engine(target, "ngram", measure_step=False)
    start, rows = RUNS[name]
    calls = slowed(engine, clock)
    run = start(engine, GenerationConfig(max_new_tokens=8, raw=True, record_topk=0))
    kinds = []
    for event in run:
        kinds.append(event.kind)
        if event.kind == "prefilling":
            break
    seen = len(calls)
    run.close()
    assert kinds[0] == "run_started" and kinds[-1] == "prefilling"
    assert seen == 1 < chunks(engine, rows)  # the first chunk, then its Prefilling event
    assert next(run, None) is None and len(calls) == seen  # closed: nothing more runs, even when asked


# -- the drift meter: a bounded job --------------------------------------------------------------------------

SAMPLED = GenerationConfig(temperature=1.0, top_k=8, raw=True, accept="typical:0.3,0.55", record_topk=0)


@pytest.mark.parametrize("spec", ["ngram", "self", "layerskip:1"])
def test_runs_reusing_the_prompts_cache_draw_what_fresh_runs_draw(target, spec):
    """The meter's runs reuse one read of the prompt (Engine.prefix_cache): each seeded run, exact or lossy, chain or
    tree, is token-identical to the same run reading the prompt itself, and the cache is reusable run after run."""
    engine = Engine(target, spec, measure_step=False)
    ids = engine.encode(PROMPT[:400], True)
    cfg = dataclasses.replace(SAMPLED, max_new_tokens=6)
    cache = engine.prefix_cache(ids, cfg)
    for _ in drift.prefill(engine.forward, ids, cache, None, target.device):
        pass
    for seed, accept, budget in [
        (0, "exact", 0),
        (1, "typical:0.3,0.55", 0),
        (2, "exact", 4),
        (3, "exact", 0),
    ]:
        run = dataclasses.replace(cfg, seed=seed, accept=accept, tree_budget=budget)
        fresh = list(engine.generate(None, run, prompt_ids=ids))[-1].token_ids
        reused = list(engine.generate(None, run, prompt_ids=ids, prefix=cache))[-1].token_ids
        assert reused == fresh, (seed, accept, budget)


def test_the_drift_meter_stops_at_its_deadline_with_both_rules_at_one_n(target, clock):
    """A deadline inside the meter's runs: the last report says time_limit, both rules have the same n (> 0), and it
    came well before the requested n; runs began until the deadline and none after it; a progress report came after
    every run pair before it."""
    engine = Engine(target, "ngram", measure_step=False)
    calls, starts, generate = slowed(engine, clock), [], engine.generate

    def run(*args, **kwargs):
        starts.append(clock.now)
        return generate(*args, **kwargs)

    engine.generate = run
    deadline = 40 * TICK
    reports = list(drift.drift_job(engine, "a b c a b", SAMPLED, n=400, deadline=deadline))
    last = reports[-1]
    assert last["final"] and last["stopped"] == "time_limit" and not any(r["final"] for r in reports[:-1])
    assert 0 < last["exact"]["n"] == last["lossy"]["n"] == last["done"] < 400 and len(calls) < 400
    assert max(starts) <= deadline < clock.now  # it ran until the deadline and began no run after it
    assert len(starts) - 2 * last["done"] in (0, 1)  # whole pairs, and at most the exact half of one more
    assert last["lossy"]["tv"] is not None and [r["done"] for r in reports[:-1]] == list(
        range(1, last["done"] + 1)
    )


@pytest.mark.slow  # a drift meter run of hundreds of rounds
def test_the_exact_rules_draws_are_reused_not_drawn_again(target, clock):
    """A second measurement with the exact rule's draws from the first draws only the lossy rule's runs, and gets the
    same exact-rule TV; without them it draws both again (the control)."""
    engine = Engine(target, "ngram", measure_step=False)
    first = list(drift.drift_job(engine, "a b c a b", SAMPLED, n=12))[-1]
    calls = slowed(engine, clock)
    again = list(
        drift.drift_job(
            engine,
            "a b c a b",
            dataclasses.replace(SAMPLED, accept="typical:0.1,0.3"),
            n=12,
            exact_draws=first["exact_draws"],
        )
    )[-1]
    reused = len(calls)
    assert again["exact"] == first["exact"] and again["done"] == 12
    list(drift.drift_job(engine, "a b c a b", dataclasses.replace(SAMPLED, accept="typical:0.1,0.3"), n=12))
    assert len(calls) - reused > reused + 6  # both rules drawn: about twice the forwards
