"""Chain vs tree speculation on the same drafter, interleaved, on this machine.

    .venv/bin/python benchmarks/probes/tree_vs_chain.py [--prompts engine/prompts/grounded.jsonl] [--max-new-tokens 96]

For each drafter it runs, per prompt and interleaved: AR, a chain of γ, and a tree with a node
budget; it prints tokens per target forward (mean accepted length), tokens/s, the speedup over AR,
and the measured cost v(n) of verifying n tokens in one forward (in target steps), which is what
decides whether the extra nodes pay. Greedy; every output is checked against AR.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from engine import Engine, GenerationConfig, load_model  # noqa: E402
from engine.runtime.cache import KVCache  # noqa: E402
from engine.runtime.lean import forward_fn  # noqa: E402
from engine.specs import parse_contestant  # noqa: E402


def verify_cost(model, n: int, context: int = 200, reps: int = 7) -> float:
    """Median seconds of one engine forward (the one the engine verifies with) over n new tokens at
    `context` cached tokens."""
    forward = forward_fn(model)
    cache = KVCache.for_model(model, context + n + 1)
    with torch.inference_mode():
        forward(torch.randint(0, 1000, (1, context)), cache, logits_to_keep=1)
        times = []
        for _ in range(reps):
            t = time.perf_counter()
            forward(torch.randint(0, 1000, (1, n)), cache)
            times.append(time.perf_counter() - t)
            cache.truncate(context)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--prompts", default="engine/prompts/grounded.jsonl")
    ap.add_argument("--max-new-tokens", type=int, default=96)
    ap.add_argument(
        "--setups",
        default="ngram@4+tree=12x3,quant@4+tree=12x3",
        help="contestants SPEC@γ+tree=BxW, comma-separated (each raced as its chain and its tree)",
    )
    ap.add_argument("--dtype", default=None, help="fp32 or bf16 (default: the engine's, fp32 on a CPU)")
    args = ap.parse_args()
    target = load_model("embedded", dtype=args.dtype)
    exact = target.dtype == torch.float32  # bf16: a multi-token forward may round a near-tie the other way
    prompts = [
        json.loads(line)["prompt"] for line in Path(args.prompts).read_text().splitlines() if line.strip()
    ]
    step = verify_cost(target.model, 1)
    print(
        "v(n) on this machine (target steps): "
        + ", ".join(f"v({n})={verify_cost(target.model, n) / step:.2f}" for n in (2, 5, 9, 13, 17, 33))
    )
    for setup in args.setups.split(","):
        c = parse_contestant(setup)
        gamma, budget, branching = c.gamma or 4, c.tree_budget, c.tree_branching
        engine = Engine(target, c.drafter, measure_step=False)
        rows, departed = {"ar": [], "chain": [], "tree": []}, []
        for prompt in prompts:
            ids = engine.encode(prompt, False)
            base = GenerationConfig(gamma=gamma, max_new_tokens=args.max_new_tokens, record_topk=0)
            tree = GenerationConfig(
                gamma=gamma,
                max_new_tokens=args.max_new_tokens,
                record_topk=0,
                tree_budget=budget,
                tree_branching=branching,
            )
            ar = list(engine.generate(None, base, "ar", prompt_ids=ids))[-1]
            for key, cfg in (("ar", None), ("chain", base), ("tree", tree)):
                done = ar if cfg is None else list(engine.generate(None, cfg, prompt_ids=ids))[-1]
                if done.token_ids != ar.token_ids:
                    assert not exact, f"{key} output differs from AR"
                    departed.append(key)
                rows[key].append(done.summary)
        ar_tps = [s["tokens_per_s"] for s in rows["ar"]]
        for key in ("chain", "tree"):
            tps = [s["tokens_per_s"] for s in rows[key]]
            mal = statistics.mean(s["mean_accepted_length"] for s in rows[key])
            speed = statistics.median(t / a for t, a in zip(tps, ar_tps))
            print(
                f"{c.drafter:>16} {key:5} γ={gamma} budget={budget if key == 'tree' else '-':>2} "
                f"branching={branching if key == 'tree' else '-'}: tokens/forward {mal:.2f}, "
                f"{statistics.median(tps):.1f} tok/s, median speedup vs AR {speed:.2f}x"
                + (
                    f" ({departed.count(key)} of {len(prompts)} outputs left {target.dtype} AR)"
                    if key in departed
                    else ""
                )
            )


if __name__ == "__main__":
    main()
