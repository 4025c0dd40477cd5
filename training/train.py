"""Train the draft heads (modules.py) by self-distillation from the target, on this machine's CPU.

    python -m training.train --seed 0            # writes assets/heads/smollm2-135m-heads.pt

1. corpus (corpus.py): the target's own greedy continuations of a committed prompt set
   (assets/heads/train_prompts.txt, disjoint from the benchmark prompts and the app's examples) and, for a broad
   run, real text it reads, with its last hidden state (the feature) at every position.
2. draft vocabulary: the most frequent label tokens.
3. Medusa heads: cross-entropy of head k on the token k+1 after each feature's position.
4. EAGLE layer: teacher-forced over [f_t ; emb(x_{t+1})] -> f_{t+1}, smooth-L1 on the feature plus
   cross-entropy of the draft LM head on x_{t+2}, with noise on the input features (EAGLE-1's recipe for
   the drift of its own predicted features); --eagle-passes > 1 adds EAGLE-3's training-time test.
5. held-out top-1 accuracy (every tenth prompt of the set): per Medusa head, and per EAGLE step k, which feeds
   its own predicted features for k − 1 steps (with the true tokens, as after accepted drafts).
Deterministic given the seed (same torch build and thread count). Labels are the target's greedy choices,
so an accuracy is the chance that a greedy draft token is accepted.
"""

from __future__ import annotations

import argparse
import shlex
import sys
import time

import torch
import torch.nn.functional as F

from engine.heads.modules import WEIGHTS, Heads, HeadsConfig, frozen_parts, save
from engine.runtime.models import EMBEDDED, load_model, materialize

from . import broad, sharegpt
from .accuracy import by_source, calibration, eagle_accuracy, labels, medusa_accuracy, medusa_rows
from .corpus import broad_material, draft_vocab, draft_vocab_share, gather
from .prompts import PROMPTS


def _index_map(vocab_ids: torch.Tensor, vocab: int) -> torch.Tensor:
    """target id -> row of the draft LM head, −100 (ignored) for tokens outside the draft vocabulary."""
    m = torch.full((vocab,), -100, dtype=torch.long)
    m[vocab_ids] = torch.arange(len(vocab_ids))
    return m


