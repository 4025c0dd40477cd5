"""The speculative loop and its autoregressive baseline, as generators of events.

Round structure (Leviathan et al. 2023): 1. draft γ tokens; 2. verify them in ONE target forward
over [last committed token, d1..dγ]; 3. accept / resample; 4. roll back the rejected tail by
moving the cache pointer; 5. commit. The AR baseline is the same loop with γ = 0: the same
cache, the same forward, the same sampling code, so the two can be raced fairly (race.py).
Invariant between rounds: the target cache holds every committed token but the last one (runtime/cache.py).
Phases 2-5 are one step (step.py: the verify forward and what follows it, returning a Step); this module drafts, times the step around it
and hands its events (built in record.py) to the consumer. Beam search (beam.py) shares the scaffolding
(loop.py) and the race.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import torch

from ..config import MAX_GAMMA, MODES, GenerationConfig, check_mode
from ..drafters.base import Settled
from ..drafters.registry import drafter_factory
from ..events import Finished, RoundTimed
from ..metrics import RunStats, summarize
from ..runtime.cache import KVCache
from ..runtime.lean import forward_fn
from ..runtime.loadwatch import LoadWatch
from ..runtime.models import EMBEDDED, LoadedModel, load_model, prompt_ids
from ..runtime.roofline import host_record
from ..runtime.threads import RACE_THREADS, check_threads, synchronizer
from ..sampling import Draws
from ..specs import parse_draft
from . import batch, beam
from .loop import Clock, cache_slots, deadline_of, past, prefill, started
from .race import interleave
from .record import TokenText, round_events
from .step import settle, verify


def next_gamma(cfg: GenerationConfig, gamma: int, drafted: int, accepted: int) -> int:
    """γ of the next round: fixed, or transformers' heuristic schedule (+2 after a fully accepted round, −1 else)."""
    if cfg.adaptive != "heuristic" or not drafted:
        return gamma
    return min(MAX_GAMMA, gamma + 2) if accepted == drafted else max(1, gamma - 1)


def forward_rows(s) -> int:
    """Rows the round's verify forward computed (what it costs): the root, the chain or the tree's nodes, and a
    drafter's extra rows (lookahead's window)."""
    extra = len(s.draft.extra.token_ids) if s.draft is not None and s.draft.extra is not None else 0
    nodes = len(s.tree.token_ids) if s.tree is not None else len(s.judged)
    return 1 + nodes + extra


@dataclass
class RunResult:
    """A finished run: its events, generated ids and text, and the summary metrics."""

    events: list
    token_ids: list
    text: str
    summary: dict


@dataclass
class _Run:
    """What every round of one run reads: the target's forward (and the list its features land in for a head
    drafter), the drafter, the committed ids (extended in place), the cache, the settings, the acceptance rule's
    uniform draws by position (None when greedy) and the run's clock with its start."""

    forward: Callable
    features: list | None
    drafter: object
    ids: list
    cache: KVCache
    cfg: GenerationConfig
    draws: Draws | None
    clock: Clock
    t_start: float
    events_s: float = (
        0.0  # the last round's events: their building time (after its feedback: the next one hears it)
    )


