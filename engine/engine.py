"""The speculative loop and its autoregressive baseline, as generators of events.

Round structure (Leviathan et al. 2023): 1. draft γ tokens; 2. verify them in ONE target forward
over [last committed token, d1..dγ]; 3. accept / resample; 4. roll back the rejected tail by
moving the cache pointer; 5. commit. The AR baseline is the same loop with γ = 0: the same
cache, the same forward, the same sampling code, so the two can be raced fairly.
Invariant between rounds: the target cache holds every committed token but the last one.
Phases 2-5 are one pure step (step.py, returning a Step); this module drafts, times the step around it
and hands its events (built in record.py) to the consumer.
"""
from __future__ import annotations

import dataclasses
import functools
import os
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import torch

from . import beam
from .cache import KVCache
from .config import MAX_GAMMA, GenerationConfig
from .drafters import drafter_factory
from .events import Finished, RoundTimed, RunStarted
from .fastllama import forward_fn
from .loadwatch import LoadWatch
from .metrics import RunStats, summarize
from .models import EMBEDDED, LoadedModel, load_model
from .record import TokenText, round_events
from .step import step


PREFILL_CHUNK = 512  # prompt tokens per prefill forward: the time limit is checked between chunks
MAX_THREADS = 256


def _race_threads() -> int | None:
    """SPECVIZ_RACE_THREADS: CPU threads a race computes with, 1..MAX_THREADS; 0 keeps torch's default."""
    raw = os.environ.get("SPECVIZ_RACE_THREADS", "1")
    if not raw.strip().isdigit() or int(raw) > MAX_THREADS:
        raise ValueError(f"SPECVIZ_RACE_THREADS must be a whole number 0..{MAX_THREADS} "
                         f"(0: torch's default thread count), got {raw!r}")
    return int(raw) or None


RACE_THREADS = _race_threads()


@contextmanager
def torch_threads(n: int | None):
    """torch's intra-op threads set to n for this OS thread inside the block (None: unchanged)."""
    if n is None:
        yield
        return
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def cache_slots(prompt_len: int, cfg: GenerationConfig) -> int:
    """KV slots a run can need: the one place that sizes the cache.

    A round starts with every committed token but the last in the cache (at most prompt + max_new − 2)
    and writes the last one plus its draft: γ tokens (up to MAX_GAMMA under adaptive γ) or a tree of
    up to tree_budget nodes. One more slot covers the single-token probe after the run.
    """
    return prompt_len + cfg.max_new_tokens + max(MAX_GAMMA, cfg.tree_budget) + 1


def next_gamma(cfg: GenerationConfig, gamma: int, drafted: int, accepted: int) -> int:
    """γ of the next round: fixed, or transformers' heuristic schedule (+2 after a fully accepted round, −1 else)."""
    if cfg.adaptive != "heuristic" or not drafted:
        return gamma
    return min(MAX_GAMMA, gamma + 2) if accepted == drafted else max(1, gamma - 1)


class _Clock:
    """Seconds of the run's own compute: the time it spends suspended at a yield (the consumer's) is not counted."""

    def __init__(self):
        self.paused = 0.0

    def __call__(self) -> float:
        return time.perf_counter() - self.paused

    def hand_over(self, events: list, stats: RunStats) -> Iterator:
        """Yield events to the consumer (counting each into stats) with the clock stopped."""
        t = time.perf_counter()
        for event in events:
            stats.add(event)
            yield event
        self.paused += time.perf_counter() - t


def _deadline(cfg: GenerationConfig) -> float | None:
    """time.monotonic() after which a run stops (stop_reason "time_limit"); None without a limit."""
    return None if cfg.time_limit_s is None else time.monotonic() + cfg.time_limit_s


@dataclass
class RunResult:
    """A finished run: its events, generated ids and text, and the summary metrics."""
    events: list
    token_ids: list
    text: str
    summary: dict


