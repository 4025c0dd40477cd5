"""The guided first minute: a recorded n-gram run plays round by round with numbered captions, no click and
no model. The captions' text and the frames; the browser plays them (assets/specviz.js), so a room of visitors
touring costs the server nothing: the frames come with the page (tour_caption's #sv-tour-frames), the page's views
start on the whole recorded run (initial_outputs), and Skip, Replay and the visitor taking over are handled there.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

import gradio as gr

from engine import costrule
from specviz.runs import split_runs
from ui import app_guard as guard
from ui import app_views as av

from .outputs import RUN_OUTPUTS, RunOutputs

TOUR_TRACE = Path(__file__).resolve().parent.parent / "assets" / "tour-trace.json"  # python -m ui.make_tour
TOUR_PROMPT = av.EXAMPLES[0][1]  # the first example: copy a passage (what the tour's run was asked)
TOUR_ROUND = 2  # the round the captions build up step by step: 4 drafted, the 4th rejected
# (the round's events up to and including this kind, caption, seconds on screen, element the caption names, tab):
# the guided first minute. "round" None: the rest of the run; "race": the whole raced run, on the Race tab.
TOUR = [
    (
        1,
        None,
        "Round 1, in the output (outlined): the target makes one plain step (grey), since nothing in the text "
        "so far matches the prompt yet (the prompt, above, asks the model to copy a passage).",
        4.0,
        "#stream",
        None,
    ),
    (
        2,
        "drafted",
        "① The drafter (n-gram lookup: no model) finds the text so far in the prompt and proposes the "
        "γ = 4 tokens that followed it there (dashed: not yet verified).",
        5.0,
        "#stream",
        None,
    ),
    (
        2,
        "verified",
        "② The target checks all 4 drafts in ONE forward pass: the verify view shows, per drafted token, "
        "the draft's q and the target's p. Greedy decoding accepts a draft when it is the target's top "
        "choice; the first that fails (struck through, ✗) is rejected, and anything drafted after it "
        "would be discarded unseen.",
        10.0,
        "#verify",
        "Verify",
    ),  # + own_choice(): a long read
    (
        2,
        "rolled_back",
        "③ The target's cache already holds the rejected position: moving its length pointer back drops "
        "it in O(1), no copying (the last line of the verify view).",
        4.5,
        "#verify .vf-why",
        "Verify",
    ),
    (
        2,
        "committed",
        "④ The target's own token (orange ↺, corrected) is committed in its place: 4 tokens for one target "
        "forward. When all drafts pass, the same forward adds a bonus token (+).",
        5.5,
        "#stream",
        None,
    ),
    (
        None,
        None,
        "The remaining rounds: most accept every draft and commit 5 tokens per target forward.",
        0.6,
        "#stream",
        None,
    ),
    ("race", None, "", 7.0, "#race", "Race"),  # the caption: race_caption(), with the recorded speedup
]


def own_choice() -> str:
    """②'s last sentence: the token the target rejected and the one it chose instead, named from the recorded round,
    and why that is no loss: the output is the target's own, speculation only makes it faster."""
    spec = split_runs(list(tour_events()))["speculative"]
    drafted = next(e for e in spec if e.kind == "drafted" and e.round == TOUR_ROUND)
    v = next(e for e in spec if e.kind == "verified" and e.round == TOUR_ROUND)
    i = v.first_rejected
    return (
        f"Here the target prefers “{v.next_token.strip()}” (p {v.next_p:.2f}) to the prompt's "
        f"“{drafted.tokens[i].strip()}” (p {v.p[i]:.2f}): that is the target's own choice, which speculation "
        f"preserves. The output is exactly what the target alone would write: verification never makes it worse "
        f"than the target."
    )


def caption_text(step: int, runs) -> str:
    """Step `step`'s caption (1-based): ⑤ the race with its measured speedup, ② with the target's own choice."""
    r, upto, text = TOUR[step - 1][:3]
    if r == "race":
        return race_caption(runs)
    return f"{text} {own_choice()}" if (r, upto) == (TOUR_ROUND, "verified") else text


def race_caption(runs) -> str:
    """⑤: the recorded race's measured speedup and the verify cost v(n) behind it, from the run's own summary under
    the one rule for measured costs (the figures the Race and Explain tabs show for the same run)."""
    s = costrule.usable(av.spec_summary(runs))
    spec = av.view_runs(runs).get("speculative")
    host = (getattr(spec.started, "host", {}) or {}).get("cpu", "") if spec and spec.started else ""
    speed = f"{s['speedup']:.2f}×" if s.get("speedup") else "–"
    same = "token-identical output" if s.get("identical_to_ar") else "different output"
    n, v = s.get("v_n"), s.get("v")
    cost = (
        f" That is the speedup: verifying {n} tokens in one forward cost v({n}) = {v:.2f} target steps "
        f"{'on the recording host' + chr(39) + 's quiet calibration' if costrule.sentence(s) else 'in this run'}, "
        f"where {n} separate steps cost {n}."
        if n and isinstance(v, float)
        else ""
    )
    return (
        f"⑤ The race: the same target decoding alone (autoregressive) against speculation, interleaved on the "
        f"machine that recorded this run{f' ({host})' if host else ''}: speculation was {speed} as fast, "
        f"with {same}.{cost}"
    )


