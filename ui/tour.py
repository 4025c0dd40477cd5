"""The guided first minute: a recorded n-gram run plays round by round with numbered captions, no click and
no model. The captions' text and the handlers that play them (Gradio-side: they yield the page's outputs).
"""
from __future__ import annotations

import functools
import time
from pathlib import Path

import gradio as gr

from specviz import app_guard as guard
from specviz import app_views as av
from .handlers import RUN_OUTPUTS

TOUR_TRACE = Path(__file__).resolve().parent.parent / "assets" / "tour-trace.json"  # a recorded n-gram run (make_tour.py)
TOUR_ROUND = 2  # the round the captions walk through: 4 drafted, the 4th rejected
TOUR = [  # (round shown, caption, seconds on screen): the guided first minute
    (1, "Round 1: nothing in the prompt matches the text so far yet, so the target makes one plain step (grey).", 3.5),
    (2, "① The drafter (n-gram lookup: no model) finds the text so far in the prompt and proposes the γ = 4 tokens "
        "that followed it there.", 4.5),
    (2, "② The target checks all 4 drafts in ONE forward pass. The verify view below shows, per drafted token, the "
        "draft's q and the target's p: greedy decoding accepts a draft when it is the target's top choice.", 5.5),
    (2, "③ The first draft that fails (struck through, ✗) is rejected; anything drafted after it would be "
        "discarded unseen.", 4.5),
    (2, "④ The target's cache already holds the rejected position: moving its length pointer back drops it in O(1), "
        "no copying.", 4.5),
    (2, "⑤ The target's own token (orange ↺, corrected) is committed in its place: 4 tokens for one target forward. "
        "When all drafts pass, the same forward adds a bonus token (+).", 5.5),
    (None, "The remaining rounds: most accept every draft and commit 5 tokens per target forward. That is the "
           "speedup: verifying 5 tokens costs about as much as generating 1.", 0.7),
]


@functools.lru_cache(maxsize=1)
def tour_runs():
    """The tour's recorded run, packed and folded once."""
    return guard.pack(av.load_trace(TOUR_TRACE))


def tour_caption(text: str, step: int | None, done: bool = False) -> str:
    counter = f'<span class="sv-tour-step">{step}/{len(TOUR)}</span>' if step else ""
    return (f'<div class="specviz sv-tour" data-done="{int(done)}" data-step="{step or 0}" role="status" '
            f'aria-live="polite">{counter}<span class="sv-tour-text">{av.esc(text)}</span></div>')


TOUR_END = "Now try your own prompt: pick an example or type one and press Generate. Click any token to verify its round."


def tour(request: gr.Request = None):
    """The guided first minute: the recorded run plays round by round with captions, no click and no model.
    ?tour=0 in the page address turns it off."""
    if request is not None and request.query_params.get("tour") == "0":
        yield (gr.skip(),) * (RUN_OUTPUTS + 1)
        return
    packed = tour_runs()
    runs = guard.runs(packed)
    total = guard.replay_rounds(runs)
    for step, (r, text, wait) in enumerate(TOUR, 1):
        rounds = [r] if r is not None else range(TOUR_ROUND + 1, total + 1)
        for k in rounds:
            yield (packed, gr.update(maximum=total, value=k, interactive=True), gr.skip(), *av.views(runs, k),
                   tour_caption(text, step))
            time.sleep(wait)
    yield (*tour_end(), )


def tour_end():
    """The tour skipped or over: the whole recorded run on screen and the hand-over caption."""
    packed = tour_runs()
    runs = guard.runs(packed)
    total = guard.replay_rounds(runs)
    return (packed, gr.update(maximum=total, value=total, interactive=True), gr.skip(), *av.views(runs),
            tour_caption(TOUR_END, None, done=True))


def tour_stopped() -> str:
    """The user took over: the caption goes, the run on screen stays."""
    return tour_caption("", None, done=True)
