"""Contestants and clocks: what one benchmark run is, and how our engine is timed.

Timing is wall clock (`time.perf_counter`) from the call to the last generated token as the caller
sees it: for our engine that includes building and consuming every event, and excludes the few
target forwards it spends after the last token to calibrate c and v (see `time_ours`).
"""

from __future__ import annotations

import collections
import time
from dataclasses import dataclass, field

from engine import costmodel
from engine.config import GenerationConfig
from engine.decode.engine import Engine
from engine.metrics import position_counts

from .bench_stats import _ratio

# the event stream may cost at most 3% tokens/s against a lean run (the bench checks it)
OVERHEAD_TARGET = 0.03


@dataclass
class BenchConfig:
    """One contestant: our engine (AR or a drafter at γ) or transformers' generate (greedy or assisted)."""

    name: str  # unique key: "ours/ar", "ours/<spec>/g<γ>", "hf/greedy", "hf/<spec>/g<γ>"
    label: str  # for tables and legends
    runner: str  # "ours" or "hf"
    drafter: str = ""  # drafter spec ("" for AR and HF greedy)
    gamma: int = 0  # draft tokens per round (0 = no drafting)
    hf_kwargs: dict = field(default_factory=dict)  # extra generate() kwargs (may hold a model object)
    hf_args: dict = field(default_factory=dict)  # the same, JSON-safe, for the report

    def to_dict(self) -> dict:
        return {
            "name": self.name,
            "label": self.label,
            "runner": self.runner,
            "drafter": self.drafter,
            "gamma": self.gamma,
            "hf_args": self.hf_args,
        }


@dataclass
class Sample:
    """One timed run."""

    token_ids: list  # generated ids (EOS included when it ended the run)
    wall_s: float  # caller-side wall clock, call -> last token
    summary: dict | None = None  # our engine's summary (None for transformers)
    pos_drafted: list = field(default_factory=list)  # per draft position: rounds that drafted it
    pos_accepted: list = field(default_factory=list)  # ... and accepted it

    @property
    def tokens_per_s(self) -> float:
        return len(self.token_ids) / self.wall_s if self.wall_s > 0 else 0.0


# -- our engine: one timed run --------------------------------------------------------------------
def time_ours(
    engine: Engine, ids: list, cfg: GenerationConfig, mode: str, on_event=None, history=None
) -> Sample:
    """Run our engine, consuming events as an app would (kept in a list); time call -> last token.

    The Finished event comes after the engine times 3 extra target steps (for c and v), so the
    clock stops when the event before it has been handled. on_event(event), when given, sees each event
    as it arrives (inside the timed span). history: a session's earlier runs (drafters.suffix.History) for a drafter
    that reads them; the run joins it.
    """
    events, finished = [], None
    t0 = t_last = time.perf_counter()
    for event in engine.generate("", cfg, mode, prompt_ids=ids, history=history):
        if event.kind == "finished":
            finished = event
            break
        events.append(event)
        if on_event is not None:
            on_event(event)
        t_last = time.perf_counter()
    drafted, accepted = position_counts(events)
    return Sample(list(finished.token_ids), t_last - t0, dict(finished.summary), drafted, accepted)


def measure_overhead(
    engine: Engine, drafter: str, ids: list, gamma: int, max_new_tokens: int, pairs: int, tick=None
) -> dict:
    """The same speculative run consuming events normally (record_topk=5, kept in a list) vs lean
    (record_topk=0, drained by a deque(maxlen=0)); interleaved pairs, order alternating.

    Both include the engine's post-run calibration (3 target steps); `ratio` subtracts it (timed in
    the normal run from the last round's event to Finished) and compares the fastest run of each.
    """
    normal_cfg = GenerationConfig(gamma=gamma, max_new_tokens=max_new_tokens)
    lean_cfg = GenerationConfig(gamma=gamma, max_new_tokens=max_new_tokens, record_topk=0)
    normal, lean, tails = [], [], []

    def run_normal():
        events, t0 = [], time.perf_counter()
        t_last = t0
        for event in engine.generate("", normal_cfg, prompt_ids=ids):
            if event.kind == "finished":
                tails.append(time.perf_counter() - t_last)
            events.append(event)
            t_last = time.perf_counter()
        normal.append(t_last - t0)

    def run_lean():
        t0 = time.perf_counter()
        collections.deque(engine.generate("", lean_cfg, prompt_ids=ids), maxlen=0)
        lean.append(time.perf_counter() - t0)

    for i in range(pairs):
        for run in (run_normal, run_lean) if i % 2 == 0 else (run_lean, run_normal):
            run()
            if tick:
                tick()
    core_normal = [n - t for n, t in zip(normal, tails)]
    core_lean = [x - t for x, t in zip(lean, tails)]
    # the fastest of each: noise from other processes only ever adds time (as timeit reports the minimum)
    ratio = _ratio(min(core_normal, default=None), min(core_lean, default=None))
    return {
        "drafter": drafter,
        "gamma": gamma,
        "max_new_tokens": max_new_tokens,
        "pairs": pairs,
        "normal_s": normal,
        "lean_s": lean,
        "calibration_s": tails,
        "raw_ratio": _ratio(min(normal, default=None), min(lean, default=None)),
        "ratio": ratio,
        "median_pair_ratio": costmodel.median(_ratio(n, x) for n, x in zip(core_normal, core_lean)),
        "overhead_pct": (ratio - 1) * 100 if ratio else None,
        "target_pct": OVERHEAD_TARGET * 100,
        "within_target": ratio is not None and ratio <= 1 + OVERHEAD_TARGET,
    }
