"""What a trace's events must mean, beyond their types: the checks `trace_from_json` runs last.

A trace comes from a file anyone can edit, and renderers trust its numbers: probabilities (p, q, α)
in [0, 1], γ within 1..MAX_GAMMA, rounds no more than the events, positions within the prompt plus
the tokens the run holds, costs positive, parallel lists of one length, known `config` and
`summary` keys of the right type. Every refusal is a one-line ValueError naming the field and its
allowed range. This module knows nothing about JSON, HTML or torch.
"""

from __future__ import annotations

import math
import re

from .config import MAX_BATCH, MAX_GAMMA, MODES, WHOLE_SETTINGS, GenerationConfig, short_repr
from .specs import FAMILIES

RUN_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")
MAX_TREE_NODES = WHOLE_SETTINGS["tree_budget"][1]  # draft nodes of one tree round
# rows of one verify forward: the root, its nodes, a drafter's own rows
MAX_FORWARD_ROWS = 2 * MAX_TREE_NODES + 1
# W, N − 1
MAX_MATCH = int(FAMILIES["suffix"].args[0].high)  # suffix's longest match, its N
MAX_OCCURRENCES = 64  # engine/drafters/suffix.py's OCCURRENCES (its test pins the two together)
MAX_WINDOW = (int(FAMILIES["lookahead"].args[0].high), int(FAMILIES["lookahead"].args[1].high) - 1)
MAX_BEAMS = WHOLE_SETTINGS["num_beams"][1]
MAX_TOPK = WHOLE_SETTINGS["record_topk"][1]  # alternatives a top-k list may hold
PROB_SLACK = 1e-6  # float32 rounding may put a probability a hair above 1
NEXT_KINDS = ("corrected", "bonus")
TREE_STATUS = ("accepted", "rejected", "unvisited")
CONFIG_KEYS = set(GenerationConfig.__dataclass_fields__)


