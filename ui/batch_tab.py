"""The Batch tab's throughput against B: the committed benchmark's curves (benchmarks/results/batch-cpu.json, written
by `python -m benchmarks batch` on the machine it names), read once, and this host's own, measured on demand
(`measure`: the tab's prompts, drafter and γ raced like the live batch at B = 1, 2, 4, 8, 16 within the run limit).
The live batch itself runs through ui/tab_runs.batch_generate."""

from __future__ import annotations

import copy
import dataclasses
import functools
import json
import time
from collections.abc import Iterator
from pathlib import Path

import gradio as gr

import specviz
import ui.server as server  # before engine: it imports ZeroGPU's `spaces` ahead of torch
from engine import Engine, GenerationConfig, costmodel, load_model
from engine.config import MAX_GAMMA
from engine.decode.batch import AUTO_SPECS
from engine.figures import plural
from engine.runtime.kernels import cpu_name
from specviz.batch_view import crossover, measured_on
from specviz.markup import esc
from ui import app_guard as guard
from ui import app_views as av
from ui.outputs import failure, prepare
from ui.tab_runs import batch_prompts

RESULTS = Path(__file__).resolve().parent.parent / "benchmarks" / "results" / "batch-cpu.json"
MEASURE_SIZES = (1, 2, 4, 8, 16)  # the committed benchmark's B


