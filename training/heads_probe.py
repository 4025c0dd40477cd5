"""Probes of the EAGLE head's training recipe on a broad run's cached corpus: what moves held-out top-1 per step.

  batch   EAGLE-1's loss (training/train.py eagle_loss) at a fixed token budget, varying the sequences per
          optimizer step and the weights of the feature and token losses; --init continues a heads file's EAGLE
          layer (more optimizer steps on the same corpus than its recipe took).
  fusion  EAGLE-3's input (Li et al. 2025): the target's low and middle layers (their RMS-normalised residual
          streams) fused with the final-norm feature by a linear map, against that feature alone; both with the
          token loss only (no single feature to regress to) and a learnt norm before the draft LM head.
  medusa  the Medusa heads' recipe (training/train.py train_medusa) on the first N training sequences: rows
          per optimizer step, peak rate, epochs, and the block's width (0: Medusa-1's square residual block;
          W: a SwiGLU-free MLP h + W2 SiLU(W1 h) with W hidden units).

Each prints one JSON line: held-out top-1 per drafting step (Medusa: per head) on the first N held-out sequences
of the ShareGPT source and on the run's Spec-Bench evaluation answers (training/accuracy.py eagle_accuracy,
medusa_accuracy).

    .venv/bin/python training/heads_probe.py --corpus-cache CACHE batch --tokens 300000 --batch 2 -- ARGS
    .venv/bin/python training/heads_probe.py --corpus-cache CACHE batch --init HEADS.pt --out MORE.pt ... -- ARGS
    .venv/bin/python training/heads_probe.py --corpus-cache CACHE fusion --layers 3,16 -- ARGS
    .venv/bin/python training/heads_probe.py --corpus-cache CACHE medusa --seqs 700 --batch 64 --width 0 -- ARGS

where ARGS are the broad training run's own arguments (its corpus is rebuilt from the cache, nothing generated).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from engine.heads import modules as H  # noqa: E402
from engine.runtime.lean import rms_norm  # noqa: E402
from engine.runtime.models import EMBEDDED, load_model, materialize  # noqa: E402
from training import corpus as C  # noqa: E402
from training import train as T  # noqa: E402


def material(cache: str, rest: list[str]):
    """(target model, train, held-out, evaluation-only sequences) of a training run, rebuilt from its cache with its
    own arguments (nothing generated that the cache holds); heads_heldout.py reads the same material."""
    args = T.argument_parser().parse_args([a for a in rest if a != "--"])
    target = load_model(EMBEDDED)
    materialize(target.model)  # training reads the transformers module: its fp32 weights, made here
    prompts, texts, evals = C.broad_material(args, target.tokenizer)
    train, held, evaluation = C.gather(
        target.model,
        target.tokenizer,
        prompts,
        max_new=args.max_new,
        gen_batch=args.gen_batch,
        corpus_cache=cache,
        texts=texts,
        text_tokens=args.text_tokens,
        evals=evals,
        log=lambda m: None,
    )
    return target.model, train, held, evaluation  # evaluation: the Spec-Bench first turns' answers


def probe_batch(a, model, train, held, specbench) -> dict:
    """EAGLE-1's loss over `tokens` (about 400 tokens a sequence), batches drawn from a reshuffled queue."""
    gen = torch.Generator().manual_seed(0)
    # continue a heads file's EAGLE layer (its own draft vocabulary), a fresh one-cycle over `tokens`
    if a.init:
        heads, record = H.load(Path(a.init), model.config)
        vocab_ids = heads.vocab_ids
    else:
        vocab_ids, _ = C.draft_vocab(train, 4096)
        heads, record = H.Heads(H.HeadsConfig(), model.config, vocab_ids), {}
    parts, index = H.frozen_parts(model, vocab_ids), T._index_map(vocab_ids, model.config.vocab_size)
    layer = heads.eagle.train()
    opt = torch.optim.AdamW(layer.parameters(), lr=a.lr, weight_decay=0.0)
    steps = int(a.tokens / (a.batch * 400))
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=a.lr, total_steps=steps, pct_start=0.1)
    t0, queue = time.time(), []
    for _ in range(steps):
        if len(queue) < a.batch:
            queue += torch.randperm(len(train), generator=gen).tolist()
        idx, queue = queue[: a.batch], queue[a.batch :]
        loss, _ = T.eagle_loss(layer, parts, index, [train[j] for j in idx], 0.1, gen, a.ce, a.passes, a.reg)
        T.optimizer_step(opt, sched, layer.parameters(), loss)
    train_s = time.time() - t0
    layer.eval()
    sharegpt = [s for s in held if s["source"] == "sharegpt"][: a.eval_seqs]
    out = {
        "probe": "batch",
        "init": a.init,
        "tokens": a.tokens,
        "batch": a.batch,
        "ce": a.ce,
        "reg": a.reg,
        "lr": a.lr,
        "steps": steps,
        "train_s": round(train_s),
        "sharegpt": T.eagle_accuracy(heads, parts, sharegpt, steps=4),
        "specbench": T.eagle_accuracy(heads, parts, specbench, steps=4),
    }
    # a heads file for heads_heldout.py and the live benchmark: the init's Medusa heads and record, with
    if a.out:
        # this probe named in it (the record's accuracy and calibration are the init's, not re-measured)
        H.save(heads, {**record, "probe": {**out, "command": " ".join(sys.argv)}}, Path(a.out))
    return out


