"""Small HTML helpers shared by the renderers: escaping, whitespace display, token tooltips.

Markup carries class names and data attributes only; colours and hover behaviour live in
assets/specviz.css and assets/specviz.js. Every string that came from an event goes through
`esc` (html.escape with quote=True) before it touches markup.

A token's tooltip travels once, as compact JSON in its `data-tip` attribute
(`{"h": head, "r": [[label, value], ...], "k": [[title, chosen index, [[text, prob], ...]], ...]}`);
specviz.js builds the floating box from it on hover, focus or tap, with textContent only.
"""

from __future__ import annotations

import html
import json
import math

from engine.figures import derive

VISIBLE_WS = {" ": "␣", "\n": "↵", "\t": "⇥", "\r": "␍"}


def esc(value) -> str:
    return html.escape(str(value), quote=True)


def fmt_p(x, digits: int = 3) -> str:
    """A probability (or any float) for display; '–' when missing."""
    if x is None:
        return "–"
    try:
        return f"{float(x):.{digits}f}"
    except (TypeError, ValueError):
        return "–"


def accept_terms(p, q, acc) -> tuple[str, str, str]:
    """(p, q, min(1, p/q)) as printed: p and q with the digits that make the printed test reproduce (engine.figures);
    each at 3 decimals when the recorded probability is not min(1, p/q) (a lossy or multi-candidate rule)."""
    if (
        all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in (p, q, acc))
        and q > 0
        and abs(min(1.0, p / q) - acc) < 1e-9
    ):
        shown, (p_text, q_text) = derive(
            lambda a, b: min(1.0, a / b) if b > 0 else math.inf, [(p, 3), (q, 3)], 3
        )
        return p_text, q_text, shown
    return fmt_p(p), fmt_p(q), fmt_p(acc)


def stream_text(text: str, breaks: bool = True) -> str:
    """Token text for the output stream: escaped; a newline shows ↵ (plus a line break when `breaks`)."""
    if text == "":
        return '<span class="ws">∅</span>'
    out = []
    for part in str(text).replace("\r", "").split("\n"):
        out.append(esc(part))
    newline = '<span class="ws">↵</span>' + ("<br>" if breaks else "")
    return newline.join(out)


def visible(text: str) -> str:
    """Spaces, tabs and newlines made visible (not escaped)."""
    return "".join(VISIBLE_WS.get(ch, ch) for ch in str(text)) if text != "" else "∅"


def label_text(text: str) -> str:
    """Token text for labels and top-k lists: escaped, with whitespace made visible."""
    return esc(visible(text))


def topk_block(title: str, rows, chosen_id=None) -> list | None:
    """One model's top-k for a tooltip: [title, index of the chosen token (-1: none), [[text, prob], ...]];
    None when not recorded. Texts have their whitespace made visible; probabilities keep 3 decimals."""
    if not rows:
        return None
    items, chosen = [], -1
    for row in rows:
        try:
            tid, text, prob = row[0], row[1], row[2]
        except (TypeError, IndexError, KeyError):
            continue
        if chosen_id is not None and tid == chosen_id:
            chosen = len(items)
        items.append([visible(text)[:40], round(float(prob), 3) if isinstance(prob, (int, float)) else None])
    return [title, chosen, items] if items else None


def attr_json(value) -> str:
    """JSON for a single-quoted attribute: only &, <, > and ' are escaped (a double quote needs none)."""
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False, default=str)
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace("'", "&#39;")


def tip_json(head: str, rows, blocks=()) -> str:
    """The data-tip payload of a token: its head line, label/value rows and top-k columns."""
    return attr_json({"h": head, "r": [[k, v] for k, v in rows], "k": [b for b in blocks if b]})


def read_tip(markup: str) -> dict:
    """The tooltip data of the first token in `markup` (for tests and tools)."""
    import re

    m = re.search(r"data-tip='([^']*)'", markup)
    return json.loads(html.unescape(m.group(1))) if m else {}


