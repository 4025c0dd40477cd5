"""Prompt lookup drafting (n-gram, "lookahead" family): no model, the text itself is the draft.

Find the latest earlier occurrence of the last n tokens (n from N down to 1) in prompt + output
and propose what followed it. There is no draft distribution: q is one-hot on the proposed token,
which the acceptance rule handles losslessly (accept with p(x), else resample from p without x).

The chat template's own tokens are no source: matching "<|im_end|>\n" against the template would
propose "<|im_start|>assistant" in every run's first round, a draft the target always rejects. Only
the user's text and the output are searched (`template_mask`).
"""

from __future__ import annotations

import torch

from ..sampling.tree import trie
from ..specs import DraftSpec
from .base import Draft, Drafter, Factory, Lookup


def longest_match(ids: list[int], max_n: int, gamma: int, limit: int = 8) -> tuple[int, list[list[int]]]:
    """(n, continuations) for the longest suffix length n <= max_n that occurred earlier; (0, []) if none.
    The reference: a scan of the whole sequence (NgramIndex.match gives the same, incrementally).

    The continuations (up to γ tokens each, distinct, at most `limit`) come latest match first: the
    first is what a chain drafter proposes, the rest are tree branches.
    """
    for n in range(min(max_n, len(ids) - 1), 0, -1):
        suffix = ids[-n:]
        # latest first, not the suffix
        starts = (s for s in range(len(ids) - n - 1, -1, -1) if ids[s : s + n] == suffix)
        found = continuations(ids, n, starts, gamma, limit)
        if found:
            return n, found
    return 0, []


def continuations(ids: list[int], n: int, starts, gamma: int, limit: int) -> list[list[int]]:
    """The distinct continuations (up to γ tokens, cut where the chat template begins: ids < 0) after the
    n-grams at `starts` (latest first), at most `limit`; shared by the reference scan and NgramIndex."""
    found, seen = [], set()
    for start in starts:
        cont = ids[start + n : start + n + gamma]
        cut = next((k for k, t in enumerate(cont) if t < 0), len(cont))  # stop at the template
        if not cut:
            continue
        cont = cont[:cut]
        key = tuple(cont)
        if key not in seen:
            found.append(cont)
            if len(found) == limit:  # a chain's (limit 1): the latest, no set of the others kept
                break
            seen.add(key)
    return found


def template_mask(ids: list[int], special: set[int], text_of) -> list[bool]:
    """True at the prompt positions the chat template wrote: its special tokens, each turn's role header (up to
    its newline) and every turn but the user's (the default system message). A prompt with no special tokens
    (raw text) has none; a template whose turns have no "user" role loses only its special tokens and headers."""
    mask, role, user_seen, header = [False] * len(ids), None, False, False
    roles = []  # (role, content start, content end) per turn
    for j, t in enumerate(ids):
        if t in special:
            mask[j], header, role = True, True, ""
            roles.append([None, j + 1, j + 1])
            continue
        if header:  # the role name up to its newline
            mask[j] = True
            text = text_of(t)
            role += text
            if "\n" in text:
                header = False
                roles[-1][0], roles[-1][1] = role.strip().lower(), j + 1
            continue
        if roles:
            roles[-1][2] = j + 1
    user_seen = any(r == "user" for r, _, _ in roles)
    if user_seen:
        for r, start, end in roles:
            if r != "user":
                mask[start:end] = [True] * (end - start)
    return mask


class Masked:
    """A run's sequence as a lookup reads it: the chat template's positions (`mask`, from template_mask) as distinct
    negative numbers, so nothing matches them and a continuation stops before them. One list that grows with the
    run: a call appends only the tokens committed since the last (the same list object every round, which
    NgramIndex extends without comparing the whole sequence). Another sequence (not the list it read last, shorter,
    or with its last read token changed) starts a new list."""

    def __init__(self, mask=()):
        self.mask, self.of, self.seq, self.last = list(mask), None, [], None

    def __call__(self, ids: list[int]) -> list[int]:
        n, mask = len(self.seq), self.mask
        if ids is not self.of or len(ids) < n or (n and ids[n - 1] != self.last):
            self.of, self.seq, n = ids, [], 0
        self.seq.extend(-1 - j if j < len(mask) and mask[j] else ids[j] for j in range(n, len(ids)))
        self.last = ids[-1] if ids else None
        return self.seq


# longer matches are accepted far more often: a lookup's variant is its match length n, "n=<n>"
VARIANTS = tuple(f"n={n}" for n in range(17))


