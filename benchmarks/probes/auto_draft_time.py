"""Where `auto`'s drafting time goes: per round, the drafting seconds (`round_timed.draft_s`) grouped by the drafter
its `decided` event chose, on Spec-Bench's first turns (one seeded question per category by default).

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
    for q in sb.sample(sb.load_questions(), args.per_category, 0):
        ids = encode_turns(target.tokenizer, q["turns"], [])
        cfg = GenerationConfig(gamma=4, max_new_tokens=args.max_new_tokens)
        for e in engine.generate(None, cfg, prompt_ids=ids):
            if e.kind == "decided":
                chosen = e.drafter or "plain"
            elif e.kind == "round_timed":
                draft[chosen].append(e.draft_s)
                verify.append(e.verify_s)
    print(host_line())
    print(f"{args.drafter}, γ 4: median verify forward {1e3 * statistics.median(verify):.1f} ms")
    for name, seconds in sorted(draft.items(), key=lambda kv: -len(kv[1])):
        print(
            f"  {name}: {len(seconds)} rounds, drafting {1e3 * statistics.fmean(seconds):.2f} ms a round "
            f"(median {1e3 * statistics.median(seconds):.2f}; the mean holds one-time costs such as a first load)"
        )


if __name__ == "__main__":
    main()
