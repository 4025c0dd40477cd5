"""What a trace's events must mean, beyond their types: the checks `trace_from_json` runs last.

A trace comes from a file anyone can edit, and renderers trust its numbers: probabilities (p, q, α)
in [0, 1], γ within 1..MAX_GAMMA, rounds no more than the events, positions within the prompt plus
the tokens the run holds, costs positive, parallel lists of one length, known `config` and
`summary` keys of the right type. Every refusal is a one-line ValueError naming the field and its
allowed range. This module knows nothing about JSON, HTML or torch.
"""

from __future__ import annotations

from .config import MAX_BATCH, MAX_GAMMA, short_repr
from .validate_fields import (
    CONFIG_KEYS,
    MAX_BEAMS,
    MAX_FORWARD_ROWS,
    MAX_MATCH,
    MAX_OCCURRENCES,
    MAX_TOPK,
    MAX_TREE_NODES,
    MAX_WINDOW,
    NEXT_KINDS,
    PROB_SLACK,
    RUN_ID,
    TREE_STATUS,
    each,
    one_of,
    positive,
    prob,
    real_number,
    same_length,
    texts,
    topk_per_position,
    topk_rows,
    whole,
)
from .validate_started import (
    ENGINE_TEXT,
    HOST_NUMBERS,
    HOST_TEXT,
    KERNEL_NAMES,
    MAX_ENGINE_TEXT,
    check_config,
    check_engine,
    check_host,
    check_started,
    check_summary,
)

# the field checks (validate_fields.py) and run_started's and the summary's (validate_started.py), re-exported
__all__ = [
    "RUN_ID",
    "MAX_TREE_NODES",
    "MAX_FORWARD_ROWS",
    "MAX_MATCH",
    "MAX_OCCURRENCES",
    "MAX_WINDOW",
    "MAX_BEAMS",
    "MAX_TOPK",
    "PROB_SLACK",
    "NEXT_KINDS",
    "TREE_STATUS",
    "CONFIG_KEYS",
    "real_number",
    "prob",
    "positive",
    "whole",
    "each",
    "texts",
    "topk_rows",
    "topk_per_position",
    "one_of",
    "same_length",
    "check_config",
    "check_summary",
    "check_decided",
    "check_drafted",
    "check_verified",
    "check_tree",
    "check_tree_sized",
    "check_suffix_match",
    "check_committed",
    "check_timed",
    "check_prefilling",
    "check_beam_verified",
    "check_started",
    "ENGINE_TEXT",
    "MAX_ENGINE_TEXT",
    "check_engine",
    "HOST_TEXT",
    "HOST_NUMBERS",
    "KERNEL_NAMES",
    "check_host",
    "check_retokenized",
    "check_window",
    "check_batch_round",
    "check_row",
    "CHECKS",
    "positions",
    "check_run",
    "validate_events",
]


def check_decided(e) -> None:
    whole("decided.gamma", e.gamma, 0, MAX_GAMMA)
    positive("decided.plain_tokens_per_s", e.plain_tokens_per_s, zero_ok=True)
    for i, c in enumerate(e.candidates):
        where = f"decided.candidates[{i}]"
        if not isinstance(c, dict):
            raise ValueError(f"{where} must be an object, got {short_repr(c)}")
        prob(f"{where}.alpha", c.get("alpha"), none_ok=True)
        prob(f"{where}.measured_alpha", c.get("measured_alpha"), none_ok=True)
        if "gamma" in c:
            whole(f"{where}.gamma", c["gamma"], 0, MAX_GAMMA)
        # auto rounds a cheap drafter's c to 0.0
        for key in ("c", "v", "predicted_tokens_per_s", "expected_tokens_per_s", "tested"):
            positive(f"{where}.{key}", c.get(key), zero_ok=True)


def check_drafted(e) -> None:
    same_length("drafted", e, ["token_ids", "tokens", "q"], MAX_GAMMA)
    each("drafted.token_ids", e.token_ids, whole, 0)
    texts("drafted.tokens", e.tokens)
    each("drafted.q", e.q, prob)
    topk_per_position("drafted.draft_topk", e.draft_topk, len(e.token_ids))


