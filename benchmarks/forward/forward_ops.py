"""Where a forward's time goes, op by op, against the roofline: the lean forward of the embedded target over n
new tokens at a fixed context, profiled (torch.profiler, self CPU time per op), grouped into the matmuls, attention and the rest, with the memory
floor of what a group must read (weights, the cached keys and values) ÷ this host's read bandwidth beside it.

    .venv/bin/python benchmarks/forward/forward_ops.py [--context 300] [--reps 9] [--threads 1,2]

It names the gap between t(n) and the roofline: which ops pay more than their bytes, and what a second row
adds. Numbers move with the host and the load: compare within one run.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from engine import costmodel  # noqa: E402
from engine.runtime import kernels, roofline  # noqa: E402
from engine.runtime.cache import KVCache  # noqa: E402
from engine.runtime.lean import LeanForward  # noqa: E402
from engine.runtime.models import load_model  # noqa: E402
from engine.runtime.threads import torch_threads  # noqa: E402

NS = (1, 2, 3, 5, 9, 17)
GROUPS = {  # profiler op name -> group; anything else is "other" (norms, RoPE, adds, views, the mask)
    "aten::mm": "matmul",
    "aten::addmm": "matmul",
    "mkldnn::_linear_pointwise": "matmul",
    "aten::_scaled_dot_product_flash_attention_for_cpu": "attention",
    "aten::_scaled_dot_product_attention_math": "attention",
    "aten::scaled_dot_product_attention": "attention",
    "aten::bmm": "attention",
    "aten::_softmax": "attention",
    "aten::copy_": "cache write / copies",
    "aten::index_copy_": "cache write / copies",
    "aten::cat": "RoPE / cat",
    "aten::mul": "elementwise",
    "aten::add": "elementwise",
    "aten::add_": "elementwise",
    "aten::mul_": "elementwise",
    "aten::neg": "elementwise",
    "aten::silu": "elementwise",
    "aten::rsqrt": "norm",
    "aten::mean": "norm",
    "aten::pow": "norm",
    "aten::embedding": "other",
    "aten::index_select": "other",
}


def profile_forward(forward, target, ids, ctx: int, n: int, reps: int) -> tuple[float, dict]:
    """(median wall seconds of the forward, {group: self CPU seconds per forward}) at n new tokens."""
    cache = KVCache.for_model(target.model, ctx + NS[-1] + 1)
    forward(ids[:, :ctx], cache, logits_to_keep=1)
    walls = []
    for _ in range(reps):
        t = time.perf_counter()
        forward(ids[:, ctx : ctx + n], cache)
        walls.append(time.perf_counter() - t)
        cache.truncate(ctx)
    groups: dict = defaultdict(float)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(reps):
            forward(ids[:, ctx : ctx + n], cache)
            cache.truncate(ctx)
    for evt in prof.key_averages():
        groups[GROUPS.get(evt.key, "other")] += evt.self_cpu_time_total / 1e6 / reps
    return statistics.median(walls), dict(groups)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--context", type=int, default=300)
    ap.add_argument("--reps", type=int, default=9)
    ap.add_argument("--threads", default="1,2")
    args = ap.parse_args()
    os.environ.setdefault("SPECVIZ_WEIGHTS", "fp32")  # this probe times the fp32 path's kernels
    target = load_model("embedded")
    forward = LeanForward(target.model)
    costs = roofline.costs_of(forward)
    ids = torch.randint(0, 1000, (1, args.context + NS[-1]))
    print(
        f"host: {kernels.cpu_name()} [{' '.join(kernels.cpu_flags())}], torch {torch.__version__}; "
        f"context {args.context}, medians of {args.reps}"
    )
    for threads in [int(t) for t in args.threads.split(",")]:
        r = {**roofline.machine(threads), **costs}
        with torch_threads(threads), torch.inference_mode():
            rows = {n: profile_forward(forward, target, ids, args.context, n, args.reps) for n in NS}
        print(
            f"\n{threads} thread(s): read {r['bandwidth'] / 1e9:.1f} GB/s; ms per forward (floor = bytes ÷ read bandwidth)"
        )
        print("| | " + " | ".join(f"n = {n}" for n in NS) + " | memory floor |")
        print("|---|" + "---|" * (len(NS) + 1))
        print(
            "| t(n), wall | "
            + " | ".join(f"{rows[n][0] * 1e3:.1f}" for n in NS)
            + f" | {costmodel.floors(1, args.context, r)[0] * 1e3:.1f} |"
        )
        print(
            "| t(n) / roofline | "
            + " | ".join(f"{costmodel.gap(rows[n][0], n, args.context, r):.2f}" for n in NS)
            + " | |"
        )
        kv = (args.context + 1) * r["kv_bytes_per_position"] / r["bandwidth"]
        for group in (
            "matmul",
            "attention",
            "cache write / copies",
            "RoPE / cat",
            "elementwise",
            "norm",
            "other",
        ):
            floor = {
                "attention": f"{kv * 1e3:.1f}",
                "matmul": f"{r['weight_bytes'] / r['bandwidth'] * 1e3:.1f}",
            }.get(group, "")
            print(
                f"| profiled: {group} | "
                + " | ".join(f"{rows[n][1].get(group, 0) * 1e3:.1f}" for n in NS)
                + f" | {floor} |"
            )


if __name__ == "__main__":
    main()
