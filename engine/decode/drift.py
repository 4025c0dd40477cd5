"""The drift meter: how far a lossy acceptance rule (GenerationConfig.accept = "typical:…") moves the output away
from the target's own.

  greedy:   the first generated position where the run's tokens leave the target's greedy tokens (its AR run), and
            how many positions differ (positions past the shorter run count as differing);
  sampling: the total variation between the law of the first two generated tokens, estimated from n seeded runs,
            and the target's exact law p(x1)·p(x2 | x1) (from the target: one 2-token forward per distinct x1 seen,
            on the prompt's cache): TV = ½ (Σ_seen |f − p| + (1 − Σ_seen p)). A finite sample has TV > 0 even for
            an exact rule, so the meter always reports the exact rule's TV at the same n beside the lossy one (the
            noise floor).

The sampled meter is a bounded job (`drift_job`): the prompt is read once and every 2-token run reuses it; the two
rules' runs alternate (seed k under the exact rule, then under the lossy one), so wherever a deadline or a closed
consumer stops it both rules have the same n; it yields a report after every run pair and while a long prompt is
read, so a consumer can show progress and stop it. An exact rule's draws from an earlier job (same target, drafter,
prompt, settings and seeds) are reused instead of drawn again.
`greedy_drift` is plain Python (engine/metrics.py: the page calls it); the rest runs the engine.
"""

from __future__ import annotations

import dataclasses
import time
from collections import Counter
from collections.abc import Iterator

import torch

from .. import sampling
from ..config import GenerationConfig
from ..metrics import (
    greedy_drift,  # the greedy meter is plain Python: the page computes it from a race's lanes
)
from .loop import past, prefill

__all__ = ["greedy_drift", "PairLaw", "target_pair_law", "drift_job", "joint_tv", "drift_report"]

MAX_SAMPLES = 20000  # seeded runs per rule, at most


class PairLaw:
    """The target's exact law of the first two generated tokens under cfg's shaping, p(x1)·p(x2 | x1), on a cache
    holding the prompt but its last token (`Engine.prefix_cache`, read by loop.prefill); one 2-token forward per distinct x1, memoised."""

    def __init__(self, engine, ids: list[int], cfg: GenerationConfig, cache):
        self.engine, self.ids, self.cfg, self.cache = engine, ids, cfg, cache
        self.second: dict[int, torch.Tensor] = {}
        self.first = self._probs([ids[-1]])  # (V,)

    @torch.inference_mode()
    def _probs(self, tail: list[int]) -> torch.Tensor:
        """The shaped next-token law after the prompt + tail[1:] (tail[0] is the prompt's last token)."""
        start = len(self.ids) - 1
        self.cache.truncate(start)
        logits = self.engine.forward(
            torch.tensor([tail], device=self.engine.target.device), self.cache, logits_to_keep=1
        )[0, -1]  # (V,)
        self.cache.truncate(start)
        return sampling.shape_probs(logits, self.cfg.temperature, self.cfg.top_k, self.cfg.top_p)

    def __call__(self, pair: tuple) -> float:
        """p(x1) p(x2 | x1); a pair (x1,) whose x1 ended the run (an end-of-text) has p(x1)."""
        x1 = pair[0]
        if len(pair) == 1:
            return float(self.first[x1])
        if x1 not in self.second:
            self.second[x1] = self._probs([self.ids[-1], x1])
        return float(self.first[x1]) * float(self.second[x1][pair[1]])

    def tv(self, draws: list[tuple]) -> float:
        """TV between the empirical law of `draws` and the target's (½ Σ_seen |f − p| + ½ the unseen mass)."""
        counts, n = Counter(draws), len(draws)
        law = {pair: self(pair) for pair in counts}
        return round(
            0.5
            * (sum(abs(c / n - law[pair]) for pair, c in counts.items()) + max(0.0, 1.0 - sum(law.values()))),
            4,
        )


def target_pair_law(engine, ids: list[int], cfg: GenerationConfig, pairs) -> dict:
    """{(x1, x2): p(x1) p(x2 | x1)} under cfg's shaping for the given pairs; a pair (x1,) has p(x1)."""
    cache = engine.prefix_cache(ids, _two_tokens(cfg, 0))
    for _ in prefill(engine.forward, ids, cache, None, engine.target.device):
        pass
    law = PairLaw(engine, ids, cfg, cache)
    return {pair: law(pair) for pair in pairs}


