"""Which matmul kernel and weight layout streams the weights fastest at 1-5 rows, per projection of
SmolLM2-135M (qkv 576→960, o 576→576, gate/up 576→3072, down 1536→576; 30 layers, fp32, random), at 1 and 2
threads, interleaved, medians of 15 passes over all 30 layers' weights. Effective GB/s = weight bytes ÷ time.

    python -m benchmarks forward layouts [--rows 1,2,3,5] [--threads 1,2] [--reps 15]

The ways: `x@Wt` MKL's mm with (in, out) weights (the lean forward's), `F.linear` MKL with (out, in) weights
(x @ W.T), `(W@x.T).T` MKL's mm with the (out, in) weight as the left operand (the rows become the small
dimension N of an M × K × N gemm), `oneDNN` the packed linear (what the kernel plan may choose).
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
import torch.nn.functional as F

from benchmarks.common import host_line, md_table

LAYERS = 30
SHAPES = {"qkv": (576, 960), "o": (576, 576), "gate/up": (576, 3072), "down": (1536, 576)}


def ways(x, weights, transposed, packed) -> dict:
    out = {
        "x@Wt": lambda: [torch.mm(x, t) for t in transposed],
        "F.linear": lambda: [F.linear(x, w) for w in weights],
        "(W@x.T).T": lambda: [torch.mm(w, x.t()) for w in weights],
    }
    if packed is not None:
        out["oneDNN"] = lambda: [
            torch.ops.mkldnn._linear_pointwise(x, p, None, "none", [], "") for p in packed
        ]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", default="1,2,3,5")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--reps", type=int, default=15)
    args = ap.parse_args()
    torch.manual_seed(0)
    rows_list = [int(r) for r in args.rows.split(",")]
    for threads in [int(t) for t in args.threads.split(",")]:
        torch.set_num_threads(threads)
        print(f"\n{host_line()}\n")
        table = []
        for name, (i, o) in SHAPES.items():
            weights = [torch.randn(o, i) for _ in range(LAYERS)]  # (out, in), as nn.Linear holds them
            transposed = [w.t().contiguous() for w in weights]  # (in, out)
            packed = None
            if torch.backends.mkldnn.is_available():
                packed = [torch.ops.mkldnn._reorder_linear_weight(w, 4) for w in weights]
            gb = LAYERS * i * o * 4 / 1e9
            for rows in rows_list:
                x = torch.randn(rows, i)
                fns = ways(x, weights, transposed, packed)
                times = {k: [] for k in fns}
                with torch.inference_mode():
                    for f in fns.values():
                        f(), f()
                    for r in range(args.reps):
                        order = list(fns.items()) if r % 2 == 0 else list(fns.items())[::-1]
                        for k, f in order:
                            t = time.perf_counter()
                            f()
                            times[k].append(time.perf_counter() - t)
                med = {k: statistics.median(v) for k, v in times.items()}
                best = min(med, key=med.get)
                table.append(
                    [name, rows] + [f"{med[k] * 1e3:.2f} ms ({gb / med[k]:.1f} GB/s)" for k in fns] + [best]
                )
        print(md_table(["projection", "rows", *fns, "fastest"], table), flush=True)


if __name__ == "__main__":
    main()
