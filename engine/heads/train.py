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
from ..specbench import load_questions, sample
from . import broad
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
            t = torch.tensor(tokens)
            # next: the target's choice after each position (its greedy continuation; prompt positions unused)
            out.append({"tokens": t, "prompt_len": len(row), "features": f.to(torch.float16), "next": t[1:]})
        log(f"corpus: {len(out)}/{len(prompts)} prompts, {time.time() - t0:.0f}s")
    return out


@torch.inference_mode()
def teacher_corpus(model, tokenizer, texts: list[str], max_tokens: int, chunk: int = 512, batch: int = 4,
                   log=print) -> list[dict]:
    """Real text read by the target (teacher forcing): the texts' tokens, joined by end-of-text, cut into chunks of
    `chunk` tokens (up to max_tokens in all); per chunk its features and `next`, the target's argmax after every
    position: labels from one batched forward per chunk, no generation. prompt_len 1: every position has a loss."""
    forward, eos = forward_fn(model), tokenizer.eos_token_id if tokenizer.eos_token_id is not None else 0
    stream: list[int] = []
    for text in texts:
        stream += tokenizer(text, add_special_tokens=False)["input_ids"] + [eos]
        if len(stream) >= max_tokens:
            break
    stream = stream[:max_tokens - max_tokens % chunk] if len(stream) >= chunk else stream
    rows = [stream[i:i + chunk] for i in range(0, len(stream) - chunk + 1, chunk)]
    out, t0 = [], time.time()
    for start in range(0, len(rows), batch):
        x = torch.tensor(rows[start:start + batch])  # (B, chunk)
        cache, hidden = KVCache.for_model(model, chunk), []
        logits = forward(x, cache, hidden_out=hidden)  # (B, chunk, V)
        best = logits.argmax(-1)  # (B, chunk)
        for i in range(len(x)):
            out.append({"tokens": x[i], "prompt_len": 1, "features": hidden[0][i, :-1].to(torch.float16),
                        "next": best[i, :-1]})
        if (start // batch) % 25 == 0:
            log(f"teacher corpus: {len(out)}/{len(rows)} chunks of {chunk}, {time.time() - t0:.0f}s")
    return out


def draft_vocab(seqs: list[dict], size: int) -> tuple[torch.Tensor, float]:
    """The `size` most frequent label tokens (the target's choices; ties by id) and the share of labels they cover."""
    counts = torch.bincount(torch.cat([s["next"][s["prompt_len"] - 1:] for s in seqs]))
    order = sorted(range(len(counts)), key=lambda i: (-int(counts[i]), i))[:size]
    ids = torch.tensor(sorted(order))
    return ids, float(counts[ids].sum() / counts.sum())


def draft_vocab_share(vocab_ids: torch.Tensor, seqs: list[dict]) -> float:
    """The share of these sequences' labels (the target's choices) the draft vocabulary holds."""
    if not seqs:
        return 0.0
    labels = torch.cat([s["next"][s["prompt_len"] - 1:] for s in seqs])
    return float(torch.isin(labels, vocab_ids).float().mean())


def _index_map(vocab_ids: torch.Tensor, vocab: int) -> torch.Tensor:
    """target id -> row of the draft LM head, −100 (ignored) for tokens outside the draft vocabulary."""
    m = torch.full((vocab,), -100, dtype=torch.long)
    m[vocab_ids] = torch.arange(len(vocab_ids))
    return m


def medusa_rows(seqs: list[dict], k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Features at labelled positions (N, H) and the target's choices k' = 1..k steps further (N, k), −1 past the
    end: head k' from f_t is labelled next[t + k'] (generated text: token t+1+k'; real text: the target's argmax
    after the real prefix through t+k')."""
    xs, ys = [], []
    for s in seqs:
        nxt, n = s["next"].tolist(), len(s["next"])
        start = s["prompt_len"] - 1  # f_t predicts token t+1
        xs.append(s["features"][start:n])
        ys += [[nxt[t + j] if t + j < n else -1 for j in range(1, k + 1)] for t in range(start, n)]
    return torch.cat(xs).float(), torch.tensor(ys)


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
        start = max(s["prompt_len"] - 2, 0)  # loss where the label is the target's own choice
        y[b, start:m] = s["next"][start + 1:m + 1]  # x_{t+2} as the target chose it after position t+1
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


def train_eagle(heads: Heads, parts, index, seqs, epochs: int, batch: int, lr: float, noise: float,
                gen: torch.Generator, log, ce_weight: float = 0.1, passes: int = 1):
    """EAGLE-1's recipe (smooth-L1 on the next feature + ce_weight × cross-entropy of the draft token, noise on the
    input features); passes > 1 adds EAGLE-3's training-time test: pass k feeds the features pass k − 1 predicted
    (shifted one position on, as drafting step k reads them) and attends as step k would (unrolled_mask), its
    cross-entropy added with weight 0.8^(k−1)."""
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
            preds = unrolled(layer, f_in, e_in, parts.rope(torch.arange(f_in.shape[1]), f_in), passes)
            valid = y >= 0
            target = torch.where(valid, index[y.clamp(min=0)], -100)
            reg = F.smooth_l1_loss(preds[0][valid], f_out[valid])
            # hard labels (the target's greedy token): its soft distribution, EAGLE's recipe, measured no better
            # here (45.7% vs 44.7% held-out step-1 top-1 on 1,000 prompts, 3 epochs)
            cls = F.cross_entropy((preds[0][valid] @ parts.lm_head.T), target[valid], ignore_index=-100)
            loss = reg + ce_weight * cls
            for k, pred in enumerate(preds[1:], 2):
                ok = valid & (torch.arange(y.shape[1]) >= k - 1)[None]
                if bool(ok.any()):
                    loss = loss + ce_weight * 0.8 ** (k - 1) * F.cross_entropy(pred[ok] @ parts.lm_head.T,
                                                                                target[ok], ignore_index=-100)
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
            hit = guess == s["next"][(label_pos - 1).clamp(max=n - 2)]  # the target's choice there
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


def cached_teacher(model, tokenizer, source: str, texts: list[str], max_tokens: int, cache: str | None,
                   log=print) -> list[dict]:
    """teacher_corpus() for one source through a file (CACHE.SOURCE.pt), reused when made for the same budget."""
    path = Path(f"{cache}.{source}.pt") if cache else None
    if path is not None and path.exists():
        saved = torch.load(path, weights_only=True)
        if saved.get("max_tokens") == max_tokens:
            return saved["seqs"]
    seqs = teacher_corpus(model, tokenizer, texts, max_tokens, log=log)
    if path is not None:
        torch.save({"max_tokens": max_tokens, "seqs": seqs}, path)
    return seqs


def tagged(seqs: list[dict], source: str) -> list[dict]:
    for s in seqs:
        s["source"] = source
    return seqs


def gather(model, tokenizer, prompts, *, max_new: int, gen_batch: int, corpus_cache: str | None, texts: dict,
           text_tokens: int, evals: dict, log) -> tuple[list, list, list]:
    """(train, held out, evaluation-only) sequences, each tagged with its source: the prompts' answers (a prompt
    may be (source, text)), every text source read by the target, and the evaluation prompts' answers (never
    trained on). Every tenth sequence of each training source is held out."""
    pairs = [p if isinstance(p, tuple) else ("prompts", p) for p in prompts]
    answers = cached_corpus(model, tokenizer, [p for _, p in pairs], max_new, gen_batch, corpus_cache, log)
    groups: dict[str, list] = {}
    for (source, _), seq in zip(pairs, answers):
        groups.setdefault(source, []).append(dict(seq, source=source))
    for source, chunk_texts in texts.items():
        groups[source] = tagged(cached_teacher(model, tokenizer, source, chunk_texts, text_tokens, corpus_cache, log),
                                source)
    train_seqs, held = [], []
    for source in sorted(groups):
        t, h = split(groups[source])
        train_seqs += t
        held += h
    evaluation = []
    for name, eval_prompts in evals.items():
        got = cached_corpus(model, tokenizer, eval_prompts, max_new, gen_batch, corpus_cache, log)
        evaluation += [dict(seq, source=name) for seq in got]
    return train_seqs, held, evaluation


def by_source(heads, parts, seqs: list[dict], steps: int) -> dict:
    """Held-out top-1 per Medusa head and EAGLE step for each source's sequences, with its label count."""
    out = {}
    for source in sorted({s["source"] for s in seqs}):
        group = [s for s in seqs if s["source"] == source]
        out[source] = {"medusa": medusa_accuracy(heads, parts.lm_head, group),
                       "eagle": eagle_accuracy(heads, parts, group, steps=steps),
                       "labels": sum(len(s["next"]) - s["prompt_len"] + 1 for s in group)}
    return out


def train(model, tokenizer, prompts: list, *, seed: int = 0, max_new: int = 128, gen_batch: int = 16,
          cfg: HeadsConfig | None = None, medusa_epochs: int = 3, eagle_epochs: int = 6, log=print,
          corpus_cache: str | None = None, texts: dict | None = None, text_tokens: int = 0,
          evals: dict | None = None, eagle_passes: int = 1, eagle_ce: float = 0.1, eagle_lr: float = 1e-3) -> tuple:
    """The whole recipe: corpus, draft vocabulary, both heads, held-out accuracy. Returns (heads, record).
    prompts: answered by the target (a prompt may be (source, text)); texts: source -> texts the target reads
    (teacher forcing), up to text_tokens tokens each; evals: name -> prompts answered for evaluation only.
    corpus_cache: a file the corpus is kept in, keyed by prompt (see cached_corpus; texts: FILE.SOURCE.pt).
    eagle_passes, eagle_ce, eagle_lr: training-time test's passes, the token loss's weight, the peak rate
    (train_eagle)."""
    cfg = cfg or HeadsConfig()
    t0 = time.time()
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    train_seqs, held, evaluation = gather(model, tokenizer, prompts, max_new=max_new, gen_batch=gen_batch,
                                          corpus_cache=corpus_cache, texts=texts or {}, text_tokens=text_tokens,
                                          evals=evals or {}, log=log)
    t_corpus = time.time() - t0
    vocab_ids, coverage = draft_vocab(train_seqs, min(cfg.draft_vocab, model.config.vocab_size))
    cfg.draft_vocab = len(vocab_ids)
    heads = Heads(cfg, model.config, vocab_ids)
    parts = frozen_parts(model, vocab_ids)
    index = _index_map(vocab_ids, model.config.vocab_size)
    train_medusa(heads, parts.lm_head, index, train_seqs, medusa_epochs, 256, 2e-3, gen, log)
    train_eagle(heads, parts, index, train_seqs, eagle_epochs, 8, eagle_lr, 0.1, gen, log, ce_weight=eagle_ce,
                passes=eagle_passes)
    heads.eval()
    seen_medusa, seen_eagle = [], []
    record = {
        "seed": seed, "prompts": len(prompts), "held_out_prompts": len(held),
        "train_tokens": sum(len(s["next"]) - s["prompt_len"] + 1 for s in train_seqs),
        "draft_vocab": len(vocab_ids), "draft_vocab_coverage": round(coverage, 4),
        "medusa_top1": medusa_accuracy(heads, parts.lm_head, held, seen_medusa),
        "eagle_top1": eagle_accuracy(heads, parts, held, steps=cfg.medusa_heads, seen=seen_eagle),
        "by_source": by_source(heads, parts, held + evaluation, cfg.medusa_heads),
        "coverage_by_source": {src: round(draft_vocab_share(vocab_ids, [s for s in held if s["source"] == src]), 4)
                               for src in sorted({s["source"] for s in held})},
        "corpus_s": round(t_corpus), "total_s": round(time.time() - t0), "threads": torch.get_num_threads(),
        "max_new": max_new, "medusa_epochs": medusa_epochs, "eagle_epochs": eagle_epochs,
        "eagle_passes": eagle_passes, "eagle_ce": eagle_ce, "eagle_lr": eagle_lr,
    }
    record["medusa_calibration"], record["eagle_calibration"] = calibration(seen_medusa), calibration(seen_eagle)
    log(f"held-out top-1: medusa {record['medusa_top1']}, eagle {record['eagle_top1']}; by confidence bin "
        f"[guesses, hit rate]: medusa {record['medusa_calibration']}, eagle {record['eagle_calibration']}")
    return heads, record


def broad_material(args) -> tuple[list, dict, dict]:
    """(prompts, texts, evals) for a broad run (engine/heads/broad.py): the templated prompts (--template-prompts of
    them), the instructions in every Spec-Bench category, every text source, and Spec-Bench's own first turns
    (--specbench-eval per category, evaluation only); texts holding a forbidden prompt are dropped."""
    forbidden = broad.forbidden()
    templated = [p for p in open(args.prompts, encoding="utf-8").read().splitlines() if p.strip()]
    prompts = [("templates", p) for p in templated[:args.template_prompts]]
    texts = {src: broad.disjoint(broad.budget(broad.chunks(src, seed=args.seed), 6 * args.text_tokens), forbidden)
             for src in args.sources.split(",") if src} if args.text_tokens else {}  # ~6 characters a token at most
    if args.instructions:
        quoted = {s: broad.chunks(s, seed=args.seed) for s in ("python-docs", "debian-reference", "man-de")}
        prompts += [(f"answers:{cat}", p) for cat, p in broad.instructions(args.instructions, args.seed, quoted)
                    if broad.disjoint([p], forbidden)]
    evals = {}
    for q in sample(load_questions(), args.specbench_eval, seed=args.seed + 1) if args.specbench_eval else []:
        evals.setdefault(f"specbench:{q['group']}", []).append(q["turns"][0])
    return prompts, texts, evals


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
    ap = argparse.ArgumentParser(prog="python -m engine.heads.train", description=__doc__.split("\n\n")[0])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--prompts", default=str(PROMPTS), help="one prompt per line")
    ap.add_argument("--limit", type=int, default=None, help="only the first N prompts (the templated set alone)")
    ap.add_argument("--max-new", type=int, default=128, help="continuation tokens per prompt")
    ap.add_argument("--gen-batch", type=int, default=32)
    ap.add_argument("--medusa-heads", type=int, default=4)
    ap.add_argument("--draft-vocab", type=int, default=4096)
    ap.add_argument("--medusa-epochs", type=int, default=3)
    ap.add_argument("--eagle-epochs", type=int, default=6)
    ap.add_argument("--eagle-passes", type=int, default=1, help="EAGLE-3's training-time test: the head trained on "
                    "its own predicted features for this many drafting steps (1 = EAGLE-1's teacher forcing)")
    ap.add_argument("--eagle-ce", type=float, default=0.1, help="weight of the EAGLE token loss beside the feature loss")
    ap.add_argument("--eagle-lr", type=float, default=1e-3, help="EAGLE's peak learning rate (one cycle)")
    ap.add_argument("--threads", type=int, default=2, help="torch threads (results depend on it)")
    ap.add_argument("--out", default=str(WEIGHTS))
    ap.add_argument("--corpus-cache", default=None, help="keep the corpus here, keyed by prompt: reused, and resumed after an interruption")
    broad_args = ap.add_argument_group("broad material (engine/heads/broad.py); any of these turns it on")
    broad_args.add_argument("--text-tokens", type=int, default=0, help="tokens of real text per source, read by the target")
    broad_args.add_argument("--sources", default=",".join(broad.SOURCES), help="comma-separated text sources")
    broad_args.add_argument("--instructions", type=int, default=0, help="instructions per Spec-Bench category, answered")
    broad_args.add_argument("--template-prompts", type=int, default=0, help="the first N templated prompts too")
    broad_args.add_argument("--specbench-eval", type=int, default=0, help="Spec-Bench first turns per category, "
                            "answered for evaluation only")
    return ap


def main(argv=None) -> None:
    args = argument_parser().parse_args(argv)
    torch.set_num_threads(args.threads)
    target = load_model(EMBEDDED)
    if args.text_tokens or args.instructions or args.specbench_eval:
        prompts, texts, evals = broad_material(args)
    else:
        prompts, texts, evals = [p for p in open(args.prompts, encoding="utf-8").read().splitlines()
                                 if p.strip()][:args.limit], {}, {}
    cfg = HeadsConfig(medusa_heads=args.medusa_heads, draft_vocab=args.draft_vocab)
    heads, record = train(target.model, target.tokenizer, prompts, seed=args.seed, max_new=args.max_new,
                          gen_batch=args.gen_batch, cfg=cfg, medusa_epochs=args.medusa_epochs,
                          eagle_epochs=args.eagle_epochs, log=lambda m: print(m, flush=True),
                          corpus_cache=args.corpus_cache, texts=texts, text_tokens=args.text_tokens, evals=evals,
                          eagle_passes=args.eagle_passes, eagle_ce=args.eagle_ce, eagle_lr=args.eagle_lr)
    record["command"] = "python -m engine.heads.train " + shlex.join(result_args(sys.argv[1:] if argv is None else argv))
    if texts or evals:
        record["packages"] = broad.manifest()
    save(heads, record, args.out)
    print(f"wrote {args.out}: {record}")


if __name__ == "__main__":
    main()