def check_verified(e) -> None:
    same_length("verified", e, ["accepted", "p", "accept_prob"], MAX_GAMMA)
    each("verified.p", e.p, prob)
    each("verified.accept_prob", e.accept_prob, prob)
    for i, ok in enumerate(e.accepted):
        if not isinstance(ok, bool):
            raise ValueError(f"verified.accepted[{i}] must be true or false, got {short_repr(ok)}")
    if e.first_rejected is not None:
        whole("verified.first_rejected", e.first_rejected, 0, max(len(e.accepted) - 1, 0))
    whole("verified.next_id", e.next_id, 0)
    prob("verified.next_p", e.next_p)
    one_of("verified.next_kind", e.next_kind, NEXT_KINDS)
    topk_per_position("verified.target_topk", e.target_topk, len(e.accepted) + 1)
    topk_rows("verified.residual_topk", getattr(e, "residual_topk", []))
    u = getattr(e, "u", None)  # sampling mode's uniform draws (None when greedy)
    if u is not None:
        if not isinstance(u, list):
            raise ValueError(
                f"verified.u must be a list of uniform draws in [0, 1) or null, got {short_repr(u)}"
            )
        each("verified.u", u, prob, none_ok=True, below_one=True)


def check_tree(e) -> None:
    names = ["token_ids", "tokens", "parents", "q", "p", "accept_prob", "status"]
    same_length("draft_tree", e, names, MAX_TREE_NODES)
    each("draft_tree.token_ids", e.token_ids, whole, 0)
    texts("draft_tree.tokens", e.tokens)
    for i, parent in enumerate(e.parents):
        whole(f"draft_tree.parents[{i}]", parent, -1, i - 1)  # parents come before their children
    each("draft_tree.q", e.q, prob)
    each("draft_tree.p", e.p, prob)
    each("draft_tree.accept_prob", e.accept_prob, prob, none_ok=True)
    for i, status in enumerate(e.status):
        one_of(f"draft_tree.status[{i}]", status, TREE_STATUS)
    each("draft_tree.path", e.path, whole, 0, max(len(e.token_ids) - 1, 0))
    whole("draft_tree.next_id", e.next_id, 0)
    one_of("draft_tree.next_kind", e.next_kind, NEXT_KINDS)


def check_tree_sized(e) -> None:
    """tree_sized: per node a parent before it and a score (a probability), a pool at least the nodes, the curve's
    length, positive times, the sizes timed within a forward's rows."""
    texts("tree_sized.drafter", [e.drafter])
    same_length("tree_sized", e, ["token_ids", "parents", "scores"], MAX_TREE_NODES)
    whole("tree_sized.pool", e.pool, len(e.token_ids), MAX_TREE_NODES)
    each("tree_sized.token_ids", e.token_ids, whole, 0)
    for i, parent in enumerate(e.parents):
        whole(f"tree_sized.parents[{i}]", parent, -1, i - 1)
    each("tree_sized.scores", e.scores, prob)
    if not isinstance(e.verify, list) or len(e.verify) != len(e.token_ids) + 2:
        raise ValueError(
            f"tree_sized.verify must hold t(n) ÷ t(1) for n = 1..{len(e.token_ids) + 2}, got {short_repr(e.verify)}"
        )
    each("tree_sized.verify", e.verify, positive, none_ok=False)
    each("tree_sized.measured", e.measured, whole, 1, MAX_FORWARD_ROWS)
    prob("tree_sized.next_score", e.next_score, none_ok=True)
    whole("tree_sized.extra_rows", e.extra_rows, 0, MAX_FORWARD_ROWS)


