"""Cost of one forward of the target over n tokens, with and without the oneDNN-packed weights.

    .venv/bin/python benchmarks/forward/onednn_cost.py

Builds the lean forward twice on the embedded target (plain matmuls only, and packed for multi-row
inputs), then times both side by side at 200 cached tokens: median of 12 per n, two passes. This is
the evidence for packing in engine/runtime/lean.py.
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from engine import load_model  # noqa: E402
from engine.runtime.cache import KVCache  # noqa: E402
from engine.runtime.lean import LeanForward  # noqa: E402


def main() -> None:
    os.environ.setdefault("SPECVIZ_WEIGHTS", "fp32")  # this probe times the fp32 path's kernels
    target = load_model("embedded")
    os.environ["SPECVIZ_ONEDNN"] = "0"
    plain = LeanForward(target.model)
    os.environ["SPECVIZ_ONEDNN"] = "1"
    packed = LeanForward(target.model)
    if packed.head.packed is None:
        print("oneDNN packing is not available here (build without oneDNN, or not enough RAM)")
        return
    ids = torch.randint(0, 40000, (1, 300))
    runs = {}
    with torch.inference_mode():
        for name, forward in (("plain", plain), ("packed", packed)):
            cache = KVCache.for_model(target.model, 400)
            forward(ids[:, :200], cache, logits_to_keep=1)
            runs[name] = (forward, cache)
        for rep in range(2):
            cells = []
            for n in (1, 2, 5, 8, 13):
                ms = {}
                for name, (forward, cache) in runs.items():
                    times = []
                    for _ in range(12):
                        t = time.perf_counter()
                        forward(ids[:, 200 : 200 + n], cache)
                        times.append(time.perf_counter() - t)
                        cache.truncate(200)
                    ms[name] = statistics.median(times) * 1e3
                cells.append(f"n={n}: packed {ms['packed']:.1f} vs plain {ms['plain']:.1f} ms")
            print(f"pass {rep + 1}: " + "; ".join(cells))


if __name__ == "__main__":
    main()
