"""Where `auto`'s drafting time goes: per round, the drafting seconds (`round_timed.draft_s`) grouped by the drafter
its `decided` event chose, on Spec-Bench's first turns (one seeded question per category by default), and per
category what its rounds brought: per chosen drafter the rounds, the tokens committed and the verify forwards they
cost in target steps (each forward ÷ the question's median plain forward), and how often each reason for a plain
round came up.

    .venv/bin/python benchmarks/probes/auto_draft_time.py [--drafter auto] [--per-category 1] [--max-new-tokens 64]

Prints, per chosen drafter, its rounds and mean and median drafting milliseconds, and the median verify forward
beside them.
Not interleaved with anything: a breakdown of one drafter's rounds, not a speedup.
"""

from __future__ import annotations

import argparse
import collections
import statistics

from benchmarks.common import host_line
from benchmarks.specbench_run import encode_turns
from engine import Engine, GenerationConfig, load_model
from engine import specbench as sb


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--drafter", default="auto")
    p.add_argument("--per-category", type=int, default=1)
    p.add_argument("--max-new-tokens", type=int, default=64)
    args = p.parse_args()
    target = load_model("embedded")
    engine = Engine(target, args.drafter, measure_step=False)
    draft, verify, chosen = collections.defaultdict(list), [], "plain"
    # category -> chosen drafter -> [rounds, tokens committed, verify forwards in target steps]; reasons of plain rounds
    brought = collections.defaultdict(lambda: collections.defaultdict(lambda: [0, 0, 0.0]))
    reasons = collections.defaultdict(collections.Counter)
    for q in sb.sample(sb.load_questions(), args.per_category, 0):
        ids = encode_turns(target.tokenizer, q["turns"], [])
        cfg = GenerationConfig(gamma=4, max_new_tokens=args.max_new_tokens)
        rounds = []  # (chosen, forward seconds, tokens committed)
        for e in engine.generate(None, cfg, prompt_ids=ids):
            if e.kind == "decided":
                chosen = e.drafter or "plain"
                if not e.drafter:
                    reasons[q["group"]][e.reason.split(";")[0]] += 1
            elif e.kind == "committed":
                rounds.append([chosen, None, len(e.token_ids)])
            elif e.kind == "round_timed":
                draft[chosen].append(e.draft_s)
                verify.append(e.verify_s)
                rounds[-1][1] = e.forward_s
        plain = [f for c, f, _ in rounds if c == "plain" and f]
        t1 = statistics.median(plain) if plain else None
        for c, f, n in rounds:
            row = brought[q["group"]][c]
            row[0], row[1] = row[0] + 1, row[1] + n
            row[2] += f / t1 if t1 and f else 1.0
    print(host_line())
    print(f"{args.drafter}, γ 4: median verify forward {1e3 * statistics.median(verify):.1f} ms")
    for name, seconds in sorted(draft.items(), key=lambda kv: -len(kv[1])):
        print(
            f"  {name}: {len(seconds)} rounds, drafting {1e3 * statistics.fmean(seconds):.2f} ms a round "
            f"(median {1e3 * statistics.median(seconds):.2f}; the mean holds one-time costs such as a first load)"
        )
    for group, by in brought.items():
        print(f"{group}:")
        for name, (n, tokens, steps) in sorted(by.items(), key=lambda kv: -kv[1][0]):
            print(f"  {name}: {n} rounds committed {tokens} tokens for {steps:.1f} target steps")
        for reason, n in reasons[group].most_common():
            print(f"  plain, {n}×: {reason}")


if __name__ == "__main__":
    main()
