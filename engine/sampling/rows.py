"""The target's distributions at a verify forward's rows, as the greedy rule and the events read them (issue 64).

Greedy acceptance needs each row's argmax; the events need p of a few tokens (the drafted ones, the committed one)
and each row's top-k. None of that needs the (rows × V) softmax: `LogitRows` keeps the logits and one
log-sum-exp per row, p(x) = e^(logit(x) − lse), from one pass over each row (its `stats`: runtime/native.py
row_stats where the C library runs, else torch's own reductions, `torch_stats`). `ProbRows` wraps rows that are
already probabilities (the sampled rule shapes them with temperature, top-k and top-p: they are needed whole).
Both answer the same four questions, so the rules and the events read either.

The greedy token is the first index of the largest logit (transformers' greedy decoding, and our AR's: both lanes
of a race use this one rule).
"""

from __future__ import annotations

import math

import torch

STATS_K = 20  # the top-k computed with the row statistics: the most a run records (config: record_topk ≤ 20)


def torch_stats(x: torch.Tensor, k: int) -> tuple[list, list, list, list]:
    """(argmax, log-sum-exp, top-k indices, top-k values) per row of x (rows, V), with torch's reductions (any
    device); the same contract as runtime/native.py row_stats."""
    top = torch.topk(x, k, dim=-1)
    return (
        x.argmax(-1).tolist(),
        torch.logsumexp(x.double(), -1).tolist(),
        top.indices.tolist(),
        top.values.tolist(),
    )


class Rows:
    """The four questions a rule or an event asks of a verify forward's distributions."""

    def __len__(self) -> int:
        raise NotImplementedError

    def best(self) -> list[int]:
        """Each row's most probable token (the first of equals)."""
        raise NotImplementedError

    def p(self, row: int, token: int) -> float:
        """p(token) at this row."""
        raise NotImplementedError

    def topk(self, k: int) -> list[list]:
        """Per row its k most probable tokens as [[id, p], ...], most probable first."""
        raise NotImplementedError

    def take(self, rows: list[int]) -> "Rows":
        """These rows only, in this order."""
        raise NotImplementedError


class LogitRows(Rows):
    """Rows kept as their logits (fp32) and one log-sum-exp each; the statistics taken once, on construction."""

    def __init__(self, logits: torch.Tensor, stats=torch_stats, k: int = STATS_K, _parts=None):
        if _parts is not None:
            self.logits, self._best, self._lse, self._ids, self._vals = _parts
            return
        self.logits = logits.float().contiguous()
        k = max(1, min(k, self.logits.shape[-1]))
        self._best, self._lse, self._ids, self._vals = stats(self.logits, k)

    def __len__(self) -> int:
        return len(self._best)

    def best(self) -> list[int]:
        return list(self._best)

    def p(self, row: int, token: int) -> float:
        return math.exp(float(self.logits[row, token]) - self._lse[row])

    def top_ids(self, k: int) -> list[list]:
        """Per row the indices of its k largest logits, largest first."""
        return self._top(k)[0]

    def topk(self, k: int) -> list[list]:
        ids, vals = self._top(k)
        return [
            [[i, math.exp(v - lse)] for i, v in zip(row_i, row_v)]
            for row_i, row_v, lse in zip(ids, vals, self._lse)
        ]

    def _top(self, k: int) -> tuple[list, list]:
        if self._ids and k > len(self._ids[0]):  # more than the statistics took: torch's top-k
            top = torch.topk(self.logits, k, dim=-1)
            return top.indices.tolist(), top.values.tolist()
        return [r[:k] for r in self._ids], [r[:k] for r in self._vals]

    def take(self, rows: list[int]) -> "LogitRows":
        pick = list(rows)
        return LogitRows(
            None,
            _parts=(
                self.logits[pick],
                [self._best[r] for r in pick],
                [self._lse[r] for r in pick],
                [self._ids[r] for r in pick],
                [self._vals[r] for r in pick],
            ),
        )


class ProbRows(Rows):
    """Rows that are probabilities already, (rows, V) (the sampled rule's shaped p)."""

    def __init__(self, probs: torch.Tensor):
        self.probs = probs

    def __len__(self) -> int:
        return self.probs.shape[0]

    def best(self) -> list[int]:
        return self.probs.argmax(-1).tolist()

    def p(self, row: int, token: int) -> float:
        return float(self.probs[row, token])

    def topk(self, k: int) -> list[list]:
        values, ids = torch.topk(self.probs, k, dim=-1)
        return [[[i, v] for i, v in zip(row_i, row_v)] for row_i, row_v in zip(ids.tolist(), values.tolist())]

    def take(self, rows: list[int]) -> "ProbRows":
        return ProbRows(self.probs[list(rows)])


def as_rows(p) -> Rows:
    """Rows as they are, or a (rows, V) probability tensor wrapped."""
    return p if isinstance(p, Rows) else ProbRows(p)