class Engine:
    """A target and a drafter spec, loaded once; `generate` runs a prompt as a stream of events."""

    def __init__(self, target: LoadedModel, draft: str = "self", trust_remote_code: bool = False,
                 measure_step: bool = True):
        self.target = target
        self.measure_step = measure_step  # time a single target step after each run (for c and v)
        self.draft_spec = draft
        self.make_drafter = drafter_factory(draft, target, trust_remote_code)  # validates the spec now
        self.forward = forward_fn(target.model)  # logits of the target: a lean Llama forward when it fits
        self.text = TokenText(target.tokenizer)  # id -> text, memoised

    @classmethod
    def load(cls, target: str = EMBEDDED, draft: str = "self", device: str | None = None,
             dtype: str | None = None, trust_remote_code: bool = False) -> "Engine":
        """Load the target (and the draft model, if the spec names one) once."""
        return cls(load_model(target, device, dtype, trust_remote_code), draft, trust_remote_code)

    # -- text ---------------------------------------------------------------------------
    def encode(self, prompt: str, raw: bool = False) -> list[int]:
        """Prompt -> ids; chat models get their chat template unless `raw`."""
        if not isinstance(prompt, str) or not prompt.strip():
            raise ValueError("prompt is empty: type some text to continue")
        tok = self.target.tokenizer
        if not raw and getattr(tok, "chat_template", None):
            ids = tok.apply_chat_template([{"role": "user", "content": prompt}], add_generation_prompt=True,
                                          tokenize=True, return_dict=False)
            ids = ids["input_ids"] if isinstance(ids, dict) or hasattr(ids, "keys") else ids
        else:
            ids = tok(prompt, add_special_tokens=True)["input_ids"]
        return [int(i) for i in ids]

    def token_text(self, token_id: int) -> str:
        return self.text(token_id)

    def run(self, prompt: str, cfg: GenerationConfig | None = None, compare_ar: bool = False,
            race_threads: int | None = RACE_THREADS) -> RunResult:
        """Run to completion; with compare_ar race the AR baseline on the same prompt ids, interleaved
        (race_threads: see race)."""
        cfg = cfg or GenerationConfig()
        if not compare_ar:
            events = list(self.generate(prompt, cfg))
            done = events[-1]
            return RunResult(events, done.token_ids, done.text, dict(done.summary))
        lanes = {"speculative": [], "ar": []}
        for lane, event in self.race(prompt, cfg, threads=race_threads):
            lanes[lane].append(event)
        done = lanes["speculative"][-1]
        summary = (beam.race_summary if cfg.num_beams > 1 else summarize)(lanes["speculative"], lanes["ar"])
        return RunResult(lanes["speculative"] + lanes["ar"], done.token_ids, done.text, summary)

    def race(self, prompt: str, cfg: GenerationConfig | None = None,
             prompt_ids: list[int] | None = None, threads: int | None = RACE_THREADS) -> Iterator[tuple[str, object]]:
        """The speculative run and the AR baseline of the same target, interleaved on this one thread.

        Yields (lane, event) with lane "speculative" or "ar". Each step advances, by one round, the lane
        that has done the smaller share of its token target, so at every moment both lanes have done the
        same fraction of their work: a load that slows the machine for a while slows the same share of
        each lane, and the ratio of their times survives it. (Advancing the lane whose clock is behind
        instead would give both lanes equal *time* under the load, and leave the slower lane's last
        stretch exposed alone: that moved the speedup by 25-50% under a bursty load.) Each lane's clock
        counts only its own compute (a lane's generator does not count the time it is suspended), and one
        deadline (cfg.time_limit_s) covers the whole race.

        threads: on a CPU, the torch threads both lanes compute with (default RACE_THREADS = 1; None keeps
        the caller's). Interleaving makes a load hit both lanes, but only one thread makes it hit them
        alike: with several, every kernel waits at a barrier for the thread the load has descheduled, and
        the wait weighs more on some kernel shapes than others (benchmarks/race-noise.md measured the
        speedup moving by up to ~30% under a one-core load with 2 threads, and ≤ ~7% with 1). The setting
        is per OS thread, so it is made around each step of a lane and undone before each yield: a
        consumer that resumes the race from other threads (Gradio does) and other runs are untouched.
        Each lane's Finished summary also says how much CPU other processes took while it computed
        (engine/loadwatch.py; a flag when they wanted more cores than the race left free).
        """
        cfg = cfg or GenerationConfig()
        ids = list(prompt_ids) if prompt_ids is not None else self.encode(prompt, cfg.raw)
        deadline = _deadline(cfg)
        lanes = {"speculative": self.generate(prompt, cfg, prompt_ids=ids, deadline=deadline),
                 "ar": self.generate(prompt, cfg, "ar", prompt_ids=ids, deadline=deadline)}
        done = dict.fromkeys(lanes, 0)  # tokens committed per lane
        if threads is not None and not (isinstance(threads, int) and 1 <= threads <= MAX_THREADS):
            raise ValueError(f"race threads must be 1..{MAX_THREADS} (or None: the caller's), got {threads!r}")
        if self.target.device.type != "cpu":
            threads = None
        watch = LoadWatch(threads, enabled=self.target.device.type == "cpu")
        if cfg.num_beams > 1:  # speculative vs plain beam search of the same width
            yield from beam.race(lanes, threads, torch_threads)
            return
        try:
            while lanes:
                lane = min(lanes, key=done.__getitem__)  # the lane behind in its share of the work
                while True:
                    with torch_threads(threads), watch.step(lane):
                        event = next(lanes[lane], None)
                    if event is None:  # that lane has finished
                        del lanes[lane]
                        break
                    if event.kind == "finished":  # what other processes took while this lane computed
                        event = dataclasses.replace(event, summary={**(event.summary or {}), **watch.summary(lane)})
                    yield lane, event
                    if event.kind == "committed":
                        done[lane] += len(event.token_ids)
                    if event.kind == "round_timed":
                        break
        finally:
            for gen in lanes.values():
                gen.close()

    def generate(self, prompt: str, cfg: GenerationConfig | None = None, mode: str = "speculative",
                 prompt_ids: list[int] | None = None, deadline: float | None = None) -> Iterator:
        """Yield the events of one run. mode: "speculative" or "ar" (the baseline).
        deadline (time.monotonic()) overrides the one cfg.time_limit_s sets from now (a race shares one)."""
        cfg = cfg or GenerationConfig()
        if mode not in ("speculative", "ar"):
            raise ValueError(f"mode must be 'speculative' or 'ar', got {mode!r}")
        ids = list(prompt_ids) if prompt_ids is not None else self.encode(prompt, cfg.raw)
        limit = getattr(self.target.model.config.get_text_config(), "max_position_embeddings", None)
        if limit and len(ids) + cfg.max_new_tokens > limit:
            raise ValueError(f"prompt ({len(ids)} tokens) + max_new_tokens ({cfg.max_new_tokens}) exceeds the "
                             f"target's context of {limit} tokens")
        deadline = deadline if deadline is not None else _deadline(cfg)
        if cfg.num_beams > 1:  # beam search (engine/beam.py): its own loop over a B-row cache
            return beam.beam_run(self, ids, cfg, mode == "speculative", deadline, cache_slots(len(ids), cfg))
        return self._run(ids, cfg, mode, deadline)

    @torch.inference_mode()
    def _run(self, ids: list[int], cfg: GenerationConfig, mode: str, deadline: float | None) -> Iterator:
        """One run: prefill, then rounds of (1. draft, 2.-5. the pure step), each turned into events."""
        target, device, prompt_len = self.target, self.target.device, len(ids)
        generator = None
        if not cfg.greedy:
            generator = torch.Generator(device=device)
            generator.manual_seed(cfg.seed if cfg.seed is not None else torch.seed())
        max_len = cache_slots(prompt_len, cfg)
        cache = KVCache.for_model(target.model, max_len)
        drafter = self.make_drafter(cfg, generator, max_len, cache) if mode == "speculative" else None
        if drafter is not None:
            drafter.prepare(ids, cfg)  # work a drafter does before the clock starts (oracle: its reference)
        forward, features = self.forward, None
        if getattr(drafter, "wants_features", False):  # trained heads read the target's final-norm features
            features = []
            forward = functools.partial(self.forward, hidden_out=features)
        clock, stats, late = _Clock(), RunStats(), lambda: deadline is not None and time.monotonic() > deadline
        sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
        t_start = clock()
        self._prefill(forward, ids, cache, late)
        if features:
            drafter.observe(torch.cat(features, dim=1)[0])  # positions 0 .. len(ids) − 2
            features.clear()
        yield from clock.hand_over([self._started(ids, cfg, mode)], stats)
        gamma_now, round_, stop_reason = cfg.gamma, 0, "max_new_tokens"  # γ moves only with adaptive="heuristic"
        while len(ids) - prompt_len < cfg.max_new_tokens:
            if late():
                stop_reason = "time_limit"
                break
            round_ += 1
            remaining = cfg.max_new_tokens - (len(ids) - prompt_len)
            gamma = min(gamma_now, remaining - 1) if drafter is not None else 0
            t0 = clock()
            # 1. draft (a drafter may propose fewer than γ tokens, or none: a plain target step)
            draft = drafter.propose(ids, gamma) if gamma else None
            sync()
            t1 = clock()
            # 2. verify  3. accept / resample  4. roll back  5. commit: one pure step
            s = step(forward, ids, draft, cache, cfg, generator, eos=target.eos_ids, remaining=remaining,
                     device=device)
            t2 = clock()
            ids.extend(s.new)
            if features:  # the features of the positions the cache keeps, for the next draft
                drafter.observe(features[-1][0, s.kept_rows])
                features.clear()
            if drafter is not None:
                drafter.learn(s.n_accepted, ids, t2 - t1)
                gamma_now = next_gamma(cfg, gamma_now, len(s.drafted), s.n_accepted)
            events = round_events(s, round_, self.text, cfg.record_topk, cfg.greedy,
                                  drafter.name if drafter is not None else "")
            t3 = clock()
            events.append(RoundTimed(round=round_, pos=len(ids), draft_s=t1 - t0, verify_s=t2 - t1, total_s=t3 - t0,
                                     elapsed_s=t3 - t_start, gamma=len(s.drafted)))
            yield from clock.hand_over(events, stats)  # a consumer that stops listening ends the run here
            if s.new[-1] in target.eos_ids:
                stop_reason = "eos"
                break
        wall = clock() - t_start
        step_s = self._target_step_cost(cache, ids[-1]) if drafter is not None and self.measure_step else None
        new_ids = ids[prompt_len:]
        yield Finished(round=round_, pos=len(ids), stop_reason=stop_reason, token_ids=new_ids,
                       text=target.tokenizer.decode(new_ids, skip_special_tokens=True),
                       summary=stats.summary(wall, step_s))

    def _prefill(self, forward, ids: list[int], cache: KVCache, late) -> None:
        """All but the last prompt token (round 1's input), in chunks; the time limit is checked between them."""
        for start in range(0, len(ids) - 1, PREFILL_CHUNK):
            if late():
                break
            chunk = ids[start:min(start + PREFILL_CHUNK, len(ids) - 1)]
            forward(torch.tensor([chunk], device=self.target.device), cache, logits_to_keep=1)

    def _started(self, ids: list[int], cfg: GenerationConfig, mode: str) -> RunStarted:
        t = self.target
        return RunStarted(round=0, run_id=uuid.uuid4().hex[:12], mode=mode, target=t.name,
                          draft=self.draft_spec if mode == "speculative" else "", device=str(t.device),
                          dtype=str(t.dtype).replace("torch.", ""), config=cfg.to_dict(),
                          prompt_text=t.tokenizer.decode(ids), prompt_ids=list(ids), prompt_tokens=self.text.many(ids),
                          pos=len(ids), threads=torch.get_num_threads() if t.device.type == "cpu" else 0)

    def _target_step_cost(self, cache: KVCache, last_id: int) -> float:
        """Median time of a single-token target forward at this context (for c and v); cache untouched."""
        x = torch.tensor([[last_id]], device=self.target.device)
        keep, times = cache.length, []
        for _ in range(3):
            t = time.perf_counter()
            self.forward(x, cache)
            if self.target.device.type == "cuda":
                torch.cuda.synchronize()
            times.append(time.perf_counter() - t)
            cache.truncate(keep)
        return sorted(times)[1]