def tip_text(tip: dict) -> str:
    """A tooltip's data as one line of text, as the box shows it (for tests and tools)."""
    cols = " ".join(f"{c[0]}: " + ", ".join(f"{t} {p}" for t, p in c[2]) for c in tip.get("k", []))
    return " · ".join([tip.get("h", "")] + [f"{k} {v}" for k, v in tip.get("r", [])]) + (
        " · " + cols if cols else ""
    )


def _at(seq, i):
    return seq[i] if seq is not None and 0 <= i < len(seq) else None


def token_details(rv, i: int, origin: str, greedy: bool):
    """(head, rows, blocks) describing token i of round `rv` (committed, or a rejected draft when origin is
    "rejected"/"discarded")."""
    d, v, c = rv.drafted, rv.verified, rv.committed
    pos = (
        c.pos
        if c is not None and origin not in ("rejected", "discarded", "pending")
        else (d.pos if d is not None else (c.pos if c is not None else 0))
    ) + i
    rows = [("round", str(rv.round)), ("position", str(pos))]
    draft_rows = _at(d.draft_topk, i) if d is not None else None
    # a discarded token (after the rejection) was never tested: the forward's distribution there follows a rejected
    # token, not the committed text, so its top-k is not the target's and is not shown
    target_rows = _at(v.target_topk, i) if v is not None and origin != "discarded" else None
    rule = "draft = argmax p" if greedy else "min(1, p/q)"
    residual_rows = None
    if origin in ("accepted", "rejected", "discarded", "pending") and d is not None:
        q, p = _at(d.q, i), _at(v.p, i) if v is not None else None
        acc = _at(v.accept_prob, i) if v is not None else None
        p_text, q_text, acc_text = accept_terms(p, q, acc) if not greedy else (fmt_p(p), fmt_p(q), fmt_p(acc))
        rows.append(("draft q", q_text))
        if origin in ("accepted", "rejected"):  # a discarded token was never tested: no p, no verdict
            rows += [("target p", p_text), (f"accept ({rule})", acc_text)]
            u = _at(getattr(v, "u", None), i)
            if isinstance(u, (int, float)) and isinstance(acc, (int, float)):  # sampling: the uniform draw
                rows.append(
                    (
                        "test",
                        f"u = {u:.3f} {'<' if origin == 'accepted' else '≥'} min(1, p/q) = {acc_text} "
                        f"→ {origin}",
                    )
                )
        head = {
            "accepted": "accepted draft token",
            "rejected": "rejected: failed the acceptance test",
            "discarded": "discarded: drafted after the rejection or the end of text (not judged)",
            "pending": "drafted, not yet verified",
        }[origin]
        chosen = _at(d.token_ids, i)
    elif origin == "corrected":
        rejected = _at(d.tokens, i) if d is not None else None
        how = "argmax p" if greedy else "resampled from norm(max(0, p − q))"
        head = f"corrected: {how}"
        if rejected is not None:
            rows.append(("replaces draft", visible(rejected)))
            rows.append(("its q / p", f"{fmt_p(_at(d.q, i))} / {fmt_p(_at(v.p, i) if v else None)}"))
        rows.append(("target p", fmt_p(_at(c.p, i) if c is not None else None)))
        chosen = _at(c.token_ids, i) if c is not None else None
        u, acc = _at(getattr(v, "u", None), i), _at(v.accept_prob, i) if v is not None else None
        if isinstance(u, (int, float)) and isinstance(acc, (int, float)):
            rows.append(
                ("test", f"u = {u:.3f} ≥ min(1, p/q) = {acc:.3f} → rejected; resampled from the residual")
            )
        residual_rows = getattr(v, "residual_topk", None) or None
    elif origin == "bonus":
        head = "bonus: all drafts accepted, one more token from p"
        rows.append(("target p", fmt_p(_at(c.p, i) if c is not None else None)))
        chosen, draft_rows = (_at(c.token_ids, i) if c is not None else None), None
    else:  # "ar" or unknown: a plain target step
        head = "target step (no draft)"
        rows.append(("target p", fmt_p(_at(c.p, i) if c is not None else None)))
        chosen = _at(c.token_ids, i) if c is not None else None
    blocks = [
        topk_block("draft q top-k", draft_rows, chosen),
        topk_block("target p top-k", target_rows, chosen),
        topk_block("residual norm(max(0, p − q)) top-k", residual_rows, chosen),
    ]
    return head, rows, blocks, pos