def check_suffix_match(e) -> None:
    """suffix_match: a match of 1..MAX_MATCH tokens, per node a count within the occurrences and an origin, the
    verify curve over the tree's sizes (one more than its rows)."""
    whole("suffix_match.match", e.match, 1, MAX_MATCH)
    if len(e.match_tokens) != e.match:
        raise ValueError(
            f"suffix_match.match_tokens must hold match ({e.match}) tokens, got {len(e.match_tokens)}"
        )
    texts("suffix_match.match_tokens", e.match_tokens)
    whole("suffix_match.occurrences", e.occurrences, 1, MAX_OCCURRENCES)
    same_length("suffix_match", e, ["token_ids", "counts", "parents", "scores", "origins"], MAX_TREE_NODES)
    each("suffix_match.token_ids", e.token_ids, whole, 0)
    each("suffix_match.counts", e.counts, whole, 1, e.occurrences)
    for i, parent in enumerate(e.parents):
        whole(f"suffix_match.parents[{i}]", parent, -1, i - 1)  # parents come before their children
    each("suffix_match.scores", e.scores, prob)
    for i, origin in enumerate(e.origins):
        if not (isinstance(origin, list) and len(origin) == 2):
            raise ValueError(f"suffix_match.origins[{i}] must be [runs_ago, at], got {short_repr(origin)}")
        whole(f"suffix_match.origins[{i}][0]", origin[0], 0)
        whole(f"suffix_match.origins[{i}][1]", origin[1], 0)
    if len(e.verify) != len(e.token_ids) + 2:
        raise ValueError(
            f"suffix_match.verify must hold t(n) ÷ t(1) for n = 1..{len(e.token_ids) + 2}, got {len(e.verify)}"
        )
    each("suffix_match.verify", e.verify, positive, none_ok=False)
    each("suffix_match.measured", e.measured, whole, 1, MAX_FORWARD_ROWS)
    prob("suffix_match.next_score", e.next_score, none_ok=True)


def check_committed(e) -> None:
    same_length("committed", e, ["token_ids", "tokens", "origins", "p"], MAX_TREE_NODES + 1)
    each("committed.token_ids", e.token_ids, whole, 0)
    texts("committed.tokens", e.tokens)
    texts("committed.origins", e.origins)
    each("committed.p", e.p, prob)


def check_timed(e) -> None:
    for name in ("draft_s", "verify_s", "total_s", "elapsed_s", "forward_s", "feedback_s"):
        positive(f"round_timed.{name}", getattr(e, name), none_ok=False, zero_ok=True)
    whole("round_timed.gamma", e.gamma, 0, MAX_GAMMA)
    whole("round_timed.verified", e.verified, 0, MAX_FORWARD_ROWS)


def check_prefilling(e) -> None:
    """A progress note before round 1: how many of the prompt's positions the target has read."""
    whole("prefilling.round", e.round, 0, 0)
    whole("prefilling.total", e.total, 0)
    whole("prefilling.pos", e.pos, 0, e.total)


def check_beam_verified(e) -> None:
    """One beam round's forward: its replayed steps are at most its drafts + 1, its cache only shrinks."""
    whole("beam_verified.steps", e.steps, 1, MAX_GAMMA + 1)  # the run's position limit adds them up
    each("beam_verified.verified", e.verified, whole, 0, MAX_GAMMA)
    whole("beam_verified.positions", e.positions, 1, MAX_BEAMS * (MAX_GAMMA + 1))
    whole("beam_verified.cache_before", e.cache_before, 0)
    whole("beam_verified.cache_after", e.cache_after, 0, e.cache_before)


def check_retokenized(e) -> None:
    """A cross-vocabulary round: parallel lists agree, at most 2γ+2 draft and γ target tokens, spans index the draft."""
    same_length("retokenized", e, ["draft_token_ids", "draft_tokens"], at_most=2 * MAX_GAMMA + 2)
    same_length("retokenized", e, ["target_token_ids", "target_tokens", "spans"], at_most=MAX_GAMMA)
    each("retokenized.draft_token_ids", e.draft_token_ids, whole, 0)
    each("retokenized.target_token_ids", e.target_token_ids, whole, 0)
    texts("retokenized.draft_tokens", e.draft_tokens)
    texts("retokenized.target_tokens", e.target_tokens)
    n = len(e.draft_token_ids)
    for i, span in enumerate(e.spans):
        ok = (
            isinstance(span, list)
            and len(span) == 2
            and all(isinstance(x, int) and not isinstance(x, bool) for x in span)
        )
        if not ok or not (span == [-1, -1] or 0 <= span[0] <= span[1] < n):
            raise ValueError(
                f"retokenized.spans[{i}] must be [first, last] draft token indices in 0..{n - 1} "
                f"(or [-1, -1]), got {short_repr(span)}"
            )