class Engine:
    """A target and a drafter spec, loaded once; `generate` runs a prompt as a stream of events."""

    def __init__(
        self,
        target: LoadedModel,
        draft: str = "self",
        trust_remote_code: bool = False,
        measure_step: bool = True,
    ):
        self.target = target
        self.sync = synchronizer(target.device)  # waits for a GPU's queued work before a clock is read
        self.measure_step = measure_step  # time a single target step after each run (for c and v)
        spec = parse_draft(draft)  # the one parser: refuses a bad spec before anything loads
        self.draft_spec = spec.text  # its normal form: what events and traces say
        self.make_drafter = drafter_factory(spec, target, trust_remote_code)  # builds (and loads) once
        self.forward = forward_fn(target.model)  # logits of the target: a lean Llama forward when it fits
        self.text = TokenText(target.tokenizer)  # id -> text, memoised

    @classmethod
    def load(
        cls,
        target: str = EMBEDDED,
        draft: str = "self",
        device: str | None = None,
        dtype: str | None = None,
        trust_remote_code: bool = False,
    ) -> "Engine":
        """Load the target (and the draft model, if the spec names one) once."""
        return cls(load_model(target, device, dtype, trust_remote_code), draft, trust_remote_code)

    # -- text ---------------------------------------------------------------------------
    def encode(self, prompt: str, raw: bool = False) -> list[int]:
        """Prompt -> ids; chat models get their chat template unless `raw`."""
        if not isinstance(prompt, str) or not prompt.strip():
            raise ValueError("prompt is empty: type some text to continue")
        return prompt_ids(self.target.tokenizer, prompt, raw)

    def token_text(self, token_id: int) -> str:
        return self.text(token_id)

    def run(
        self,
        prompt: str,
        cfg: GenerationConfig | None = None,
        compare_ar: bool = False,
        race_threads: int | None = RACE_THREADS,
    ) -> RunResult:
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

    def race(
        self,
        prompt: str,
        cfg: GenerationConfig | None = None,
        prompt_ids: list[int] | None = None,
        threads: int | None = RACE_THREADS,
        history=None,
    ) -> Iterator[tuple[str, object]]:
        """The speculative run and the AR baseline of the same target (chains, or beams when cfg.num_beams > 1),
        interleaved on this one thread (race.py explains how and why). Yields (lane, event) with lane
        "speculative" or "ar"; one deadline (cfg.time_limit_s) covers the whole race.

        threads: on a CPU, the torch threads both lanes compute with (default RACE_THREADS = 1; None keeps
        the caller's; ignored off the CPU).
        """
        cfg = cfg or GenerationConfig()
        ids = list(prompt_ids) if prompt_ids is not None else self.encode(prompt, cfg.raw)
        yield from self._raced(
            lambda mode, deadline: self.generate(
                prompt, cfg, mode, prompt_ids=ids, deadline=deadline, history=history
            ),
            cfg,
            threads,
        )

    def watched(self, prompt: str, cfg: GenerationConfig | None = None, history=None):
        """generate's speculative run as (lane, event) with lane "speculative", its outside load watched as a race's
        lanes are (runtime/loadwatch.py): its Finished summary carries `contended_share` and `outside_cores`, which
        the one rule for measured costs reads (engine/costrule.py)."""
        cpu = self.target.device.type == "cpu"
        lanes = {"speculative": self.generate(prompt, cfg, history=history)}
        yield from interleave(lanes, None, LoadWatch(torch.get_num_threads() if cpu else None, enabled=cpu))

    def generate(
        self,
        prompt: str,
        cfg: GenerationConfig | None = None,
        mode: str = "speculative",
        prompt_ids: list[int] | None = None,
        deadline: float | None = None,
        prefix: KVCache | None = None,
        history=None,
    ) -> Iterator:
        """Yield the events of one run. mode: "speculative" or "ar" (the baseline).
        deadline (time.monotonic()) overrides the one cfg.time_limit_s sets from now (a race shares one).
        prefix: a `prefix_cache` holding the prompt but its last token, reused instead of a prefill (many short runs
        of one prompt, the drift meter's); the run writes after the prompt only, so the next run can reuse it.
        history: a session's earlier runs (drafters.suffix.History) for a drafter that reads them; a finished
        speculative run adds its prompt and output to it."""
        cfg = cfg or GenerationConfig()
        check_mode(mode)
        ids = list(prompt_ids) if prompt_ids is not None else self.encode(prompt, cfg.raw)
        self._check_context(ids, cfg)
        deadline = deadline if deadline is not None else deadline_of(cfg)
        if cfg.num_beams > 1:  # beam search (beam.py): its own step over a B-row cache
            return beam.beam_run(self, ids, cfg, mode == "speculative", deadline, cache_slots(len(ids), cfg))
        return self._events(ids, cfg, mode, deadline, prefix, history if mode == "speculative" else None)

    def prefix_cache(self, ids: list[int], cfg: GenerationConfig) -> KVCache:
        """An empty cache sized for cfg's runs of this prompt: once loop.prefill has read the prompt into it (all
        but its last token), `generate(prefix=...)` reuses it."""
        return KVCache.for_model(self.target.model, cache_slots(len(ids), cfg, self.make_drafter.needs.rows))

    def generate_batch(
        self,
        prompts: list[str],
        cfg: GenerationConfig | None = None,
        mode: str = "speculative",
        prompt_ids: list[list[int]] | None = None,
        deadline: float | None = None,
    ) -> Iterator:
        """Yield the events of one batched run of B = len(prompts) sequences (1..batch.MAX_BATCH; decode/batch.py):
        one target forward per round over every running row, each row's events carrying its `row`."""
        cfg = cfg or GenerationConfig()
        check_mode(mode)
        if prompt_ids is None:
            if not isinstance(prompts, (list, tuple)):
                raise ValueError(f"prompts must be a list of strings, got {type(prompts).__name__}")
            batch.check_batch([[0]] * len(prompts))  # B first: the range, before any prompt is read
            prompt_ids = []
            for b, prompt in enumerate(prompts):
                try:
                    prompt_ids.append(self.encode(prompt, cfg.raw))
                except ValueError as e:
                    raise ValueError(f"prompt {b + 1} of the batch: {e}") from None
        for b, ids in enumerate(prompt_ids):
            self._check_context(ids, cfg, f"prompt {b + 1} of the batch")
        return batch.batch_run(
            self,
            prompt_ids,
            cfg,
            mode == "speculative",
            deadline if deadline is not None else deadline_of(cfg),
        )

    def race_batch(
        self,
        prompt_ids: list[list[int]],
        cfg: GenerationConfig | None = None,
        threads: int | None = RACE_THREADS,
    ) -> Iterator[tuple[str, object]]:
        """The batched speculative run and the AR batch of the same prompts, interleaved like `race` (race.py), one
        deadline for both. Yields (lane, event), lane "speculative" or "ar"."""
        cfg = cfg or GenerationConfig()
        yield from self._raced(
            lambda mode, deadline: self.generate_batch(
                None, cfg, mode, prompt_ids=prompt_ids, deadline=deadline
            ),
            cfg,
            threads,
        )

    def _raced(self, lane, cfg: GenerationConfig, threads: int | None) -> Iterator[tuple[str, object]]:
        """Both lanes, lane(mode, deadline) for each of MODES, interleaved (race.py) under one deadline; on a CPU
        with `threads` torch threads and the outside load watched."""
        check_threads(threads)
        deadline = deadline_of(cfg)
        lanes = {mode: lane(mode, deadline) for mode in MODES}
        cpu = self.target.device.type == "cpu"
        yield from interleave(
            lanes, threads if cpu else None, LoadWatch(threads if cpu else None, enabled=cpu)
        )

    def _check_context(self, ids: list[int], cfg: GenerationConfig, what: str = "prompt") -> None:
        """The prompt and its token budget fit the target's context (a ValueError naming both lengths)."""
        limit = getattr(self.target.model.config.get_text_config(), "max_position_embeddings", None)
        if limit and len(ids) + cfg.max_new_tokens > limit:
            raise ValueError(
                f"{what} ({len(ids)} tokens) + max_new_tokens ({cfg.max_new_tokens}) exceeds the "
                f"target's context of {limit} tokens"
            )

    def _drafter(self, cfg: GenerationConfig, generator, cache: KVCache, history=None):
        """This run's drafter; one whose family declared Needs.history is handed the session's history."""
        return self.make_drafter(cfg, generator, cache.max_len, cache, history)

    @torch.inference_mode()
    def _events(
        self,
        ids: list[int],
        cfg: GenerationConfig,
        mode: str,
        deadline: float | None,
        prefix: KVCache | None = None,
        history=None,
    ) -> Iterator:
        """One run: prefill (or a prefix cache reused), then rounds of (1. draft, 2.-5. the step), as events."""
        target, prompt_len = self.target, len(ids)
        generator, draws = self._random(cfg)
        # a drafter's own forward size
        rows = self.make_drafter.needs.rows if mode == "speculative" else 0
        reuse = prefix is not None
        cache = prefix if reuse else KVCache.for_model(target.model, cache_slots(prompt_len, cfg, rows))
        if reuse:
            cache.truncate(prompt_len - 1)  # the prompt but its last token, as a prefill leaves it
        drafter = self._drafter(cfg, generator, cache, history) if mode == "speculative" else None
        if drafter is not None:
            drafter.prepare(ids, cfg)  # work a drafter does before the clock starts (oracle: its reference)
        forward, features = self._forward_for(drafter is not None and self.make_drafter.needs.features)
        # a head drafter reads the prompt's features: the prompt is read again
        if reuse and features is not None:
            cache.truncate(0)
            reuse = False
        # before the clock: a host's first call measures
        host = host_record(target.model, target.device, target.dtype)
        clock, stats = Clock(), RunStats()
        t_start = clock()
        run = _Run(forward, features, drafter, ids, cache, cfg, draws, clock, t_start)
        yield from clock.hand_over(
            [started(target, self.text, ids, cfg, mode, self.draft_spec if drafter else "", host)], stats
        )
        # a stop between chunks
        for progress in () if reuse else prefill(forward, ids, cache, deadline, target.device):
            yield from clock.hand_over([progress], stats)
        if features and not past(
            deadline
        ):  # the prefill's settle: the prompt's features, positions 0 .. len(ids) − 2
            prompt = torch.cat(features, dim=1)[0]
            drafter.settle(Settled(round=0, n_accepted=0, ids=ids, verify_s=0.0, rows=0, features=prompt))
        if features:
            features.clear()
        # γ moves only with adaptive="heuristic"
        gamma_now, round_, stop_reason = (cfg.gamma, 0, "max_new_tokens")
        while len(ids) - prompt_len < cfg.max_new_tokens:
            if past(deadline):
                stop_reason = "time_limit"
                break
            round_ += 1
            remaining = cfg.max_new_tokens - (len(ids) - prompt_len)
            s, timed = self._round(
                run, round_, min(gamma_now, remaining - 1) if drafter is not None else 0, remaining
            )
            if drafter is not None:
                gamma_now = next_gamma(cfg, gamma_now, len(s.judged), s.n_accepted)
            events = round_events(
                s, round_, self.text, cfg.record_topk, cfg.greedy, drafter.name if drafter else ""
            )
            # a consumer that stops listening ends it
            yield from clock.hand_over(events + [timed(clock())], stats)
            if s.new[-1] in target.eos_ids:
                stop_reason = "eos"
                break
        wall = clock() - t_start
        if history is not None and drafter is not None:  # the session's next runs draft from this one too
            kept = drafter.history_source(ids)
            history.add(ids if kept is None else kept)
        step_s = self._target_step_cost(cache, ids[-1]) if drafter is not None and self.measure_step else None
        new_ids = ids[prompt_len:]
        yield Finished(
            round=round_,
            pos=len(ids),
            stop_reason=stop_reason,
            token_ids=new_ids,
            text=target.tokenizer.decode(new_ids, skip_special_tokens=True),
            summary=stats.summary(wall, step_s),
        )

    def _round(self, run: _Run, round_: int, gamma: int, remaining: int):
        """One round, top to bottom: 1. draft, 2.-4. the step (verify, accept / resample, roll back), 5. commit,
        6. the drafter settles. Returns the Step and, to be called with the clock once the round's events are built,
        its RoundTimed."""
        forward, features, drafter, ids, clock = run.forward, run.features, run.drafter, run.ids, run.clock
        sync = self.sync
        t0 = clock()
        # 1. draft (a drafter may propose fewer than γ tokens, or none: a plain target step)
        draft = drafter.propose(ids, gamma) if gamma else None
        sync()
        t1 = clock()
        # 2. verify (the forward)  3. accept / resample  4. roll back (step.py: no events, no clock)
        logits = verify(forward, ids, draft, run.cache, self.target.device)
        sync()
        t_forward = clock()
        s = settle(
            logits, ids, draft, run.cache, run.cfg, run.draws, eos=self.target.eos_ids, remaining=remaining
        )
        t2 = clock()
        ids.extend(s.new)  # 5. commit
        # 6. feedback: the settled round to the drafter (the features of the positions the cache keeps, for a
        # drafter that declared them; what the forward computed that the draft asked for; its time and rows)
        kept = s.kept_features(features[-1]) if features else None
        if features:
            features.clear()
        if drafter is not None:
            drafter.settle(
                Settled(
                    round=round_,
                    n_accepted=s.n_accepted,
                    ids=ids,
                    verify_s=t2 - t1,
                    round_s=t2 - t0,
                    events_s=run.events_s,
                    rows=forward_rows(s),
                    seen=s.seen,
                    features=kept,
                )
            )
        t_fed = clock()

        def timed(t3: float) -> RoundTimed:
            run.events_s = t3 - t_fed  # built after the feedback: the next round's Settled carries it
            return RoundTimed(
                round=round_,
                pos=len(ids),
                draft_s=t1 - t0,
                verify_s=t2 - t1,
                total_s=t3 - t0,
                elapsed_s=t3 - run.t_start,
                gamma=len(s.judged),
                verified=forward_rows(s),
                forward_s=t_forward - t1,
                feedback_s=t_fed - t2,
            )

        return s, timed

    def _random(self, cfg: GenerationConfig) -> tuple[torch.Generator | None, Draws | None]:
        """The run's randomness when sampling, from cfg.seed (a fresh seed when unset): the drafter's generator
        (a model draft samples from q with it) and the acceptance rule's draws, one per position (sampling/draws.py:
        how many nodes a round drafted never moves them). (None, None) for greedy."""
        if cfg.greedy:
            return None, None
        seed = cfg.seed if cfg.seed is not None else torch.seed()
        generator = torch.Generator(device=self.target.device)
        generator.manual_seed(seed)
        return generator, Draws(seed)

    def _forward_for(self, features: bool):
        """The target's forward for this run, and the list its final-norm features land in when the drafter
        declared it reads them (Needs.features: the trained heads), else None."""
        if not features:
            return self.forward, None
        features = []
        return functools.partial(self.forward, hidden_out=features), features

    def _target_step_cost(self, cache: KVCache, last_id: int) -> float:
        """Median time of a single-token target forward at this context (for c and v); cache untouched."""
        x = torch.tensor([[last_id]], device=self.target.device)
        keep, times, sync = cache.length, [], self.sync
        for _ in range(3):
            t = time.perf_counter()
            self.forward(x, cache)
            sync()
            times.append(time.perf_counter() - t)
            cache.truncate(keep)
        return sorted(times)[1]
