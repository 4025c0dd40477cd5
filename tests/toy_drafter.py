"""A toy drafter family for tests/test_registry.py: the whole of what adding a drafter takes, beside one
`register(Family(...))` line. It proposes the last committed token K times over (a poor but lossless draft)."""

from __future__ import annotations

import torch

from engine.drafters.base import Draft, Drafter


class RepeatDrafter(Drafter):
    """Drafts ids[-1] repeated: stateless, so beam search may ask it once per beam (the default propose_beams)."""

    def __init__(self, times: int, device, name: str):
        self.times, self.device, self.name = times, device, name

    def propose(self, ids: list[int], gamma: int) -> Draft:
        return Draft(torch.tensor([ids[-1]] * min(gamma, self.times), device=self.device), None, self.name)


def build(spec, target, ctx):
    """The per-run constructor (engine/drafters/registry.py calls it)."""
    return lambda cfg, gen, max_len, cache: RepeatDrafter(spec["K"], target.device, spec.text)
