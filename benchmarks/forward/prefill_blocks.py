"""Prefill on a GGUF's blocks, the two ways side by side: every projection of the embedded SmolLM2-135M's forward (30
layers' qkv, o, gate/up and down, and the Q8_0 LM head) at n prompt rows, by

- `dequant` (what BlockWeight runs past BLOCK_ROWS rows): each slice of panels de-quantized into a 16 MiB scratch
  buffer, then torch's matmul over it;
- `blocks`: native.c's block kernel over all n rows, RMAX rows a pass while a panel's blocks stay in cache (a block
  GEMM: every weight rebuilt once per RMAX rows).

One process, the weights loaded once, the two interleaved (their order reversed every other rep); the median of
REPS passes in ms, and the ratio. The two outputs must agree to fp32 rounding (the same products, summed in another
order by the matmul).

    python -m benchmarks forward prefill [--rows 17,32,64,128,256,512] [--threads 1,2] [--reps 5]

The AVX2 build with torch's own kernels held to AVX2 (as `make peer-avx2` holds them): SPECVIZ_NATIVE_ARCH=x86-64-v3
ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2 MKL_ENABLE_INSTRUCTIONS=AVX2 before the command.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from benchmarks.common import embedded_on, host_line, md_table
from engine.runtime import blocks, native
from engine.runtime.lean import forward_fn
from engine.runtime.threads import torch_threads


def passes(weights: list, x_of: dict, how: str) -> float:
    """One pass over every projection at its input width; seconds."""
    t = time.perf_counter()
    for w in weights:
        x = x_of[w.in_features]
        blocks.gemv(x, w) if how == "blocks" else w._dequant(x)
    return time.perf_counter() - t


def main(argv: list | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", default="17,32,64,128,256,512")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--reps", type=int, default=5)
    args = ap.parse_args(argv)
    forward = forward_fn(embedded_on("gguf").model)
    weights = [w for ws in forward.weights().values() for w in ws]
    if not all(isinstance(w, blocks.BlockWeight) for w in weights):
        raise SystemExit("the embedded model did not load on its blocks (SPECVIZ_WEIGHTS, native.c)")
    torch.manual_seed(0)
    table = []
    for threads in [int(t) for t in args.threads.split(",")]:
        with torch_threads(threads):
            for n in [int(r) for r in args.rows.split(",")]:
                x_of = {k: torch.randn(n, k) for k in {w.in_features for w in weights}}
                for w in weights[:3]:  # the same products: the two agree to fp32 rounding
                    a, b = blocks.gemv(x_of[w.in_features], w), w._dequant(x_of[w.in_features])
                    torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)
                times = {"dequant": [], "blocks": []}
                for rep in range(args.reps):
                    for how in ("dequant", "blocks") if rep % 2 == 0 else ("blocks", "dequant"):
                        times[how].append(passes(weights, x_of, how))
                d, b = (statistics.median(times[k]) * 1e3 for k in ("dequant", "blocks"))
                table.append(
                    [threads, n, f"{d:.1f}", f"{b:.1f}", f"{b / d:.2f}", f"{d / n:.2f}", f"{b / n:.2f}"]
                )
                print(table[-1], flush=True)
    print(f"{host_line()}; native.c at {native.level()}")
    print(
        md_table(
            ["threads", "rows", "dequant + matmul ms", "block kernel ms", "block ÷ dequant", "dequant ms/row",
             "block ms/row"],
            table,
        )
    )  # fmt: skip


if __name__ == "__main__":
    main()
