"""c, α, tokens per target forward and v(n) of the training-free drafters on this CPU, from each run's own summary
(engine/metrics.py: c = draft seconds per drafted token ÷ the target step, v = the verify forward ÷ the target
step at its most common size n = v_n rows). Spec-Bench questions, 2 per category (seeded), greedy, γ = 4.

    .venv/bin/python benchmarks/training_free.py [--drafts lookahead,recycle,recycle:8:wide,ngram] [--per-category 2]

A drafter may be any benchmark contestant (engine/specs.py: parse_contestant), e.g. eagle+tree=16x4.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.common import host_line  # noqa: E402
from engine import Engine, GenerationConfig, load_model  # noqa: E402
from engine.specbench import load_questions, sample  # noqa: E402
from engine.specs import parse_contestant  # noqa: E402


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--drafts", default="lookahead,recycle,recycle:8:wide,ngram")
    ap.add_argument("--per-category", type=int, default=2)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    args = ap.parse_args(argv)
    target = load_model("embedded")
    questions = sample(load_questions(), args.per_category, seed=0)
    engines = {d: Engine(target, parse_contestant(d).drafter) for d in args.drafts.split(",")}
    cfgs = {
        d: GenerationConfig(
            **{"gamma": 4, **parse_contestant(d).settings()},
            max_new_tokens=args.max_new_tokens,
            record_topk=0,
        )
        for d in engines
    }
    rows = {d: [] for d in engines}
    for q in questions:  # every drafter on a question before the next: interleaved
        for d, engine in engines.items():
            rows[d].append(list(engine.generate(q["turns"][0], cfgs[d]))[-1].summary)
    cpu = host_line()
    print(
        f"{cpu}; {len(questions)} Spec-Bench first turns, greedy, γ = 4, "
        f"{args.max_new_tokens} tokens; medians over the questions\n"
    )
    print("| drafter | α | tokens / forward | c | v | n (forward rows, most common) |")
    print("|---|---|---|---|---|---|")
    for d, summaries in rows.items():
        med = lambda k: statistics.median([s[k] for s in summaries if s.get(k) is not None] or [float("nan")])  # noqa
        print(
            f"| `{d}` | {med('alpha'):.2f} | {med('mean_accepted_length'):.2f} | {med('c'):.3f} | {med('v'):.2f} | "
            f"{med('v_n'):.0f} |"
        )


if __name__ == "__main__":
    main()