def check_window(e) -> None:
    """lookahead_window: levels × columns of ids, texts and fixed flags of one shape, within MAX_WINDOW."""
    cols, levels = MAX_WINDOW
    grid = e.token_ids
    if not (
        isinstance(grid, list)
        and 1 <= len(grid) <= levels
        and all(isinstance(r, list) for r in grid)
        and 1 <= len(grid[0]) <= cols
        and all(len(r) == len(grid[0]) for r in grid)
    ):
        raise ValueError(
            f"lookahead_window.token_ids must be 1..{levels} levels of one width in 1..{cols}, got "
            f"{short_repr(grid)}"
        )
    for name in ("tokens", "fixed"):
        value = getattr(e, name)
        if not (
            isinstance(value, list)
            and len(value) == len(grid)
            and all(isinstance(r, list) and len(r) == len(grid[0]) for r in value)
        ):
            raise ValueError(
                f"lookahead_window.{name} must have the shape of token_ids, got {short_repr(value)}"
            )
    for lv, row in enumerate(grid):
        each(f"lookahead_window.token_ids[{lv}]", row, whole, 0)
        texts(f"lookahead_window.tokens[{lv}]", e.tokens[lv])
        for i, flag in enumerate(e.fixed[lv]):
            if flag is not None and not isinstance(flag, bool):
                raise ValueError(
                    f"lookahead_window.fixed[{lv}][{i}] must be true, false or null, got {short_repr(flag)}"
                )
    same_length("lookahead_window", e, ["next_ids", "next_tokens"], cols)
    if len(e.next_ids) != len(grid[0]):
        raise ValueError(
            f"lookahead_window.next_ids must hold one id per column ({len(grid[0])}), got {len(e.next_ids)}"
        )
    each("lookahead_window.next_ids", e.next_ids, whole, 0)
    texts("lookahead_window.next_tokens", e.next_tokens)
    for name in ("candidates", "added", "pool"):
        whole(f"lookahead_window.{name}", getattr(e, name), 0)


def check_batch_round(e) -> None:
    """A batched round: its rows, and one entry per row in each per-row list."""
    if not e.rows or len(e.rows) > MAX_BATCH:
        raise ValueError(f"batch_round.rows must list 1 to {MAX_BATCH} rows, got {len(e.rows)}")
    each("batch_round.rows", e.rows, whole, 0, MAX_BATCH - 1)
    whole("batch_round.gamma", e.gamma, 0, MAX_GAMMA)
    same_length("batch_round", e, ["rows", "drafted", "accepted", "committed"])
    each("batch_round.drafted", e.drafted, whole, 0, MAX_FORWARD_ROWS)
    each("batch_round.accepted", e.accepted, whole, 0, MAX_FORWARD_ROWS)
    each("batch_round.committed", e.committed, whole, 0, MAX_FORWARD_ROWS + 1)
    if len(e.forward_shape) != 2:
        raise ValueError(
            f"batch_round.forward_shape must be [rows, tokens], got {short_repr(e.forward_shape)}"
        )
    each("batch_round.forward_shape", e.forward_shape, whole, 1, MAX_FORWARD_ROWS * MAX_BATCH)
    for name in ("draft_s", "verify_s", "total_s", "elapsed_s"):
        positive(f"batch_round.{name}", getattr(e, name), none_ok=False, zero_ok=True)


