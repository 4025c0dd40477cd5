"""The scaffolding every decoding loop shares (chains, the AR baseline, beam search): the cache size, the
deadline, the prefill, the run's clock and its first event. No decoding decisions in here.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import torch

from ..config import MAX_GAMMA, GenerationConfig
from ..events import Prefilling, RunStarted
from ..runtime.cache import KVCache

# prompt tokens per prefill forward (a batch: all its rows together); between two chunks the
PREFILL_CHUNK = 256
# deadline is checked and the consumer gets control (a Prefilling event), so a long prompt can be stopped within a
# chunk's time (~0.4 s for 256 tokens of the embedded model on 2 cores)


def cache_slots(prompt_len: int, cfg: GenerationConfig, rows: int = 0) -> int:
    """KV slots a run can need: the one place that sizes the cache.

    A round starts with every committed token but the last in the cache (at most prompt + max_new − 2)
    and writes the last one plus its draft: γ tokens (up to MAX_GAMMA under adaptive γ), a tree of
    up to tree_budget nodes, or the `rows` a drafter says its forward can write besides the root (a static
    tree template, lookahead's branch and window: the factory's `rows`). One more slot covers the
    single-token probe after the run.
    """
    return prompt_len + cfg.max_new_tokens + max(MAX_GAMMA, cfg.tree_budget, rows) + 1


def deadline_of(cfg: GenerationConfig) -> float | None:
    """time.monotonic() after which a run stops (stop_reason "time_limit"); None without a limit."""
    return None if cfg.time_limit_s is None else time.monotonic() + cfg.time_limit_s


def past(deadline: float | None) -> bool:
    """The deadline has passed (never without one)."""
    return deadline is not None and time.monotonic() > deadline


@torch.inference_mode()  # per step of the generator: no grad mode is left set while it is suspended
def prefill(forward, ids: list[int], cache: KVCache, deadline: float | None, device) -> Iterator[Prefilling]:
    """All but the last prompt token (round 1's input), in chunks. Between chunks: stop at the deadline, and yield a
    Prefilling (so a consumer that closes the run stops it there). A prompt of one chunk yields nothing."""
    total = len(ids) - 1
    for start in range(0, total, PREFILL_CHUNK):
        if past(deadline):
            return
        if start:
            yield Prefilling(round=0, pos=start, total=total)
        chunk = ids[start : min(start + PREFILL_CHUNK, total)]
        forward(torch.tensor([chunk], device=device), cache, logits_to_keep=1)


class Clock:
    """Seconds of the run's own compute: the time it spends suspended at a yield (the consumer's) is not counted."""

    def __init__(self):
        self.paused = 0.0

    def __call__(self) -> float:
        return time.perf_counter() - self.paused

    def hand_over(self, events: list, stats=None) -> Iterator:
        """Yield events to the consumer (counting each into stats, when given) with the clock stopped."""
        t = time.perf_counter()
        for event in events:
            if stats is not None:
                stats.add(event)
            yield event
        self.paused += time.perf_counter() - t


def started(
    target, text, ids: list[int], cfg: GenerationConfig, mode: str, draft: str, host: dict
) -> RunStarted:
    """The run's first event: who runs, on what, with which settings, from which prompt (text: id -> text).
    host: host_record(target), taken before the run's clock starts (its first call on a host measures)."""
    return RunStarted(
        round=0,
        run_id=uuid.uuid4().hex[:12],
        mode=mode,
        target=target.name,
        draft=draft,
        device=str(target.device),
        dtype=str(target.dtype).replace("torch.", ""),
        config=cfg.to_dict(),
        prompt_text=target.tokenizer.decode(ids),
        prompt_ids=list(ids),
        prompt_tokens=text.many(ids),
        pos=len(ids),
        threads=torch.get_num_threads() if target.device.type == "cpu" else 0,
        host=host,
    )
