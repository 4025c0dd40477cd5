"""Train the draft heads (modules.py) by self-distillation from the target, on this machine's CPU.

    python -m engine.heads.train --seed 0            # writes assets/heads/smollm2-135m-heads.pt

1. corpus: the target's own greedy continuations of a committed prompt set (assets/heads/train_prompts.txt,
   disjoint from the benchmark prompts and the app's examples), generated in batches, with its last hidden
   state (the feature) at every position, taken from the same forward that chose each token (free).
2. draft vocabulary: the most frequent continuation tokens.
3. Medusa heads: cross-entropy of head k on the token k+1 after each feature's position.
4. EAGLE layer: teacher-forced over [f_t ; emb(x_{t+1})] -> f_{t+1}, smooth-L1 on the feature plus
   cross-entropy of the draft LM head on x_{t+2}, with noise on the input features (EAGLE-1's recipe for
   the drift of its own predicted features).
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
from pathlib import Path

import torch
import torch.nn.functional as F

from ..costmodel import CONFIDENCE_EDGES
from ..runtime.cache import KVCache
from ..runtime.fastllama import forward_fn
from ..runtime.models import EMBEDDED, eos_ids, load_model
from .prompts import PROMPTS
from .modules import WEIGHTS, Heads, HeadsConfig, frozen_parts, save

HELD_OUT = 0.1  # share of the prompts (every tenth) kept out of training


def encode(tokenizer, prompt: str) -> list[int]:
    """As Engine.encode: the chat template where the tokenizer has one."""
    if getattr(tokenizer, "chat_template", None):
        ids = tokenizer.apply_chat_template([{"role": "user", "content": prompt}], add_generation_prompt=True,
                                            tokenize=True, return_dict=False)
        ids = ids["input_ids"] if hasattr(ids, "keys") else ids
    else:
        ids = tokenizer(prompt)["input_ids"]
    return [int(i) for i in ids]


@torch.inference_mode()
def corpus(model, tokenizer, prompts: list[str], max_new: int, batch: int, log=print) -> list[dict]:
    """Per prompt: tokens (prompt + greedy continuation, through an end-of-text), the prompt length, and
    features (len − 1, H): the final-norm hidden state at every position but the last. Batched with left
    padding on the engine's forward (a pad query sees only itself, so it stays finite and is never seen)."""
    forward, eos = forward_fn(model), eos_ids(model, tokenizer)
    out, t0 = [], time.time()
    for start in range(0, len(prompts), batch):
        rows = [encode(tokenizer, p) for p in prompts[start:start + batch]]
        b, width = len(rows), max(map(len, rows))
        valid = torch.tensor([[False] * (width - len(r)) + [True] * len(r) for r in rows])  # (B, W)
        x = torch.tensor([[0] * (width - len(r)) + r for r in rows])  # (B, W) left padded
        pos = (valid.cumsum(1) - 1).clamp(min=0)
        mask = torch.tril(torch.ones(width, width, dtype=torch.bool)) & valid[:, None, :]
        mask = (mask | torch.eye(width, dtype=torch.bool))[:, None]  # (B, 1, W, W)
        cache, hidden = KVCache.for_model(model, width + max_new), []
        logits = forward(x, cache, attention_mask=mask, position_ids=pos, hidden_out=hidden)[:, -1]  # (B, V)
        new, done = [], torch.zeros(b, dtype=torch.bool)
        for _ in range(max_new):
            tok = logits.argmax(-1)  # (B,)
            new.append(tok)
            done |= torch.tensor([int(t) in eos for t in tok])
            if bool(done.all()):
                break
            valid = torch.cat([valid, torch.ones(b, 1, dtype=torch.bool)], dim=1)
            pos = pos[:, -1:] + 1
            logits = forward(tok[:, None], cache, attention_mask=valid[:, None, None], position_ids=pos,
                             hidden_out=hidden)[:, -1]
        feats = torch.cat(hidden, dim=1)  # (B, W + steps, H)
        gen = torch.stack(new, dim=1).tolist()  # (B, steps)
        for i, row in enumerate(rows):
            end = next((k + 1 for k, t in enumerate(gen[i]) if t in eos), len(gen[i]))
            tokens = row + gen[i][:end]
            f = feats[i, width - len(row):width - len(row) + len(tokens) - 1]
            out.append({"tokens": torch.tensor(tokens), "prompt_len": len(row), "features": f.to(torch.float16)})
        log(f"corpus: {len(out)}/{len(prompts)} prompts, {time.time() - t0:.0f}s")
    return out


