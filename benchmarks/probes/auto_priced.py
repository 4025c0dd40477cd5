"""What `auto`'s decisions earn apart from this host's noise: every round of each contestant priced at a fixed t(rows),
the block forward's times by rows from benchmarks/results/roofline-blocks.txt (2 threads), on Spec-Bench's sample (4
per category, seed 0; greedy, γ 4, 64 new tokens), the contestants interleaved per question, their order rotating.

    .venv/bin/python -m benchmarks.probes.auto_priced --against 0e94342 --passes 3 --also ngram

One warm-up pass, then `--passes` over the whole sample (what auto learns carries across categories, as in the
benchmark). Prints per category the tokens committed × t(1) ÷ the rounds' summed t(rows): the speedup over our AR if
every round cost its verify forward and nothing else (no drafting, no host work, no prefill). A wall-clock column of
this sample moves by up to 8% between runs on a shared host; this one moves only with what was decided.
"""

from __future__ import annotations

import argparse
import collections
import re
from pathlib import Path

from benchmarks.common import host_line
from benchmarks.probes.auto_paired import earlier_auto
from benchmarks.specbench_run import encode_turns
from engine import Engine, GenerationConfig, load_model
from engine import specbench as sb
from engine.drafters import auto

ROOFLINE = Path(__file__).resolve().parents[1] / "results" / "roofline-blocks.txt"


def forward_times(threads: int = 2) -> dict[int, float]:
    """t(rows) in ms of the roofline file's table for `threads`."""
    times, inside = {}, False
    for line in ROOFLINE.read_text().splitlines():
        if re.match(r"\d+ thread", line):
            inside = line.startswith(f"{threads} thread")
        elif inside and (m := re.match(r"\s+n=\s*(\d+): t\(n\)\s+([\d.]+) ms", line)):
            times[int(m.group(1))] = float(m.group(2))
    return times


def priced(engine, ids, cfg, t: dict) -> tuple[int, float]:
    """(tokens committed, the rounds' summed t(rows)) of one generation."""
    tokens, cost = 0, 0.0
    for e in engine.generate(None, cfg, "speculative", prompt_ids=ids):
        if e.kind == "committed":
            tokens += len(e.token_ids)
        elif e.kind == "round_timed":
            cost += t[min(max(e.verified, e.gamma + 1), max(t))]
    return tokens, cost


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--against", default="HEAD", help="the commit whose auto.py runs beside this tree's")
    p.add_argument("--passes", type=int, default=3)
    p.add_argument("--also", default="", help="comma-separated fixed drafters to run as well (e.g. ngram)")
    args = p.parse_args()
    t = forward_times()
    target = load_model("embedded")
    classes = {"new": auto.AutoDrafter, "old": earlier_auto(args.against)}
    engines = {
        "new": Engine(target, "auto"),
        "old": Engine(target, "auto"),
        **{name: Engine(target, name) for name in filter(None, args.also.split(","))},
    }
    questions = sb.sample(sb.load_questions(), 4, 0)
    cfg = GenerationConfig(gamma=4, max_new_tokens=64)
    tokens, cost, names = collections.defaultdict(int), collections.defaultdict(float), list(engines)
    for n in range(args.passes + 1):  # pass 0: the warm-up
        for i, q in enumerate(questions):
            ids = encode_turns(target.tokenizer, q["turns"], [])
            k = (n + i) % len(names)
            for name in names[k:] + names[:k]:
                auto.AutoDrafter = classes.get(name, classes["new"])  # what auto's factory builds this run
                got, seconds = priced(engines[name], ids, cfg, t)
                auto.AutoDrafter = classes["new"]
                if n:
                    tokens[name, q["group"]] += got
                    cost[name, q["group"]] += seconds
    cats = list(dict.fromkeys(q["group"] for q in questions))
    print(host_line(), f"{args.passes} passes; auto: this tree (new), {args.against} (old)")
    print("speedup over AR at fixed t(rows) (roofline-blocks, 2 threads):", " / ".join(cats), "/ all")
    for name in names:
        row = [tokens[name, c] * t[1] / cost[name, c] for c in cats]
        whole = sum(tokens[name, c] for c in cats) * t[1] / sum(cost[name, c] for c in cats)
        print(f"  {name:6s}", " / ".join(f"{x:.3f}" for x in row), f"/ {whole:.3f}")


if __name__ == "__main__":
    main()
