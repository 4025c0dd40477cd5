"""`oracle:A[:C]`: a drafter of known acceptance, for checking the cost model against measurement.

It proposes the target's own greedy continuation (a reference pass made before the timed run), each
token replaced with probability 1 − A, at C target steps of busy compute per drafted token.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable

import torch

from ..config import GenerationConfig
from ..runtime.cache import KVCache
from ..runtime.lean import forward_fn
from ..runtime.models import LoadedModel
from ..specs import DraftSpec
from .base import Draft, Drafter, Factory, empty_draft


class OracleDrafter(Drafter):
    """Proposes the target's own greedy continuation (from a reference pass made before the timed run),
    each token replaced by another with probability 1 − alpha, so greedy verification accepts each
    drafted token with probability exactly alpha (Leviathan et al.'s i.i.d. model, made true). Lossless
    like any drafter: the target still verifies. Under sampling its tokens are one-hot proposals whose
    acceptance is p(x), not alpha. Each drafted token costs `cost` target steps of busy compute."""

    def __init__(
        self, alpha: float, cost: float, reference: Callable, device: torch.device, vocab: int, name: str
    ):
        self.alpha, self.cost, self.reference, self.device, self.vocab, self.name = (
            alpha,
            cost,
            reference,
            device,
            vocab,
            name,
        )
        self.ref: list[int] = []
        self.prompt_len, self.step_s, self.seed = 0, 0.0, 0

    def prepare(self, prompt_ids: list[int], cfg: GenerationConfig) -> None:
        self.ref, self.step_s = self.reference(prompt_ids, cfg.max_new_tokens)
        self.prompt_len, self.seed = len(prompt_ids), cfg.seed or 0

    def propose(self, ids: list[int], gamma: int) -> Draft:
        t_end = time.perf_counter() + self.cost * self.step_s * gamma
        start = len(ids) - self.prompt_len
        tokens = []
        for k, tok in enumerate(self.ref[start : start + gamma]):
            draw = random.Random(self.seed * 1_000_003 + start + k)  # keyed by position: independent of γ
            if draw.random() >= self.alpha:
                tok = (tok + 1 + draw.randrange(self.vocab - 1)) % self.vocab  # any other token
            tokens.append(tok)
        while time.perf_counter() < t_end:  # the drafting cost, spent as compute
            pass
        if not tokens:
            return empty_draft(self.device, self.name)
        return Draft(torch.tensor(tokens, device=self.device), None, self.name)


def greedy_reference(target: LoadedModel) -> Callable:
    """(prompt ids, n) -> (the target's greedy continuation, seconds of one target step), memoised."""
    forward, memo = forward_fn(target.model), {}

    @torch.inference_mode()
    def reference(prompt_ids: list[int], n: int):
        key = (tuple(prompt_ids), n)
        if key not in memo:
            cache = KVCache.for_model(target.model, len(prompt_ids) + n + 1)
            x, out, steps = torch.tensor([prompt_ids], device=target.device), [], []
            for _ in range(n):
                t = time.perf_counter()
                tok = int(forward(x, cache, logits_to_keep=1)[0, -1].argmax())
                steps.append(time.perf_counter() - t)
                out.append(tok)
                if tok in target.eos_ids:
                    break
                x = torch.tensor([[tok]], device=target.device)
            while len(memo) >= 16:
                memo.pop(next(iter(memo)))
            memo[key] = (out, sorted(steps[1:] or steps)[len(steps[1:] or steps) // 2])
        return memo[key]

    return reference


def build(spec: DraftSpec, target: LoadedModel, ctx):
    """The per-run constructor of oracle:A[:C] (registry.py calls it)."""
    reference = greedy_reference(target)
    alpha, cost = spec["A"], spec["C"]
    return Factory(
        lambda cfg, gen, max_len, cache: OracleDrafter(
            alpha, cost, reference, target.device, target.vocab_size, spec.text
        )
    )
