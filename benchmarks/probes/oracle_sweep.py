"""Does the cost model predict the measured speedup? oracle:α at α = 0.2 .. 0.95, raced against AR.

    .venv/bin/python benchmarks/probes/oracle_sweep.py [--gamma 4] [--max-new-tokens 96] [--repeats 2] [--cost 0]

oracle:α drafts the target's own greedy tokens, each corrupted with probability 1 − α, so the per-token
acceptance is α by construction (greedy). For each α and prompt (3 open-ended prompts, interleaved over
α per prompt and repeat) the interleaved race measures the speedup over AR, and the cost model predicts
it from the run's own α, c and v(n) (engine/costmodel.py). Prints measured, predicted and their ratio
(medians), and how many runs the timing guards flagged.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from engine import Engine, GenerationConfig, load_model  # noqa: E402
from engine.runtime.kernels import cpu_name  # noqa: E402

ALPHAS = (0.2, 0.4, 0.6, 0.8, 0.95)
PROMPTS = (
    "Write a short story about a lighthouse keeper who finds a message in a bottle.",
    "Explain how a bicycle stays upright, for a curious ten-year-old.",
    "Describe a walk through a busy market in the morning.",
)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gamma", type=int, default=4)
    ap.add_argument("--max-new-tokens", type=int, default=96)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--cost", type=float, default=0.0, help="oracle draft cost in target steps per token")
    args = ap.parse_args()
    target = load_model("embedded")
    suffix = f":{args.cost:g}" if args.cost else ""
    engines = {a: Engine(target, f"oracle:{a:g}{suffix}") for a in ALPHAS}
    cfg = GenerationConfig(gamma=args.gamma, max_new_tokens=args.max_new_tokens)
    engines[ALPHAS[0]].run(PROMPTS[0], cfg, compare_ar=True)  # warm-up
    rows = {a: [] for a in ALPHAS}
    for _ in range(args.repeats):
        for prompt in PROMPTS:
            for a in ALPHAS:
                s = engines[a].run(prompt, cfg, compare_ar=True).summary
                rows[a].append(s)
    print(
        f"# oracle sweep: γ={args.gamma}, {args.max_new_tokens} new tokens, draft cost {args.cost:g} steps, greedy "
        f"fp32, {len(PROMPTS)} prompts × {args.repeats} repeats, {cpu_name()}, "
        f"race lanes on {rows[ALPHAS[0]][0].get('threads') or 'all'} CPU thread(s)"
    )
    print(
        "| α set | α measured | c | v(γ+1) | measured × | predicted × | measured ÷ predicted | identical | flagged |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for a, runs in rows.items():
        med = {
            k: statistics.median(r[k] for r in runs)
            for k in ("alpha", "c", "v", "speedup", "predicted_speedup")
        }
        ratio = statistics.median(r["speedup"] / r["predicted_speedup"] for r in runs)
        print(
            f"| {a:g} | {med['alpha']:.2f} | {med['c']:.3f} | {med['v']:.2f} | {med['speedup']:.2f}× | "
            f"{med['predicted_speedup']:.2f}× | {ratio:.2f} | {sum(r['identical_to_ar'] for r in runs)}/{len(runs)} | "
            f"{sum(bool(r['timing_flags']) for r in runs)}/{len(runs)} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
