"""Where a sampled run's randomness comes from: one uniform draw per absolute position, keyed by the seed.

The draw of position k is a hash of (seed, k), not the next number of a stream, so how many nodes a drafter put
in a round (a tree sized on measured time, a drafter with nothing to propose) never moves the draws of later
positions. And a position's token is drawn from p by inverse CDF in vocabulary order, never in an order the
draft chooses: where every candidate is a deterministic (one-hot) guess, the token a position commits is the
same whatever was drafted there (chain.judge), so a seeded run repeats exactly at any machine load, and equals
the AR baseline's run with the same seed. No models, no caches, no clocks in here.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Draws:
    """The uniform draws of one sequence: draws(i) is the draw of position start + i, in [0, 1)."""

    seed: int  # the run's seed (a batch row's: seed + row)
    start: int = 0  # the absolute position index 0 stands for

    def __call__(self, i: int) -> float:
        key = f"{self.seed}:{self.start + i}".encode()
        bits = int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "big") >> 11  # 53 bits
        return bits / 2**53

    def at(self, pos: int) -> "Draws":
        """The same draws, indexed from absolute position `pos` (a round's first position)."""
        return Draws(self.seed, self.start + pos)


def cdf_of(probs: torch.Tensor) -> torch.Tensor:
    """(V,) -> (V,) float64 cumulative distribution in vocabulary order, normalised to end at 1 (on a CUDA device
    where probs are, else on the CPU: not every accelerator has float64)."""
    where = probs.device if probs.device.type == "cuda" else "cpu"
    cdf = probs.detach().to(where, torch.float64).cumsum(0)
    return cdf / cdf[-1]


def draw_token(probs: torch.Tensor, u: float, cdf: torch.Tensor | None = None) -> int:
    """The token at u of probs' CDF (inverse-CDF sampling): u ~ U(0, 1) gives a token distributed as probs.
    A token of zero probability owns an empty interval and is never drawn."""
    cdf = cdf_of(probs) if cdf is None else cdf
    token = int(torch.searchsorted(cdf, torch.tensor([u], dtype=cdf.dtype, device=cdf.device), right=True))
    if token >= len(cdf):  # u rounded onto the very end: the last token with mass
        token = int(torch.nonzero(probs).max())
    return token
