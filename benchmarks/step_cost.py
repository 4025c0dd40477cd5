"""The lean forward (engine/fastllama.py) vs transformers' own forward of the same model, side by side.

    .venv/bin/python benchmarks/step_cost.py

Greedy-decodes 48 tokens after a 100-token prefill with each, interleaved 5 times, and prints the
median ms/token of each; then times one forward over n = 5 and 13 new tokens (a verify) at 200
cached tokens, median of 12 interleaved pairs. tests/test_drafters.py pins the two to the same logits.
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


def decode(forward, model, ids: torch.Tensor, n: int = 48) -> float:
    """Milliseconds per token of n greedy steps."""
    cache = KVCache.for_model(model, ids.shape[1] + n + 1)
    forward(ids, cache, logits_to_keep=1)
    x = ids[:, -1:]
    t = time.perf_counter()
    for _ in range(n):
        x = forward(x, cache)[:, -1:].argmax(-1)
    return (time.perf_counter() - t) / n * 1e3


def main() -> None:
    target = load_model("embedded")
    paths = {"lean": forward_fn(target.model),
             "transformers": lambda x, cache, **kw: target.model(x, past_key_values=cache, **kw).logits}
    ids = torch.randint(0, 40000, (1, 100))
    times = {name: [] for name in paths}
    with torch.inference_mode():
        for name, f in paths.items():
            decode(f, target.model, ids, 4)
        for _ in range(5):
            for name, f in paths.items():
                times[name].append(decode(f, target.model, ids))
    for name, ms in times.items():
        print(f"{name:13s} {statistics.median(ms):.1f} ms/token")
    print(f"ratio {statistics.median(times['transformers']) / statistics.median(times['lean']):.3f}")
    with torch.inference_mode():
        cache = KVCache.for_model(target.model, 220)
        paths["lean"](torch.randint(0, 40000, (1, 200)), cache, logits_to_keep=1)
        for n in (5, 13):
            x = torch.randint(0, 40000, (1, n))
            ms = {name: [] for name in paths}
            for _ in range(12):
                for name, f in paths.items():
                    t = time.perf_counter()
                    f(x, cache)
                    ms[name].append((time.perf_counter() - t) * 1e3)
                    cache.truncate(200)
            print(f"verify of {n}: lean {statistics.median(ms['lean']):.1f} ms, "
                  f"transformers {statistics.median(ms['transformers']):.1f} ms")


if __name__ == "__main__":
    main()
