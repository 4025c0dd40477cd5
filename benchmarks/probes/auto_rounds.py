"""Where auto's rounds go: per Spec-Bench question, the rounds each drafter was chosen for and the drafts they got
accepted, with the run's tok/s, for auto and auto:ngram alternating per question (greedy, γ = 4, first turns).

    .venv/bin/python benchmarks/probes/auto_rounds.py --categories translation --per-category 10 [--skip 4] [--limit 6]

Read from the runs' own `decided` and `verified` events (the choice of each round and what the target kept).
"""

from __future__ import annotations

import argparse
import collections
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from engine import Engine, GenerationConfig, load_model  # noqa: E402
from engine.specbench import load_questions, sample  # noqa: E402


def rounds_of(events) -> tuple[dict, dict]:
    """({drafter or "plain": rounds chosen}, {drafter: accepted drafts}) of one run."""
    chosen, rounds, accepted = {}, collections.Counter(), collections.Counter()
    for e in events:
        if e.kind == "decided":
            chosen[e.round] = e.drafter or "plain"
            rounds[chosen[e.round]] += 1
        elif e.kind == "verified":
            accepted[chosen.get(e.round, "?")] += sum(e.accepted)
    return dict(rounds), dict(accepted)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--categories", default="translation")
    ap.add_argument("--per-category", type=int, default=10, help="the Spec-Bench harness's seeded sample")
    ap.add_argument("--skip", type=int, default=0, help="start after this many questions of the sample")
    ap.add_argument("--limit", type=int, default=6)
    ap.add_argument("--drafts", default="auto,auto:ngram")
    ap.add_argument("--max-new-tokens", type=int, default=64)
    args = ap.parse_args(argv)
    target = load_model("embedded")
    cats = args.categories.split(",")
    questions = [q for q in sample(load_questions(), args.per_category, seed=0) if q["category"] in cats]
    engines = {d: Engine(target, d) for d in args.drafts.split(",")}
    cfg = GenerationConfig(gamma=4, max_new_tokens=args.max_new_tokens, record_topk=0)
    for (
        engine
    ) in engines.values():  # warm up: the first run in a process pays loading the heads, first kernels
        list(engine.generate("Say hi.", GenerationConfig(gamma=4, max_new_tokens=8, record_topk=0)))
    for q in questions[args.skip : args.skip + args.limit]:
        for d, engine in engines.items():  # interleaved: every drafter on a question before the next
            events = list(engine.generate(q["turns"][0], cfg))
            rounds, accepted = rounds_of(events)
            print(
                f"{q['category']} q{q['question_id']} {d}: {events[-1].summary['tokens_per_s']:.1f} tok/s; "
                f"rounds {rounds}; accepted drafts {accepted}",
                flush=True,
            )


if __name__ == "__main__":
    main()
