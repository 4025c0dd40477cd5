"""The tabs' own compute: the sampled drift meter (Explain), beam search (Beam search) and the batch raced
against the AR batch (Batch); a bad setting is one warning, and each shares the one compute queue."""

from __future__ import annotations

import dataclasses
import os
import threading
import time
from collections import OrderedDict

import gradio as gr

import specviz
import ui.server  # noqa: F401  (first: it imports ZeroGPU's `spaces`, when present, before torch)
from engine import Engine, GenerationConfig, load_model
from engine.config import MAX_BATCH, MAX_GAMMA
from engine.decode.drift import drift_job
from specviz.drift import drift_progress_html, sampled_drift_html
from ui import app_guard as guard
from ui import app_views as av
from ui.controls import Controls
from ui.outputs import ROUND_END, failure, prepare, reading, status_line, time_limit_warning
from ui.run import stream_events
from ui.server import MAX_PROMPT_TOKENS, MAX_RUN_S, TICK_S, gpu, release_memory

DRIFT_SAMPLES = int(os.environ.get("SPECVIZ_DRIFT_SAMPLES", "100"))  # seeded 2-token runs per rule (1..2000)
DRIFT_EVERY_S = 1.0  # the meter's progress line is redrawn at most this often
# (target, draft, prompt, settings) -> the exact rule's draws, seed order
EXACT_DRAWS: OrderedDict = OrderedDict()
EXACT_DRAWS_KEPT = 16  # the newest settings' draws are kept (each at most 2,000 pairs of ids)
EXACT_LOCK = threading.Lock()


@gpu
def measure_drift(*controls):
    """The sampled drift meter for the current settings, as a bounded job (engine/decode/drift.py): the first two
    tokens' law under the chosen rule and under the exact rule, up to DRIFT_SAMPLES seeded runs each, against the
    target's exact law. A progress line while it runs; it ends at MAX_RUN_S with what it has (its n said), and a
    visitor who leaves stops it at the next run. The exact rule's draws are kept for the next measurement."""
    try:
        c = Controls.of(controls)
        target, draft, cfg = c.settings(MAX_RUN_S)
        if cfg.greedy:
            raise ValueError(
                "the sampled drift meter needs Temperature above 0 (Sampling: from 0.05 to 2); at 0 a run is "
                "greedy, and its drift is in the race"
            )
        if not 1 <= DRIFT_SAMPLES <= 2000:
            raise ValueError(f"SPECVIZ_DRIFT_SAMPLES must be between 1 and 2000, got {DRIFT_SAMPLES}")
        target, draft = prepare(target, draft, c.prompt, cfg.raw)
        engine = Engine(load_model(target), draft, measure_step=False)  # no step probe after each 2-token run
        key = (target, draft, c.prompt, repr(dataclasses.replace(cfg, accept="exact", time_limit_s=None)))
        job = drift_job(
            engine,
            c.prompt,
            cfg,
            DRIFT_SAMPLES,
            deadline=time.monotonic() + MAX_RUN_S,
            exact_draws=EXACT_DRAWS.get(key, []).copy(),
        )
        shown_at = 0.0
        for report in job:
            if report["final"]:
                break
            if time.monotonic() - shown_at >= DRIFT_EVERY_S:
                shown_at = time.monotonic()
                yield drift_progress_html(report, MAX_RUN_S)
    except ValueError as e:
        gr.Warning(str(e))
        yield gr.skip()
        return
    with EXACT_LOCK:  # two meters may end at once
        EXACT_DRAWS[key] = report["exact_draws"]
        EXACT_DRAWS.move_to_end(key)
        while len(EXACT_DRAWS) > EXACT_DRAWS_KEPT:
            EXACT_DRAWS.popitem(last=False)
    if report["stopped"] == "time_limit":
        gr.Warning(
            f"the drift meter stopped at the {MAX_RUN_S:g} s limit per request (SPECVIZ_MAX_RUN_S) after "
            f"{report['done']} of {report['of']} seeded runs per rule"
        )
    yield sampled_drift_html(report)