def check_row(e) -> None:
    """Every event's row: 0..MAX_BATCH − 1, or −1 for an event of the whole batch."""
    whole(f"{e.kind}.row", getattr(e, "row", 0), -1, MAX_BATCH - 1)


CHECKS = {
    "batch_round": check_batch_round,
    "run_started": check_started,
    "decided": check_decided,
    "drafted": check_drafted,
    "verified": check_verified,
    "draft_tree": check_tree,
    "committed": check_committed,
    "round_timed": check_timed,
    "retokenized": check_retokenized,
    "lookahead_window": check_window,
    "suffix_match": check_suffix_match,
    "tree_sized": check_tree_sized,
    "prefilling": check_prefilling,
    "beam_verified": check_beam_verified,
}


def positions(e) -> list[tuple[str, object]]:
    """(field, value) of every absolute position an event carries."""
    out = [(f"{e.kind}.pos", e.pos)] if hasattr(e, "pos") else []
    if e.kind == "rolled_back":
        out += [("rolled_back.cache_before", e.cache_before), ("rolled_back.cache_after", e.cache_after)]
        out += [(f"rolled_back.positions[{i}]", p) for i, p in enumerate(e.positions)]
    return out


def check_run(run: list, n_events: int) -> None:
    """One run (a RunStarted and what follows it): every position lies within its prompt + its tokens."""
    started = run[0]
    committed = sum(len(e.token_ids) for e in run if e.kind == "committed")
    generated = max(
        [committed, sum(e.steps for e in run if e.kind == "beam_verified")]  # beam search: its steps
        + [len(e.token_ids) for e in run if e.kind == "finished"]
    )
    drafts = max(
        [len(e.token_ids) for e in run if e.kind in ("drafted", "draft_tree")]
        + [len(d) for e in run if e.kind == "beam_drafted" for d in e.token_ids if isinstance(d, list)],
        default=0,
    )
    window = max(
        [len(e.token_ids) * len(e.token_ids[0]) for e in run if e.kind == "lookahead_window"], default=0
    )
    # the verify forward writes the drafts (and a lookahead
    limit = started.pos + generated + drafts + window + 1
    # window's rows) and one more slot
    for e in run:
        for where, pos in positions(e):
            whole(where, pos, 0, limit)
        if e.kind == "rolled_back" and e.cache_after > e.cache_before:
            raise ValueError(
                f"rolled_back.cache_after must be at most cache_before ({e.cache_before}), "
                f"got {e.cache_after}"
            )
        if e.kind == "finished":
            each("finished.token_ids", e.token_ids, whole, 0)
            check_summary(e.summary, started.mode == "ar", n_events)


def validate_events(events: list) -> None:
    """Refuse (ValueError, one line) a list of typed events whose numbers cannot mean a real run."""
    n = len(events)
    if not events or events[0].kind != "run_started":
        raise ValueError("trace must begin with a run_started event")
    for e in events:
        check_row(e)
    row_of = [getattr(e, "row", 0) for e in events]
    # a batched run: each row's events are runs of their own
    for row in sorted({r for r in row_of if r >= 0}):
        mine = [e for e, r in zip(events, row_of) if r == row]
        if mine[0].kind != "run_started":
            raise ValueError(f"row {row}'s events must begin with a run_started event")
        _validate_runs(mine, n)
    for e, r in zip(events, row_of):  # the whole batch's own events (batch_round, auto's decided)
        if r < 0:
            whole(f"{e.kind}.round", e.round, 0, n)
            check = CHECKS.get(e.kind)
            if check is not None:
                check(e)


def _validate_runs(events: list, n: int) -> None:
    """One row's events: the runs in it (a race holds two), each checked from its run_started on."""
    run: list = []
    for e in events:
        whole(f"{e.kind}.round", e.round, 0, n)  # a round number cannot exceed the number of events
        check = CHECKS.get(e.kind)
        if check is not None:
            check(e)
        if e.kind == "run_started" and run:
            check_run(run, n)
            run = []
        run.append(e)
    check_run(run, n)
