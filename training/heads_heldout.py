"""Held-out top-1 of several heads files on the same held-out material, per source: before and after in one table.

The material is what a broad training run held out (every tenth sequence of each source) plus its Spec-Bench
evaluation prompts, rebuilt from that run's corpus cache (training/train.py --corpus-cache, training/corpus.py) with the same
broad arguments. Each heads file is scored with its own draft vocabulary (a label outside it is a miss).

    .venv/bin/python training/heads_heldout.py --corpus-cache CACHE --heads OLD.pt --heads NEW.pt \\
        -- --text-tokens 150000 --instructions 120 --template-prompts 600 --specbench-eval 5
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

from engine.heads import modules as H  # noqa: E402
from training import train as T  # noqa: E402
from training.heads_probe import material  # noqa: E402  (the run's corpus rebuilt from its cache)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--corpus-cache", required=True)
    ap.add_argument("--heads", action="append", required=True, help="a heads file (repeat)")
    ap.add_argument("rest", nargs=argparse.REMAINDER, help="-- then the training run's broad arguments")
    args = ap.parse_args(argv)
    torch.set_num_threads(2)
    model, _, held, evaluation = material(args.corpus_cache, args.rest)
    tables = []
    for path in args.heads:
        heads, _ = H.load(Path(path), model.config)
        parts = H.frozen_parts(model, heads.vocab_ids)
        tables.append(T.by_source(heads, parts, held + evaluation, heads.cfg.medusa_heads))
    names = [f"{Path(p).parent.name}/{Path(p).name}" for p in args.heads]
    print(
        "| source | labels | "
        + " | ".join(f"EAGLE 1-4 ({n})" for n in names)
        + " | "
        + " | ".join(f"Medusa 1-4 ({n})" for n in names)
        + " |"
    )
    print("|---|---|" + "---|" * (2 * len(args.heads)))
    for source in tables[0]:
        cells = [" / ".join(f"{x:.0%}" for x in t[source]["eagle"]) for t in tables]
        cells += [" / ".join(f"{x:.0%}" for x in t[source]["medusa"]) for t in tables]
        print(f"| {source} | {tables[0][source]['labels']} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
