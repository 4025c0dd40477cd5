"""Held-out top-1 of several heads files on the same held-out material, per source: before and after in one table.

The material is what a broad training run held out (every tenth sequence of each source) plus its Spec-Bench
evaluation prompts, rebuilt from that run's corpus cache (engine/heads/train.py --corpus-cache, engine/heads/corpus.py) with the same
broad arguments. Each heads file is scored with its own draft vocabulary (a label outside it is a miss).

    .venv/bin/python benchmarks/heads_heldout.py --corpus-cache CACHE --heads OLD.pt --heads NEW.pt \\
        -- --text-tokens 150000 --instructions 120 --template-prompts 600 --specbench-eval 5
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

from engine.heads import corpus as C  # noqa: E402
from engine.heads import modules as H  # noqa: E402
from engine.heads import train as T  # noqa: E402
from engine.runtime.models import EMBEDDED, load_model  # noqa: E402


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--corpus-cache", required=True)
    ap.add_argument("--heads", action="append", required=True, help="a heads file (repeat)")
    ap.add_argument("rest", nargs=argparse.REMAINDER, help="-- then the training run's broad arguments")
    args = ap.parse_args(argv)
    torch.set_num_threads(2)
    train_args = T.argument_parser().parse_args([a for a in args.rest if a != "--"])
    target = load_model(EMBEDDED)
    prompts, texts, evals = C.broad_material(train_args, target.tokenizer)
    _, held, evaluation = C.gather(target.model, target.tokenizer, prompts, max_new=train_args.max_new,
                                   gen_batch=train_args.gen_batch, corpus_cache=args.corpus_cache, texts=texts,
                                   text_tokens=train_args.text_tokens, evals=evals, log=lambda m: None)
    tables = []
    for path in args.heads:
        heads, _ = H.load(Path(path), target.model.config)
        parts = H.frozen_parts(target.model, heads.vocab_ids)
        tables.append(T.by_source(heads, parts, held + evaluation, heads.cfg.medusa_heads))
    names = [f"{Path(p).parent.name}/{Path(p).name}" for p in args.heads]
    print("| source | labels | " + " | ".join(f"EAGLE 1-4 ({n})" for n in names)
          + " | " + " | ".join(f"Medusa 1-4 ({n})" for n in names) + " |")
    print("|---|---|" + "---|" * (2 * len(args.heads)))
    for source in tables[0]:
        cells = [" / ".join(f"{x:.0%}" for x in t[source]["eagle"]) for t in tables]
        cells += [" / ".join(f"{x:.0%}" for x in t[source]["medusa"]) for t in tables]
        print(f"| {source} | {tables[0][source]['labels']} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
