"""torch.compile against the native kernel on one decode step's products: SmolLM2-135M's 30 layers' four
projections (fused q/k/v, o, fused gate/up, down) and its LM head, 1 row, fp32, random weights of the real
shapes, on this CPU.

    .venv/bin/python -m benchmarks forward compile [--threads 2] [--passes 5] [--modes default,max-autotune-no-cudagraphs] [--frozen]

Times, interleaved over passes (median of 20 calls each per pass): the native kernel on packed panels (what the
lean forward runs), torch eager (F.linear: MKL), and the same function through torch.compile in each mode
(inductor's CPU backend; max-autotune also benchmarks its C++ GEMM templates). Compile time printed apart.
Only the products: the rest of a layer (norms, RoPE, attention, the cache write) is 6.4 torch calls and two
native calls, which the products dominate.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
import torch.nn.functional as F

from benchmarks.common import host_line
from engine.runtime import native
from engine.runtime.threads import torch_threads

HIDDEN, INTER, KV, VOCAB, LAYERS = 576, 1536, 192, 49152, 30
SHAPES = [(HIDDEN + 2 * KV, HIDDEN), (HIDDEN, HIDDEN), (2 * INTER, HIDDEN), (HIDDEN, INTER)] * LAYERS + [
    (VOCAB, HIDDEN)
]


def products(xs, ws):
    return [F.linear(x, w) for x, w in zip(xs, ws)]


class Products(torch.nn.Module):
    """The same products on weights held as parameters: with inductor's freezing they are constants, which its
    C++ GEMM templates (max-autotune) need."""

    def __init__(self, ws):
        super().__init__()
        self.ws = torch.nn.ParameterList([torch.nn.Parameter(w, requires_grad=False) for w in ws])

    def forward(self, xs):
        return [F.linear(x, w) for x, w in zip(xs, self.ws)]


def timed(fn, calls: int = 20) -> float:
    ts = []
    for _ in range(calls):
        t = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t)
    return statistics.median(ts)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--passes", type=int, default=5)
    p.add_argument("--modes", default="default,max-autotune-no-cudagraphs")
    p.add_argument(
        "--frozen", action="store_true", help="also max-autotune on frozen weights (C++ GEMM templates)"
    )
    args = p.parse_args()
    torch.manual_seed(0)
    ws = [torch.randn(o, i) * 0.02 for o, i in SHAPES]
    xs = [torch.randn(1, i) for _, i in SHAPES]
    packed = [native.pack(w) for w in ws] if native.library() is not None else None
    with torch_threads(args.threads), torch.inference_mode():
        contenders = {"eager (F.linear)": lambda: products(xs, ws)}
        if packed is not None:
            contenders["native panels"] = lambda: [
                native.gemv(x, w, o) for x, w, (o, _) in zip(xs, packed, SHAPES)
            ]
        for mode in [m for m in args.modes.split(",") if m]:
            f = torch.compile(products, mode=None if mode == "default" else mode, dynamic=False)
            t = time.perf_counter()
            f(xs, ws)
            print(f"torch.compile {mode}: compiled in {time.perf_counter() - t:.1f} s", flush=True)
            contenders[f"compile {mode}"] = lambda f=f: f(xs, ws)
        if args.frozen:
            import torch._inductor.config as inductor_config

            inductor_config.freezing = True
            module = Products(ws).eval()
            f = torch.compile(module, mode="max-autotune-no-cudagraphs", dynamic=False)
            t = time.perf_counter()
            f(xs)
            print(f"torch.compile max-autotune, frozen weights: compiled in {time.perf_counter() - t:.1f} s")
            contenders["compile max-autotune, frozen"] = lambda f=f: f(xs)
        for fn in contenders.values():
            fn()
        times = {k: [] for k in contenders}
        for _ in range(args.passes):
            for k, fn in contenders.items():
                times[k].append(timed(fn))
    print(host_line())
    print(
        f"{len(SHAPES)} products, 1 row, fp32, {args.threads} thread{'s' if args.threads != 1 else ''}, {args.passes} interleaved passes"
    )
    print("| kernel | step's products (median of passes) | range |")
    print("|---|---|---|")
    for k, ts in times.items():
        print(f"| {k} | {1e3 * statistics.median(ts):.1f} ms | {1e3 * min(ts):.1f}-{1e3 * max(ts):.1f} |")


if __name__ == "__main__":
    main()
