"""The session's history in a run: the accepted drafts suffix speculation took from the visitor's earlier runs
in this session (SuffixMatched.origins with runs_ago >= 1), counted, named and marked. Events -> plain data and
HTML; it knows nothing of the History object the engine keeps (a trace replays with the same credit).
"""

from __future__ import annotations

from dataclasses import dataclass

from engine.figures import plural
from engine.specs import family

from .markup import esc

PASSAGE_CHARS = 80  # the longest passage drawn from history, quoted up to this many characters
READS_HISTORY = ("suffix", "auto")  # drafter families that search the session's earlier runs


def node_runs_ago(rv) -> list[int]:
    """Per node of round `rv`'s tree: the earlier run of the session it was last seen in (1 = the run before this
    one), 0 for this run's own text; [] without a suffix match that describes the tree (a hand-made trace)."""
    m, t = rv.suffix, rv.tree
    if m is None or t is None or list(getattr(m, "token_ids", [])) != list(t.token_ids):
        return []
    try:
        out = [o[0] for o in m.origins]
    except (IndexError, TypeError, KeyError):
        return []
    return [k if isinstance(k, int) and not isinstance(k, bool) and k > 0 else 0 for k in out]


def from_history(rv) -> dict[int, tuple[int, int]]:
    """{chain index j: (runs_ago, position in that run)} for the accepted drafts of round `rv` whose suffix-tree
    node was last seen in an earlier run of the session (runs_ago 1 = the run before this one). {} for a round
    without a suffix match, or one whose match record does not describe its tree (a hand-made trace)."""
    m, t = rv.suffix, rv.tree
    if m is None or t is None or list(getattr(m, "token_ids", [])) != list(t.token_ids):
        return {}
    out = {}
    for j, node in enumerate(t.path or []):
        try:
            runs_ago, at = m.origins[node]
        except (IndexError, TypeError, ValueError):
            return {}
        if isinstance(runs_ago, int) and runs_ago >= 1:
            out[j] = (runs_ago, at)
    return out


def where(runs_ago: int) -> str:
    """'your previous run' / 'your run 3 back' (in this session)."""
    return "your previous run" if runs_ago == 1 else f"your run {runs_ago} back"


@dataclass(frozen=True)
class Credit:
    """What a run owes to the session's earlier runs."""

    reads_history: bool  # the drafter searches the session's earlier runs (suffix, auto)
    accepted: int  # accepted draft tokens in the run
    from_history: int  # of which came from the session's earlier runs
    by_run: dict  # runs_ago -> accepted drafts taken from that run
    rounds: int  # rounds that accepted at least one of them
    passage: str  # the longest stretch of rounds drawing on history, as committed text


def credit(run) -> Credit | None:
    """The run's credit to its session's history; None for a run that is not speculative."""
    if run is None or run.mode != "speculative":
        return None
    draft = (getattr(run.started, "draft", "") or "") if run.started is not None else ""
    accepted = from_hist = rounds = 0
    by_run: dict[int, int] = {}
    stretch, best = [], []
    for rv in run.rounds:
        accepted += rv.n_accepted
        hist = from_history(rv)
        if hist:
            from_hist += len(hist)
            rounds += 1
            for runs_ago, _ in hist.values():
                by_run[runs_ago] = by_run.get(runs_ago, 0) + 1
            stretch += rv.tokens
            best = stretch if len(stretch) > len(best) else best
        else:
            stretch = []
    passage = "".join(best)
    if len(passage) > PASSAGE_CHARS:
        passage = passage[:PASSAGE_CHARS].rstrip() + "…"
    return Credit(
        reads_history=family(draft) in READS_HISTORY or bool(from_hist),
        accepted=accepted,
        from_history=from_hist,
        by_run=dict(sorted(by_run.items())),
        rounds=rounds,
        passage=passage,
    )


def _runs_text(c: Credit) -> str:
    """'your previous run' or 'your earlier runs in this session'."""
    return where(next(iter(c.by_run))) if len(c.by_run) == 1 else "your earlier runs in this session"


def summary_part(c: Credit | None) -> str:
    """The summary line's clause: '23 of 31 accepted drafts came from your previous run in this session'; "" when
    none did."""
    if c is None or not c.from_history:
        return ""
    whom = _runs_text(c) + (" in this session" if len(c.by_run) == 1 else "")
    return (
        f'<span class="sv-history" data-from-history="{c.from_history}" data-accepted="{c.accepted}">'
        f"⟲ {c.from_history} of {plural(c.accepted, 'accepted draft')} came from {esc(whom)}</span>"
    )


def explain_paragraph(c: Credit | None, draft: str) -> str:
    """Explain's paragraph on the session's history: which runs, which passage, why acceptance rose; for a drafter
    that reads history but drew nothing from it, how to see it do so. "" for other drafters."""
    if c is None or not c.reads_history:
        return ""
    head = "<b>Your session's history.</b> "
    if not c.from_history:
        return (
            f'<p class="sv-history-note">{head}{esc(draft)} drafts from this run\'s text and also from your '
            "earlier runs in this session (their prompts and outputs, kept for your session only); none of this "
            "run's accepted drafts came from them. Run the same prompt again: the second run finds this "
            "answer in your history and drafts whole stretches of it.</p>"
        )
    runs = ", ".join(f"{where(k)}: {n}" for k, n in c.by_run.items())
    passage = f", the longest stretch «{esc(' '.join(c.passage.split()))}»" if c.passage.strip() else ""
    return (
        f'<p class="sv-history-note">{head}{c.from_history} of this run\'s {plural(c.accepted, "accepted draft")} '
        f"came from your earlier runs in this session ({runs}), in {plural(c.rounds, 'round')}{passage}. Why "
        "acceptance rose: the drafter searches your earlier prompts and outputs as well as this run's text; "
        "where this run says again what an earlier one said (greedy decoding answers the same prompt the same "
        "way), the context's suffix matches a long passage there, and what followed it is what the target says "
        "next, so its drafts are kept. Those tokens are marked ⟲ in the output and the tree (hover one for the "
        "run and position it came from); <i>Forget my history</i> empties the session's history, so the next "
        "run drafts from its own text only.</p>"
    )
