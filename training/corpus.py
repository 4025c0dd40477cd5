"""The heads' training material (train.py trains on it): the target's own greedy answers to prompts, real text
read by the target (teacher forcing: its argmax after every position as the label), the evaluation prompts'
answers; every source cached on disk, tagged, and split into train and held out (every tenth sequence); the draft
vocabulary read off the labels.

A sequence is {"tokens" (T,), "prompt_len", "features" (T − 1, H) fp16 (the target's final-norm hidden state at
every position but the last), "next" (T − 1,) (the target's choice after each position), "source"}.
"""

from __future__ import annotations

import time
from pathlib import Path

import torch

from engine.runtime.cache import KVCache
from engine.runtime.lean import forward_fn
from engine.runtime.models import eos_ids, prompt_ids
from engine.specbench import load_questions, sample

from . import broad, sharegpt

HELD_OUT = 0.1  # share of each source's sequences (every tenth) kept out of training


@torch.inference_mode()
def corpus(model, tokenizer, prompts: list[str], max_new: int, batch: int, log=print) -> list[dict]:
    """Per prompt: tokens (prompt + greedy continuation, through an end-of-text), the prompt length, and
    features (len − 1, H): the final-norm hidden state at every position but the last. Batched with left
    padding on the engine's forward (a pad query sees only itself, so it stays finite and is never seen)."""
    forward, eos = forward_fn(model), eos_ids(model, tokenizer)
    out, t0 = [], time.time()
    for start in range(0, len(prompts), batch):
        rows = [prompt_ids(tokenizer, p) for p in prompts[start : start + batch]]
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
            logits = forward(
                tok[:, None], cache, attention_mask=valid[:, None, None], position_ids=pos, hidden_out=hidden
            )[:, -1]
        feats = torch.cat(hidden, dim=1)  # (B, W + steps, H)
        gen = torch.stack(new, dim=1).tolist()  # (B, steps)
        for i, row in enumerate(rows):
            end = next((k + 1 for k, t in enumerate(gen[i]) if t in eos), len(gen[i]))
            tokens = row + gen[i][:end]
            f = feats[i, width - len(row) : width - len(row) + len(tokens) - 1]
            t = torch.tensor(tokens)
            # next: the target's choice after each position (its greedy continuation; prompt positions unused)
            out.append({"tokens": t, "prompt_len": len(row), "features": f.to(torch.float16), "next": t[1:]})
        log(f"corpus: {len(out)}/{len(prompts)} prompts, {time.time() - t0:.0f}s")
    return out


