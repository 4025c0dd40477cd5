"""Batched throughput on this machine: tokens/s of the whole batch against B for AR, fixed-γ speculation and auto.

    .venv/bin/python -m benchmarks batch [--sizes 1,2,4,8,16] [--drafts ngram,auto] [--gammas 1,2,4] [--repeats 3]

Two prompt sets from Spec-Bench's questions (first turns, ≤ --max-prompt-tokens): *grounded* (translation,
summarization, rag: the answer copies the prompt, n-gram lookup's best case) and *open* (MT-bench, qa, math: it
mostly does not). For every repeat, every B and every set, the contestants run one after another on the same B
prompts in a rotated order (interleaved: a slow minute of the machine hits them all); each is reported by its
median decode throughput (committed tokens of all rows ÷ seconds after the prefill). Greedy: every row of every
contestant is checked against the AR batch's. The crossover is the smallest B at which fixed-γ speculation falls
below AR; the roofline (engine/runtime/roofline.py) says why: a forward's compute floor grows with the
B × (γ + 1) tokens it carries, and past the ridge the forward is no longer memory-bound.
Writes <out>.json, <out>.md and <out>.html.
"""

from __future__ import annotations

import argparse
import json
import shlex
import statistics
import sys
import time
from pathlib import Path

import torch

from engine import Engine, GenerationConfig, costmodel, load_model
from engine.config import MAX_BATCH
from engine.specbench import load_questions, sample
from engine.specs import CONTESTANT_USAGE, family, parse_contestant
from specviz.batch_view import crossover, throughput_figure, throughput_markdown

from .common import host

SETS = {"grounded": ("translation", "summarization", "rag"), "open": ("mt_bench", "qa", "math_reasoning")}
# the numbers kept from each run of a contestant
SAMPLED = ("decode_tokens_per_s", "tokens_per_s", "tokens", "alpha", "round_gammas", "prefill_s", "wall_s")