@functools.lru_cache(maxsize=1)
def tour_events() -> tuple:
    """The tour's recorded race, read once."""
    return tuple(av.load_trace(TOUR_TRACE))


@functools.lru_cache(maxsize=1)
def tour_runs():
    """The tour's recorded run, packed and folded once."""
    return guard.pack(list(tour_events()))


def frame_events(round_, upto: str | None) -> list | None:
    """The speculative lane's events up to round `round_`'s `upto` event (None: all of that round); None for the
    frames that show the whole run (round None, "race")."""
    if round_ in (None, "race"):
        return None
    spec = split_runs(list(tour_events()))["speculative"]
    out = []
    for e in spec:
        r = getattr(e, "round", 0)
        if r > round_ or (r == round_ and out and upto and out[-1].kind == upto and out[-1].round == round_):
            break
        out.append(e)
    return out


def tour_caption(
    text: str, step: int | None, done: bool = False, focus: str | None = None, tab: str | None = None
) -> str:
    """The caption; data-focus / data-tab name the element it talks about (assets/specviz.js scrolls to it,
    opens its tab and highlights it)."""
    counter = f'<span class="sv-tour-step">{step}/{len(TOUR)}</span>' if step else ""
    where = (f' data-focus="{av.esc(focus)}"' if focus else "") + (
        f' data-tab="{av.esc(tab)}"' if tab else ""
    )
    return (
        f'<div class="specviz sv-tour" data-done="{int(done)}" data-step="{step or 0}"{where} role="status" '
        f'aria-live="polite">{counter}<span class="sv-tour-text">{av.esc(text)}</span></div>'
    )


TOUR_END = "Now try your own prompt: pick an example or type one and press Generate. Click any token to verify its round."


def tour_frames():
    """The guided first minute as (frame, seconds on screen) pairs, each frame the page's outputs (RunOutputs, the
    caption, the prompt): the recorded run builds round 2 up event by event with captions, plays the rest and ends
    in the race, then hands over."""
    packed = tour_runs()
    runs = guard.runs(packed)
    total = guard.replay_rounds(runs)
    for step, (r, upto, text, wait, focus, tab) in enumerate(TOUR, 1):
        text = caption_text(step, runs)
        part = frame_events(r, upto)
        rounds = [r] if isinstance(r, int) else range(TOUR_ROUND + 1, total + 1) if r is None else [total]
        for k in rounds:
            views = (
                av.views(part, k, figures=False)
                if part is not None
                else av.views(runs, None if r == "race" else k, figures=False)
            )
            yield (
                (
                    packed,
                    gr.update(maximum=total, value=k, interactive=True),
                    gr.skip(),
                    *views,
                    tour_caption(text, step, focus=focus, tab=tab),
                    TOUR_PROMPT,
                ),
                wait,
            )
    yield (
        (
            packed,
            gr.update(maximum=total, value=total, interactive=True),
            gr.skip(),
            *av.views(runs, figures=False),
            tour_caption(TOUR_END, None, done=True),
            TOUR_PROMPT,
        ),
        0.0,
    )


TOUR_VIEWS = ("stream", "tree", "race", "explain", "summary", "verify")  # the HTML views a tour frame sets


@functools.lru_cache(maxsize=1)
def tour_data() -> str:
    """The tour as the browser plays it, JSON: {"texts": [distinct HTML strings], "frames": [{"caption": i,
    "wait": seconds, "views": {view: i}, "round": the replay slider's}], "prompt": the recorded run's}, the last frame the hand-over; every
    string stored once."""
    texts, index = [], {}

    def ref(html: str) -> int:
        if html not in index:
            index[html] = len(texts)
            texts.append(html)
        return index[html]

    frames = []
    for outputs, wait in tour_frames():
        named = dict(zip(RunOutputs._fields, outputs))
        views = {v: ref(named[v]) for v in TOUR_VIEWS if isinstance(named[v], str)}
        # the replay slider's round, shown (not set) while the frame plays: it stayed at the last round
        k = named["slider"].get("value") if isinstance(named["slider"], dict) else None
        frames.append({"caption": ref(outputs[RUN_OUTPUTS]), "wait": wait, "views": views, "round": k})
    data = {"texts": texts, "frames": frames, "prompt": TOUR_PROMPT}
    return json.dumps(data, separators=(",", ":"), ensure_ascii=False)


def tour_host() -> str:
    """The tour caption's first value: an empty, ended caption, and the frames the browser plays (an attribute of a
    hidden element: no script in the page's markup)."""
    return (
        tour_caption("", None, done=True)
        + f'<div id="sv-tour-frames" hidden data-frames="{av.esc(tour_data())}"></div>'
    )


def initial_outputs() -> dict:
    """What the page shows before any server call: the whole recorded run (views by name, the session's run
    packed, the replay slider's range) with its prompt; the tour's last frame shows the same."""
    packed = tour_runs()
    runs = guard.runs(packed)
    return {
        "state": packed,
        "rounds": guard.replay_rounds(runs),
        "views": dict(zip(av.VIEWS, av.views(runs))),
        "prompt": TOUR_PROMPT,
    }
