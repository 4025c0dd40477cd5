"""Held-out accuracy of the draft heads (training/train.py step 5): top-1 per Medusa head and per EAGLE step as
drafting runs them, per source, and the hit rate by confidence bin that auto starts from.

The labels are the target's greedy choices, so an accuracy is the chance that a greedy draft token is accepted.
"""

from __future__ import annotations

import torch

from engine.costmodel import CONFIDENCE_EDGES
from engine.heads.modules import Heads


def labels(seqs: list[dict]) -> int:
    """Labelled positions of these sequences (the target's own choices after each prompt): a record's tokens."""
    return sum(len(s["next"]) - s["prompt_len"] + 1 for s in seqs)


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
    return [
        round(float(((guess[:, k] == y[:, k]) & valid[:, k]).sum() / valid[:, k].sum()), 4)
        for k in range(y.shape[1])
    ]


@torch.no_grad()
def eagle_accuracy(
    heads: Heads, parts, seqs, steps: int, every: int = 3, seen: list | None = None, first=None, decode=None
) -> list[float]:
    """Held-out top-1 accuracy per EAGLE step k = 1..steps, as drafting runs it: from a start j, step 1 reads
    the true feature f_j (and x_{j+1}); step k > 1 reads the feature step k − 1 predicted, with the true
    token x_{j+k} (the draft accepted so far); its guess must equal x_{j+1+k}. first(seq, features) and decode
    as in eagle_loss (a probe's fused input and output norm)."""
    layer, hits, tried = heads.eagle, [0] * steps, [0] * steps
    decode = decode or (lambda x: x @ parts.lm_head.T)
    for s in seqs:
        toks, feats, n = s["tokens"], s["features"].float(), len(s["tokens"])
        m = n - 2
        if m < 1:
            continue
        kv: list = []
        cos, sin = parts.rope(torch.arange(m), feats)
        f_in = feats[:m] if first is None else first(s, feats[:m])
        pred = layer(f_in[None], parts.embed[toks[1 : m + 1]][None], cos, sin, kv=kv)[0]  # (m, H), step 1
        starts = torch.arange(max(s["prompt_len"] - 2, 0), m, every)  # positions j with x_{j+2} generated
        if len(starts) == 0:
            continue
        keys, values = kv[0].expand(len(starts), -1, -1, -1), kv[1].expand(len(starts), -1, -1, -1)
        cache = [keys, values]
        feature = pred[starts][:, None]  # (J, 1, H)
        for k in range(1, steps + 1):
            label_pos = starts + 1 + k  # token x_{j+1+k}
            ok = label_pos < n
            probs = decode(feature[:, 0]).softmax(-1)
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
            # (J, m + k)
            allowed = torch.cat(
                [torch.arange(m)[None] <= starts[:, None], torch.ones(len(starts), k, dtype=torch.bool)],
                dim=1,
            )
            feature = layer(feature, emb, cos, sin, kv=cache, mask=allowed[:, None, None])
    return [round(h / max(t, 1), 4) for h, t in zip(hits, tried)]


def by_source(heads, parts, seqs: list[dict], steps: int) -> dict:
    """Held-out top-1 per Medusa head and EAGLE step for each source's sequences, with its label count."""
    out = {}
    for source in sorted({s["source"] for s in seqs}):
        group = [s for s in seqs if s["source"] == source]
        out[source] = {
            "medusa": medusa_accuracy(heads, parts.lm_head, group),
            "eagle": eagle_accuracy(heads, parts, group, steps=steps),
            "labels": labels(group),
        }
    return out