def draft_vocab(seqs: list[dict], size: int) -> tuple[torch.Tensor, float]:
    """The `size` most frequent continuation tokens (ties by id) and the share of continuation tokens they cover."""
    counts = torch.bincount(torch.cat([s["tokens"][s["prompt_len"]:] for s in seqs]))
    order = sorted(range(len(counts)), key=lambda i: (-int(counts[i]), i))[:size]
    ids = torch.tensor(sorted(order))
    return ids, float(counts[ids].sum() / counts.sum())


def _index_map(vocab_ids: torch.Tensor, vocab: int) -> torch.Tensor:
    """target id -> row of the draft LM head, −100 (ignored) for tokens outside the draft vocabulary."""
    m = torch.full((vocab,), -100, dtype=torch.long)
    m[vocab_ids] = torch.arange(len(vocab_ids))
    return m


def medusa_rows(seqs: list[dict], k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Features at continuation positions (N, H) and the target ids k' = 1..k steps further (N, k), −1 past the end."""
    xs, ys = [], []
    for s in seqs:
        toks, n = s["tokens"], len(s["tokens"])
        for t in range(s["prompt_len"] - 1, n - 1):  # f_t predicts token t+1, which the target generated
            xs.append(s["features"][t])
            ys.append([int(toks[t + 1 + j]) if t + 1 + j < n else -1 for j in range(1, k + 1)])
    return torch.stack(xs).float(), torch.tensor(ys)


def train_medusa(heads: Heads, lm_head, index, seqs, epochs: int, batch: int, lr: float, gen: torch.Generator, log):
    x, y = medusa_rows(seqs, heads.cfg.medusa_heads)
    y = torch.where(y >= 0, index[y.clamp(min=0)], -100)  # (N, K) draft rows
    opt = torch.optim.AdamW(heads.medusa.parameters(), lr=lr, weight_decay=0.0)
    steps = epochs * ((len(x) + batch - 1) // batch)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=lr, total_steps=steps, pct_start=0.1)
    for epoch in range(epochs):
        perm, total = torch.randperm(len(x), generator=gen), 0.0
        for i in range(0, len(x), batch):
            idx = perm[i:i + batch]
            logits = heads.medusa(x[idx], lm_head)  # (K, B, V_draft)
            loss = F.cross_entropy(logits.flatten(0, 1), y[idx].T.flatten(), ignore_index=-100)
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
            total += float(loss.detach()) * len(idx)
        log(f"medusa epoch {epoch + 1}/{epochs}: loss {total / len(x):.3f}")


def calibration(seen: list) -> list[list]:
    """Per confidence bin of auto (costmodel.CONFIDENCE_EDGES): [guesses, share the target chose], from the
    (confidence, hit) tensors of held-out guesses; auto starts each bin's α there (a prior it then updates)."""
    conf, hit = torch.cat([c for c, _ in seen]), torch.cat([h for _, h in seen]).float()
    bins = torch.bucketize(conf, torch.tensor(CONFIDENCE_EDGES), right=True)
    out = []
    for b in range(len(CONFIDENCE_EDGES) + 1):
        sel = bins == b
        n = int(sel.sum())
        out.append([n, round(float(hit[sel].mean()), 4) if n else None])
    return out


@torch.no_grad()
def medusa_accuracy(heads: Heads, lm_head, seqs, seen: list | None = None) -> list[float]:
    """Held-out top-1 accuracy of each Medusa head (a label outside the draft vocabulary counts as a miss);
    `seen` collects every guess's (confidence, hit) for calibration()."""
    x, y = medusa_rows(seqs, heads.cfg.medusa_heads)
    probs = heads.medusa(x, lm_head).softmax(-1)  # (K, N, V_draft)
    guess = heads.vocab_ids[probs.argmax(-1)].T  # (N, K) target ids
    valid = y >= 0
    if seen is not None:
        seen.append((probs.amax(-1).T[valid], (guess == y)[valid]))
    return [round(float(((guess[:, k] == y[:, k]) & valid[:, k]).sum() / valid[:, k].sum()), 4)
            for k in range(y.shape[1])]


def _pad_batch(seqs: list[dict], embed):
    """Teacher-forced EAGLE inputs for a batch of sequences, right padded: features f_t, embeddings of
    x_{t+1}, target features f_{t+1} and target ids x_{t+2} (−1 where there is no loss) for t = 0..len−3."""
    n = max(len(s["tokens"]) - 2 for s in seqs)
    hidden = embed.shape[1]
    f_in, e_in, f_out = (torch.zeros(len(seqs), n, hidden) for _ in range(3))
    y = torch.full((len(seqs), n), -1, dtype=torch.long)
    for b, s in enumerate(seqs):
        toks, feats, m = s["tokens"], s["features"].float(), len(s["tokens"]) - 2
        f_in[b, :m], e_in[b, :m], f_out[b, :m] = feats[:m], embed[toks[1:m + 1]], feats[1:m + 1]
        start = max(s["prompt_len"] - 2, 0)  # loss where x_{t+2} is the target's own continuation
        y[b, start:m] = toks[start + 2:m + 2]
    return f_in, e_in, f_out, y


def train_eagle(heads: Heads, parts, index, seqs, epochs: int, batch: int, lr: float, noise: float,
                gen: torch.Generator, log):
    layer = heads.eagle
    opt = torch.optim.AdamW(layer.parameters(), lr=lr, weight_decay=0.0)
    steps = epochs * ((len(seqs) + batch - 1) // batch)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=lr, total_steps=steps, pct_start=0.1)
    for epoch in range(epochs):
        perm, total, count = torch.randperm(len(seqs), generator=gen).tolist(), 0.0, 0
        for i in range(0, len(seqs), batch):
            f_in, e_in, f_out, y = _pad_batch([seqs[j] for j in perm[i:i + batch]], parts.embed)
            scale = f_in.pow(2).mean(-1, keepdim=True).sqrt()
            f_in = f_in + noise * scale * torch.randn(f_in.shape, generator=gen)
            cos, sin = parts.rope(torch.arange(f_in.shape[1]), f_in)
            pred = layer(f_in, e_in, cos, sin)  # (B, T, H)
            valid = y >= 0
            reg = F.smooth_l1_loss(pred[valid], f_out[valid])
            target = torch.where(valid, index[y.clamp(min=0)], -100)
            # hard labels (the target's greedy token): its soft distribution, EAGLE's recipe, measured no better
            # here (45.7% vs 44.7% held-out step-1 top-1 on 1,000 prompts, 3 epochs)
            cls = F.cross_entropy((pred[valid] @ parts.lm_head.T), target[valid], ignore_index=-100)
            loss = reg + 0.1 * cls
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(layer.parameters(), 1.0)
            opt.step()
            sched.step()
            total, count = total + float(cls.detach()), count + 1
        log(f"eagle epoch {epoch + 1}/{epochs}: token loss {total / max(count, 1):.3f}")


@torch.no_grad()
def eagle_accuracy(heads: Heads, parts, seqs, steps: int, every: int = 3, seen: list | None = None) -> list[float]:
    """Held-out top-1 accuracy per EAGLE step k = 1..steps, as drafting runs it: from a start j, step 1 reads
    the true feature f_j (and x_{j+1}); step k > 1 reads the feature step k − 1 predicted, with the true
    token x_{j+k} (the draft accepted so far); its guess must equal x_{j+1+k}."""
    layer, hits, tried = heads.eagle, [0] * steps, [0] * steps
    for s in seqs:
        toks, feats, n = s["tokens"], s["features"].float(), len(s["tokens"])
        m = n - 2
        if m < 1:
            continue
        kv: list = []
        cos, sin = parts.rope(torch.arange(m), feats)
        pred = layer(feats[None, :m], parts.embed[toks[1:m + 1]][None], cos, sin, kv=kv)[0]  # (m, H), step 1
        starts = torch.arange(max(s["prompt_len"] - 2, 0), m, every)  # positions j with x_{j+2} generated
        if len(starts) == 0:
            continue
        keys, values = kv[0].expand(len(starts), -1, -1, -1), kv[1].expand(len(starts), -1, -1, -1)
        cache = [keys, values]
        feature = pred[starts][:, None]  # (J, 1, H)
        for k in range(1, steps + 1):
            label_pos = starts + 1 + k  # token x_{j+1+k}
            ok = label_pos < n
            probs = (feature[:, 0] @ parts.lm_head.T).softmax(-1)
            guess = heads.vocab_ids[probs.argmax(-1)]
            hit = guess == toks[label_pos.clamp(max=n - 1)]
            hits[k - 1] += int((hit & ok).sum())
            if seen is not None:
                seen.append((probs.amax(-1)[ok], hit[ok]))
            tried[k - 1] += int(ok.sum())
            if k == steps:
                break
            pos = starts + k  # the next input: [predicted f_{j+k} ; emb(x_{j+1+k})] at position j+k
            emb = parts.embed[toks[label_pos.clamp(max=n - 1)]][:, None]
            cos, sin = parts.rotary(feature, pos[:, None])  # (J, 1, D)
            allowed = torch.cat([torch.arange(m)[None] <= starts[:, None],
                                 torch.ones(len(starts), k, dtype=torch.bool)], dim=1)  # (J, m + k)
            feature = layer(feature, emb, cos, sin, kv=cache, mask=allowed[:, None, None])
    return [round(h / max(t, 1), 4) for h, t in zip(hits, tried)]


def cached_corpus(model, tokenizer, prompts: list[str], max_new: int, batch: int, cache: str | None,
                  log=print, save_every_s: float = 120.0) -> list[dict]:
    """corpus() for the prompts, through a cache file keyed by prompt: prompts already there are read back
    (greedy: the same either way), the others are generated and the file is rewritten every few minutes, so an
    interrupted run resumes where it stopped. A cache made with another max_new is not used."""
    done: dict = {}
    if cache and Path(cache).exists():
        saved = torch.load(cache, weights_only=True)
        done = saved["seqs"] if saved.get("max_new") == max_new else {}
    todo, last = [p for p in prompts if p not in done], time.time()
    for start in range(0, len(todo), batch):
        chunk = todo[start:start + batch]
        done.update(zip(chunk, corpus(model, tokenizer, chunk, max_new, batch, log=lambda m: None)))
        log(f"corpus: {len(todo) - len(todo[start + batch:])}/{len(todo)} new prompts ({len(done)} cached)")
        if cache and (time.time() - last > save_every_s or start + batch >= len(todo)):
            torch.save({"max_new": max_new, "seqs": done}, cache)
            last = time.time()
    return [done[p] for p in prompts]


def split(seqs: list[dict]) -> tuple[list[dict], list[dict]]:
    """(train, held out): every tenth prompt is held out, so the held-out set has the whole set's mix."""
    every = round(1 / HELD_OUT)
    held = {i for i in range(len(seqs)) if i % every == every - 1} or {len(seqs) - 1}  # a tiny set holds its last
    return [s for i, s in enumerate(seqs) if i not in held], [s for i, s in enumerate(seqs) if i in held]


def train(model, tokenizer, prompts: list[str], *, seed: int = 0, max_new: int = 128, gen_batch: int = 16,
          cfg: HeadsConfig | None = None, medusa_epochs: int = 3, eagle_epochs: int = 6, log=print,
          corpus_cache: str | None = None) -> tuple:
    """The whole recipe: corpus, draft vocabulary, both heads, held-out accuracy. Returns (heads, record).
    corpus_cache: a file the corpus is kept in, keyed by prompt (see cached_corpus)."""
    cfg = cfg or HeadsConfig()
    t0 = time.time()
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    seqs = cached_corpus(model, tokenizer, prompts, max_new, gen_batch, corpus_cache, log)
    t_corpus = time.time() - t0
    train_seqs, held = split(seqs)
    vocab_ids, coverage = draft_vocab(train_seqs, min(cfg.draft_vocab, model.config.vocab_size))
    cfg.draft_vocab = len(vocab_ids)
    heads = Heads(cfg, model.config, vocab_ids)
    parts = frozen_parts(model, vocab_ids)
    index = _index_map(vocab_ids, model.config.vocab_size)
    train_medusa(heads, parts.lm_head, index, train_seqs, medusa_epochs, 256, 2e-3, gen, log)
    train_eagle(heads, parts, index, train_seqs, eagle_epochs, 8, 1e-3, 0.1, gen, log)
    heads.eval()
    seen_medusa, seen_eagle = [], []
    record = {
        "seed": seed, "prompts": len(prompts), "held_out_prompts": len(held),
        "train_tokens": sum(len(s["tokens"]) - s["prompt_len"] for s in train_seqs),
        "draft_vocab": len(vocab_ids), "draft_vocab_coverage": round(coverage, 4),
        "medusa_top1": medusa_accuracy(heads, parts.lm_head, held, seen_medusa),
        "eagle_top1": eagle_accuracy(heads, parts, held, steps=cfg.medusa_heads, seen=seen_eagle),
        "corpus_s": round(t_corpus), "total_s": round(time.time() - t0), "threads": torch.get_num_threads(),
        "max_new": max_new, "medusa_epochs": medusa_epochs, "eagle_epochs": eagle_epochs,
    }
    record["medusa_calibration"], record["eagle_calibration"] = calibration(seen_medusa), calibration(seen_eagle)
    log(f"held-out top-1: medusa {record['medusa_top1']}, eagle {record['eagle_top1']}; by confidence bin "
        f"[guesses, hit rate]: medusa {record['medusa_calibration']}, eagle {record['eagle_calibration']}")
    return heads, record


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(prog="python -m engine.heads.train", description=__doc__.split("\n\n")[0])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--prompts", default=str(PROMPTS), help="one prompt per line")
    ap.add_argument("--limit", type=int, default=None, help="only the first N prompts")
    ap.add_argument("--max-new", type=int, default=128, help="continuation tokens per prompt")
    ap.add_argument("--gen-batch", type=int, default=32)
    ap.add_argument("--medusa-heads", type=int, default=4)
    ap.add_argument("--draft-vocab", type=int, default=4096)
    ap.add_argument("--medusa-epochs", type=int, default=3)
    ap.add_argument("--eagle-epochs", type=int, default=6)
    ap.add_argument("--threads", type=int, default=2, help="torch threads (results depend on it)")
    ap.add_argument("--out", default=str(WEIGHTS))
    ap.add_argument("--corpus-cache", default=None, help="keep the corpus here, keyed by prompt: reused, and resumed after an interruption")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    target = load_model(EMBEDDED)
    prompts = [p for p in open(args.prompts, encoding="utf-8").read().splitlines() if p.strip()][:args.limit]
    cfg = HeadsConfig(medusa_heads=args.medusa_heads, draft_vocab=args.draft_vocab)
    heads, record = train(target.model, target.tokenizer, prompts, seed=args.seed, max_new=args.max_new,
                          gen_batch=args.gen_batch, cfg=cfg, medusa_epochs=args.medusa_epochs,
                          eagle_epochs=args.eagle_epochs, log=lambda m: print(m, flush=True),
                          corpus_cache=args.corpus_cache)
    record["command"] = "python -m engine.heads.train " + shlex.join(sys.argv[1:] if argv is None else argv)
    save(heads, record, args.out)
    print(f"wrote {args.out}: {record}")


if __name__ == "__main__":
    main()
