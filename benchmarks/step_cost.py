"""The lean forward's batch-1 fp32 row path vs its general path, side by side.

    .venv/bin/python benchmarks/step_cost.py

Greedy-decodes 48 tokens after a 100-token prefill with each path, interleaved 5 times, and prints
the median ms/token of each; then times one forward over n = 5 and 13 new tokens (a verify) at 200
cached tokens, median of 12 interleaved pairs. Both paths give bit-identical logits
(tests/test_drafters.py checks it).
"""
from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from engine import load_model  # noqa: E402
from engine.cache import KVCache  # noqa: E402
from engine.fastllama import forward_fn  # noqa: E402


def decode(forward, model, ids: torch.Tensor, general: bool, n: int = 48) -> float:
    """Milliseconds per token of n greedy steps."""
    cache = KVCache.for_model(model, ids.shape[1] + n + 1)
    forward(ids, cache, logits_to_keep=1)
    x = ids[:, -1:]
    t = time.perf_counter()
    for _ in range(n):
        x = (forward._general if general else forward)(x, cache)[:, -1:].argmax(-1)
    return (time.perf_counter() - t) / n * 1e3


def main() -> None:
    target = load_model("embedded")
    forward = forward_fn(target.model)
    ids = torch.randint(0, 40000, (1, 100))
    times = {"row path": [], "general path": []}
    with torch.inference_mode():
        decode(forward, target.model, ids, False, 4)
        decode(forward, target.model, ids, True, 4)
        for _ in range(5):
            times["row path"].append(decode(forward, target.model, ids, False))
            times["general path"].append(decode(forward, target.model, ids, True))
    for name, ms in times.items():
        print(f"{name:13s} {statistics.median(ms):.1f} ms/token")
    print(f"ratio {statistics.median(times['general path']) / statistics.median(times['row path']):.3f}")
    with torch.inference_mode():
        cache = KVCache.for_model(target.model, 220)
        forward(torch.randint(0, 40000, (1, 200)), cache, logits_to_keep=1)
        for n in (5, 13):
            x = torch.randint(0, 40000, (1, n))
            ms = {"row path": [], "general path": []}
            for _ in range(12):
                for name, f in (("row path", forward), ("general path", forward._general)):
                    t = time.perf_counter()
                    f(x, cache)
                    ms[name].append((time.perf_counter() - t) * 1e3)
                    cache.truncate(200)
            print(f"verify of {n}: row path {statistics.median(ms['row path']):.1f} ms, "
                  f"general path {statistics.median(ms['general path']):.1f} ms")


if __name__ == "__main__":
    main()