def token_span(
    rv, i: int, origin: str, greedy: bool, text: str, breaks: bool = True, cls: str = "tok", note=None
) -> str:
    """A token with its origin class, data-round / data-pos, a one-line data-tip and the tooltip child. `note`: a
    (label, text) row of a draft taken from the session's history, which also marks it (class tok-hist)."""
    head, rows, blocks, pos = token_details(rv, i, origin, greedy)
    if note is not None:
        rows = [*rows, note]
    return tip_span(rv.round, pos, origin, text, head, rows, blocks, breaks, cls, "tok-hist" if note else "")


# the shape beside the colour (specviz.css draws the
GLYPHS = {"corrected": "↺", "bonus": "+", "rejected": "✗"}
# same marks before stream tokens; the SVG tree writes them into its text)


def tip_attrs(round_, pos, origin: str, head: str, rows, blocks=(), cls: str = "tok", extra: str = "") -> str:
    """The attributes of one token or tree node: `class="{cls} {cls}-{origin}"` (+ `extra` classes),
    data-round / data-pos and the tooltip's data once (data-tip)."""
    # the box reads them from data-round/-pos
    rows = [(k, v) for k, v in rows if k not in ("round", "position")]
    kind = f"{cls}-rejected {cls}-discarded" if origin == "discarded" else f"{cls}-{esc(origin)}"
    extra = f" {esc(extra)}" if extra else ""
    return (
        f'class="{cls} {kind}{extra}" data-round="{esc(round_)}" data-pos="{esc(pos)}" '
        f"data-tip='{tip_json(head, rows, blocks)}'"
    )


def tip_span(
    round_,
    pos,
    origin: str,
    text: str,
    head: str,
    rows,
    blocks=(),
    breaks: bool = True,
    cls: str = "tok",
    extra: str = "",
) -> str:
    """The markup of one token: tip_attrs on a <span>; rejected and discarded text is struck (<del>). Not a tab
    stop: the stream is one focusable element whose arrow keys move between tokens (specviz.js)."""
    struck = origin in ("rejected", "discarded")
    shown = stream_text(text, breaks=breaks and not struck)
    inner = f'<del class="tok-text">{shown}</del>' if struck else f'<span class="tok-text">{shown}</span>'
    return f"<span {tip_attrs(round_, pos, origin, head, rows, blocks, cls, extra)}>{inner}</span>"


def recorded_by(started) -> str:
    """The line that labels another engine's recorded run (RunStarted.engine, engine/recorders): who ran it, how,
    where the recorder hooked in and what it could not see; "" for specviz's own run."""
    engine = getattr(started, "engine", None) or {}
    if not engine:
        return ""
    who = " ".join(esc(engine.get(k, "")) for k in ("name", "version") if engine.get(k))
    how = esc(engine.get("method", ""))
    hook = esc(engine.get("hook", ""))
    missing = [esc(m) for m in engine.get("missing", []) if m]
    return (
        f'<div class="sv-engine" data-engine="{esc(engine.get("name", ""))}">Recorded from <b>{who}</b>'
        + (f" · {how}" if how else "")
        + (f" · hooked at <code>{hook}</code>" if hook else "")
        + (f'<span class="sv-note"> · not seen: {"; ".join(missing)}</span>' if missing else "")
        + "</div>"
    )
