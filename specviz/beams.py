"""The beam view: one lane per beam slot, one column per beam-search step (events -> HTML).

Each cell is the token a surviving beam added at that step; a beam that continues another slot's
beam says so (↰ parent). Cells whose beam has a child at the next step are survivors, the others were
pruned there; tokens read from a drafted path (speculative beam search) are marked, a round's first
column is marked, and the final best hypothesis's path is highlighted across lanes; ■ marks where a
hypothesis finished (EOS or the length limit), the best one's lane is starred. Hover shows the
cumulative score, the parent and the round. With the plain run's events too, a race line compares
target forwards and wall time. This module knows nothing about torch or gradio; token text is escaped.
"""

from __future__ import annotations

import json

from engine.figures import plural, quotient_terms

from .markup import esc, tip_span


def beam_run(events) -> dict:
    """The beam-search parts of one run's events."""
    run = {"started": None, "steps": [], "drafts": {}, "verified": {}, "result": None, "finished": None}
    for e in events or []:
        kind = getattr(e, "kind", None)
        if kind == "run_started":
            run["started"] = e
        elif kind == "beam_step":
            run["steps"].append(e)
        elif kind == "beam_drafted":
            run["drafts"][e.round] = e
        elif kind == "beam_verified":
            run["verified"][e.round] = e
        elif kind == "beam_result":
            run["result"] = e
        elif kind == "finished":
            run["finished"] = e
    return run


def _sequences(steps) -> list:
    """Per step, per slot: the tuple of tokens that beam holds after the step."""
    out, prev = [], None
    for s in steps:
        row = [
            ((prev[p] if prev is not None and 0 <= p < len(prev) else ()) + (t,))
            for p, t in zip(s.parents, s.token_ids)
        ]
        out.append(row)
        prev = row
    return out


def running_best_text(events) -> str:
    """The text of the best-scoring running beam so far ("" before the first step): what the API streams."""
    steps = beam_run(events)["steps"]
    if not steps:
        return ""
    last = steps[-1]
    slot = max(range(len(last.scores)), key=lambda i: last.scores[i])
    pieces = []
    for s in reversed(steps):  # follow the parents back to the first step
        pieces.append(s.tokens[slot])
        slot = s.parents[slot]
    return "".join(reversed(pieces))


def api_result(events, cut_reason: str) -> tuple[str, str]:
    """(best hypothesis text, summary JSON) of a beam-search run for the /generate API: the engine's summary,
    its stop reason and every finished hypothesis (text, score), best first; a run cut before the engine
    finished it returns the best running beam with stop_reason cut_reason."""
    run = beam_run(events)
    done, result = run["finished"], run["result"]
    summary = dict(done.summary or {}) if done is not None else {"mode": "beam", "steps": len(run["steps"])}
    summary["stop_reason"] = done.stop_reason if done is not None else cut_reason
    if result is not None:
        summary["hypotheses"] = [{"text": t, "score": sc} for t, sc in zip(result.texts, result.scores)]
    return (done.text if done is not None else running_best_text(events)), json.dumps(summary)


def _ends(steps, seqs, best: tuple | None) -> dict:
    """(column, slot) of the cell each finished hypothesis extends -> [(token, score, is the best)]."""
    ends: dict = {}
    for k, s in enumerate(steps):
        for f in s.finished:
            parent = f.get("parent")
            if k == 0 or not isinstance(parent, int) or not 0 <= parent < len(seqs[k - 1]):
                continue  # finished at the first step: no cell to hang it on
            whole = seqs[k - 1][parent] + (f.get("token_id"),)
            ends.setdefault((k - 1, parent), []).append(
                (f.get("token", ""), f.get("score", 0.0), whole == best)
            )
    return ends


def _cell(s, i: int, seqs, nxt, best: tuple | None, first_of_round: bool, ends=()) -> str:
    parent, score = s.parents[i], s.scores[i]
    drafted = bool(s.drafted[i]) if i < len(s.drafted) else False
    survived = nxt is None or i in nxt.parents
    on_best = best is not None and seqs[i] == best[: len(seqs[i])]
    classes = ["beam-survived" if survived else "beam-pruned"]
    if drafted:
        classes.append("beam-drafted")
    if on_best:
        classes.append("beam-best")
    if first_of_round:
        classes.append("beam-round-start")
    rows = [
        ("score", f"{score:.4f} (sum of log p)"),
        ("extends", f"beam {parent}"),
        ("round", str(s.round)),
        ("from the draft", "yes: read from the round's one forward" if drafted else "no"),
        ("next step", "survives" if survived else "pruned"),
    ]
    for f in s.finished:
        if f.get("parent") == parent and f.get("token_id") == s.token_ids[i]:
            rows.append(("finished", f"score {f.get('score', 0):.4f}"))
    head = f"beam {i}, step {s.pos}" + (" · best hypothesis" if on_best else "")
    mark = f'<span class="beam-parent">↰{esc(parent)}</span>' if parent != i else ""
    span = tip_span(
        s.round,
        s.pos,
        "beam",
        s.tokens[i] if i < len(s.tokens) else "",
        head,
        rows,
        breaks=False,
        extra=" ".join(classes),
    )
    badges = "".join(
        f'<span class="beam-end{" beam-end-best" if is_best else ""}" data-score="{score:.6f}" '
        f'title="{"best hypothesis" if is_best else "hypothesis"} ends here: {esc(token)} '
        f'(score {score:.4f})">■</span>'
        for token, score, is_best in ends
    )
    return (
        f'<span class="beam-cell" data-beam="{i}" data-parent="{esc(parent)}" data-step="{esc(s.pos)}">'
        f"{mark}{span}{badges}</span>"
    )


