"""Where the C time of a forward goes: SmolLM2-135M's shapes (30 layers, random fp32 weights in native.c's
panels, a cache of --context tokens per layer), called through ctypes with no Python checks, interleaved in one
process against a read-only stream over as many bytes as the weights (the memory floor of that moment):

- `gemv`: the four products of every layer and the LM head, one specviz_gemv call each;
- `gemv + attention`: the same, with each layer's attention over its cache (specviz_attention);
- `layers`: every layer fused in one specviz_layers call (norms, RoPE, the cache write, attention, SiLU gate)
  plus the LM head, as the lean forward runs a step.

    .venv/bin/python benchmarks/probes/native_split.py [--threads 1] [--rows 1,4] [--context 300] [--reps 9]

Prints, per row count, each mode's median time and its ratio to the median floor, with the build and the host.
"""

from __future__ import annotations

import argparse
import ctypes
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch  # noqa: E402

from benchmarks.common import host_line  # noqa: E402
from engine.runtime import native  # noqa: E402

H, INTER, HEADS, KV, HD, LAYERS, VOCAB = 576, 1536, 9, 3, 64, 30, 49152
WIDTH = (HEADS + 2 * KV) * HD


def model(context: int) -> tuple[list[dict], torch.Tensor]:
    g = torch.Generator().manual_seed(0)

    def w(out, inner):
        return native.pack(torch.randn(out, inner, generator=g) * 0.05)

    layers = [
        {
            "qkv": w(WIDTH, H), "o": w(H, H), "gu": w(2 * INTER, H), "down": w(H, INTER),
            "n1": torch.ones(H), "n2": torch.ones(H),
            "kc": torch.randn(1, KV, context + 32, HD, generator=g),
            "vc": torch.randn(1, KV, context + 32, HD, generator=g),
        }
        for _ in range(LAYERS)
    ]  # fmt: skip
    return layers, w(VOCAB, H)


def modes(layers, head, rows: int, context: int, threads: int) -> dict:
    lib, p = native.library(), lambda t: t.data_ptr()
    x, xi, xa = torch.randn(rows, H), torch.randn(rows, INTER), torch.randn(rows, HEADS * HD)
    ys = [torch.empty(rows, n) for n in (WIDTH, H, 2 * INTER, H, VOCAB)]
    cos, sin = torch.ones(rows, HD), torch.zeros(rows, HD)
    start, stride = context - rows, layers[0]["kc"].stride(1)
    ws = torch.empty(rows * (WIDTH + HEADS * HD + 2 * H + 3 * INTER) + threads * (context + 64))
    order = ("n1", "qkv", None, "o", "n2", "gu", "down")
    stack = (ctypes.c_void_p * (7 * LAYERS))(
        *[None if k is None else p(la[k]) for la in layers for k in order]
    )
    kc = (ctypes.c_void_p * LAYERS)(*[p(la["kc"]) for la in layers])
    vc = (ctypes.c_void_p * LAYERS)(*[p(la["vc"]) for la in layers])

    def head_gemv():
        lib.specviz_gemv(p(head), p(x), None, p(ys[4]), H, VOCAB, rows, threads)

    def products(attend: bool):
        for la in layers:
            lib.specviz_gemv(p(la["qkv"]), p(x), None, p(ys[0]), H, WIDTH, rows, threads)
            if attend:
                lib.specviz_attention(
                    p(ys[0]), WIDTH, p(la["kc"]), p(la["vc"]), stride, None, start, p(xa), p(ws),
                    rows, context, HEADS, KV, HD, ctypes.c_float(HD**-0.5), threads,
                )  # fmt: skip
            lib.specviz_gemv(p(la["o"]), p(xa), None, p(ys[1]), HEADS * HD, H, rows, threads)
            lib.specviz_gemv(p(la["gu"]), p(x), None, p(ys[2]), H, 2 * INTER, rows, threads)
            lib.specviz_gemv(p(la["down"]), p(xi), None, p(ys[3]), INTER, H, rows, threads)
        head_gemv()

    def fused():
        lib.specviz_layers(
            p(x), LAYERS, stack, kc, vc, stride, start, rows, H, WIDTH, HEADS, KV, HD, INTER, 1e-5,
            p(cos), p(sin), None, p(ws), ctypes.c_float(HD**-0.5), threads,
        )  # fmt: skip
        head_gemv()

    return {"gemv": lambda: products(False), "gemv + attention": lambda: products(True), "layers": fused}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--rows", default="1,4")
    ap.add_argument("--context", type=int, default=300)
    ap.add_argument("--reps", type=int, default=9)
    args = ap.parse_args()
    if native.library() is None:
        raise SystemExit(f"no native kernel here: {native.status()}")
    torch.set_num_threads(args.threads)
    layers, head = model(args.context)
    nbytes = sum(la[k].numel() * 4 for la in layers for k in ("qkv", "o", "gu", "down")) + head.numel() * 4
    blob = torch.rand(nbytes // 4)
    print(
        f"{host_line()}; native.c: {native.status()}; {nbytes / 1e6:.0f} MB of weights, {args.context} cached"
    )
    for rows in (int(r) for r in args.rows.split(",")):
        fns = modes(layers, head, rows, args.context, args.threads)
        times, floors = {m: [] for m in fns}, []
        for rep in range(args.reps):
            t = time.perf_counter()
            blob.sum()
            floors.append(time.perf_counter() - t)
            for name in fns if rep % 2 == 0 else list(fns)[::-1]:
                t = time.perf_counter()
                fns[name]()
                times[name].append(time.perf_counter() - t)
        floor = statistics.median(floors)
        cells = [
            f"{m} {statistics.median(v) * 1e3:.2f} ms ({statistics.median(v) / floor:.2f}×)"
            for m, v in times.items()
        ]
        print(f"rows {rows}: floor {floor * 1e3:.2f} ms | " + " | ".join(cells))


if __name__ == "__main__":
    main()