class Fused(torch.nn.Module):
    """The EAGLE layer with EAGLE-3's input: fc([low ; middle ; final-norm feature]) -> H, and a learnt norm before
    the draft LM head; fused=False keeps the final-norm feature alone (the same head otherwise)."""

    def __init__(self, config, n_layers: int, fused: bool):
        super().__init__()
        hidden = config.hidden_size
        self.eagle = H.EagleLayer(
            hidden, config.num_attention_heads, config.num_key_value_heads, 1024, config.rms_norm_eps
        )
        self.fuse = torch.nn.Linear(hidden * (1 + n_layers), hidden) if fused else None
        self.norm = torch.nn.Parameter(torch.ones(hidden))

    def first(self, features: torch.Tensor, extra: torch.Tensor) -> torch.Tensor:
        return features if self.fuse is None else self.fuse(torch.cat([extra, features], -1))


@torch.no_grad()
def add_layers(model, seqs: list[dict], layers: list[int]) -> None:
    """s["extra"]: the RMS-normalised residual stream after each of `layers` at every position but the last."""
    ones = torch.ones(model.config.hidden_size)
    for s in seqs:
        hidden = model(input_ids=s["tokens"][None], output_hidden_states=True).hidden_states
        s["extra"] = torch.cat([rms_norm(hidden[i][0, :-1], ones, 1e-5) for i in layers], -1).half()


def probe_fusion(a, model, train, held, specbench) -> dict:
    layers = [int(x) for x in a.layers.split(",")]
    gen = torch.Generator().manual_seed(0)
    pool = [s for s in train if s["source"] == "sharegpt"]
    subset = [pool[i] for i in torch.randperm(len(pool), generator=gen)[: a.train_seqs].tolist()]
    sharegpt = [s for s in held if s["source"] == "sharegpt"][: a.eval_seqs]
    t0 = time.time()
    add_layers(model, subset + sharegpt + specbench, layers)
    out = {
        "probe": "fusion",
        "layers": layers,
        "train_seqs": len(subset),
        "epochs": a.epochs,
        "features_s": round(time.time() - t0),
    }
    vocab_ids, _ = C.draft_vocab(train, 4096)
    parts, index = H.frozen_parts(model, vocab_ids), T._index_map(vocab_ids, model.config.vocab_size)
    hidden = model.config.hidden_size
    for variant in ("last", "fused"):
        torch.manual_seed(0)
        gen = torch.Generator().manual_seed(0)
        head = Fused(model.config, len(layers), variant == "fused")
        head.vocab_ids = vocab_ids

        def decode(x, head=head):
            return rms_norm(x, head.norm, 1e-5) @ parts.lm_head.T

        def first_batch(seqs, features, head=head):
            extra = torch.zeros(*features.shape[:2], hidden * len(layers))
            for b, s in enumerate(seqs):
                m = len(s["tokens"]) - 2
                extra[b, :m] = s["extra"][:m].float()
            return head.first(features, extra)

        opt = torch.optim.AdamW(head.parameters(), lr=a.lr, weight_decay=0.0)
        steps = a.epochs * (len(subset) // a.batch)
        sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=a.lr, total_steps=steps, pct_start=0.1)
        t1 = time.time()
        for _ in range(a.epochs):
            perm = torch.randperm(len(subset), generator=gen).tolist()
            for i in range(0, len(subset) - a.batch + 1, a.batch):
                loss, _ = T.eagle_loss(
                    head.eagle,
                    parts,
                    index,
                    [subset[j] for j in perm[i : i + a.batch]],
                    0.1,
                    gen,
                    1.0,
                    2,
                    reg_weight=0.0,
                    first=first_batch,
                    decode=decode,
                )
                T.optimizer_step(opt, sched, head.parameters(), loss)
        head.eval()
        first = lambda s, f, head=head: head.first(f, s["extra"][: len(f)].float())
        out[variant] = {
            "train_s": round(time.time() - t1),
            "sharegpt": T.eagle_accuracy(head, parts, sharegpt, 4, first=first, decode=decode),
            "specbench": T.eagle_accuracy(head, parts, specbench, 4, first=first, decode=decode),
        }
    return out


