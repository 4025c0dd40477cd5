"""The drift meter: how far a lossy acceptance rule (GenerationConfig.accept = "typical:…") moves the output away
from the target's own.

  greedy:   the first generated position where the run's tokens leave the target's greedy tokens (its AR run), and
            how many positions differ (positions past the shorter run count as differing);
  sampling: the total variation between the law of the first two generated tokens, estimated from n seeded runs,
            and the target's exact law p(x1)·p(x2 | x1) (computed from the target, one batched forward per distinct
            x1 seen): TV = ½ (Σ_seen |f − p| + (1 − Σ_seen p)). A finite sample has TV > 0 even for an exact rule,
            so the meter always reports the exact rule's TV at the same n beside the lossy one (the noise floor).
`greedy_drift` is plain Python (engine/metrics.py: the page calls it); `joint_tv` runs the engine.
"""
from __future__ import annotations

import dataclasses
from collections import Counter

import torch

from .. import sampling
from ..config import GenerationConfig
from ..metrics import greedy_drift  # the greedy meter is plain Python: the page computes it from a race's lanes

__all__ = ["greedy_drift", "target_pair_law", "joint_tv", "drift_report"]


@torch.inference_mode()
def target_pair_law(engine, ids: list[int], cfg: GenerationConfig, pairs) -> dict:
    """{(x1, x2): p(x1) p(x2 | x1)} under cfg's shaping for the given pairs; a pair (x1,) whose x1 ended the run
    (an end-of-text) has p(x1)."""
    model, device = engine.target.model, engine.target.device
    first = sampling.shape_probs(model(torch.tensor([ids], device=device)).logits[0, -1], cfg.temperature, cfg.top_k,
                                 cfg.top_p)  # (V,)
    heads = sorted({pair[0] for pair in pairs if len(pair) == 2})
    second = {}
    if heads:
        rows = torch.tensor([ids + [x1] for x1 in heads], device=device)  # (K, T + 1)
        probs = sampling.shape_probs(model(rows).logits[:, -1], cfg.temperature, cfg.top_k, cfg.top_p)  # (K, V)
        second = {x1: probs[k] for k, x1 in enumerate(heads)}
    return {pair: float(first[pair[0]]) * (float(second[pair[0]][pair[1]]) if len(pair) == 2 else 1.0)
            for pair in pairs}


def joint_tv(engine, prompt: str, cfg: GenerationConfig, n: int = 400, seed: int = 0) -> dict:
    """TV between the first two tokens' law under cfg (n runs, seeds seed..seed+n−1) and the target's exact law.
    Returns {'tv', 'n', 'pairs' (distinct pairs seen), 'accept'}. cfg must sample (temperature > 0)."""
    if cfg.greedy:
        raise ValueError("joint_tv measures a sampled law: temperature must be > 0 (greedy drift: greedy_drift)")
    if not 1 <= n <= 20000:
        raise ValueError(f"samples must be between 1 and 20000, got {n!r}")
    ids = engine.encode(prompt, cfg.raw)
    counts: Counter = Counter()
    for k in range(n):
        run = dataclasses.replace(cfg, max_new_tokens=2, seed=seed + k, record_topk=0)
        out = list(engine.generate(prompt, run, prompt_ids=ids))[-1].token_ids
        counts[tuple(out[:2])] += 1
    law = target_pair_law(engine, ids, cfg, list(counts))
    seen = sum(law.values())
    tv = 0.5 * (sum(abs(c / n - law[pair]) for pair, c in counts.items()) + max(0.0, 1.0 - seen))
    return {"tv": round(tv, 4), "n": n, "pairs": len(counts), "accept": cfg.accept}


def drift_report(engine, prompt: str, cfg: GenerationConfig, n: int = 400, seed: int = 0) -> dict:
    """The sampled drift meter: joint_tv of cfg's rule and of the exact rule at the same n and seeds."""
    exact = joint_tv(engine, prompt, dataclasses.replace(cfg, accept="exact"), n, seed)
    lossy = joint_tv(engine, prompt, cfg, n, seed) if cfg.lossy else exact
    return {"lossy": lossy, "exact": exact, "prompt": prompt, "draft": engine.draft_spec}
