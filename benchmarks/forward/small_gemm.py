"""Small-row matmul kernels side by side: the 30 gate/up matrices of SmolLM2-135M's shape (576 × 3072, fp32,
random), one pass over all of them per call, at 1-5 rows and 1-2 threads, interleaved, medians of 15:
MKL with (in, out) weights (`nn`, what the lean forward uses), MKL with (out, in) weights (`nt`, F.linear),
and the oneDNN-packed linear packed for batch sizes 1, 2, 4 and 16 (`dnnB`). Milliseconds.

    .venv/bin/python benchmarks/forward/small_gemm.py
"""

from __future__ import annotations

import statistics
import time

import torch

H, FFN, LAYERS = 576, 3072, 30


def main() -> None:
    torch.manual_seed(0)
    w_out_in = [torch.randn(FFN, H) for _ in range(LAYERS)]
    w_in_out = [w.t().contiguous() for w in w_out_in]
    fns = {
        "nn": lambda x: [torch.mm(x, w) for w in w_in_out],
        "nt": lambda x: [torch.nn.functional.linear(x, w) for w in w_out_in],
    }
    for batch in (1, 2, 4, 16):
        packed = [torch.ops.mkldnn._reorder_linear_weight(w, batch) for w in w_out_in]
        fns[f"dnn{batch}"] = (
            lambda ps: lambda x: [torch.ops.mkldnn._linear_pointwise(x, p, None, "none", [], "") for p in ps]
        )(packed)
    for threads in (1, 2):
        torch.set_num_threads(threads)
        for rows in (1, 2, 3, 5):
            x = torch.randn(rows, H)
            times = {k: [] for k in fns}
            for fn in fns.values():
                fn(x)
            for _ in range(15):
                for k, fn in fns.items():
                    t = time.perf_counter()
                    fn(x)
                    times[k].append(time.perf_counter() - t)
            print(
                f"{threads} thread(s), {rows} row(s): "
                + "  ".join(f"{k} {statistics.median(v) * 1e3:.2f}" for k, v in times.items())
            )


if __name__ == "__main__":
    main()
