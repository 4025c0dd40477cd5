"""Both tokenisations of a cross-vocabulary draft: `retokenized` events -> HTML.

This module knows events and HTML; it knows nothing about tokenizers or models. A draft model with
another vocabulary proposes text: its own tokens (top row) are re-tokenised for the target (bottom
row). Each target token names the draft tokens its characters came from (`spans`), so a reader sees a
draft word that becomes several target tokens (one → many), or several draft tokens that the target
reads as one (many → one), and what the target then accepted.
"""

from __future__ import annotations

from engine.figures import plural

from .markup import esc, label_text

MAX_ROUNDS = 8  # the most recent rounds shown; older ones are summarised in one line


def _pairing(e) -> list[str]:
    """Per target token: "1:1", "1:n" (part of a draft token that made several) or "n:1" (from several)."""
    users: dict[int, int] = {}
    for first, last in e.spans:
        # bounded for hand-built events
        for i in range(max(first, 0), min(last, len(e.draft_tokens) - 1) + 1):
            users[i] = users.get(i, 0) + 1
    kinds = []
    for first, last in e.spans:
        if first < 0:
            kinds.append("none")
        elif last > first:
            kinds.append("n:1")
        else:
            kinds.append("1:n" if users.get(first, 0) > 1 else "1:1")
    return kinds


def round_rows(e, accepted: list | None = None) -> str:
    """One round: the draft's tokens above, the target's tokens below, joined by span indices."""
    kinds = _pairing(e)
    draft = "".join(
        f'<span class="tok xv-draft" data-i="{i}">{label_text(t)}</span>'
        for i, t in enumerate(e.draft_tokens)
    )
    target = []
    for j, (t, (first, last), kind) in enumerate(zip(e.target_tokens, e.spans, kinds)):
        verdict = "" if accepted is None or j >= len(accepted) else (" xv-ok" if accepted[j] else " xv-no")
        target.append(
            f'<span class="tok xv-target xv-{kind.replace(":", "")}{verdict}" data-from="{first}-{last}" '
            f'title="{esc(kind)} · from draft token(s) {first}…{last}">{label_text(t)}</span>'
        )
    held = (
        (
            f'<span class="xv-held" title="held back: may merge with what the draft writes next">'
            f"{label_text(e.held_back)}</span>"
        )
        if e.held_back
        else ""
    )
    differ = sum(k != "1:1" for k in kinds)
    return (
        f'<div class="xv-round" data-round="{e.round}" data-pos="{e.pos}">'
        f'<span class="xv-label">round {e.round}: {len(e.draft_token_ids)} draft → '
        f"{len(e.target_token_ids)} target tokens{f', {differ} split or merged' if differ else ''}</span>"
        f'<div class="xv-row">{draft}</div><div class="xv-row">{"".join(target)}{held}</div></div>'
    )


def render_tokenisations(events) -> str:
    """The panel for a run whose draft has another vocabulary; "" for every other run (nothing to show)."""
    retok = [e for e in events if getattr(e, "kind", None) == "retokenized"]
    if not retok:
        return ""
    verdicts = {e.round: list(e.accepted) for e in events if getattr(e, "kind", None) == "verified"}
    shown = retok[-MAX_ROUNDS:]
    drafted = sum(len(e.draft_token_ids) for e in retok)
    proposed = sum(len(e.target_token_ids) for e in retok)
    split = sum(sum(k != "1:1" for k in _pairing(e)) for e in retok)
    head = (
        f"<summary>Two vocabularies: {plural(drafted, 'draft token')} became {plural(proposed, 'target token')} in "
        f"{plural(len(retok), 'round')} ({split} split or merged); last {plural(len(shown), 'round')}</summary>"
    )
    body = "".join(round_rows(e, verdicts.get(e.round)) for e in shown)
    return f'<details class="specviz sv-crossvocab" open>{head}{body}</details>'
