"""native.c at each vector level on this host, side by side: t(n) against the memory floor and greedy AR through
Engine.generate, one process per level (a process loads one build), the levels alternating round after round.

    python -m benchmarks forward levels [--levels native,x86-64-v3] [--rounds 3] [--threads 1,2] [--passes 5]

Each child builds native.c at its level (SPECVIZ_NATIVE_ARCH; x86-64-v3 runs as an AVX2-only host would, torch's
own kernels, oneDNN and MKL held to AVX2 too: benchmarks/common.py AVX2_HOST) and loads the embedded target's lean
forward (its kernel plan measured for that build). Then per thread count:
- t(n) for n = 1..17 new tokens after --context cached ones (--passes passes, every n once a pass, the order
  reversed every other pass; the median), each over the floor at the read rate measured just before it (a stream
  over as many bytes as the weights, best of 2: the memory floor of that moment; the median ratio);
- whether t(n) never falls as n grows: each t(n + 1) ÷ t(n) taken within a pass, moments apart (the host's drift
  between passes cancels), its median;
- AR through Engine.generate (greedy, --tokens new tokens, best of 3): tokens/s of the whole run, and the share of
  the bandwidth bound a decode step reached in it (one read of the weights at the faster of the read rates
  measured just before and just after the run ÷ the run's measured step time).
The table: per level and thread count, the median over rounds of each figure; the AR tokens must be identical
across levels.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

from benchmarks.common import AVX2_HOST, host_line

NS = tuple(range(1, 18))  # new tokens per forward: AR (1) and every verification up to γ 16
PROMPT = "Write a short story about a lighthouse keeper and a storm, in five sentences."


def child(threads: list[int], context: int, tokens: int, passes: int) -> dict:
    """This process's level: {"level", "status", threads: {"t": {n: ms}, "ratio": {n: t ÷ floor}, "ar": tok/s,
    "bound": tok/s at the read rate, "ids": the AR tokens}}."""
    import torch

    from engine import Engine, GenerationConfig, costmodel, load_model
    from engine.runtime import native, roofline
    from engine.runtime.cache import KVCache
    from engine.runtime.threads import torch_threads

    target = load_model("embedded")
    engine = Engine(target, "ngram")
    forward = engine.forward
    costs = roofline.costs_of(forward)
    ids = torch.randint(0, 40000, (1, context + max(NS)), generator=torch.Generator().manual_seed(0))
    out = {
        "level": native.level(),
        "status": f"{native.status()}, torch's kernels at {torch.backends.cpu.get_cpu_capability()}",
    }
    for th in threads:
        host = {**costs, **roofline.machine(th)}  # the compute rate for the floor's other term
        with torch_threads(th), torch.inference_mode():
            blob = torch.rand(int(costs["weight_bytes"]) // 4)
            cache = KVCache.for_model(target.model, context + max(NS) + 1)
            forward(ids[:, :context], cache, logits_to_keep=1)
            times, ratios = {n: [] for n in NS}, {n: [] for n in NS}
            for p in range(passes):  # every n once a pass, the order reversed every other pass
                for n in NS if p % 2 == 0 else NS[::-1]:
                    rate = roofline.read_rate(blob, reps=2)
                    t = time.perf_counter()
                    forward(ids[:, context : context + n], cache, logits_to_keep=n)
                    times[n].append(time.perf_counter() - t)
                    cache.truncate(context)
                    floor = max(costmodel.floors(n, context, {**host, "bandwidth": rate}))
                    ratios[n].append(times[n][-1] / floor)
            t_ms = {n: statistics.median(v) * 1e3 for n, v in times.items()}
            ratio = {n: statistics.median(v) for n, v in ratios.items()}
            # t(n + 1) ÷ t(n) within each pass (measured moments apart: the host's drift cancels), its median
            step = {n: statistics.median(a / b for a, b in zip(times[n + 1], times[n])) for n in NS[:-1]}
            cfg = GenerationConfig(gamma=4, max_new_tokens=tokens)
            best, share, said = 0.0, 0.0, None
            for _ in range(3):  # AR: the engine's own baseline lane, between two reads of the memory rate
                before = roofline.read_rate(blob, reps=2)
                events = list(engine.generate(PROMPT, cfg, mode="ar"))
                rate = max(before, roofline.read_rate(blob, reps=2))  # the faster: the bound never too low
                fin = next(e for e in events if e.kind == "finished")
                if fin.summary["tokens_per_s"] > best:
                    best, said = fin.summary["tokens_per_s"], fin.token_ids
                    # one read of the weights at that rate ÷ a decode step's measured time
                    share = costs["weight_bytes"] / rate / fin.summary["target_step_s"]
            del blob
        out[th] = {"t": t_ms, "ratio": ratio, "step": step, "ar": best, "share": share, "ids": said}
    return out


def falls(steps: dict[int, float]) -> str:
    """Whether t(n) never falls as n grows: "yes" when no t(n + 1) ÷ t(n) (the median within a pass) is below 1,
    else where one is."""
    drops = [f"t({n + 1}) < t({n})" for n, r in steps.items() if r < 1]
    return "yes" if not drops else "no: " + ", ".join(drops)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--levels", default="native,x86-64-v3", help="-march values ('native': the host's own)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--context", type=int, default=300)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument(
        "--passes", type=int, default=5, help="forwards per n in each child (every n once a pass)"
    )
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    threads = [int(t) for t in args.threads.split(",")]
    if args.child:
        print(json.dumps(child(threads, args.context, args.tokens, args.passes)))
        return 0
    levels = [lv.strip() for lv in args.levels.split(",")]
    results: dict = {lv: [] for lv in levels}
    for r in range(args.rounds):
        for lv in levels if r % 2 == 0 else levels[::-1]:
            env = dict(os.environ, SPECVIZ_NATIVE_ARCH="" if lv == "native" else lv)
            if lv == "x86-64-v3":  # the whole stack at AVX2, as an AVX2-only host runs it
                env.update(AVX2_HOST)
            cmd = [sys.executable, "-m", "benchmarks", "forward", "levels", "--child", "--threads", args.threads,
                   "--context", str(args.context), "--tokens", str(args.tokens), "--passes", str(args.passes)]  # fmt: skip
            done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1200)
            if done.returncode:
                print(done.stderr[-3000:], file=sys.stderr)
                return 2
            results[lv].append(json.loads(done.stdout.strip().splitlines()[-1]))
            print(f"round {r + 1}, {lv}: {results[lv][-1]['status']}", flush=True)

    print(
        f"\n{host_line()}; {args.rounds} rounds, levels alternating; t(n) ÷ the floor at the read rate of its moment\n"
    )
    ns = ", ".join(map(str, NS))
    print(
        f"| level | threads | t(1) ÷ its floor | t(n) ms, n = {ns} | t(n) ÷ its floor | t(n + 1) ÷ t(n) in a "
        "pass, smallest | t(n) non-decreasing | AR tok/s | AR step: share of the bound |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    ids = set()
    for lv, runs in results.items():
        for th in threads:
            key = str(th)
            med = lambda f, key=key, runs=runs: statistics.median(f(run[key]) for run in runs)  # noqa: E731
            t_ms = [med(lambda x, n=n: x["t"][str(n)]) for n in NS]
            ratios = [med(lambda x, n=n: x["ratio"][str(n)]) for n in NS]
            steps = {n: med(lambda x, n=n: x["step"][str(n)]) for n in NS[:-1]}
            low = min(steps, key=steps.get)
            ar, share = med(lambda x: x["ar"]), med(lambda x: x["share"])
            print(
                f"| {runs[0]['level']} ({lv}) | {th} | {ratios[0]:.2f} | {', '.join(f'{t:.1f}' for t in t_ms)} | "
                f"{', '.join(f'{r:.2f}' for r in ratios)} | {steps[low]:.3f} (n = {low}) | {falls(steps)} | "
                f"{ar:.1f} | {share:.0%} |"
            )
            ids |= {tuple(run[key]["ids"]) for run in runs}
    print(f"\nAR outputs identical across levels, threads and rounds: {len(ids) == 1}")
    return 0 if len(ids) == 1 else 1


if __name__ == "__main__":
    raise SystemExit(main())
