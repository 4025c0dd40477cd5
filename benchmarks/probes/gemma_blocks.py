"""Gemma-3-270M on its GGUF's blocks against its de-quantized fp32 weights in transformers: greedy AR and n-gram
speculation on each, interleaved per prompt in one process, the same tokens required.

    .venv/bin/python -m benchmarks.probes.gemma_blocks [--prompts 4] [--tokens 48] [--repeats 2]

Prints per method and format the decoding rate (new tokens after the first ÷ the time after the first token,
median over prompts and repeats) and the run's wall rate, prefill included."""

from __future__ import annotations

import argparse
import os
import statistics
import time

from benchmarks.common import host_line

PROMPTS = [
    "The water cycle describes how water moves between the oceans, the air and the land.",
    "def fibonacci(n):\n    if n < 2:\n        return n\n",
    "Once upon a time, in a small village by the sea, there lived",
    "The three primary colors are red, yellow and blue. Mixing them",
    "Photosynthesis is the process by which green plants",
    "Monday, Tuesday, Wednesday,",
]


def load(fmt: str):
    from engine.runtime.models import EMBEDDED_GEMMA, load_model

    os.environ["SPECVIZ_WEIGHTS"] = fmt
    return load_model(EMBEDDED_GEMMA)


def timed(model, prompt: str, tokens: int, mode: str) -> tuple[list[int], float, float]:
    """(tokens, seconds after the first token, seconds in all) of one greedy run."""
    from engine import Engine, GenerationConfig

    cfg = GenerationConfig(gamma=4, max_new_tokens=tokens, raw=True)
    start, first = time.perf_counter(), None
    out = None
    for event in Engine(model, "ngram", measure_step=False).generate(prompt, cfg, mode=mode):
        if first is None and getattr(event, "kind", "") == "committed":
            first = time.perf_counter()
        out = event
    end = time.perf_counter()
    return out.token_ids, end - (first or start), end - start


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(
        prog="python -m benchmarks.probes.gemma_blocks", description=__doc__.split("\n\n")[0]
    )
    ap.add_argument("--prompts", type=int, default=4)
    ap.add_argument("--tokens", type=int, default=48)
    ap.add_argument("--repeats", type=int, default=2)
    args = ap.parse_args(argv)
    print(host_line())
    models = {fmt: load(fmt) for fmt in ("gguf", "fp32")}
    rates: dict = {}
    differ = 0
    for prompt in PROMPTS[: args.prompts]:
        for _ in range(args.repeats):
            seen = {}
            for mode in ("ar", "speculative"):
                for fmt, model in models.items():
                    ids, after, total = timed(model, prompt, args.tokens, mode)
                    seen[(mode, fmt)] = ids
                    rates.setdefault((mode, fmt), []).append(((len(ids) - 1) / after, len(ids) / total))
            differ += len({tuple(v) for v in seen.values()}) != 1
    print(
        f"{args.prompts} prompts x {args.repeats}, {args.tokens} new tokens, greedy; outputs differing: {differ}"
    )
    for (mode, fmt), r in rates.items():
        name = "AR" if mode == "ar" else "ngram γ 4"
        print(
            f"{name:10s} {fmt}: decoding {statistics.median(x for x, _ in r):6.1f} tok/s, "
            f"with prefill {statistics.median(y for _, y in r):6.1f} tok/s"
        )


if __name__ == "__main__":
    main()
