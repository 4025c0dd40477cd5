"""Drafting across vocabularies: a draft model whose tokenizer differs from the target's.

This module knows tokenizers and a draft model; it knows nothing about verification.

The two models share only *text*. Each round the draft model continues the committed text in its own
tokens, its new tokens are decoded to text, and that text is re-tokenised with the target's tokenizer
(transformers' "universal assisted generation" does the same):
- the committed text is re-encoded with the draft's tokenizer every round; the draft's KV cache keeps
  the longest prefix that still matches, so only the boundary is recomputed;
- the draft text is re-tokenised with a few committed target tokens of look-behind, so a word that
  continues across the boundary is tokenised as the target would in context;
- partial tokens: a draft token that ends inside a UTF-8 character (decoded as U+FFFD) is never
  proposed alone, and the last re-tokenised target token is held back unless the draft ended its
  text, because more draft text could still merge into it (" hel" + "lo"); the draft runs until
  γ + 1 target tokens exist (or 2γ + 2 draft tokens), so γ whole tokens can be proposed.

**Lossless, greedy and sampling.** The proposal is judged as a one-hot draft (q = None): greedy keeps
it while it equals argmax p; sampling accepts each token x with probability p(x) and after a rejection
draws from p with x removed (engine/sampling/chain.py). For any way of choosing x (here: a draft model
through a re-tokeniser), P(emit y) = P(x = y)·p(y) + Σ_{x≠y} P(x)·(1 − p(x))·p(y)/(1 − p(x)) = p(y), so
the output law is exactly the target's. This is Timor et al.'s string-level exact match (SLEM, ICML
2025) in the one-hot form vLLM uses for n-gram drafts: SLEM lets the target sample y ~ p and keeps x
while y = x, which accepts x with the same probability p(x) and has the same law. We chose it over
token-level intersection (TLI: q restricted to the tokens both vocabularies share, renormalised, then
min(1, p/q)) because SLEM needs no token map, keeps the draft's multi-token words, and works for any
pair of tokenizers; TLI can accept more under sampling (min(1, p/q) ≥ p) when the vocabularies
overlap on whole tokens, and is the natural next step.
"""

from __future__ import annotations

import torch

from ..config import GenerationConfig
from ..events import Retokenized
from ..runtime.cache import KVCache
from ..runtime.lean import forward_fn
from ..runtime.models import LoadedModel
from ..sampling.chain import pick, shape_probs
from .base import Draft, Drafter, Note, empty_draft

# committed target tokens re-encoded with the draft text, so a boundary word tokenises in context
LOOK_BEHIND = 3
BAD_CHAR = "\ufffd"  # what a decoder shows for bytes that do not complete a character


def same_vocab(target: LoadedModel, draft: LoadedModel) -> bool:
    """True when both tokenizers map every token to the same id (the draft's q is then over p's tokens)."""
    return target.tokenizer.get_vocab() == draft.tokenizer.get_vocab()


def decode_tail(tok, context: list[int], new: list[int]) -> str:
    """Text of `new` as it reads after `context` (a SentencePiece-style decoder drops a leading space
    when it decodes a token alone; decoding with a few tokens of context and cutting keeps it)."""
    head = tok.decode(context, skip_special_tokens=True)
    return tok.decode(context + new, skip_special_tokens=True)[len(head) :]


def retokenize(tok, committed: list[int], text: str) -> list[int]:
    """`text` in the target's tokens as a continuation of `committed`: encoded with LOOK_BEHIND committed
    tokens in front when those come back unchanged, else on its own."""
    ctx = committed[-LOOK_BEHIND:]
    head = tok.decode(ctx, skip_special_tokens=True)
    ids = tok(head + text, add_special_tokens=False)["input_ids"]
    if ids[: len(ctx)] == ctx:
        return ids[len(ctx) :]
    return tok(text, add_special_tokens=False)["input_ids"]


def spans(
    tok_a, ids_a: list[int], tok_b, ids_b: list[int], context_a: list[int], context_b: list[int]
) -> list:
    """For each token of ids_b, [first, last] index of the ids_a tokens whose characters it overlaps
    ([-1, -1] for none): which draft tokens a target token came from."""

    def ends(tok, ids, ctx):
        return [len(decode_tail(tok, ctx, ids[: k + 1])) for k in range(len(ids))]

    end_a, end_b = ends(tok_a, ids_a, context_a), ends(tok_b, ids_b, context_b)
    out, start_b = [], 0
    for eb in end_b:
        hit = [i for i, ea in enumerate(end_a) if ea > start_b and (end_a[i - 1] if i else 0) < eb]
        out.append([hit[0], hit[-1]] if hit else [-1, -1])
        start_b = eb
    return out