def beam_generate(pair, drafter, param, gamma, max_new, num_beams, race, prompt):
    """Stream the beam view once per round (see specviz/beams.py); a bad setting is one warning."""
    try:
        target, draft = av.model_specs(pair, drafter, param)
        guard.beam_drafter(draft)  # the page's words: where the Drafter control is
        cfg = GenerationConfig(
            gamma=guard.check_gamma(gamma, MAX_GAMMA),
            max_new_tokens=int(max_new),
            num_beams=int(num_beams),
            time_limit_s=MAX_RUN_S,
        )
        target, draft = prepare(target, draft, prompt, cfg.raw, cfg.num_beams)
        lanes = {"speculative": [], "ar": []}
        note, ticked = beam_note(int(num_beams)), time.monotonic()
        for lane, event in stream_events(target, draft, cfg, prompt, bool(race)):  # cfg.num_beams routes it
            if event.kind == "prefilling":
                yield gr.skip(), status_line(reading(event))
                continue
            lanes[lane].append(event)
            if event.kind in ROUND_END:
                yield specviz.render_beams(lanes["speculative"], lanes["ar"]), note
                ticked = time.monotonic()
            elif time.monotonic() - ticked > TICK_S:  # the other lane's round: a visitor who left stops here
                yield gr.skip(), gr.skip()
                ticked = time.monotonic()
    except (ValueError, RuntimeError) as e:
        gr.Warning(failure(e) if isinstance(e, RuntimeError) else str(e))
        yield gr.skip(), gr.skip()
        return
    time_limit_warning(lanes)
    yield specviz.render_beams(lanes["speculative"], lanes["ar"]), note
    release_memory()


def beam_note(num_beams: int) -> str:
    """The summary line while the Beam search tab shows a beam run: what the stream below it still holds."""
    return (
        f'<div class="specviz sv-summary" data-beam="1">Beam search, B = {num_beams}: its beams, scores and race '
        "are in the Beam search tab · the stream, tree and charts below still show the last single-sequence "
        "run</div>"
    )


BATCH_EXAMPLE = (
    "Copy this sentence exactly: the quick brown fox jumps over the lazy dog.\n"
    "List the numbers from 1 to 20, separated by commas.\n"
    "Write a haiku about the sea.\n"
    "Explain in two sentences why the sky is blue."
)


def batch_prompts(text) -> list[str]:
    """The Batch tab's prompts, one per non-empty line; refused (naming the setting and its range) when there are
    none or more than MAX_BATCH, or when one is too long for the server."""
    from_lines = [line.strip() for line in str(text or "").splitlines() if line.strip()]
    if not 1 <= len(from_lines) <= MAX_BATCH:
        raise ValueError(
            f"Batch prompts: write 1 to {MAX_BATCH} prompts, one per line (B = the number of lines); "
            f"got {len(from_lines)}"
        )
    for line in from_lines:
        guard.check_prompt(line, MAX_PROMPT_TOKENS)
    return from_lines


@gpu
def stream_batch(target: str, draft: str, cfg: GenerationConfig, prompts: list, race: bool):
    """(lane, event) of the batched speculative run and, when racing, the AR batch of the same prompts, interleaved
    round by round (engine/decode/race.py's rule: the lane behind in its share of the work goes next)."""
    engine = Engine(load_model(target), draft)
    ids = [engine.encode(p, cfg.raw) for p in prompts]
    for row, prompt in zip(ids, prompts):
        guard.check_prompt_tokens(len(row), MAX_PROMPT_TOKENS, chars=len(prompt))
    if race:
        yield from engine.race_batch(ids, cfg)
    else:
        for event in engine.generate_batch(None, cfg, prompt_ids=ids):
            yield "speculative", event


def batch_generate(pair, drafter, param, gamma, max_new, prompts_text, race):
    """Stream the Batch tab's lanes and its summary once per round; a bad setting is one warning."""
    try:
        prompts = batch_prompts(prompts_text)
        target, draft = av.model_specs(pair, drafter, param)
        cfg = GenerationConfig(
            gamma=guard.check_gamma(gamma, MAX_GAMMA), max_new_tokens=int(max_new), time_limit_s=MAX_RUN_S
        )
        target, draft = prepare(target, draft, prompts[0], cfg.raw)
        lanes = {"speculative": [], "ar": []}
        for lane, event in stream_batch(target, draft, cfg, prompts, bool(race)):
            if event.kind == "prefilling":
                yield gr.skip(), status_line(f"{lane} batch: {reading(event)}")
                continue
            lanes[lane].append(event)
            if event.kind in ("batch_round", "batch_finished"):
                yield specviz.render_batch_lanes(lanes["speculative"]), specviz.batch_summary_html(lanes)
    except (ValueError, RuntimeError) as e:
        gr.Warning(failure(e) if isinstance(e, RuntimeError) else str(e))
        yield gr.skip(), gr.skip()
        return
    time_limit_warning({k: [e for e in v if e.kind == "finished"] for k, v in lanes.items()})
    release_memory()