def prompt_sets(engine: Engine, size: int, max_tokens: int, seed: int = 0) -> dict:
    """{set: [first turns]} of `size` Spec-Bench questions each, every prompt at most max_tokens tokens."""
    questions = sample(load_questions(), None)
    out = {}
    for name, groups in SETS.items():
        pool = [q["turns"][0] for q in questions if q["group"] in groups]
        pool = [p for p in pool if len(engine.encode(p)) <= max_tokens]
        step = max(1, len(pool) // size)
        out[name] = pool[::step][:size]
        if len(out[name]) < size:
            raise ValueError(f"only {len(out[name])} {name} questions fit {max_tokens} tokens; lower --sizes")
    return out


def one_batch(engine: Engine, prompts: list, cfg: GenerationConfig, mode: str) -> dict:
    events = list(engine.generate_batch(prompts, cfg, mode=mode))
    done = events[-1]
    rows = {e.row: e.token_ids for e in events if e.kind == "finished"}
    return {**done.summary, "outputs": [rows[b] for b in range(len(prompts))], "host": events[0].host}


def contestants(drafts: list, gammas: list) -> list[str]:
    """ "ar", then "<drafter>@<γ>" for every fixed-γ drafter and γ, then auto (its γ is its own, each round)."""
    out = ["ar"]
    for d in drafts:
        out += [d] if family(d) == "auto" else [f"{d}@{g}" for g in gammas]
    return out


def _measure(engines: dict, sets: dict, sizes: list, names: list, configs: dict, repeats: int) -> tuple:
    """After one AR warm-up batch: for every repeat, B and set, each contestant in turn (the order rotated per
    repeat) on the same B prompts, a line per set and B on stderr. Returns (samples: set -> B -> name -> a list
    of each run's SAMPLED numbers, the count of contestants' outputs that differ from AR's, the first host)."""
    samples = {s: {b: {n: [] for n in names} for b in sizes} for s in sets}
    mismatches, recorded = 0, {}
    with torch.inference_mode():
        one_batch(engines["ar"], sets["open"][:2], configs["ar"], "ar")  # warm-up: kernels, caches
        for rep in range(repeats):
            for b in sizes:
                for s, prompts in sets.items():
                    order = names[rep % len(names) :] + names[: rep % len(names)]
                    outs = {}
                    for n in order:
                        r = one_batch(
                            engines[parse_contestant(n).drafter],
                            prompts[:b],
                            configs[n],
                            "ar" if n == "ar" else "speculative",
                        )
                        recorded = recorded or r["host"]
                        outs[n] = r["outputs"]
                        samples[s][b][n].append({k: r[k] for k in SAMPLED})
                    mismatches += sum(outs[n] != outs["ar"] for n in names if n != "ar")
                    print(
                        f"rep {rep + 1} B={b} {s}: "
                        + ", ".join(f"{n} {samples[s][b][n][-1]['decode_tokens_per_s']:.0f}" for n in names),
                        file=sys.stderr,
                    )
    return samples, mismatches, recorded


def run(
    target: str,
    drafts: list,
    sizes: list,
    gammas: list,
    max_new: int,
    repeats: int,
    max_prompt: int,
    command: str,
) -> dict:
    for b in sizes:
        if not 1 <= b <= MAX_BATCH:
            raise ValueError(f"--sizes must lie between 1 and {MAX_BATCH}, got {b}")
    loaded = load_model(target)
    names = contestants(drafts, gammas)
    engines = {"ar": Engine(loaded, "ngram", measure_step=False)}
    engines.update(
        {(d := parse_contestant(x).drafter): Engine(loaded, d, measure_step=False) for x in drafts}
    )
    sets = prompt_sets(engines["ar"], max(sizes), max_prompt)
    gamma = max(gammas)  # auto's first probe; the fixed contestants' own γ is in their name
    configs = {
        n: GenerationConfig(
            **{"gamma": gamma, **parse_contestant(n).settings()}, max_new_tokens=max_new, record_topk=0
        )
        for n in names
    }
    t0 = time.time()
    samples, mismatches, recorded = _measure(engines, sets, sizes, names, configs, repeats)
    curves = {s: {n: [summarise(samples[s][b][n]) for b in sizes] for n in names} for s in sets}
    r = costmodel.roof(recorded)
    return {
        "command": command,
        "cpu": (machine := host())["cpu"],
        "machine": machine,
        "threads": torch.get_num_threads(),
        "target": loaded.name,
        "gamma": gamma,
        "gammas": gammas,
        "max_new_tokens": max_new,
        "repeats": repeats,
        "sizes": sizes,
        "contestants": names,
        "sets": {s: list(SETS[s]) for s in sets},
        "curves": curves,
        "mismatches": mismatches,
        "ridge_tokens": costmodel.ridge(256, r) if r else None,
        "host": recorded,
        "crossover": {
            s: {n: crossover(sizes, curves[s]["ar"], curves[s][n]) for n in names if n != "ar"} for s in sets
        },
        "seconds": time.time() - t0,
    }


def summarise(rows: list) -> dict:
    med = lambda k: statistics.median(x[k] for x in rows if x[k] is not None) if rows else None  # noqa: E731
    return {
        "decode_tokens_per_s": med("decode_tokens_per_s"),
        "tokens_per_s": med("tokens_per_s"),
        "alpha": rows[-1]["alpha"],
        "round_gammas": rows[-1]["round_gammas"],
        "runs": len(rows),
    }


def parser() -> argparse.ArgumentParser:
    b = argparse.ArgumentParser(prog="python -m benchmarks batch", description=__doc__.split("\n\n")[0])
    b.add_argument("--target", default="embedded")
    b.add_argument(
        "--drafts",
        default="ngram,auto",
        help=f"comma-separated contestants: {CONTESTANT_USAGE} (AR always runs)",
    )
    b.add_argument("--sizes", default="1,2,4,8,16", help=f"batch sizes, 1..{MAX_BATCH}")
    b.add_argument(
        "--gammas", default="1,2,4", help="the fixed-γ contestants' γ (auto's first probe: the largest)"
    )
    b.add_argument("--max-new-tokens", type=int, default=48)
    b.add_argument("--max-prompt-tokens", type=int, default=400)
    b.add_argument("--repeats", type=int, default=3)
    b.add_argument("--out", default="batch-out", help="writes OUT.json, OUT.md and OUT.html")
    return b


def main(argv: list) -> int:
    args = parser().parse_args(argv)
    split = lambda t: [x.strip() for x in t.split(",") if x.strip()]  # noqa: E731
    try:
        sizes = [int(x) for x in split(args.sizes)]
        gammas = [int(x) for x in split(args.gammas)]
    except ValueError:
        raise ValueError(
            f"--sizes and --gammas take whole numbers separated by commas, got {args.sizes!r} and "
            f"{args.gammas!r}"
        ) from None
    results = run(
        args.target,
        split(args.drafts),
        sizes,
        gammas,
        args.max_new_tokens,
        args.repeats,
        args.max_prompt_tokens,
        "python -m benchmarks batch " + shlex.join(argv),
    )
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(results, indent=1), encoding="utf-8")
    out.with_suffix(".md").write_text(throughput_markdown(results), encoding="utf-8")
    out.with_suffix(".html").write_text(
        throughput_figure(results).to_html(include_plotlyjs="cdn"), encoding="utf-8"
    )
    print(f"wrote {out}.json, .md and .html ({results['seconds'] / 60:.1f} min)", file=sys.stderr)
    if results["mismatches"]:
        print(f"WARNING: {results['mismatches']} batch outputs differ from AR's", file=sys.stderr)
    return 0