def train_medusa(
    heads: Heads, lm_head, index, seqs, epochs: int, batch: int, lr: float, gen: torch.Generator, log
):
    if epochs < 1:
        return
    x, y = medusa_rows(seqs, heads.cfg.medusa_heads)
    y = torch.where(y >= 0, index[y.clamp(min=0)], -100)  # (N, K) draft rows
    opt = torch.optim.AdamW(heads.medusa.parameters(), lr=lr, weight_decay=0.0)
    steps = epochs * ((len(x) + batch - 1) // batch)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=lr, total_steps=steps, pct_start=0.1)
    for epoch in range(epochs):
        perm, total = torch.randperm(len(x), generator=gen), 0.0
        for i in range(0, len(x), batch):
            idx = perm[i : i + batch]
            logits = heads.medusa(x[idx], lm_head)  # (K, B, V_draft)
            loss = F.cross_entropy(logits.flatten(0, 1), y[idx].T.flatten(), ignore_index=-100)
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
            total += float(loss.detach()) * len(idx)
        log(f"medusa epoch {epoch + 1}/{epochs}: loss {total / len(x):.3f}")


def _pad_batch(seqs: list[dict], embed):
    """Teacher-forced EAGLE inputs for a batch of sequences, right padded: features f_t, embeddings of
    x_{t+1}, target features f_{t+1} and target ids x_{t+2} (−1 where there is no loss) for t = 0..len−3."""
    n = max(len(s["tokens"]) - 2 for s in seqs)
    hidden = embed.shape[1]
    f_in, e_in, f_out = (torch.zeros(len(seqs), n, hidden) for _ in range(3))
    y = torch.full((len(seqs), n), -1, dtype=torch.long)
    for b, s in enumerate(seqs):
        toks, feats, m = s["tokens"], s["features"].float(), len(s["tokens"]) - 2
        f_in[b, :m], e_in[b, :m], f_out[b, :m] = feats[:m], embed[toks[1 : m + 1]], feats[1 : m + 1]
        start = max(s["prompt_len"] - 2, 0)  # loss where the label is the target's own choice
        y[b, start:m] = s["next"][start + 1 : m + 1]  # x_{t+2} as the target chose it after position t+1
    return f_in, e_in, f_out, y


def unrolled_mask(t: int, k: int) -> torch.Tensor:
    """Attention of training-time test's pass k (1-based) over the keys of passes 1..k, (T, k·T): the query at
    position p reads what drafting step k at p would hold: the true positions through p − k + 1 (pass 1's keys)
    and the drafted positions after them, pass i's key at p − (k − i) for i = 2..k."""
    pos = torch.arange(t)
    blocks = [pos[None] <= (pos - k + 1)[:, None]]
    blocks += [pos[None] == (pos - (k - i))[:, None] for i in range(2, k + 1)]
    return torch.cat(blocks, dim=1)


def unrolled(layer, f_in, e_in, rope, passes: int) -> list[torch.Tensor]:
    """Predicted features of passes 1..passes over a teacher-forced batch (B, T, H): pass 1 reads the true
    features; pass k reads pass k − 1's outputs one position back, [pred ; emb(x_{p+1})] at p, over the keys
    drafting step k would hold (unrolled_mask). pass k at p is drafting step k from the true position p − k + 1."""
    cos, sin = rope
    kv: list = [] if passes > 1 else None
    preds = [layer(f_in, e_in, cos, sin, kv=kv)]
    for k in range(2, passes + 1):
        fed = torch.cat([preds[-1][:, :1], preds[-1][:, :-1]], dim=1)  # position p reads pass k−1's p − 1
        preds.append(layer(fed, e_in, cos, sin, kv=kv, mask=unrolled_mask(f_in.shape[1], k)[None, None]))
    return preds


def eagle_loss(
    layer,
    parts,
    index,
    seqs: list[dict],
    noise: float,
    gen: torch.Generator,
    ce_weight: float = 0.1,
    passes: int = 1,
    reg_weight: float = 1.0,
    first=None,
    decode=None,
) -> tuple:
    """(loss, token loss) of one teacher-forced batch: reg_weight × smooth-L1 on the next feature + ce_weight ×
    cross-entropy of the draft token, noise on the input features; passes > 1 adds training-time test's passes,
    each pass k's cross-entropy weighted ce_weight × 0.8^(k−1). first(seqs, features) -> the layer's input in
    place of the padded features (a probe's fused input); decode(x) -> draft logits (default x @ lm_head.T)."""
    decode = decode or (lambda x: x @ parts.lm_head.T)
    f_in, e_in, f_out, y = _pad_batch(seqs, parts.embed)
    if first is not None:
        f_in = first(seqs, f_in)
    scale = f_in.detach().pow(2).mean(-1, keepdim=True).sqrt()
    f_in = f_in + noise * scale * torch.randn(f_in.shape, generator=gen)
    preds = unrolled(layer, f_in, e_in, parts.rope(torch.arange(f_in.shape[1]), f_in), passes)
    valid = y >= 0
    target = torch.where(valid, index[y.clamp(min=0)], -100)
    reg = F.smooth_l1_loss(preds[0][valid], f_out[valid]) if reg_weight else None
    # hard labels (the target's greedy token): its soft distribution, EAGLE's recipe, measured no better
    # here (45.7% vs 44.7% held-out step-1 top-1 on 1,000 prompts, 3 epochs)
    cls = F.cross_entropy(decode(preds[0][valid]), target[valid], ignore_index=-100)
    loss = ce_weight * cls if reg is None else reg_weight * reg + ce_weight * cls
    for k, pred in enumerate(preds[1:], 2):
        ok = valid & (torch.arange(y.shape[1]) >= k - 1)[None]
        if bool(ok.any()):
            loss = loss + ce_weight * 0.8 ** (k - 1) * F.cross_entropy(
                decode(pred[ok]), target[ok], ignore_index=-100
            )
    return loss, cls.detach()


def optimizer_step(opt, sched, params, loss) -> None:
    opt.zero_grad()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(params, 1.0)
    opt.step()
    sched.step()


def train_eagle(
    heads: Heads,
    parts,
    index,
    seqs,
    epochs: int,
    batch: int,
    lr: float,
    noise: float,
    gen: torch.Generator,
    log,
    ce_weight: float = 0.1,
    passes: int = 1,
):
    """EAGLE-1's recipe (eagle_loss: smooth-L1 on the next feature + ce_weight × cross-entropy of the draft token,
    noise on the input features); passes > 1 adds EAGLE-3's training-time test: pass k feeds the features pass
    k − 1 predicted (shifted one position on, as drafting step k reads them) and attends as step k would
    (unrolled_mask), its cross-entropy added with weight 0.8^(k−1). One cycle of the rate over the epochs."""
    layer = heads.eagle
    if epochs < 1:
        return
    opt = torch.optim.AdamW(layer.parameters(), lr=lr, weight_decay=0.0)
    steps = epochs * ((len(seqs) + batch - 1) // batch)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=lr, total_steps=steps, pct_start=0.1)
    for epoch in range(epochs):
        perm, total, count = torch.randperm(len(seqs), generator=gen).tolist(), 0.0, 0
        for i in range(0, len(seqs), batch):
            loss, cls = eagle_loss(
                layer, parts, index, [seqs[j] for j in perm[i : i + batch]], noise, gen, ce_weight, passes
            )
            optimizer_step(opt, sched, layer.parameters(), loss)
            total, count = total + float(cls), count + 1
        log(f"eagle epoch {epoch + 1}/{epochs}: token loss {total / max(count, 1):.3f}")


def _fit_heads(
    heads: Heads,
    parts,
    index: torch.Tensor,
    seqs: list[dict],
    gen: torch.Generator,
    log,
    *,
    medusa_epochs: int,
    eagle_epochs: int,
    eagle_batch: int,
    eagle_lr: float,
    eagle_ce: float,
    eagle_passes: int,
) -> None:
    """Steps 3 and 4: the Medusa heads (batches of 256 rows, peak rate 2e-3), then the EAGLE layer (noise 0.1)."""
    train_medusa(heads, parts.lm_head, index, seqs, medusa_epochs, 256, 2e-3, gen, log)
    train_eagle(
        heads,
        parts,
        index,
        seqs,
        eagle_epochs,
        eagle_batch,
        eagle_lr,
        0.1,
        gen,
        log,
        ce_weight=eagle_ce,
        passes=eagle_passes,
    )


def _held_out(heads: Heads, parts, vocab_ids, held: list, evaluation: list, seen_medusa, seen_eagle) -> dict:
    """Step 5: held-out top-1 per Medusa head and EAGLE step (their guesses collected in the seen lists), per
    source over the held-out and evaluation sequences, and the draft vocabulary's share of each source."""
    steps = heads.cfg.medusa_heads
    return {
        "medusa_top1": medusa_accuracy(heads, parts.lm_head, held, seen_medusa),
        "eagle_top1": eagle_accuracy(heads, parts, held, steps=steps, seen=seen_eagle),
        "by_source": by_source(heads, parts, held + evaluation, steps),
        "coverage_by_source": {
            src: round(draft_vocab_share(vocab_ids, [s for s in held if s["source"] == src]), 4)
            for src in sorted({s["source"] for s in held})
        },
    }


def train(
    model,
    tokenizer,
    prompts: list,
    *,
    seed: int = 0,
    max_new: int = 128,
    gen_batch: int = 16,
    cfg: HeadsConfig | None = None,
    medusa_epochs: int = 3,
    eagle_epochs: int = 6,
    log=print,
    corpus_cache: str | None = None,
    texts: dict | None = None,
    text_tokens: int = 0,
    evals: dict | None = None,
    eagle_passes: int = 1,
    eagle_ce: float = 0.1,
    eagle_lr: float = 1e-3,
    eagle_batch: int = 8,
) -> tuple:
    """The whole recipe: corpus, draft vocabulary, both heads, held-out accuracy. Returns (heads, record).
    prompts: answered by the target (a prompt may be (source, text)); texts: source -> texts the target reads
    (teacher forcing), up to text_tokens tokens each; evals: name -> prompts answered for evaluation only.
    corpus_cache: a file the corpus is kept in, keyed by prompt (see cached_corpus; texts: FILE.SOURCE.pt).
    eagle_passes, eagle_ce, eagle_lr, eagle_batch: training-time test's passes, the token loss's weight, the peak
    rate, sequences per optimizer step (train_eagle)."""
    cfg = cfg or HeadsConfig()
    t0 = time.time()
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    train_seqs, held, evaluation = gather(
        model,
        tokenizer,
        prompts,
        max_new=max_new,
        gen_batch=gen_batch,
        corpus_cache=corpus_cache,
        texts=texts or {},
        text_tokens=text_tokens,
        evals=evals or {},
        log=log,
    )
    t_corpus = time.time() - t0
    vocab_ids, coverage = draft_vocab(train_seqs, min(cfg.draft_vocab, model.config.vocab_size))
    cfg.draft_vocab = len(vocab_ids)
    heads = Heads(cfg, model.config, vocab_ids)
    parts = frozen_parts(model, vocab_ids)
    index = _index_map(vocab_ids, model.config.vocab_size)
    epochs = dict(medusa_epochs=medusa_epochs, eagle_epochs=eagle_epochs)
    eagle = dict(eagle_passes=eagle_passes, eagle_ce=eagle_ce, eagle_lr=eagle_lr, eagle_batch=eagle_batch)
    _fit_heads(heads, parts, index, train_seqs, gen, log, **epochs, **eagle)
    heads.eval()
    seen_medusa, seen_eagle = [], []
    record = {
        "seed": seed,
        "prompts": len(prompts),
        "held_out_prompts": len(held),
        "train_tokens": labels(train_seqs),
        "draft_vocab": len(vocab_ids),
        "draft_vocab_coverage": round(coverage, 4),
        **_held_out(heads, parts, vocab_ids, held, evaluation, seen_medusa, seen_eagle),
        "corpus_s": round(t_corpus),
        "total_s": round(time.time() - t0),
        "threads": torch.get_num_threads(),
        "max_new": max_new,
        **epochs,
        **eagle,
    }
    record["medusa_calibration"], record["eagle_calibration"] = (
        calibration(seen_medusa),
        calibration(seen_eagle),
    )
    log(
        f"held-out top-1: medusa {record['medusa_top1']}, eagle {record['eagle_top1']}; by confidence bin "
        f"[guesses, hit rate]: medusa {record['medusa_calibration']}, eagle {record['eagle_calibration']}"
    )
    return heads, record


def result_args(argv: list[str]) -> list[str]:
    """The command line without the options that do not change the heads (where the corpus is cached, where the
    file is written), so a record names a command anyone can run."""
    out, skip = [], False
    for arg in argv:
        if skip:
            skip = False
        elif arg in ("--corpus-cache", "--out"):
            skip = True
        elif not arg.startswith(("--corpus-cache=", "--out=")):
            out.append(arg)
    return out


def argument_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m training.train", description=__doc__.split("\n\n")[0])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--prompts", default=str(PROMPTS), help="one prompt per line")
    ap.add_argument(
        "--limit", type=int, default=None, help="only the first N prompts (the templated set alone)"
    )
    ap.add_argument("--max-new", type=int, default=128, help="continuation tokens per prompt")
    ap.add_argument("--gen-batch", type=int, default=32)
    ap.add_argument("--medusa-heads", type=int, default=4)
    ap.add_argument("--draft-vocab", type=int, default=4096)
    ap.add_argument(
        "--eagle-ffn", type=int, default=HeadsConfig.eagle_ffn, help="the EAGLE layer's SwiGLU width"
    )
    ap.add_argument("--medusa-epochs", type=int, default=3)
    ap.add_argument("--eagle-epochs", type=int, default=6)
    ap.add_argument(
        "--eagle-passes",
        type=int,
        default=1,
        help="EAGLE-3's training-time test: the head trained on "
        "its own predicted features for this many drafting steps (1 = EAGLE-1's teacher forcing)",
    )
    ap.add_argument(
        "--eagle-ce", type=float, default=0.1, help="weight of the EAGLE token loss beside the feature loss"
    )
    ap.add_argument("--eagle-lr", type=float, default=1e-3, help="EAGLE's peak learning rate (one cycle)")
    ap.add_argument(
        "--eagle-batch",
        type=int,
        default=8,
        help="EAGLE's sequences per optimizer step (up to 512 "
        "tokens each): at equal tokens, 2 gives 4x the steps and measured +3.5 points of step-1 top-1",
    )
    ap.add_argument("--threads", type=int, default=2, help="torch threads (results depend on it)")
    ap.add_argument("--out", default=str(WEIGHTS))
    ap.add_argument(
        "--corpus-cache",
        default=None,
        help="keep the corpus here, keyed by prompt: reused, and resumed after an interruption",
    )
    broad_args = ap.add_argument_group("broad material (training/broad.py); any of these turns it on")
    broad_args.add_argument(
        "--text-tokens", type=int, default=0, help="tokens of real text per source, read by the target"
    )
    broad_args.add_argument(
        "--sources",
        default=",".join(broad.SOURCES),
        help="comma-separated text sources: " + ", ".join([*broad.SOURCES, sharegpt.SOURCE]),
    )
    broad_args.add_argument(
        "--instructions", type=int, default=0, help="instructions per Spec-Bench category, answered"
    )
    broad_args.add_argument(
        "--template-prompts", type=int, default=0, help="the first N templated prompts too"
    )
    broad_args.add_argument(
        "--sharegpt-answers",
        type=int,
        default=0,
        help="ShareGPT opening requests answered by the target (training/sharegpt.py)",
    )
    broad_args.add_argument(
        "--specbench-eval",
        type=int,
        default=0,
        help="Spec-Bench first turns per category, answered for evaluation only",
    )
    return ap


def main(argv=None) -> None:
    args = argument_parser().parse_args(argv)
    torch.set_num_threads(args.threads)
    target = load_model(EMBEDDED)
    materialize(target.model)  # training reads the transformers module: its fp32 weights, made here
    if args.text_tokens or args.instructions or args.specbench_eval or args.sharegpt_answers:
        prompts, texts, evals = broad_material(args, target.tokenizer)
    else:
        prompts, texts, evals = (
            [p for p in open(args.prompts, encoding="utf-8").read().splitlines() if p.strip()][: args.limit],
            {},
            {},
        )
    cfg = HeadsConfig(medusa_heads=args.medusa_heads, draft_vocab=args.draft_vocab, eagle_ffn=args.eagle_ffn)
    heads, record = train(
        target.model,
        target.tokenizer,
        prompts,
        seed=args.seed,
        max_new=args.max_new,
        gen_batch=args.gen_batch,
        cfg=cfg,
        medusa_epochs=args.medusa_epochs,
        eagle_epochs=args.eagle_epochs,
        log=lambda m: print(m, flush=True),
        corpus_cache=args.corpus_cache,
        texts=texts,
        text_tokens=args.text_tokens,
        evals=evals,
        eagle_passes=args.eagle_passes,
        eagle_ce=args.eagle_ce,
        eagle_lr=args.eagle_lr,
        eagle_batch=args.eagle_batch,
    )
    record["command"] = "python -m training.train " + shlex.join(
        result_args(sys.argv[1:] if argv is None else argv)
    )
    if texts or evals:
        record["packages"] = broad.manifest()
    save(heads, record, args.out)
    print(f"wrote {args.out}: {record}")


if __name__ == "__main__":
    main()
