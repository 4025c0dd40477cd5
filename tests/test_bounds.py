"""Every compute path of the engine is bounded and stoppable inside a long prompt's prefill: a deadline that passes
while the prompt is read ends the run cleanly ("time_limit", no error), and a consumer that closes the run between
two prefill chunks stops it there (what a Gradio client that leaves does). Tiny random models; the forward slowed."""
from __future__ import annotations

import time

import pytest

from engine import Engine, GenerationConfig, load_model
from engine.decode.loop import PREFILL_CHUNK

PROMPT = " ".join(["the sea is wide and the sky is blue"] * 160)  # ~1,450 tokens: several prefill chunks
SLOW_S = 0.05  # each target forward sleeps this long: a prefill chunk takes at least as long


@pytest.fixture(scope="module")
def target(tiny_dirs):
    return load_model(tiny_dirs["target"])


def slowed(engine: Engine) -> list:
    """Slow the engine's target forward down by SLOW_S a call; returns the list its calls are counted in."""
    calls, forward = [], engine.forward

    def slow(*args, **kwargs):
        calls.append(time.monotonic())
        time.sleep(SLOW_S)
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
def test_a_deadline_inside_the_prefill_ends_the_run_cleanly(target, name):
    """The time limit passes while the prompt is read: every run (chain, beams, batch) ends with "time_limit" and no
    error, and the prompt was not read to its end (the batch raised "cannot truncate row 0" here before)."""
    engine = Engine(target, "ngram", measure_step=False)
    start, rows = RUNS[name]
    calls = slowed(engine)
    cfg = GenerationConfig(max_new_tokens=8, raw=True, time_limit_s=3 * SLOW_S, record_topk=0)
    events = list(start(engine, cfg))
    done = [e for e in events if e.kind == "finished"]
    assert done and all(e.stop_reason == "time_limit" for e in done), [e.stop_reason for e in done]
    assert len(calls) < chunks(engine, rows), "the whole prompt was read past the deadline"
    assert [e.kind for e in events].count("prefilling") >= 1


def test_a_deadline_before_the_first_chunk_ends_a_batch_cleanly(target):
    """A deadline already past when the batch starts: no forward, every row "time_limit" (it raised before)."""
    engine = Engine(target, "ngram", measure_step=False)
    events = list(engine.generate_batch([PROMPT, "short"], GenerationConfig(max_new_tokens=8, raw=True,
                                                                           time_limit_s=1e-9)))
    assert sorted(e.stop_reason for e in events if e.kind == "finished") == ["time_limit"] * 2


@pytest.mark.parametrize("name", RUNS)
def test_closing_a_run_inside_its_prefill_stops_it_there(target, name):
    """A consumer that closes the run at its first Prefilling event: no forward runs after that (a client that
    leaves stops its run within one chunk, and frees its slot)."""
    engine = Engine(target, "ngram", measure_step=False)
    start, rows = RUNS[name]
    calls = slowed(engine)
    run = start(engine, GenerationConfig(max_new_tokens=8, raw=True, record_topk=0))
    kinds = []
    for event in run:
        kinds.append(event.kind)
        if event.kind == "prefilling":
            break
    run.close()
    assert kinds[0] == "run_started" and kinds[-1] == "prefilling"
    assert 1 <= len(calls) < chunks(engine, rows)
    seen = len(calls)
    time.sleep(3 * SLOW_S)
    assert len(calls) == seen
