"""What `auto`'s drafted rounds earn, per kind of round, on Spec-Bench's first turns (4 per category, seed 0; greedy,
γ 4, 64 new tokens): one warm-up pass over the sample, then two passes over each chosen category. Each drafted
round's cost is its whole time (`round_timed.total_s`) over the median plain round's of the same passes; its gain is
the tokens it committed less that cost (a plain round commits 1 token for 1).

    .venv/bin/python -m benchmarks.probes.auto_gain --category qa,mt_bench,math_reasoning

Prints per category the median plain round and, per (drafter, γ, probe or not), the rounds, their cost in plain
rounds, the tokens they committed and the gain.
"""

from __future__ import annotations

import argparse
import collections
import statistics

from benchmarks.common import host_line
from benchmarks.specbench_run import encode_turns
from engine import Engine, GenerationConfig, load_model
from engine import specbench as sb


def rounds_of(engine, questions, cfg, category: str | None) -> list[tuple]:
    """(drafter, γ verified, round seconds, probe?, tokens committed) per round of the questions of `category`
    (all when None)."""
    out = []
    for q in questions:
        if category and q["group"] != category:
            continue
        ids = encode_turns(engine.target.tokenizer, q["turns"][:1], [])
        decided, tokens = None, 0
        for e in engine.generate(None, cfg, "speculative", prompt_ids=ids):
            if e.kind == "decided":
                decided = e
            elif e.kind == "committed":
                tokens = len(e.token_ids)
            elif e.kind == "round_timed":
                probe = decided is not None and decided.reason.startswith("probing")
                out.append((decided.drafter if decided else "", e.gamma, e.total_s, probe, tokens))
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--category", default="qa", help="comma-separated Spec-Bench categories")
    args = p.parse_args()
    engine = Engine(load_model("embedded"), "auto", measure_step=False)
    questions = sb.sample(sb.load_questions(), 4, 0)
    cfg = GenerationConfig(gamma=4, max_new_tokens=64)
    rounds_of(engine, questions, cfg, None)  # the warm-up: what auto learns carries, as in the benchmark
    print(host_line())
    for category in args.category.split(","):
        rows = rounds_of(engine, questions, cfg, category) + rounds_of(engine, questions, cfg, category)
        plain = statistics.median(r[2] for r in rows if r[1] == 0)
        print(f"{category}: plain round {plain * 1e3:.2f} ms, {sum(r[1] == 0 for r in rows)} plain rounds")
        by = collections.defaultdict(lambda: [0, 0.0, 0])
        for drafter, g, seconds, probe, tokens in rows:
            if g:
                kind = by[drafter, g, "probe" if probe else ""]
                kind[0], kind[1], kind[2] = kind[0] + 1, kind[1] + seconds / plain, kind[2] + tokens
        for key, (n, cost, tokens) in sorted(by.items()):
            print(
                f"  {key}: {n} rounds cost {cost:.1f} plain rounds for {tokens} tokens: gain {tokens - cost:+.1f}"
            )


if __name__ == "__main__":
    main()