@torch.inference_mode()
def teacher_corpus(
    model, tokenizer, texts: list[str], max_tokens: int, chunk: int = 512, batch: int = 4, log=print
) -> list[dict]:
    """Real text read by the target (teacher forcing): the texts' tokens, joined by end-of-text, cut into chunks of
    `chunk` tokens (up to max_tokens in all); per chunk its features and `next`, the target's argmax after every
    position: labels from one batched forward per chunk, no generation. prompt_len 1: every position has a loss."""
    forward, eos = forward_fn(model), tokenizer.eos_token_id if tokenizer.eos_token_id is not None else 0
    stream: list[int] = []
    for text in texts:
        stream += tokenizer(text, add_special_tokens=False)["input_ids"] + [eos]
        if len(stream) >= max_tokens:
            break
    stream = stream[: max_tokens - max_tokens % chunk] if len(stream) >= chunk else stream
    rows = [stream[i : i + chunk] for i in range(0, len(stream) - chunk + 1, chunk)]
    out, t0 = [], time.time()
    for start in range(0, len(rows), batch):
        x = torch.tensor(rows[start : start + batch])  # (B, chunk)
        cache, hidden = KVCache.for_model(model, chunk), []
        logits = forward(x, cache, hidden_out=hidden)  # (B, chunk, V)
        best = logits.argmax(-1)  # (B, chunk)
        for i in range(len(x)):
            out.append(
                {
                    "tokens": x[i],
                    "prompt_len": 1,
                    "features": hidden[0][i, :-1].to(torch.float16),
                    "next": best[i, :-1],
                }
            )
        if (start // batch) % 25 == 0:
            log(f"teacher corpus: {len(out)}/{len(rows)} chunks of {chunk}, {time.time() - t0:.0f}s")
    return out


def draft_vocab(seqs: list[dict], size: int) -> tuple[torch.Tensor, float]:
    """The `size` most frequent label tokens (the target's choices; ties by id) and the share of labels they cover."""
    counts = torch.bincount(torch.cat([s["next"][s["prompt_len"] - 1 :] for s in seqs]))
    order = sorted(range(len(counts)), key=lambda i: (-int(counts[i]), i))[:size]
    ids = torch.tensor(sorted(order))
    return ids, float(counts[ids].sum() / counts.sum())


def draft_vocab_share(vocab_ids: torch.Tensor, seqs: list[dict]) -> float:
    """The share of these sequences' labels (the target's choices) the draft vocabulary holds."""
    if not seqs:
        return 0.0
    labels = torch.cat([s["next"][s["prompt_len"] - 1 :] for s in seqs])
    return float(torch.isin(labels, vocab_ids).float().mean())


def cached_corpus(
    model,
    tokenizer,
    prompts: list[str],
    max_new: int,
    batch: int,
    cache: str | None,
    log=print,
    save_every_s: float = 120.0,
) -> list[dict]:
    """corpus() for the prompts, through a cache file keyed by prompt: prompts already there are read back
    (greedy: the same either way), the others are generated and the file is rewritten every few minutes, so an
    interrupted run resumes where it stopped. A cache made with another max_new is not used."""
    done: dict = {}
    if cache and Path(cache).exists():
        saved = torch.load(cache, weights_only=True)
        done = saved["seqs"] if saved.get("max_new") == max_new else {}
    todo, last = [p for p in prompts if p not in done], time.time()
    for start in range(0, len(todo), batch):
        chunk = todo[start : start + batch]
        done.update(zip(chunk, corpus(model, tokenizer, chunk, max_new, batch, log=lambda m: None)))
        log(f"corpus: {len(todo) - len(todo[start + batch :])}/{len(todo)} new prompts ({len(done)} cached)")
        if cache and (time.time() - last > save_every_s or start + batch >= len(todo)):
            torch.save({"max_new": max_new, "seqs": done}, cache)
            last = time.time()
    return [done[p] for p in prompts]


def split(seqs: list[dict]) -> tuple[list[dict], list[dict]]:
    """(train, held out): every tenth prompt is held out, so the held-out set has the whole set's mix."""
    every = round(1 / HELD_OUT)
    # a tiny set holds its last
    held = {i for i in range(len(seqs)) if i % every == every - 1} or {len(seqs) - 1}
    return [s for i, s in enumerate(seqs) if i not in held], [s for i, s in enumerate(seqs) if i in held]


def cached_teacher(
    model, tokenizer, source: str, texts: list[str], max_tokens: int, cache: str | None, log=print
) -> list[dict]:
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


def gather(
    model,
    tokenizer,
    prompts,
    *,
    max_new: int,
    gen_batch: int,
    corpus_cache: str | None,
    texts: dict,
    text_tokens: int,
    evals: dict,
    log,
) -> tuple[list, list, list]:
    """(train, held out, evaluation-only) sequences, each tagged with its source: the prompts' answers (a prompt
    may be (source, text)), every text source read by the target, and the evaluation prompts' answers (never
    trained on). Every tenth sequence of each training source is held out."""
    pairs = [p if isinstance(p, tuple) else ("prompts", p) for p in prompts]
    answers = cached_corpus(model, tokenizer, [p for _, p in pairs], max_new, gen_batch, corpus_cache, log)
    groups: dict[str, list] = {}
    for (source, _), seq in zip(pairs, answers):
        groups.setdefault(source, []).append(dict(seq, source=source))
    for source, chunk_texts in texts.items():
        groups[source] = tagged(
            cached_teacher(model, tokenizer, source, chunk_texts, text_tokens, corpus_cache, log), source
        )
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


def broad_material(args, tokenizer=None) -> tuple[list, dict, dict]:
    """(prompts, texts, evals) for a broad run (training/broad.py): the templated prompts (--template-prompts of
    them), the instructions in every Spec-Bench category, every text source (`sharegpt`: conversations through the
    tokenizer's chat template, sharegpt.py), ShareGPT's opening requests (--sharegpt-answers), and Spec-Bench's own
    first turns (--specbench-eval per category, evaluation only); texts holding a forbidden prompt are dropped."""
    forbidden = broad.forbidden()
    templated = [p for p in open(args.prompts, encoding="utf-8").read().splitlines() if p.strip()]
    prompts = [("templates", p) for p in templated[: args.template_prompts]]
    sources = [s for s in args.sources.split(",") if s]
    convs = sharegpt.conversations(args.seed) if sharegpt.SOURCE in sources or args.sharegpt_answers else []
    # a conversation is used once
    asked, read = (convs[: args.sharegpt_answers], convs[args.sharegpt_answers :])
    texts = {}
    for src in sources if args.text_tokens else []:  # ~6 characters a token at most
        material = (
            (sharegpt.rendered(tokenizer, c) for c in read)
            if src == sharegpt.SOURCE
            else broad.chunks(src, seed=args.seed)
        )
        texts[src] = broad.disjoint(broad.budget(material, 6 * args.text_tokens), forbidden)
    if args.instructions:
        quoted = {s: broad.chunks(s, seed=args.seed) for s in ("python-docs", "debian-reference", "man-de")}
        prompts += [
            (f"answers:{cat}", p)
            for cat, p in broad.instructions(args.instructions, args.seed, quoted)
            if broad.disjoint([p], forbidden)
        ]
    prompts += [
        (f"answers:{sharegpt.SOURCE}", p) for p in broad.disjoint(sharegpt.first_turns(asked), forbidden)
    ]
    evals = {}
    for q in sample(load_questions(), args.specbench_eval, seed=args.seed + 1) if args.specbench_eval else []:
        evals.setdefault(f"specbench:{q['group']}", []).append(q["turns"][0])
    return prompts, texts, evals
