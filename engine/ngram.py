"""Prompt lookup drafting (n-gram, "lookahead" family): no model, the text itself is the draft.

Find the latest earlier occurrence of the last n tokens (n from N down to 1) in prompt + output
and propose what followed it. There is no draft distribution: q is one-hot on the proposed token,
which the acceptance rule handles losslessly (accept with p(x), else resample from p without x).
"""
from __future__ import annotations

import torch

from .draft import Draft, Drafter, empty_draft
from .tree import trie


def longest_match(ids: list[int], max_n: int, gamma: int, limit: int = 8) -> tuple[int, list[list[int]]]:
    """(n, continuations) for the longest suffix length n <= max_n that occurred earlier; (0, []) if none.

    The continuations (up to γ tokens each, distinct, at most `limit`) come latest match first: the
    first is what a chain drafter proposes, the rest are tree branches.
    """
    for n in range(min(max_n, len(ids) - 1), 0, -1):
        suffix = ids[-n:]
        found, seen = [], set()
        for start in range(len(ids) - n - 1, -1, -1):  # latest first, excluding the suffix itself
            if ids[start:start + n] == suffix:
                cont = tuple(ids[start + n:start + n + gamma])
                if cont and cont not in seen:
                    seen.add(cont)
                    found.append(list(cont))
                    if len(found) == limit:
                        return n, found
        if found:
            return n, found
    return 0, []


class NgramDrafter(Drafter):
    """Proposes the continuation of the latest match of the last n <= max_n tokens."""
    peekable = True  # proposing is free and has no side effects: `auto` may ask before choosing

    def __init__(self, max_n: int, device: torch.device, name: str = "ngram", tree_budget: int = 0):
        self.max_n, self.device, self.name, self.tree_budget = max_n, device, name, tree_budget

    def propose(self, ids: list[int], gamma: int) -> Draft:
        n, found = longest_match(ids, self.max_n, gamma)
        if not found:
            return empty_draft(self.device, self.name)
        variant = f"n={n}"  # longer matches are accepted far more often: auto tracks α per match length
        if self.tree_budget and len(found) > 1:  # every distinct continuation, shared prefixes merged
            tokens, parents = trie(found)
            tokens, parents = tokens[:self.tree_budget], parents[:self.tree_budget]  # topological: a prefix is a tree
            return Draft(torch.tensor(tokens, device=self.device), None, self.name, parents=parents, variant=variant)
        return Draft(torch.tensor(found[0], device=self.device), None, self.name, variant=variant)