class NgramIndex:
    """Where every n-gram (n <= max_n) of a growing sequence starts, updated with only the new tokens.

    `match` gives what `longest_match` gives, without rescanning the sequence from token 0 every round:
    indexing is O(new tokens x max_n) per round, a lookup walks only the suffix's own occurrences.
    The sequence may only grow (committed tokens never change); any other change rebuilds the index. The list it
    read last, grown, is taken as a continuation after a look at its last indexed token (Masked keeps one such
    list); any other list is compared whole.
    """

    def __init__(self, max_n: int):
        self.max_n = max_n
        self.starts: dict[tuple, list[int]] = {}  # n-gram -> its start positions, ascending
        self.seen: list[int] = []  # the tokens indexed so far
        self.of: list[int] | None = None  # the list they were read from

    def _extend(self, ids: list[int]) -> None:
        old = len(self.seen)
        grown = ids is self.of and old <= len(ids) and (not old or ids[old - 1] == self.seen[-1])
        # not a continuation (another beam, a new run): start again
        if not grown and (old > len(ids) or ids[:old] != self.seen):
            self.starts, self.seen, old = {}, [], 0
        self.of = ids
        self.seen.extend(ids[old:])
        for end in range(old, len(ids)):  # every n-gram that ends at a new token
            for n in range(1, min(self.max_n, end + 1) + 1):
                self.starts.setdefault(tuple(ids[end - n + 1 : end + 1]), []).append(end - n + 1)

    def match(self, ids: list[int], gamma: int, limit: int = 8) -> tuple[int, list[list[int]]]:
        """(n, continuations) exactly as longest_match(ids, max_n, gamma, limit)."""
        self._extend(ids)
        for n in range(min(self.max_n, len(ids) - 1), 0, -1):
            at = self.starts.get(tuple(ids[-n:]))
            if not at:
                continue
            # not the suffix
            found = continuations(ids, n, (s for s in reversed(at) if s + n < len(ids)), gamma, limit)
            if found:
                return n, found
        return 0, []


class NgramDrafter(Drafter):
    """Proposes the continuation of the latest match of the last n <= max_n tokens (free to ask: auto asks it
    before it chooses)."""

    def __init__(
        self,
        max_n: int,
        device: torch.device,
        name: str = "ngram",
        tree_budget: int = 0,
        special: frozenset = frozenset(),
        text_of=None,
    ):
        self.max_n, self.device, self.name, self.tree_budget = max_n, device, name, tree_budget
        self.special, self.text_of = special, text_of or str  # the tokenizer's special ids and id -> text
        self.source = Masked()  # ids as the lookup reads them: template positions of this run's prompt masked
        self.index = NgramIndex(max_n)  # per run: drafters are built fresh for each

    def prepare(self, prompt_ids: list[int], cfg) -> None:
        self.source = Masked(template_mask(prompt_ids, self.special, self.text_of) if self.special else [])

    def history_source(self, ids: list[int]) -> list[int]:
        """What the session's history keeps of this run (a later suffix run drafts from it): its masked sequence."""
        return list(self.source(ids))

    def propose(self, ids: list[int], gamma: int) -> Draft:
        return self.lookup(ids, gamma).draft(self.device, self.name)

    def lookup(self, ids: list[int], gamma: int) -> Lookup:
        # a chain drafts the latest continuation: the others are looked for only for a tree
        n, found = self.index.match(self.source(ids), gamma, limit=8 if self.tree_budget else 1)
        if not found:
            return Lookup("", [])
        variant = VARIANTS[n] if n < len(VARIANTS) else f"n={n}"  # auto tracks α per match length
        if self.tree_budget and len(found) > 1:  # every distinct continuation, shared prefixes merged
            tokens, parents = trie(found)
            # topological: a prefix is a tree
            return Lookup(variant, tokens[: self.tree_budget], parents[: self.tree_budget])
        return Lookup(variant, found[0])


def template_reader(tokenizer) -> tuple[frozenset, object]:
    """(special ids, id -> text) of a tokenizer: what template_mask needs to find the chat template's positions."""
    special = frozenset(getattr(tokenizer, "all_special_ids", None) or [])
    return special, tokenizer.decode if hasattr(tokenizer, "decode") else str


def build(spec: DraftSpec, target, ctx):
    """The per-run constructor of ngram[:N] (registry.py calls it)."""
    special, text_of = template_reader(target.tokenizer)
    return Factory(
        lambda cfg, gen, max_len, cache: NgramDrafter(
            spec["N"], target.device, spec.text, cfg.tree_budget, special, text_of
        )
    )
