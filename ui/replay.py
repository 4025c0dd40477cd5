"""Replay and traces: the views at a round (the slider, ◀ Prev, Next ▶), the verify view of a picked round, and a
saved trace replayed without any model, the controls set to what it ran with."""

from __future__ import annotations

import gradio as gr

from ui import app_guard as guard
from ui import app_views as av
from ui.controls import TRACE_SETS
from ui.outputs import RUN_OUTPUTS, refused, settled, status
from ui.server import GRADIO_CACHE, TRACE_FILES


def show_round(state, r):
    """The views at replay round r."""
    return av.views(guard.runs(state), int(r))


def step(state, r, delta):
    events = guard.runs(state)
    r = min(max(int(r) + delta, 0), guard.replay_rounds(events))
    return (r, *av.views(events, r))


def step_back(state, r):
    """◀ Prev: one round back."""
    return step(state, r, -1)


def step_on(state, r):
    """Next ▶: one round on."""
    return step(state, r, +1)


def select_round(state, choice, r):
    """The verify view of the round the user picked (a click in the stream or tree, or the view's own arrows),
    as it stood at the replay round r."""
    try:
        picked = int(str(choice).split(":")[0])  # "12: …", a round's label: not a drafter name
    except ValueError:
        return gr.skip()
    events = guard.runs(state)
    cut = av.events_upto(events, None if r is None or int(r) >= guard.replay_rounds(events) else int(r))
    return av.render_verify(cut, picked)


def load_trace(path):
    """Replay a saved trace without any model, the controls (TRACE_SETS, in that order) set to what it ran
    with. A bad file is one warning; the last good run and the controls stay. A generator: it yields a status
    between reading the trace and drawing its views, so a visitor who leaves stops it there."""
    keep = (gr.skip(),) * len(TRACE_SETS)
    if not path:
        yield (*refused("no file uploaded", RUN_OUTPUTS + 1), *keep)
        return
    try:
        events = av.load_trace(path)  # read and validated (bounded: MAX_TRACE_BYTES)
        yield (*status(f"drawing the trace's {len(events):,} events …"), gr.skip(), *keep)
        values = av.controls_of(events)
        controls = tuple(
            gr.update(value=values[name]) if name in values else gr.skip() for name in TRACE_SETS
        )
        yield (*settled(events, cut_reason=None), None, *controls)  # None empties the drop zone
    except (ValueError, OSError, RecursionError) as e:
        yield (*refused(f"cannot load trace: {guard.public_error(e)}", RUN_OUTPUTS), None, *keep)
    finally:  # the file is Gradio's copy (or another session's): never deleted here; our served copies are bounded
        guard.prune_cache(GRADIO_CACHE, TRACE_FILES, max_age_s=3600)


def loaded(path) -> tuple:
    """load_trace's last outputs (what the page shows once it has ended)."""
    *_, last = load_trace(path)
    return last