def render_beams(events, ar_events=None) -> str:
    """The lanes of a beam-search run (and, with the plain run's events, the race line)."""
    run = beam_run(events)
    steps = run["steps"]
    if run["started"] is None or not steps:
        return '<div class="specviz specviz-beams"><div class="sv-empty">no beam search yet</div></div>'
    width = max(len(s.parents) for s in steps)
    result = run["result"]
    best = tuple(result.token_ids[0]) if result is not None and result.token_ids else None
    seqs = _sequences(steps)
    ends = _ends(steps, seqs, best)
    best_lane = next((slot for (_, slot), items in ends.items() if any(b for _, _, b in items)), None)
    if best_lane is None and best is not None:  # not among the finished (a time limit): a running beam
        best_lane = next((i for i, sq in enumerate(seqs[-1]) if sq == best), None)
    rounds_seen, columns = set(), []
    for k, s in enumerate(steps):
        first = s.round not in rounds_seen
        rounds_seen.add(s.round)
        columns.append((s, seqs[k], steps[k + 1] if k + 1 < len(steps) else None, first))
    lanes = []
    for i in range(width):
        cells = "".join(
            _cell(s, i, sq, nxt, best, first, ends.get((k, i), ()))
            if i < len(s.parents)
            else '<span class="beam-cell"></span>'
            for k, (s, sq, nxt, first) in enumerate(columns)
        )
        lanes.append(
            f'<div class="beam-lane{" beam-lane-best" if i == best_lane else ""}" data-beam="{i}">'
            f'<span class="beam-label">beam {i}</span>{cells}</div>'
        )
    parts = [
        f'<div class="specviz specviz-beams" data-beams="{width}" data-steps="{len(steps)}">',
        _head(run),
        f'<div class="beam-lanes" style="--beam-steps:{len(steps)}">{"".join(lanes)}</div>',
        LEGEND,
    ]
    if result is not None:
        parts.append(_hypotheses(result))
    if ar_events:
        parts.append(_race(run, beam_run(ar_events)))
    parts.append("</div>")
    return "".join(parts)


LEGEND = (
    '<p class="beam-legend">Each row is one beam slot, each column one step. <span class="beam-parent">↰k</span> '
    "on a cell: at that step the beam in this row continued beam k of the step before (the search reordered "
    "its beams); no mark: it continued its own row. A cell with no child at the next step was dropped.</p>"
)


def _head(run) -> str:
    started, steps, verified = run["started"], run["steps"], run["verified"]
    cfg = started.config or {}
    mode = "speculative" if started.mode == "speculative" else "plain"
    forwards = len(verified)
    text = (
        f"{mode} beam search, B = {esc(cfg.get('num_beams', '?'))}"
        + (f", γ = {esc(cfg.get('gamma'))}, drafter {esc(started.draft)}" if mode == "speculative" else "")
        + f": {plural(len(steps), 'step')} in {plural(forwards, 'target forward')}"
    )
    return f'<div class="beam-head" data-mode="{mode}">{text}</div>'


def _hypotheses(result) -> str:
    items = []
    for k, (text, score) in enumerate(zip(result.texts, result.scores)):
        cls = "beam-hyp beam-hyp-best" if k == 0 else "beam-hyp"
        tag = "best" if k == 0 else f"#{k + 1}"
        items.append(
            f'<li class="{cls}" data-score="{score:.6f}"><b>{tag}</b> '
            f'<span class="beam-score">{score:.4f}</span> {esc(text)}</li>'
        )
    return f'<ol class="beam-hyps">{"".join(items)}</ol>'


def _lane_numbers(run) -> tuple:
    fin = run["finished"]
    s = (fin.summary or {}) if fin is not None else {}
    return len(run["verified"]), len(run["steps"]), s.get("wall_s")


def _race(spec, plain) -> str:
    """Target forwards and wall time of both lanes; the verdict only once both have finished (the lanes' seconds
    printed so that they divide to its ratio)."""
    walls = {name: _lane_numbers(run)[2] for name, run in (("speculative", spec), ("plain", plain))}
    ws, wp = walls["speculative"], walls["plain"]
    done = spec["finished"] is not None and plain["finished"] is not None
    ratio = quotient_terms(wp, ws, least=2) if done and ws and wp else None
    shown = (
        {"plain": ratio[1], "speculative": ratio[2]}
        if ratio
        else {k: f"{w:.2f}" for k, w in walls.items() if isinstance(w, (int, float))}
    )
    rows = []
    for name, run in (("speculative", spec), ("plain", plain)):
        forwards, steps, _ = _lane_numbers(run)
        per = quotient_terms(steps, forwards)[0] if forwards else "–"
        rows.append(
            f'<span class="beam-race-lane" data-lane="{name}" data-forwards="{forwards}">{name}: '
            f"{plural(steps, 'step')}, {plural(forwards, 'target forward')} ({per} steps/forward)"
            f"{f', {shown[name]} s' if name in shown else ''}</span>"
        )
    verdict = ""
    if done:
        same = (
            spec["result"] is not None
            and plain["result"] is not None
            and spec["result"].token_ids == plain["result"].token_ids
        )
        said = f"{ratio[0]}× plain's speed ({ratio[1]} s ÷ {ratio[2]} s)" if ratio else "–"
        verdict = (
            f'<span class="beam-verdict" data-same="{str(same).lower()}">{said}; '
            f"{'same beams' if same else 'beams differ'}</span>"
        )
    return f'<div class="beam-race">{"".join(rows)}{verdict}</div>'
