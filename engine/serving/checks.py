"""Reading a report's numbers and checking its counts: each refusal is a one-line ValueError naming the field;
a parsed run's counts must cohere and agree with the figures its engine printed beside them. Plain Python.
"""

from __future__ import annotations

import math
from dataclasses import replace

from .run import MAX_COUNT, MAX_POSITIONS, SHOWN, TOLERANCE, MetricsRun, evaluate, named, substitute


# -- reading numbers: each refusal names its field --------------------------------------------------------------
def shown(value) -> str:
    text = repr(value)
    return text if len(text) <= SHOWN else text[: SHOWN - 1] + "…"


def whole(where: str, name: str, value) -> int:
    """A count: a whole number from 0 to MAX_COUNT (43 or 43.0); else a ValueError naming the field."""
    ok = (
        not isinstance(value, bool)
        and isinstance(value, (int, float))
        and (isinstance(value, int) or (math.isfinite(value) and value.is_integer()))
        and 0 <= value <= MAX_COUNT
    )
    if not ok:
        raise ValueError(f"{where}{name} must be a whole number ≥ 0, got {shown(value)}")
    return int(value)


def number(where: str, name: str, value) -> float:
    """A reported figure: a finite number ≥ 0."""
    ok = (
        not isinstance(value, bool)
        and isinstance(value, (int, float))
        and math.isfinite(value)
        and value >= 0
    )
    if not ok:
        raise ValueError(f"{where}{name} must be a finite number ≥ 0, got {shown(value)}")
    return float(value)


def get(obj: dict, where: str, name: str):
    if name not in obj:
        raise ValueError(f"{where}{name} is missing")
    return obj[name]


def first_count(obj: dict, where: str, names: tuple) -> int | None:
    """The first of `names` present in obj, as a count (an engine that renamed a field keeps the old name a while)."""
    for name in names:
        if name in obj:
            return whole(where, name, obj[name])
    return None


def histogram(where: str, name: str, value) -> tuple:
    """Steps by accepted drafts: a dense list (index j) or a map {"j": steps} (JSON keys are strings)."""
    if isinstance(value, dict):
        dense = {}
        for key, count in value.items():
            j = whole(where, f"{name} key", int(key) if str(key).isdigit() and len(str(key)) <= 6 else key)
            dense[j] = whole(where, f"{name}[{shown(key)}]", count)
        if dense and max(dense) >= MAX_POSITIONS:
            raise ValueError(f"{where}{name} has a bucket {max(dense)}; at most {MAX_POSITIONS - 1} is read")
        return tuple(dense.get(j, 0) for j in range(max(dense) + 1)) if dense else ()
    if not isinstance(value, list):
        raise ValueError(f"{where}{name} must be a list of step counts, got {type(value).__name__}")
    if len(value) > MAX_POSITIONS:
        raise ValueError(f"{where}{name} has {len(value)} buckets; at most {MAX_POSITIONS} are read")
    return tuple(whole(where, f"{name}[{j}]", count) for j, count in enumerate(value))


def tails(hist: tuple, k: int) -> tuple:
    """per_position from a histogram: steps that accepted more than i drafts, i = 0..k−1."""
    return tuple(sum(hist[i + 1 :]) for i in range(k))


def check_counts(where: str, names: dict, run: MetricsRun) -> None:
    """What counts of one run must satisfy, whatever the engine: accepted ≤ drafted; a histogram adds up to the
    steps and the accepted drafts; per-position counts fall with the position and add up to the accepted."""
    name = names.get
    if run.steps == 0 and run.drafted:
        raise ValueError(f"{where}{name('steps')} is 0, but {name('drafted')} is {run.drafted}")
    if run.accepted is None:
        return
    if run.drafted is not None and run.accepted > run.drafted:
        raise ValueError(
            f"{where}{name('accepted')} is {run.accepted}, more than {name('drafted')} = {run.drafted}"
        )
    hist = run.histogram
    if hist and run.steps is not None and sum(hist) != run.steps:
        raise ValueError(
            f"{where}{name('histogram')} adds up to {sum(hist)} steps, {name('steps')} is {run.steps}"
        )
    if hist and sum(j * n for j, n in enumerate(hist)) != run.accepted:
        raise ValueError(
            f"{where}{name('histogram')} holds {sum(j * n for j, n in enumerate(hist))} accepted drafts, "
            f"{name('accepted')} is {run.accepted}"
        )
    pos = run.per_position
    if any(a < b for a, b in zip(pos, pos[1:])) or (pos and run.steps is not None and pos[0] > run.steps):
        raise ValueError(
            f"{where}{name('per_position')} must fall with the position and start at most at "
            f"{name('steps')} = {run.steps}, got {list(pos)[:8]}"
        )
    if pos and sum(pos) != run.accepted:
        raise ValueError(
            f"{where}{name('per_position')} adds up to {sum(pos)}, {name('accepted')} is {run.accepted} "
            "(a scrape caught mid-update? read it again)"
        )


def check_reported(where: str, run: MetricsRun) -> None:
    """A figure the engine reports beside its counts must be the one its own formula gives from them."""
    r = run.reader
    for key, formula, field_name in (("tau", r.tau, r.tau_name), ("rate", r.rate, r.rate_name)):
        given, derived = run.reported.get(key), evaluate(formula, run.counts())
        if given is not None and derived is not None and abs(given - float(derived)) > TOLERANCE:
            raise ValueError(
                f"{where}{field_name} is {given:g}, but {named(formula, r.names)} = "
                f"{substitute(formula, run.counts())} = {float(derived):.4f}: the figure and its counts disagree"
            )


def drafting_note(run: MetricsRun) -> tuple:
    """Said when steps drafted fewer than k on average: a position's rate then counts those steps as misses."""
    k, steps, drafted = run.draft_len, run.steps, run.drafted
    if not (k and steps and drafted is not None) or drafted >= steps * k:
        return ()
    return (
        f"{drafted} drafts over {steps} steps is {drafted / steps:.2f} a step, fewer than k = {k}: some steps "
        "drafted fewer tokens, and the per-position rates count their missing positions as not accepted",
    )


def drafted_nothing(run: MetricsRun) -> bool:
    """No draft in the report (a request that never drafted, a window in which the server drafted none)."""
    return run.drafted == 0 or run.steps == 0


def nothing_note(run: MetricsRun) -> str:
    names = run.reader.names
    zero = names["drafted"] if run.drafted == 0 else names["steps"]
    return (
        f"drafted nothing: {zero} is 0, so τ and the rate are 0 ÷ 0 and not shown (a request that never "
        "drafted, or a window in which the server drafted none)"
    )


def finish(where: str, run: MetricsRun) -> MetricsRun:
    """A parsed run, checked: its counts cohere and agree with the figures the engine printed beside them. A run
    that drafted nothing is read, said in a note (its figures are 0 ÷ 0)."""
    check_counts(where, run.reader.names, run)
    if drafted_nothing(run):
        return replace(run, notes=run.notes + (nothing_note(run),))
    check_reported(where, run)
    if run.drafted is not None and run.steps and run.draft_len and run.drafted == run.steps * run.draft_len:
        last = run.histogram[run.draft_len] if len(run.histogram) > run.draft_len else None
        full = last if last is not None else (run.per_position[-1] if run.per_position else None)
        if (
            full is not None and run.rejections is None
        ):  # every step drafted k: a step that kept fewer rejected
            run = replace(run, rejections=run.steps - full)
    return replace(run, notes=run.notes + drafting_note(run))
