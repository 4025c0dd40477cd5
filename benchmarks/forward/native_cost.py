"""The lean forward with and without specviz's native few-row kernel, side by side on the embedded target.

    python -m benchmarks forward native [--threads 1,2] [--passes 5] [--context 300] [--tokens 64]

Builds the lean forward twice (the native kernel off, then on; each with the kernel plan measured for it on
this host), then at each thread count: t(n) for n = 1..17 new tokens after `--context` cached ones (the
roofline's measurement: interleaved between the two forwards, medians of 3 per pass, the median over
--passes passes), beside the memory floor (costmodel.floors with this host's cached read bandwidth, and with the
read rate measured just before each n's forwards in each pass, a stream over as many bytes as the weights: the
ratio per pass, then its median); and greedy
AR decoding of --tokens tokens through each forward (1-row steps, argmax; interleaved, best of 3), as tokens/s
and its share of the bandwidth bound. Both forwards' AR tokens must be identical. First, each forward's torch
op calls per layer in a 1-token step (torch.profiler; native.c's calls are not torch ops: a layer makes 2).
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import torch
from torch.profiler import ProfilerActivity, profile

from benchmarks.common import host_line, md_table
from engine import costmodel, load_model
from engine.runtime import native, roofline
from engine.runtime.cache import KVCache
from engine.runtime.lean import LeanForward
from engine.runtime.threads import torch_threads

NS = (1, 2, 3, 4, 5, 9, 17)


def forwards(model) -> dict:
    """{"without": lean forward on MKL/oneDNN, "native": with the native kernel} (each with its measured plan)."""
    saved = dict(native._state)
    native._state.update({"lib": None, "status": "off for this comparison", "build": None})
    try:
        without = LeanForward(model)
    finally:
        native._state.clear()
        native._state.update(saved)
    return {"without": without, "native": LeanForward(model)}


def step_ms(fwds: dict, model, ids, context: int, passes: int, blob: torch.Tensor) -> tuple[dict, dict]:
    """({name: {n: [ms per pass]}} of forwards over n new tokens after `context` cached, interleaved (each the
    median of 3); {n: [the read rate of a stream over `blob`, bytes/s, best of 3, just before them, per pass]}).
    This host's memory rate moved 2× between seconds (35-67 GB/s at 2 threads): a floor from the same moment is
    the fair one."""
    caches = {}
    for name, f in fwds.items():
        caches[name] = KVCache.for_model(model, context + max(NS) + 1)
        f(ids[:, :context], caches[name], logits_to_keep=1)
    out, rates = {name: {n: [] for n in NS} for name in fwds}, {n: [] for n in NS}
    for p in range(passes):
        for n in NS:
            rates[n].append(roofline.read_rate(blob, reps=3))
            for name in list(fwds) if p % 2 == 0 else list(fwds)[::-1]:
                times = []
                for _ in range(3):
                    t = time.perf_counter()
                    fwds[name](ids[:, context : context + n], caches[name], logits_to_keep=n)
                    times.append(time.perf_counter() - t)
                    caches[name].truncate(context)
                out[name][n].append(statistics.median(times) * 1e3)
    return out, rates


def ops_per_layer(fwds: dict, model, ids, context: int) -> dict:
    """{name: torch op calls per layer} of a 1-token step (the forward's calls outside the layers included)."""
    out = {}
    for name, f in fwds.items():
        cache = KVCache.for_model(model, context + 2)
        f(ids[:, :context], cache, logits_to_keep=1)
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            f(ids[:, context : context + 1], cache)
        calls = sum(e.count for e in prof.key_averages() if e.key.startswith("aten::"))
        out[name] = calls / len(f.layers)
    return out


def ar(fwds: dict, model, ids, context: int, tokens: int) -> dict:
    """{name: (tokens/s best of 3, the tokens)} of greedy 1-row decoding through each forward, interleaved."""
    best, said = {name: 0.0 for name in fwds}, {}
    for rep in range(3):
        for name in list(fwds) if rep % 2 == 0 else list(fwds)[::-1]:
            cache = KVCache.for_model(model, context + tokens + 1)
            nxt = fwds[name](ids[:, :context], cache, logits_to_keep=1)[0, -1].argmax()
            got = []
            t = time.perf_counter()
            for _ in range(tokens):
                got.append(int(nxt))
                nxt = fwds[name](nxt.view(1, 1), cache)[0, -1].argmax()
            best[name] = max(best[name], tokens / (time.perf_counter() - t))
            said[name] = got
    return {name: (best[name], said[name]) for name in fwds}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--passes", type=int, default=5)
    ap.add_argument("--context", type=int, default=300)
    ap.add_argument("--tokens", type=int, default=64)
    args = ap.parse_args()
    os.environ.setdefault("SPECVIZ_WEIGHTS", "fp32")  # this probe times the fp32 path's kernels
    target = load_model("embedded")
    model = target.model
    ids = torch.randint(0, 40000, (1, args.context + max(NS)), generator=torch.Generator().manual_seed(0))
    print(f"native kernel: {native.status()}")
    with torch.inference_mode():
        fwds = forwards(model)
        costs = roofline.costs_of(fwds["native"])
        ops = ops_per_layer(fwds, model, ids, args.context)
        print("torch op calls per layer, 1-token step: " + ", ".join(f"{k} {v:.1f}" for k, v in ops.items()))
        for threads in [int(t) for t in args.threads.split(",")]:
            rates = roofline.machine(threads)
            host = {**costs, **rates}
            floor = {n: max(costmodel.floors(n, args.context, host)) * 1e3 for n in NS}  # the roofline
            with torch_threads(threads):
                blob = torch.rand(int(costs["weight_bytes"]) // 4)  # as many bytes as the weights
                runs, rates_now = step_ms(fwds, model, ids, args.context, args.passes, blob)
                del blob
                decoded = ar(fwds, model, ids, args.context, args.tokens)
            print(
                f"\n{host_line()}; read {rates['bandwidth'] / 1e9:.1f} GB/s (a read-only stream; copy "
                f"{rates.get('copy_bandwidth', 0) / 1e9:.1f} GB/s, read + write counted), {threads} thread(s)\n"
            )
            # each pass's t(n) over the floor at the read rate measured just before it, then the median
            per_pass = {
                n: [t / (max(costmodel.floors(n, args.context, {**host, "bandwidth": r})) * 1e3)
                    for t, r in zip(runs["native"][n], rates_now[n])]
                for n in NS
            }  # fmt: skip
            ms = {name: {n: statistics.median(v) for n, v in by_n.items()} for name, by_n in runs.items()}
            every = [r / 1e9 for n in NS for r in rates_now[n]]
            print(
                f"read rate just before each n's forwards, over {costs['weight_bytes'] / 1e6:.0f} MB: "
                f"{min(every):.1f}-{max(every):.1f} GB/s (median {statistics.median(every):.1f})\n"
            )
            rows = [
                [n, f"{floor[n]:.1f}", f"{ms['without'][n]:.1f}", f"{ms['native'][n]:.1f}",
                 f"{ms['without'][n] / ms['native'][n]:.2f}×", f"{ms['native'][n] / floor[n]:.2f}",
                 f"{statistics.median(per_pass[n]):.2f} ({min(per_pass[n]):.2f}-{max(per_pass[n]):.2f})"]
                for n in NS
            ]  # fmt: skip
            heads = ["n", "floor ms", "t(n) without", "t(n) native", "speed-up", "native ÷ floor"]
            print(md_table([*heads, "native ÷ floor at its moment's read rate (range over passes)"], rows))
            same = decoded["without"][1] == decoded["native"][1]
            cells = []
            for name, (tps, _) in decoded.items():
                share = costmodel.bandwidth_share(1 / tps, args.context, host)["share"]
                cells.append(f"{name} {tps:.1f} tok/s ({share:.0%} of the bound)")
            print(
                f"\nAR, {args.tokens} tokens after {args.context}: "
                + "; ".join(cells)
                + f"; tokens identical: {same}"
            )


if __name__ == "__main__":
    main()
