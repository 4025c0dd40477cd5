"""This checkout's engine against another checkout's, interleaved in one process (a refactor's before/after).

    git worktree add --detach /tmp/base <commit>
    .venv/bin/python tools/engine_ab.py --base /tmp/base [--max-new-tokens 48] [--repeats 2]
    .venv/bin/python tools/engine_ab.py --base /tmp/base --drafts all --prompts bench   # every drafter

The base checkout's engine/ is imported as a second package (`engine_base`; the flat layout before the
rooms, or the rooms), each with its own copy of the embedded target. First one forward of each lean
forward at 200 cached tokens (1, 5 and 13 new tokens, median of 15, interleaved); then whole greedy runs
(AR and drafters, chains, trees and beams, events kept in a list as an app would), old and new
alternating, with the total time to the last round, the time spent drafting (the summaries' draft_s) and a
token-for-token identity check. Prints the new ÷ old time ratios (below 1: the new engine is faster).
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
PROMPTS = [
    "Explain what a hash map is in two sentences.",
    "Copy this text exactly: The quick brown fox jumps over the lazy dog. The quick brown fox jumps again.",
    "def add(a, b):\n    return a + b\n\nRewrite the function above with type hints.",
    "Summarise: Speculative decoding drafts tokens cheaply and verifies them in one target forward.",
]
# (drafter spec, γ, mode, extra GenerationConfig settings)
CONFIGS = [
    ("ar", 1, "ar", {}),
    ("ngram", 3, "speculative", {}),
    ("self", 3, "speculative", {}),
    ("auto", 4, "speculative", {}),
]
EVERY = CONFIGS + [
    ("layerskip", 3, "speculative", {}),
    ("quant", 3, "speculative", {}),
    ("medusa", 3, "speculative", {}),
    ("eagle", 3, "speculative", {}),
    ("auto:ngram", 4, "speculative", {}),
    ("oracle:0.7", 4, "speculative", {}),
    ("ngram+tree", 4, "speculative", {"tree_budget": 8}),
    ("eagle+tree", 4, "speculative", {"tree_budget": 8, "tree_branching": 2}),
    ("medusa+tree", 3, "speculative", {"tree_budget": 8, "tree_branching": 2}),
    ("ngram+beams", 3, "speculative", {"num_beams": 3}),
    ("self+beams", 3, "speculative", {"num_beams": 2}),
    ("ar+beams", 1, "ar", {"num_beams": 3}),
    ("suffix", 4, "speculative", {}),
    ("recycle", 4, "speculative", {}),
    ("lookahead", 4, "speculative", {}),
    ("union", 4, "speculative", {}),
]
# rooms, then flat
LAYOUTS = (
    {"engine": "decode.engine", "config": "config", "cache": "runtime.cache", "models": "runtime.models"},
    {"engine": "engine", "config": "config", "cache": "cache", "models": "models"},
)


def load(package: str):
    """(Engine, GenerationConfig, KVCache, load_model) of one engine package, in either layout."""
    root = Path(importlib.import_module(package).__file__).parent
    layout = next(lay for lay in LAYOUTS if (root / (lay["engine"].replace(".", "/") + ".py")).exists())
    mods = [
        importlib.import_module(f"{package}.{layout[m]}") for m in ("engine", "config", "cache", "models")
    ]
    if (root / "specs.py").exists():  # the registry names builders by dotted path: the base's must be its own
        specs = importlib.import_module(f"{package}.specs")
        families = getattr(specs, "FAMILIES", None) or specs.REGISTRY  # an older checkout names it REGISTRY
        for name, family in list(families.items()):
            if family.builder.startswith("engine."):
                builder = package + family.builder[len("engine") :]
                families[name] = dataclasses.replace(family, builder=builder)
    return mods[0].Engine, mods[1].GenerationConfig, mods[2].KVCache, mods[3].load_model


def prompts_of(which: str) -> list[str]:
    """The A/B's prompts: the 4 built in, engine/prompts/bench.jsonl ("bench") or Spec-Bench's ("specbench")."""
    if which == "bench":
        lines = (ROOT / "engine" / "prompts" / "bench.jsonl").read_text().splitlines()
        return [json.loads(line)["prompt"] for line in lines]
    if which == "specbench":
        from engine import specbench as sb

        return [q["turns"][0] for q in sb.sample(sb.load_questions(), 1)]
    return PROMPTS


def spec_of(name: str) -> str:
    """The drafter spec of a config name ("ngram+tree" drafts with ngram; "ar" builds a `self` engine)."""
    spec = name.partition("+")[0]
    return "self" if spec == "ar" else spec


def timed_run(engine, cfg, mode, ids) -> tuple[float, list, dict]:
    events, t0 = [], time.perf_counter()
    t_last = t0
    for event in engine.generate("", cfg, mode, prompt_ids=ids):
        if event.kind == "finished":
            return t_last - t0, list(event.token_ids), event.summary
        events.append(event)
        t_last = time.perf_counter()
    raise RuntimeError("no finished event")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--base", required=True, help="a checkout of the code to compare against")
    ap.add_argument("--max-new-tokens", type=int, default=48)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument(
        "--drafts",
        default="ar,ngram,self,auto",
        help="comma list of config names (" + ",".join(c[0] for c in EVERY) + ") or 'all'",
    )
    ap.add_argument(
        "--prompts",
        default="",
        help="'bench': engine/prompts/bench.jsonl; 'specbench': the first turn of Spec-Bench's seeded sample, one "
        "question per column (engine/specbench.py); default: the 4 built in",
    )
    ap.add_argument("--forward-pairs", type=int, default=15)
    args = ap.parse_args()
    configs = EVERY if args.drafts == "all" else [c for c in EVERY if c[0] in args.drafts.split(",")]
    tmp = Path(tempfile.mkdtemp())
    shutil.copytree(Path(args.base) / "engine", tmp / "engine_base")
    # the base's shipped heads, where it looks
    (tmp / "assets").symlink_to(Path(args.base).resolve() / "assets")
    sys.path[:0] = [str(tmp), str(ROOT)]
    sides = {"old": load("engine_base"), "new": load("engine")}
    targets = {side: s[3]("embedded") for side, s in sides.items()}
    engines = {
        side: {
            d: sides[side][0](targets[side], spec_of(d), measure_step=False)
            for d in {"ar"} | {c[0] for c in configs}
        }
        for side in sides
    }

    # 1. one forward of each lean forward
    x = torch.randint(0, 40000, (1, 213))
    with torch.inference_mode():
        caches = {side: sides[side][2].for_model(targets[side].model, 240) for side in sides}
        for side in sides:
            engines[side]["ar"].forward(x[:, :200], caches[side], logits_to_keep=1)
        for n in (1, 5, 13):
            ms = {side: [] for side in sides}
            for i in range(args.forward_pairs):
                for side in ("old", "new") if i % 2 == 0 else ("new", "old"):
                    t = time.perf_counter()
                    engines[side]["ar"].forward(x[:, 200 : 200 + n], caches[side])
                    ms[side].append((time.perf_counter() - t) * 1e3)
                    caches[side].truncate(200)
            old, new = statistics.median(ms["old"]), statistics.median(ms["new"])
            print(
                f"forward of {n:2d} tokens at 200 cached: old {old:.1f} ms, new {new:.1f} ms, new/old {new / old:.3f}"
            )

    # 2. whole runs, old and new alternating
    prompts = prompts_of(args.prompts)
    encoded = [engines["new"]["ar"].encode(p) for p in prompts]
    totals = {(side, d, g): 0.0 for side in sides for d, g, _, _ in configs}
    # rounds, drafted, draft s
    rounds = {(side, d, g): [0, 0, 0.0] for side in sides for d, g, _, _ in configs}
    same = {(d, g): True for d, g, _, _ in configs}
    for d, g, mode, extra in configs:  # warm-up
        for side in sides:
            timed_run(engines[side][d], sides[side][1](gamma=g, max_new_tokens=8, **extra), mode, encoded[0])
    for r in range(args.repeats):
        for i, ids in enumerate(encoded):
            for d, g, mode, extra in configs:
                out = {}
                for side in ("old", "new") if (r + i) % 2 == 0 else ("new", "old"):
                    cfg = sides[side][1](gamma=g, max_new_tokens=args.max_new_tokens, **extra)
                    wall, out[side], summary = timed_run(engines[side][d], cfg, mode, ids)
                    totals[(side, d, g)] += wall
                    rounds[(side, d, g)][0] += summary.get("rounds") or 0
                    rounds[(side, d, g)][1] += summary.get("drafted") or 0
                    rounds[(side, d, g)][2] += summary.get("draft_s") or 0.0
                same[(d, g)] &= out["old"] == out["new"]
    for d, g, _, _ in configs:
        old, new = totals[("old", d, g)], totals[("new", d, g)]
        (r_old, d_old, s_old), (r_new, d_new, s_new) = rounds[("old", d, g)], rounds[("new", d, g)]
        print(
            f"{d:6s} γ={g}: old {old:.2f} s, new {new:.2f} s, new/old {new / old:.3f}, "
            f"{'identical' if same[(d, g)] else 'DIFFERENT'} output; rounds {r_old} vs {r_new}, "
            f"drafted tokens {d_old} vs {d_new}, drafting {s_old:.2f} s vs {s_new:.2f} s"
        )


if __name__ == "__main__":
    main()
