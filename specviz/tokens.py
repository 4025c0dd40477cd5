"""The output stream: events -> HTML of the committed tokens, coloured by origin, with each round's
rejected draft tokens struck through where they were rejected (right before that round's corrected
token). Hovering or tapping a token shows round, position, q, p, min(1, p/q) and both models' top-k.
Each round's markup is built once (RoundView.cached) and reused by later updates of a streaming run.
"""

from __future__ import annotations

from .drift import lossy_badge
from .history import from_history, where
from .markup import esc, token_span
from .runs import main_run

LEGEND = (
    ("accepted", "accepted draft token (q proposed it, the target agreed)"),
    ("corrected", "corrected: the target's token where a draft was rejected"),
    ("bonus", "bonus: every draft accepted, one extra token from the target"),
    ("rejected", "rejected draft token (discarded, struck through)"),
    ("ar", "plain target step (no draft)"),
    ("accepted tok-hist", "⟲ drafted from your earlier run in this session (suffix, auto)"),
    ("unvisited", "tree node never tested (its branch was not reached)"),
)


def round_html(rv, greedy: bool, breaks: bool = True) -> str:
    """One round's tokens in reading order: accepted drafts, the rejected tail, then the corrected/bonus token."""
    parts = []
    origins, tokens = rv.origins, rv.tokens
    cut = rv.first_rejected
    # a round caught mid-way (a live run, the tour's frames)
    if rv.committed is None and rv.drafted is not None:
        for j, text in enumerate(rv.drafted.tokens):
            origin = (
                "pending"
                if rv.verified is None
                else "accepted"
                if cut is None or j < cut
                else "rejected"
                if j == cut
                else "discarded"
            )
            parts.append(token_span(rv, j, origin, greedy, text, breaks=False))
        return "".join(parts)
    hist = from_history(rv)  # accepted drafts taken from the session's earlier runs: marked ⟲
    for i, (text, origin) in enumerate(zip(tokens, origins)):
        if i == cut and rv.drafted is not None:  # the draft's rejected tail goes where it was rejected
            parts.append(token_span(rv, cut, "rejected", greedy, rv.drafted.tokens[cut], breaks=False))
            parts.append(tail_html(rv, cut, greedy))
        seen = hist.get(i) if origin == "accepted" else None
        note = None if seen is None else ("drafted from", f"{where(seen[0])}, position {seen[1]}")
        parts.append(token_span(rv, i, origin, greedy, text, breaks=breaks, note=note))
    return "".join(parts)


def tail_html(rv, cut: int, greedy: bool) -> str:
    """The drafts after the rejected one (discarded unseen), in one span: compact mode (the "Compact rejected
    drafts" box, a class on the stream) hides them and shows "+N" instead. "" when none."""
    more = len(rv.drafted.tokens) - cut - 1
    if more <= 0:
        return ""
    spans = "".join(
        token_span(rv, j, "discarded", greedy, rv.drafted.tokens[j], breaks=False)
        for j in range(cut + 1, len(rv.drafted.tokens))
    )
    return (
        f'<span class="sv-tail" data-more="{more}" title="{more} more drafted token{"s" if more != 1 else ""} '
        f'discarded unseen">{spans}</span>'
    )


def render_stream(events, upto_round: int | None = None, mode: str | None = None) -> str:
    """HTML of the speculative run's output (or the AR run's when that is the only one), rounds <= upto_round."""
    run = main_run(events, mode)
    if run is None or not run.rounds:
        return '<div class="specviz specviz-stream sv-empty">No tokens yet.</div>'
    rounds = run.upto(upto_round)
    greedy = run.greedy
    body = "".join(
        rv.cached(
            ("stream", greedy),
            lambda rv=rv: f'<span class="sv-round" data-round="{rv.round}">{round_html(rv, greedy)}</span>',
        )
        for rv in rounds
    )
    live = upto_round is None and not run.done
    cursor = '<span class="sv-cursor" aria-hidden="true">▌</span>' if live else ""
    shown = rounds[-1].round if rounds else 0
    # every round's measured wall time (s), for Play, which steps the replay in the browser at that pace
    times = ",".join(f"{rv.timed.total_s:.3f}" if rv.timed else "0.1" for rv in run.rounds)
    return (
        f'<div class="specviz specviz-stream" data-mode="{esc(run.mode)}" data-rounds="{shown}" '
        f'data-live="{int(live)}" tabindex="0" role="group" aria-label="output tokens: arrow keys move between '
        f'tokens, Enter opens a round in the verify view" data-round-s="{times}">{lossy_badge(run)}{body}{cursor}</div>'
    )


def render_legend() -> str:
    """A one-line key: each origin's sample styling and meaning."""
    items = []
    for origin, meaning in LEGEND:
        sample = (
            '<del class="tok-text">tok</del>' if origin == "rejected" else '<span class="tok-text">tok</span>'
        )
        items.append(
            f'<span class="sv-legend-item"><span class="tok tok-{origin}">{sample}</span> '
            f"{esc(meaning)}</span>"
        )
    return f'<div class="specviz sv-legend">{"".join(items)}</div>'
