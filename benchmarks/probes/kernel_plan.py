"""The measured kernel plan (engine/runtime/kernels.py) against the fixed rule it replaced, whole forwards
interleaved in one process: t(n) at 300 cached tokens, n = 1, 2, 3, 5, 9, 17, with 1 and 2 threads.

    .venv/bin/python benchmarks/probes/kernel_plan.py [--passes 5] [--reps 15]

The fixed rule: fp32 rows of 1 on MKL, every multi-row call on the oneDNN-packed weight. Each pass prints,
per thread count, both t(n) medians, v(2) = t(2)/t(1) of each, and AR tok/s = 1/t(1).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from engine import load_model  # noqa: E402
from engine.runtime import kernels  # noqa: E402
from engine.runtime.cache import KVCache  # noqa: E402
from engine.runtime.lean import LeanForward  # noqa: E402
from engine.runtime.threads import torch_threads  # noqa: E402

NS = (1, 2, 3, 5, 9, 17)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--passes", type=int, default=5)
    ap.add_argument("--reps", type=int, default=15)
    args = ap.parse_args()
    target = load_model("embedded")
    os.environ["SPECVIZ_KERNELS"] = "fixed"
    fixed = LeanForward(target.model)
    os.environ["SPECVIZ_KERNELS"] = "measure"
    measured = LeanForward(target.model)
    print(f"host: {kernels.cpu_name()} [{' '.join(kernels.cpu_flags())}], torch {torch.__version__}")
    ids = torch.randint(0, 40000, (1, 330))
    sides = {"fixed": fixed, "measured": measured}
    with torch.inference_mode():
        caches = {}
        for name, forward in sides.items():
            caches[name] = KVCache.for_model(target.model, 400)
            forward(ids[:, :300], caches[name], logits_to_keep=1)
        for p in range(args.passes):
            for threads in (1, 2):
                ms = {name: {} for name in sides}
                with torch_threads(threads):
                    for n in NS:
                        times = {name: [] for name in sides}
                        for i in range(args.reps):
                            for name in ("fixed", "measured") if i % 2 == 0 else ("measured", "fixed"):
                                t = time.perf_counter()
                                sides[name](ids[:, 300 : 300 + n], caches[name])
                                times[name].append(time.perf_counter() - t)
                                caches[name].truncate(300)
                        for name in sides:
                            ms[name][n] = statistics.median(times[name]) * 1e3
                cells = [
                    f"{name}: "
                    + " ".join(f"t({n})={ms[name][n]:.1f}" for n in NS)
                    + f"  v(2)={ms[name][2] / ms[name][1]:.2f}  AR {1e3 / ms[name][1]:.1f} tok/s"
                    for name in sides
                ]
                print(f"pass {p + 1}, {threads} thread(s): " + " | ".join(cells))


if __name__ == "__main__":
    main()
