"""Settled rounds built by hand for drafter unit tests (engine/drafters/base.Settled): what a drafter's one
feedback call receives after a round the test did not run."""

from __future__ import annotations

from engine.drafters.base import Settled


def timed(rows: int, verify_s: float) -> Settled:
    """A round whose verify forward computed `rows` positions in `verify_s` seconds (nothing else to learn)."""
    return Settled(round=1, n_accepted=0, ids=[], verify_s=verify_s, rows=rows)


def saw(seen) -> Settled:
    """A round whose forward handed back what the draft asked for (`seen`: top-k rows, extra rows)."""
    return Settled(round=1, n_accepted=0, ids=[], verify_s=0.0, rows=0, seen=seen)


def kept(n_accepted: int, ids: list, verify_s: float) -> Settled:
    """A round whose target accepted `n_accepted` drafts, leaving the committed sequence `ids`."""
    return Settled(round=1, n_accepted=n_accepted, ids=ids, verify_s=verify_s, rows=0)
