"""SmolLM2-135M drafting for Gemma-3-270M across vocabularies (both embedded), grounded vs open prompts.

    .venv/bin/python benchmarks/probes/gemma_pair.py [--gamma 4] [--max-new-tokens 64] [--no-hf]

Gemma-3-270M is a base model, so the prompts are raw text to continue: grounded ones hold the text the
continuation repeats (a passage to copy, a list to extend), open ones do not. Each prompt is raced
against Gemma's own AR (interleaved, engine.race), greedy; the cost model (engine/costmodel.py) predicts
the speedup from the run's α, c and v(n). Then transformers' universal assisted generation on the same
pair (`generate(assistant_model=..., tokenizer=..., assistant_tokenizer=...)`), timed against its own
greedy `generate`, if the installed version runs it offline. Prints one Markdown table.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from engine import Engine, GenerationConfig, load_model  # noqa: E402
from engine.metrics import summarize  # noqa: E402
from engine.runtime.kernels import cpu_name  # noqa: E402

PROMPTS = {
    "grounded": [
        "The honeybee is one of the most important pollinators in the world. Bees visit flowers to collect nectar "
        "and pollen, which they use as food for the colony.\n\nThe same paragraph, copied exactly:\n\n",
        "Speculative decoding lets a small draft model propose several tokens that a larger target model verifies "
        "in one forward pass.\nRepeated word for word:\nSpeculative decoding",
        "January, February, March, April, May, June, July, August, September, October, November, December.\n"
        "January, February, March,",
    ],
    "open": [
        "Once upon a time, in a small village by the sea, there lived an old fisherman who",
        "The history of the bicycle begins in the early nineteenth century, when",
        "Here are some tips for growing tomatoes at home:\n\n1.",
    ],
}


def race(engine: Engine, prompt: str, cfg: GenerationConfig) -> dict:
    lanes = {"speculative": [], "ar": []}
    for lane, event in engine.race(prompt, cfg):
        lanes[lane].append(event)
    return summarize(lanes["speculative"], lanes["ar"])


@torch.inference_mode()
def uag(target, draft, prompt: str, n: int) -> dict:
    """transformers' universal assisted generation vs its own greedy generate on the same pair (seconds)."""
    ids = target.tokenizer(prompt, return_tensors="pt").input_ids
    kw = dict(max_new_tokens=n, min_new_tokens=n, do_sample=False)
    t = time.perf_counter()
    plain = target.model.generate(ids, **kw)
    t_plain = time.perf_counter() - t
    t = time.perf_counter()
    assisted = target.model.generate(
        ids,
        assistant_model=draft.model,
        tokenizer=target.tokenizer,
        assistant_tokenizer=draft.tokenizer,
        **kw,
    )
    t_uag = time.perf_counter() - t
    return {"speedup": t_plain / t_uag, "identical": plain[0].tolist() == assisted[0].tolist()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gamma", type=int, default=4)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--no-hf", action="store_true", help="skip transformers' universal assisted generation")
    args = ap.parse_args()
    target, draft = load_model("embedded-gemma"), load_model("embedded")
    engine = Engine(target, "model:embedded")
    cfg = GenerationConfig(gamma=args.gamma, max_new_tokens=args.max_new_tokens, raw=True, record_topk=0)
    # warm-up
    race(engine, PROMPTS["open"][0], GenerationConfig(gamma=args.gamma, max_new_tokens=8, raw=True))
    # the weights each model runs on: its GGUF's blocks (the default where native.c runs) or fp32 matrices
    weights = ", ".join(
        f"{m.name} {'gguf' if getattr(m.model, 'specviz_gguf', None) else 'fp32'}" for m in (target, draft)
    )
    print(
        f"CPU: {cpu_name()}; γ = {args.gamma}, {args.max_new_tokens} new tokens, greedy; weights: {weights}\n"
    )
    print(
        "| prompts | α per token | accepted ÷ drafted | tokens / target forward | c | speedup (measured) | "
        "predicted | identical to AR | transformers UAG vs its greedy |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for kind, prompts in PROMPTS.items():
        rows = [race(engine, p, cfg) for p in prompts]
        hf = []
        if not args.no_hf:
            for p in prompts:
                try:
                    hf.append(uag(target, draft, p, args.max_new_tokens))
                except Exception as e:  # noqa: BLE001 - report why it does not run, keep the table
                    hf.append({"error": f"{type(e).__name__}: {str(e)[:120]}"})
        med = lambda k, rows=rows: statistics.median(r[k] for r in rows if r.get(k) is not None)  # noqa: E731
        acc = sum(r["accepted"] for r in rows) / max(1, sum(r["drafted"] for r in rows))
        hf_txt = "not run"
        if hf and all("speedup" in h for h in hf):
            hf_txt = (
                f"{statistics.median(h['speedup'] for h in hf):.2f}× "
                f"({sum(h['identical'] for h in hf)}/{len(hf)} identical)"
            )
        elif hf:
            hf_txt = next(h["error"] for h in hf if "error" in h)
        print(
            f"| {kind} ({len(rows)}) | {med('alpha'):.2f} | {acc:.0%} | {med('mean_accepted_length'):.2f} | "
            f"{med('c'):.2f} | {med('speedup'):.2f}× | {med('predicted_speedup'):.2f}× | "
            f"{sum(bool(r['identical_to_ar']) for r in rows)}/{len(rows)} | {hf_txt} |"
        )
        flags = [f for r in rows for f in (r.get("timing_flags") or [])]
        if flags:
            print(f"  timing flags: {'; '.join(flags)}")


if __name__ == "__main__":
    main()
