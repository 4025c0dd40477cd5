"""The ceiling of training-free drafting on Spec-Bench: tokens per target forward that greedy speculation would
commit if every round drafted the whole candidate tree of a family at no cost, verified in one forward.

    .venv/bin/python benchmarks/probes/ceiling.py RESULTS.json [--gammas 4,8] [--topk 8]

RESULTS.json: a `python -m benchmarks specbench` run's results (its "ours/ar" answers are the target's greedy
output, which every lossless drafter reproduces). For each turn the target reads prompt + answer once (its top-k
at every position), then rounds are replayed: a round at position i accepts the longest prefix of the true
continuation that the family's tree holds, and commits it plus one token. Families:
- context retrieval, longest match: every earlier occurrence of the longest suffix (n ≤ 8) that recurs, each one's
  next γ tokens (n-gram lookup and suffix drafting, with no limit on the tree);
- context retrieval, any match: the same over every n from 8 down to 1 (a tree of every occurrence of every
  suffix length);
- recycling: paths whose every token is among the target's top-k successors of the token before it, as last
  seen at an earlier position (token recycling's adjacency, every path kept);
- the union of the three (a per-round oracle choosing among them does no better than the union's tree).
No timings: an upper bound on tokens per forward; a drafter pays for its tree, so it commits fewer. Two
approximations in the recycling column: its adjacency holds the top-k at the prompt's positions too (the drafter
seeds only the prompt's bigrams) and not the top-k of rejected draft rows (which the drafter's table records).
Without a session history or a datastore: a drafter given earlier answers can match more.
"""

from __future__ import annotations

import argparse
import json

import torch

from benchmarks.specbench_run import encode_turns
from engine import load_model
from engine import specbench as sb
from engine.runtime.cache import KVCache
from engine.runtime.lean import forward_fn

MAX_N = 8


def retrieval(seq: list[int], i: int, gamma: int, longest_only: bool) -> int:
    """Longest accepted prefix over every earlier occurrence's continuation (tokens known before i only)."""
    truth, best = seq[i : i + gamma], 0
    for n in range(min(MAX_N, i - 1), 0, -1):
        suffix, found = seq[i - n : i], False
        for s in range(0, i - n):
            if seq[s : s + n] == suffix:
                found = True
                cont = seq[s + n : min(s + n + gamma, i)]
                k = 0
                while k < len(cont) and k < len(truth) and cont[k] == truth[k]:
                    k += 1
                best = max(best, k)
        if found and longest_only:
            break
    return best


def recycling(seq: list[int], i: int, gamma: int, adj: dict) -> int:
    """Longest accepted prefix along paths of recorded top-k successors."""
    k, prev = 0, seq[i - 1]
    while k < gamma and i + k < len(seq) and seq[i + k] in adj.get(prev, ()):
        prev = seq[i + k]
        k += 1
    return k


def replay(seq: list[int], start: int, topk: list[list[int]], gamma: int) -> dict:
    """Forwards each family needs to commit seq[start:], its rounds replayed."""
    out = {}
    for family in ("retrieval, longest match", "retrieval, any match", "recycling", "union"):
        i, forwards = start, 0
        while i < len(seq):
            adj = {}
            for j in range(max(i - 1, 0)):  # the target's top-k at positions whose logits a forward computed
                adj[seq[j]] = topk[j]
            a = (
                retrieval(seq, i, gamma, True)
                if family.startswith("retrieval, l") or family == "union"
                else 0
            )
            b = retrieval(seq, i, gamma, False) if family in ("retrieval, any match", "union") else 0
            c = recycling(seq, i, gamma, adj) if family in ("recycling", "union") else 0
            i += max(a, b, c) + 1
            forwards += 1
        out[family] = forwards
    return out


@torch.inference_mode()
def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("results")
    p.add_argument("--gammas", default="4,8")
    p.add_argument("--topk", type=int, default=8)
    args = p.parse_args()
    res = json.loads(open(args.results).read())
    target = load_model(res["settings"]["target"])
    forward = forward_fn(target.model)
    questions = {q["question_id"]: q for q in sb.load_questions()}
    gammas = [int(g) for g in args.gammas.split(",")]
    totals = {g: {} for g in gammas}
    tokens = {g: 0 for g in gammas}
    per_cat = {g: {} for g in gammas}
    for qid, a in res["answers"]["ours/ar"].items():
        q = questions[int(qid)]
        texts = []
        for t, ids_out in enumerate(a["token_ids"]):
            ids = encode_turns(target.tokenizer, q["turns"][: t + 1], texts)
            texts.append(target.tokenizer.decode(ids_out, skip_special_tokens=True))
            seq = ids + list(ids_out)
            cache = KVCache.for_model(target.model, len(seq) + 1)
            logits = forward(torch.tensor([seq]), cache)[0]
            topk = logits.topk(args.topk, dim=-1).indices.tolist()
            for g in gammas:
                f = replay(seq, len(ids), topk, g)
                for k, v in f.items():
                    totals[g][k] = totals[g].get(k, 0) + v
                    cat = per_cat[g].setdefault(q["group"], {})
                    cat.setdefault(k, [0, 0])
                    cat[k][0] += len(ids_out)
                    cat[k][1] += v
                tokens[g] += len(ids_out)
    print(f"{len(res['answers']['ours/ar'])} questions of {args.results}; top-{args.topk} for recycling")
    print("| γ | family | tokens per forward, overall | per category |")
    print("|---|---|---|---|")
    for g in gammas:
        for k, v in totals[g].items():
            cats = ", ".join(
                f"{c} {t / f:.2f}" for c, d in per_cat[g].items() for kk, (t, f) in d.items() if kk == k
            )
            print(f"| {g} | {k} | {tokens[g] / v:.2f} | {cats} |")


if __name__ == "__main__":
    main()