@functools.lru_cache(maxsize=1)
def results() -> dict | None:
    try:
        return json.loads(RESULTS.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def figure(live: dict | None = None):
    return specviz.throughput_figure(results(), live)


def note(live: dict | None = None) -> str:
    """Where each curve was measured: the committed one's command and machine, this host's (or how to get it)."""
    r = results()
    committed = (
        f'<p class="batch-source">Lines: measured by <code>{esc(r["command"])}</code> on {esc(r["cpu"])} '
        f"({plural(r['threads'], 'thread')}, {r['max_new_tokens']} new tokens per row, medians of "
        f"{r['repeats']} interleaved repeats; benchmarks/results/batch-cpu.md), not on this host.</p>"
        if r is not None
        else '<p class="batch-source">No batch benchmark is committed: run python -m benchmarks batch.</p>'
    )
    return committed + host_note(live) + specviz.roofline_note(r, live)


def host_note(live: dict | None) -> str:
    """This host's curve: what was measured and how, or the button that measures it."""
    if not live or not live.get("sizes"):
        return (
            f'<p class="batch-host">This host: {esc(cpu_name())}. <b>Measure on this host</b> races AR against the '
            f"drafter and γ beside Generate at B = {', '.join(map(str, MEASURE_SIZES))} on the prompts above "
            f"(repeated to fill B), within the {server.MAX_RUN_S:.0f} s run limit.</p>"
        )
    cut = live.get("cut")
    cross = crossover(live["sizes"], live["curves"]["ar"], live["curves"]["speculative"])
    names = live["names"]
    return (
        f'<p class="batch-host" data-cpu="{esc(live["cpu"])}">★ This host ({measured_on(live)}): '
        f"{names['speculative']} raced against AR at B = {', '.join(map(str, live['sizes']))} on "
        f"{plural(live['prompts'], 'prompt')} repeated to fill B, {live['max_new_tokens']} new tokens per row, one "
        f"race per B (not a median: a busy host moves a point by tens of percent); "
        + (
            f"{names['speculative']} below AR from B = {cross} on"
            if cross
            else f"{names['speculative']} at or above AR at B = {live['sizes'][-1]}"
        )
        + (f". {esc(cut)}" if cut else "")
        + ".</p>"
    )


def host_curve(
    engine: Engine, rows_ids: list[list[int]], cfg: GenerationConfig, sizes, deadline: float
) -> Iterator[dict | None]:
    """This host's throughput against B: at each B, the tab's prompts repeated to B rows, the speculative batch
    raced against the AR batch (Engine.race_batch: interleaved round by round, the race's threads), each lane's
    decode throughput after its prefill. Yields the curve after each B; a B the deadline (time.monotonic()) cuts
    is left out and ends the curve, which is yielded once more saying so. Between rounds, every server.TICK_S, it yields
    None: the request's handler yields then, so Gradio stops it within a round of its visitor leaving."""
    spec = "auto" if engine.draft_spec in AUTO_SPECS else f"{engine.draft_spec} γ={cfg.gamma}"
    live = {"sizes": [], "curves": {"ar": [], "speculative": []}, "names": {"ar": "AR", "speculative": spec}}
    live.update(gamma=cfg.gamma, max_new_tokens=cfg.max_new_tokens, prompts=len(rows_ids), cut=None)
    for b in sizes:
        left = deadline - time.monotonic()
        cut = f"B = {b} and above not measured: past the {server.MAX_RUN_S:.0f} s limit per request"
        if left <= 0:
            live["cut"] = cut
            break
        rows = [rows_ids[i % len(rows_ids)] for i in range(b)]
        events, ticked = [], time.monotonic()
        for item in engine.race_batch(rows, dataclasses.replace(cfg, time_limit_s=left)):
            events.append(item)
            # between rounds: a visitor who left stops the measure here
            if time.monotonic() - ticked > server.TICK_S:
                ticked = time.monotonic()
                yield None
        done = {lane: e.summary for lane, e in events if e.kind == "batch_finished"}
        late = any(e.kind == "finished" and e.stop_reason == "time_limit" for _, e in events)
        if late or len(done) < 2 or not all(s.get("decode_tokens_per_s") for s in done.values()):
            live["cut"] = cut
            break
        started = next(e for _, e in events if e.kind == "run_started")
        roof = costmodel.roof(started.host)
        live.update(
            cpu=(started.host or {}).get("cpu") or cpu_name(),
            threads=started.threads or None,
            ridge_tokens=costmodel.ridge(256, roof) if roof else None,
        )
        live["sizes"].append(b)
        for lane, s in done.items():
            live["curves"][lane].append(
                {k: s[k] for k in ("decode_tokens_per_s", "tokens", "wall_s", "prefill_s")}
            )
        yield copy.deepcopy(live)  # a snapshot: the next B grows the curve
    if live["cut"] and live["sizes"]:
        yield live  # the curve as it stood, now saying where it was cut


@server.gpu
def measured_curve(target: str, draft: str, cfg: GenerationConfig, prompts: list) -> Iterator[dict | None]:
    """host_curve on the tab's prompts, as a job of plain data (on ZeroGPU: the GPU worker's part)."""
    deadline = time.monotonic() + server.MAX_RUN_S
    engine = Engine(load_model(target), draft)
    ids = [engine.encode(p, cfg.raw) for p in prompts]
    for row, prompt in zip(ids, prompts):
        guard.check_prompt_tokens(len(row), server.MAX_PROMPT_TOKENS, chars=len(prompt))
    yield from host_curve(engine, ids, cfg, MEASURE_SIZES, deadline)


def measure(pair, drafter, param, gamma, max_new, prompts_text):
    """Measure on this host: the curve grows one B at a time (the chart and its note redrawn after each); a bad
    setting is one warning and the chart stays."""
    try:
        prompts = batch_prompts(prompts_text)
        target, draft = av.model_specs(pair, drafter, param)
        cfg = GenerationConfig(
            gamma=guard.check_gamma(gamma, MAX_GAMMA),
            max_new_tokens=int(max_new),
            time_limit_s=server.MAX_RUN_S,
            record_topk=0,
        )
        target, draft = prepare(target, draft, prompts[0], cfg.raw)
        measured = False
        for live in measured_curve(target, draft, cfg, prompts):
            if live is None:  # a round ended: nothing to draw, a point where a visitor who left stops it
                yield gr.skip(), gr.skip()
                continue
            measured = True
            yield figure(live), note(live)
        if not measured:
            gr.Warning(
                f"Measure on this host: not even B = 1 fitted the {server.MAX_RUN_S:.0f} s limit per request"
            )
    except (ValueError, RuntimeError) as e:
        gr.Warning(failure(e) if isinstance(e, RuntimeError) else str(e))
        yield gr.skip(), gr.skip()
    finally:
        server.release_memory()
