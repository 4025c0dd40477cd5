"""A session's history (what suffix speculation and auto draft from; Forget my history) and the controls that
answer in place: the pair's drafter and note, γ under auto, p_min under the confidence rule."""

from __future__ import annotations

import gradio as gr

import ui.server  # noqa: F401  (first: it imports ZeroGPU's `spaces`, when present, before torch)
from engine.drafters.suffix import MAX_HISTORY_TOKENS, History
from engine.figures import plural
from ui import app_views as av
from ui.server import HISTORY_TOKENS


def session_history() -> History | None:
    """A new visitor's history (the page's gr.State calls it once per session); None when SPECVIZ_HISTORY_TOKENS
    is 0. Checked at start-up: a value out of range stops the server with its name and range."""
    if not 0 <= HISTORY_TOKENS <= MAX_HISTORY_TOKENS:
        raise ValueError(
            f"SPECVIZ_HISTORY_TOKENS must be between 0 and {MAX_HISTORY_TOKENS}, got {HISTORY_TOKENS}"
        )
    return History(max_tokens=HISTORY_TOKENS) if HISTORY_TOKENS else None


def forget_history(history) -> History | None:
    """Forget my history: the session's history emptied (a fresh one), said in a toast with what was dropped."""
    if not isinstance(history, History) or not history.runs:
        gr.Info("Your session has no earlier runs to forget.")
    else:
        n = len(history.runs)
        gr.Info(
            f"Forgot {plural(n, 'earlier run')} ({plural(history.tokens, 'token')}): the next run drafts from its "
            "own text only."
        )
    return session_history()


def pair_changed(pair):
    """Hub pairs default to their preset draft model; the embedded pair to n-gram lookup."""
    return gr.update(value="ngram" if pair == av.EMBEDDED_PAIR else av.PRESET_DRAFT)


def pair_note_changed(pair):
    """The chosen pair's note (what to expect from it), hidden when it has none."""
    note = av.pair_note(pair)
    return gr.update(value=note, visible=bool(note))


def drafter_changed(drafter: str):
    """γ is auto's own choice under auto: the slider greys out and says so."""
    # "" clears it
    return gr.update(
        interactive=drafter != "auto", info="auto chooses γ each round" if drafter == "auto" else ""
    )


def adaptive_changed(adaptive: str):
    """p_min matters only under the confidence rule."""
    return gr.update(interactive=adaptive.startswith("confidence"))
