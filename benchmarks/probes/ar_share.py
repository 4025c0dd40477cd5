"""The share of the bandwidth bound our AR reaches through Engine.generate, as the page computes it: each run's
floor is the weight bytes (+ KV) ÷ the read rate of that run's start (RunStarted.host.bandwidth), beside the
same step over the floor at this host's cached best take (bandwidth_best).

    .venv/bin/python benchmarks/probes/ar_share.py [--prompts 8] [--max-new-tokens 64] [--threads 1,2]

Thread counts interleaved per prompt; prints per thread count the median step, the median share at the run's own
rate and at the best take, and the range of the rates the runs read.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

from benchmarks.common import host_line
from engine import Engine, GenerationConfig, load_model
from engine.runtime.threads import torch_threads


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--prompts", type=int, default=8)
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--threads", default="1,2")
    args = p.parse_args()
    engine = Engine(load_model("embedded"), "ngram", measure_step=False)
    cfg = GenerationConfig(max_new_tokens=args.max_new_tokens, record_topk=0)
    prompts = [json.loads(x)["prompt"] for x in Path("engine/prompts/bench.jsonl").read_text().splitlines()]
    threads = [int(t) for t in args.threads.split(",")]
    rows, bests = {t: [] for t in threads}, {}
    for prompt in prompts[: args.prompts]:
        for t in threads:
            with torch_threads(t):
                events = list(engine.generate(prompt, cfg, "ar"))
            host, s = events[0].host, events[-1].summary
            share = s["bandwidth"]
            best = share["floor_s"] * host["bandwidth"] / host["bandwidth_best"]
            rows[t].append((share["step_s"], share["share"], best / share["step_s"], host["bandwidth"]))
            bests[t] = host["bandwidth_best"]
    print(host_line())
    print(
        "| threads | step (median) | share at the run's read rate | share at the best take | rates read | best take |"
    )
    print("|---|---|---|---|---|---|")
    for t, r in rows.items():
        step, share, best, rate = (list(x) for x in zip(*r))
        print(
            f"| {t} | {1e3 * statistics.median(step):.1f} ms | {100 * statistics.median(share):.0f}% "
            f"({100 * min(share):.0f}-{100 * max(share):.0f}%) | {100 * statistics.median(best):.0f}% "
            f"| {min(rate) / 1e9:.1f}-{max(rate) / 1e9:.1f} GB/s | {bests[t] / 1e9:.1f} GB/s |"
        )


if __name__ == "__main__":
    main()
