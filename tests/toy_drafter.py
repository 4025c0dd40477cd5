"""A toy drafter family for tests/test_registry.py: the whole of what adding a drafter takes, beside one
`register(Family(...))` line. It proposes the last committed token K times over (a poor but lossless draft) and
notes why in its own event (a Note: the seam a drafter with its own view uses, drafters/base.py)."""

from __future__ import annotations

import torch

from engine.drafters.base import Draft, Drafter, Factory, Note
from engine.events import Decided


class RepeatDrafter(Drafter):
    """Drafts ids[-1] repeated: stateless, so beam search may ask it once per beam (the default propose_beams).
    It keeps the rounds it was settled with (what the engine handed it: tests/test_registry.py)."""

    def __init__(self, times: int, device, name: str):
        self.times, self.device, self.name = times, device, name
        self.settled = []

    def settle(self, r) -> None:
        self.settled.append(r)

    def propose(self, ids: list[int], gamma: int) -> Draft:
        n = min(gamma, self.times)
        why = {"gamma": n, "reason": f"repeats {ids[-1]} {n} times"}
        return Draft(
            torch.tensor([ids[-1]] * n, device=self.device),
            None,
            self.name,
            notes=[Note("decided", why, _why)],
        )


def _why(round_: int, pos: int, text, why: dict) -> Decided:
    """The toy's own event: what it repeated (a Decided, so every renderer already knows it)."""
    return Decided(round=round_, pos=pos, drafter="repeat", plain_tokens_per_s=None, candidates=[], **why)


def build(spec, target, ctx):
    """The per-run constructor (engine/drafters/registry.py calls it): it declares no Needs."""
    return Factory(lambda cfg, gen, max_len, cache: RepeatDrafter(spec["K"], target.device, spec.text))