class WideMedusa(torch.nn.Module):
    """K heads h + W2 SiLU(W1 h) (W2 starts at zero: each head starts as the base LM head, as Medusa's init)."""

    def __init__(self, hidden: int, k: int, width: int):
        super().__init__()
        self.up = torch.nn.ModuleList(torch.nn.Linear(hidden, width) for _ in range(k))
        self.down = torch.nn.ModuleList(torch.nn.Linear(width, hidden) for _ in range(k))
        for layer in self.down:
            torch.nn.init.zeros_(layer.weight)
            torch.nn.init.zeros_(layer.bias)

    def forward(self, feature: torch.Tensor, lm_head: torch.Tensor) -> torch.Tensor:
        hs = torch.stack([feature + down(F.silu(up(feature))) for up, down in zip(self.up, self.down)])
        return hs @ lm_head.T


def probe_medusa(a, model, train, held, specbench) -> dict:
    gen = torch.Generator().manual_seed(0)
    vocab_ids, _ = C.draft_vocab(train, 4096)
    heads = H.Heads(H.HeadsConfig(), model.config, vocab_ids)
    if a.width:
        heads.medusa = WideMedusa(model.config.hidden_size, heads.cfg.medusa_heads, a.width)
    parts, index = H.frozen_parts(model, vocab_ids), T._index_map(vocab_ids, model.config.vocab_size)
    subset = [train[i] for i in torch.randperm(len(train), generator=gen)[: a.seqs].tolist()]
    t0 = time.time()
    T.train_medusa(heads, parts.lm_head, index, subset, a.epochs, a.batch, a.lr, gen, lambda m: None)
    train_s = time.time() - t0
    heads.eval()
    sharegpt = [s for s in held if s["source"] == "sharegpt"][: a.eval_seqs]
    with torch.no_grad():
        return {
            "probe": "medusa",
            "seqs": len(subset),
            "rows": T.labels(subset),
            "epochs": a.epochs,
            "batch": a.batch,
            "lr": a.lr,
            "width": a.width,
            "train_s": round(train_s),
            "sharegpt": T.medusa_accuracy(heads, parts.lm_head, sharegpt),
            "specbench": T.medusa_accuracy(heads, parts.lm_head, specbench),
        }


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--corpus-cache", required=True)
    ap.add_argument(
        "--lr",
        type=float,
        default=None,
        help="peak rate (default: the shipped recipe's, EAGLE 1e-3, Medusa 2e-3)",
    )
    sub = ap.add_subparsers(dest="probe", required=True)
    b = sub.add_parser("batch")
    b.add_argument("--tokens", type=float, default=300e3)
    b.add_argument("--batch", type=int, default=8)
    b.add_argument("--ce", type=float, default=0.1)
    b.add_argument("--reg", type=float, default=1.0)
    b.add_argument("--passes", type=int, default=2)
    b.add_argument("--eval-seqs", type=int, default=150)
    b.add_argument("--init", default=None, help="a heads file whose EAGLE layer to continue training")
    b.add_argument("--out", default=None, help="save the trained heads here (with --init: its Medusa heads)")
    f = sub.add_parser("fusion")
    f.add_argument(
        "--layers", default="3,16", help="hidden_states indices: the input of these decoder layers"
    )
    f.add_argument("--train-seqs", type=int, default=500)
    f.add_argument("--epochs", type=int, default=2)
    f.add_argument("--batch", type=int, default=2)
    f.add_argument("--eval-seqs", type=int, default=120)
    m = sub.add_parser("medusa")
    m.add_argument("--seqs", type=int, default=700, help="training sequences (a seeded sample)")
    m.add_argument("--epochs", type=int, default=2)
    m.add_argument("--batch", type=int, default=256, help="rows per optimizer step")
    m.add_argument("--width", type=int, default=0, help="0: the shipped square block; W: an MLP of W units")
    m.add_argument("--eval-seqs", type=int, default=150)
    for p in (b, f, m):
        p.add_argument("rest", nargs=argparse.REMAINDER, help="-- then the training run's broad arguments")
    a = ap.parse_args(argv)
    a.lr = a.lr or (2e-3 if a.probe == "medusa" else 1e-3)
    torch.set_num_threads(2)
    # before the model loads, as the measured runs did (the batch probe's head init follows it)
    torch.manual_seed(0)
    model, train, held, specbench = material(a.corpus_cache, a.rest)
    probe = {"batch": probe_batch, "fusion": probe_fusion, "medusa": probe_medusa}[a.probe]
    print(json.dumps(probe(a, model, train, held, specbench)), flush=True)


if __name__ == "__main__":
    main()
