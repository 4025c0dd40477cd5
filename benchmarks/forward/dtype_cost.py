"""Cost of one target forward over n new tokens, per weight dtype, on this machine.

    .venv/bin/python benchmarks/forward/dtype_cost.py

Prints milliseconds per forward (median of 15) for n = 1, 5, 9 at 100 cached tokens, for fp32 and
bf16 weights, through the same forward the engine uses. This is the verify cost v(n) that decides
whether speculation pays; bf16 is not the CPU default (fp32 is), so this is the evidence for it.
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from engine.runtime.cache import KVCache  # noqa: E402
from engine.runtime.lean import forward_fn  # noqa: E402
from engine.runtime.models import load_model  # noqa: E402

for dtype in ("fp32", "bf16"):
    model = load_model(dtype=dtype).model
    forward = forward_fn(model)
    row = []
    with torch.inference_mode():
        for n in (1, 5, 9):
            cache = KVCache.for_model(model, 128)
            forward(torch.randint(0, 40000, (1, 100)), cache)
            x = torch.randint(0, 40000, (1, n))
            times = []
            for _ in range(15):
                t = time.perf_counter()
                forward(x, cache)
                times.append(time.perf_counter() - t)
                cache.truncate(100)
            row.append(statistics.median(times) * 1000)
    print(
        f"{dtype}: n=1 {row[0]:.1f} ms, n=5 {row[1]:.1f} ms (v={row[1] / row[0]:.2f}), "
        f"n=9 {row[2]:.1f} ms (v={row[2] / row[0]:.2f})"
    )