def _two_tokens(cfg: GenerationConfig, seed: int) -> GenerationConfig:
    return dataclasses.replace(cfg, max_new_tokens=2, seed=seed, record_topk=0, time_limit_s=None)


def _rule_report(law: PairLaw, draws: list[tuple], accept: str) -> dict:
    return {
        "tv": law.tv(draws) if draws else None,
        "n": len(draws),
        "pairs": len(set(draws)),
        "accept": accept,
    }


def drift_job(
    engine,
    prompt: str,
    cfg: GenerationConfig,
    n: int = 400,
    seed: int = 0,
    deadline: float | None = None,
    exact_draws: list | None = None,
) -> Iterator[dict]:
    """The sampled drift meter as a bounded job. Yields a report after every run pair (and while a long prompt is
    read); the last one is final. A report: {"lossy", "exact": {"tv", "n", "pairs", "accept"}, "done", "of",
    "elapsed_s", "stopped" ("time_limit" when the deadline cut it, else None), "final", "exact_draws" (the exact
    rule's draws in seed order: pass them back as `exact_draws` to reuse them), "prompt", "draft"}.
    cfg must sample; deadline is a time.monotonic() value (None: no limit)."""
    if cfg.greedy:
        raise ValueError(
            "the sampled drift meter measures a sampled law: temperature must be > 0 (greedy drift: "
            "race it against AR)"
        )
    if not 1 <= n <= MAX_SAMPLES:
        raise ValueError(f"samples must be between 1 and {MAX_SAMPLES}, got {n!r}")
    t0, ids = time.monotonic(), engine.encode(prompt, cfg.raw)
    engine._check_context(ids, _two_tokens(cfg, seed))
    exact, lossy, law = list(exact_draws or [])[:n], [], None
    rules = [(dataclasses.replace(cfg, accept="exact"), exact)] + ([(cfg, lossy)] if cfg.lossy else [])

    def report(final: bool, stopped: str | None = None) -> dict:
        done = min(len(exact), len(lossy)) if cfg.lossy else len(exact)
        done = done if law is not None else 0
        ex = _rule_report(law, exact[:done], "exact")
        return {
            "exact": ex,
            "lossy": _rule_report(law, lossy[:done], cfg.accept) if cfg.lossy else ex,
            "done": done,
            "of": n,
            "elapsed_s": time.monotonic() - t0,
            "stopped": stopped,
            "final": final,
            "exact_draws": list(exact),
            "prompt": prompt,
            "draft": engine.draft_spec,
        }

    # the prompt is read once: every run and the law reuse it
    cache = engine.prefix_cache(ids, _two_tokens(cfg, seed))
    for _ in prefill(engine.forward, ids, cache, deadline, engine.target.device):
        yield report(False)
    if past(deadline):
        yield report(True, "time_limit")
        return
    law = PairLaw(engine, ids, cfg, cache)
    for k in range(n):
        for rule_cfg, draws in rules:
            if len(draws) > k:  # an earlier job's draw, reused
                continue
            if past(deadline):
                yield report(True, "time_limit")
                return
            last = None
            for event in engine.generate(
                prompt, _two_tokens(rule_cfg, seed + k), prompt_ids=ids, prefix=cache
            ):
                last = event
            draws.append(tuple(last.token_ids[:2]))
        yield report(k == n - 1)


def joint_tv(engine, prompt: str, cfg: GenerationConfig, n: int = 400, seed: int = 0) -> dict:
    """TV between the first two tokens' law under cfg (n runs, seeds seed..seed+n−1) and the target's exact law.
    Returns {'tv', 'n', 'pairs' (distinct pairs seen), 'accept'}. cfg must sample (temperature > 0)."""
    if cfg.greedy:
        raise ValueError(
            "joint_tv measures a sampled law: temperature must be > 0 (greedy drift: greedy_drift)"
        )
    *_, last = drift_job(engine, prompt, cfg, n, seed)
    return last["lossy"]


def drift_report(engine, prompt: str, cfg: GenerationConfig, n: int = 400, seed: int = 0) -> dict:
    """The sampled drift meter run to its end: joint_tv of cfg's rule and of the exact rule at the same n and seeds."""
    *_, last = drift_job(engine, prompt, cfg, n, seed)
    return {key: last[key] for key in ("lossy", "exact", "prompt", "draft")}