def real_number(value) -> bool:
    """A finite int or float, not a bool."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def prob(where: str, value, none_ok: bool = False, below_one: bool = False) -> None:
    """A probability in [0, 1] (in [0, 1) when `below_one`: a uniform draw)."""
    if value is None and none_ok:
        return
    high = 1.0 if below_one else 1.0 + PROB_SLACK
    if not (real_number(value) and 0.0 <= value and (value < high if below_one else value <= high)):
        allowed = "a probability in [0, 1)" if below_one else "a probability in [0, 1]"
        raise ValueError(f"{where} must be {allowed}{' or null' if none_ok else ''}, got {short_repr(value)}")


def positive(where: str, value, none_ok: bool = True, zero_ok: bool = False) -> None:
    """A cost or rate: > 0 (>= 0 when `zero_ok`), or None."""
    if value is None and none_ok:
        return
    if not (real_number(value) and (value >= 0 if zero_ok else value > 0)):
        allowed = "a number >= 0" if zero_ok else "a number > 0"
        raise ValueError(f"{where} must be {allowed}{' or null' if none_ok else ''}, got {short_repr(value)}")


def whole(where: str, value, low: int, high: int | None = None) -> None:
    """An int (not a bool, not a float) in low..high."""
    if not (
        isinstance(value, int)
        and not isinstance(value, bool)
        and low <= value
        and (high is None or value <= high)
    ):
        allowed = f"a whole number in {low}..{high}" if high is not None else f"a whole number >= {low}"
        raise ValueError(f"{where} must be {allowed}, got {short_repr(value)}")


def each(where: str, values: list, check, *args, **kwargs) -> None:
    for i, value in enumerate(values):
        check(f"{where}[{i}]", value, *args, **kwargs)


def texts(where: str, values: list) -> None:
    for i, value in enumerate(values):
        if not isinstance(value, str):
            raise ValueError(f"{where}[{i}] must be a string, got {short_repr(value)}")


def topk_rows(where: str, rows) -> None:
    """A top-k list as the renderers read it: at most MAX_TOPK rows of [id, text, prob]."""
    if not isinstance(rows, list) or len(rows) > MAX_TOPK:
        raise ValueError(
            f"{where} must be a list of at most {MAX_TOPK} [id, text, prob] rows, got {short_repr(rows)}"
        )
    for i, row in enumerate(rows):
        if not (isinstance(row, list) and len(row) == 3 and isinstance(row[1], str)):
            raise ValueError(f"{where}[{i}] must be [id, text, prob], got {short_repr(row)}")
        whole(f"{where}[{i}][0]", row[0], 0)
        prob(f"{where}[{i}][2]", row[2])


def topk_per_position(where: str, value, at_most: int) -> None:
    """One top-k list per position ([] when none was recorded), at most `at_most` positions."""
    if not isinstance(value, list) or len(value) > at_most:
        raise ValueError(f"{where} must be a list of at most {at_most} top-k lists, got {short_repr(value)}")
    for i, rows in enumerate(value):
        topk_rows(f"{where}[{i}]", rows)


def one_of(where: str, value, allowed: tuple) -> None:
    if value not in allowed:
        raise ValueError(f"{where} must be one of {', '.join(allowed)}, got {short_repr(value)}")


def same_length(kind: str, event, names: list[str], at_most: int | None = None) -> None:
    """Parallel lists of an event (one entry per token) have one length, at most `at_most`."""
    lengths = {name: len(getattr(event, name)) for name in names}
    n = lengths[names[0]]
    for name, length in lengths.items():
        if length != n:
            raise ValueError(
                f"{kind}.{name} must have one entry per token ({n}, like {kind}.{names[0]}), got {length}"
            )
    if at_most is not None and n > at_most:
        raise ValueError(f"{kind}.{names[0]} must hold at most {at_most} tokens, got {n}")


def check_config(config: dict) -> None:
    """The known keys of RunStarted.config, checked by GenerationConfig itself (unknown keys are kept as data)."""
    known = {k: v for k, v in config.items() if k in CONFIG_KEYS}
    try:
        GenerationConfig(**known)
    except ValueError as e:
        raise ValueError(f"run_started.config.{e}") from None


def check_summary(summary: dict, ar: bool, n_events: int) -> None:
    """The known keys of Finished.summary (engine/metrics.py writes them); unknown keys are kept as data."""
    where = "finished.summary."
    for key, value in summary.items():
        if key in ("acceptance_rate", "alpha", "contended_share"):
            prob(where + key, value, none_ok=True)
        elif key == "per_position_acceptance":
            if not isinstance(value, list):
                raise ValueError(f"{where}{key} must be a list of probabilities, got {short_repr(value)}")
            each(where + key, value, prob, none_ok=True)
        elif key == "gamma":
            whole(where + key, value, 0 if ar else 1, MAX_GAMMA)
        elif key == "rounds":
            whole(where + key, value, 0, n_events)
        elif key == "v_n" and value is not None:
            whole(where + key, value, 1, MAX_FORWARD_ROWS)
        elif key in ("new_tokens", "drafted", "accepted", "rejections", "max_new_tokens", "tree_rounds"):
            whole(where + key, value, 0)
        elif key in ("wall_s", "target_step_s", "c", "v", "ar_wall_s"):
            positive(where + key, value)
        elif key in (
            "tokens_per_s",
            "draft_s",
            "verify_s",
            "predicted_speedup",
            "ar_tokens_per_s",
            "speedup",
            "mean_accepted_length",
            "expected_tokens",
            "model_tokens",
            "model_steps",
            "c_spread",
            "v_spread",
            "step_spread",
            "probe_step_s",
            "outside_cores",
            "free_cores",
        ):
            positive(where + key, value, zero_ok=True)
        elif key == "ar_token_ids":
            if not isinstance(value, list):
                raise ValueError(f"{where}{key} must be a list of token ids, got {short_repr(value)}")
            each(where + key, value, whole, 0)
        elif key == "identical_to_ar" and not isinstance(value, bool):
            raise ValueError(f"{where}{key} must be true or false, got {short_repr(value)}")
        elif key == "mode" and not isinstance(value, str):
            raise ValueError(f"{where}{key} must be a string, got {short_repr(value)}")


def check_decided(e) -> None:
    whole("decided.gamma", e.gamma, 0, MAX_GAMMA)
    positive("decided.plain_tokens_per_s", e.plain_tokens_per_s, zero_ok=True)
    for i, c in enumerate(e.candidates):
        where = f"decided.candidates[{i}]"
        if not isinstance(c, dict):
            raise ValueError(f"{where} must be an object, got {short_repr(c)}")
        prob(f"{where}.alpha", c.get("alpha"), none_ok=True)
        if "gamma" in c:
            whole(f"{where}.gamma", c["gamma"], 0, MAX_GAMMA)
        for key in ("c", "v", "predicted_tokens_per_s"):  # auto rounds a cheap drafter's c to 0.0
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
    for name in ("draft_s", "verify_s", "total_s", "elapsed_s"):
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


def check_started(e) -> None:
    if not (isinstance(e.run_id, str) and RUN_ID.fullmatch(e.run_id)):
        raise ValueError(
            f"run_started.run_id must be 1 to 64 characters of A-Z a-z 0-9 _ -, got {short_repr(e.run_id)}"
        )
    one_of("run_started.mode", e.mode, MODES)
    check_config(e.config)
    same_length("run_started", e, ["prompt_ids", "prompt_tokens"])
    each("run_started.prompt_ids", e.prompt_ids, whole, 0)
    texts("run_started.prompt_tokens", e.prompt_tokens)
    if e.pos != len(e.prompt_ids):
        raise ValueError(
            f"run_started.pos must be the prompt length ({len(e.prompt_ids)}), got {short_repr(e.pos)}"
        )
    check_host(e.host)
    check_engine(getattr(e, "engine", {}))


ENGINE_TEXT = (
    "name",
    "version",
    "method",
    "hook",
)  # RunStarted.engine: who recorded the run (engine/recorders)
MAX_ENGINE_TEXT = 120


def check_engine(engine) -> None:
    """RunStarted.engine: {} (specviz's own run) or the recording engine's name, version, method and hook (short
    strings) and `missing`, what the recording could not see (a list of short strings)."""
    if not isinstance(engine, dict):
        raise ValueError(f"run_started.engine must be an object, got {short_repr(engine)}")
    unknown = set(engine) - set(ENGINE_TEXT) - {"missing"}
    if unknown:
        raise ValueError(
            f"run_started.engine has unknown key {sorted(unknown)[0]!r}; known: {', '.join(ENGINE_TEXT)}, missing"
        )
    for key in ENGINE_TEXT:
        value = engine.get(key, "")
        if not isinstance(value, str) or len(value) > MAX_ENGINE_TEXT:
            raise ValueError(
                f"run_started.engine.{key} must be text of at most {MAX_ENGINE_TEXT} characters, "
                f"got {short_repr(value)}"
            )
    missing = engine.get("missing", [])
    if not isinstance(missing, list) or len(missing) > 8:
        raise ValueError(
            f"run_started.engine.missing must be a list of at most 8 texts, got {short_repr(missing)}"
        )
    for i, m in enumerate(missing):
        if not isinstance(m, str) or len(m) > MAX_ENGINE_TEXT:
            raise ValueError(
                f"run_started.engine.missing[{i}] must be text of at most {MAX_ENGINE_TEXT} characters, "
                f"got {short_repr(m)}"
            )


HOST_TEXT = ("cpu", "gpu", "torch", "dtype", "device", "forward", "measured")
HOST_NUMBERS = (
    "threads",
    "bandwidth",
    "bandwidth_best",
    "copy_bandwidth",
    "flops",
    "weight_bytes",
    "flops_per_token",
    "kv_bytes_per_position",
    "attn_flops_per_position",
    "outside_cores",
)
KERNEL_NAMES = ("native", "mkl", "onednn")


def check_host(host) -> None:
    """RunStarted.host: the measured machine (engine/runtime/roofline.py). Known keys only, numbers >= 0,
    short strings, kernels {projection: {rows: "native" | "mkl" | "onednn"}}."""
    if not isinstance(host, dict):
        raise ValueError(f"run_started.host must be an object, got {short_repr(host)}")
    unknown = set(host) - set(HOST_TEXT) - set(HOST_NUMBERS) - {"flags", "kernels"}
    if unknown:
        raise ValueError(
            f"run_started.host has unknown keys {short_repr(sorted(unknown))}; known: "
            f"{', '.join(HOST_TEXT + HOST_NUMBERS + ('flags', 'kernels'))}"
        )
    for k in HOST_NUMBERS:
        positive(f"run_started.host.{k}", host.get(k), zero_ok=True)
    for k in HOST_TEXT:
        if k in host and not (isinstance(host[k], str) and len(host[k]) <= 200):
            raise ValueError(
                f"run_started.host.{k} must be a string of at most 200 characters, got {short_repr(host[k])}"
            )
    flags = host.get("flags", [])
    if not (
        isinstance(flags, list)
        and len(flags) <= 32
        and all(isinstance(f, str) and len(f) <= 32 for f in flags)
    ):
        raise ValueError(
            f"run_started.host.flags must be a list of at most 32 short strings, got {short_repr(flags)}"
        )
    plan = host.get("kernels", {})
    ok = (
        isinstance(plan, dict)
        and len(plan) <= 16
        and all(
            isinstance(name, str)
            and len(name) <= 32
            and isinstance(rows, dict)
            and len(rows) <= 64
            and all(
                isinstance(r, str) and r.isdigit() and len(r) <= 4 and k in KERNEL_NAMES
                for r, k in rows.items()
            )
            for name, rows in plan.items()
        )
    )
    if not ok:
        raise ValueError(
            'run_started.host.kernels must map at most 16 projections to {rows: "native", "mkl" or "onednn"}, '
            f"got {short_repr(plan)}"
        )


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