class CrossVocabDrafter(Drafter):
    """A draft model with its own tokenizer: drafts text, proposes it in the target's tokens (one-hot)."""

    def __init__(
        self,
        draft: LoadedModel,
        target: LoadedModel,
        name: str,
        cfg: GenerationConfig,
        generator: torch.Generator | None,
        max_len: int,
    ):
        self.draft, self.target, self.name, self.cfg, self.generator = draft, target, name, cfg, generator
        self.forward = forward_fn(draft.model)
        # the draft's tokens for the same text can outnumber the target's (a smaller vocabulary)
        self.cache = KVCache.for_model(draft.model, 2 * max_len + 64)
        self.fed: list[int] = []  # the draft ids in the draft cache, in order
        self.eos = draft.eos_ids

    def propose(self, ids: list[int], gamma: int) -> Draft:
        dtok, ttok = self.draft.tokenizer, self.target.tokenizer
        text = ttok.decode(ids, skip_special_tokens=True)
        # the committed text, draft's tokens
        ctx = [int(i) for i in dtok(text, add_special_tokens=True)["input_ids"]]
        max_draft = 2 * gamma + 2
        if not ctx or len(ctx) + max_draft + 1 > self.cache.max_len:
            # no text yet, or out of draft cache: a plain step
            return empty_draft(self.target.device, self.name)
        keep = 0  # longest prefix of the draft cache that is still this text's tokenisation
        limit = min(len(self.fed), len(ctx) - 1)
        while keep < limit and self.fed[keep] == ctx[keep]:
            keep += 1
        self.cache.truncate(keep)
        x = torch.tensor([ctx[keep:]], device=self.draft.device)
        new: list[int] = []
        proposal: list[int] = []
        ended = False
        for _ in range(max_draft):
            logits = self.forward(x, self.cache, logits_to_keep=1)[0, -1]  # (V_draft,)
            q = shape_probs(logits, self.cfg.temperature, self.cfg.top_k, self.cfg.top_p)
            # one host sync per draft token: text needs ids
            tok = int(pick(q, self.cfg.greedy, self.generator))
            if tok in self.eos:
                ended = True
                break
            new.append(tok)
            x = torch.tensor([[tok]], device=self.draft.device)
            piece = decode_tail(dtok, ctx[-LOOK_BEHIND:], new)
            if piece.endswith(BAD_CHAR):
                continue  # inside a character: its remaining bytes come with the next token
            proposal = retokenize(ttok, ids, piece)
            if len(proposal) > gamma:
                break
        self.fed = ctx + new[:-1] if new and not ended else ctx + new  # the last sampled token is not fed
        self.fed = self.fed[: self.cache.length]
        piece = decode_tail(dtok, ctx[-LOOK_BEHIND:], new).rstrip(BAD_CHAR)
        proposal = retokenize(ttok, ids, piece) if piece else []
        held = proposal[gamma:] if ended else proposal[max(0, min(gamma, len(proposal) - 1)) :]
        proposal = proposal[:gamma] if ended else proposal[: max(0, min(gamma, len(proposal) - 1))]
        if not proposal:
            return empty_draft(self.target.device, self.name)
        view = {
            "draft_token_ids": new,
            "draft_tokens": [decode_tail(dtok, ctx[-LOOK_BEHIND:] + new[:k], [t]) for k, t in enumerate(new)],
            "target_token_ids": proposal,
            "target_tokens": [
                decode_tail(ttok, ids[-LOOK_BEHIND:] + proposal[:k], [t]) for k, t in enumerate(proposal)
            ],
            "spans": spans(dtok, new, ttok, proposal, ctx[-LOOK_BEHIND:], ids[-LOOK_BEHIND:]),
            "held_back": ttok.decode(held, skip_special_tokens=True),
        }
        return Draft(
            torch.tensor(proposal, dtype=torch.long, device=self.target.device),
            None,
            self.name,
            notes=[Note("retokenized", view, _retokenized, after_drafted=True)],
        )

    # settle: nothing to learn (Drafter's default): the next propose re-encodes the committed text and keeps the
    # matching cache


def _retokenized(round_: int, pos: int, text, view: dict) -> Retokenized:
    """Both tokenisations of a draft with another vocabulary (a `retokenized` event)."""
    return Retokenized(round=round_, pos=pos, **view)
