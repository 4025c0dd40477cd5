"""Stepping through a recorded run: how many rounds it has, the events as they stood after round r,
and the wall time of that moment (so the AR run can be cut at the same instant of its own clock).
"""

from __future__ import annotations

from .race import render_race
from .runs import ROUND_KINDS, RunSet, as_event, main_run, run_set, split_runs, view_run
from .tokens import render_stream
from .tree import render_tree


def rounds_of(events) -> int:
    """Number of rounds of the speculative run (of the AR run when there is no speculative one)."""
    run = main_run(events)
    if run is None:
        return 0
    last = max((r.round for r in run.rounds), default=0)
    return max(last, run.finished.round if run.finished is not None else 0)


def time_at_round(events, r: int) -> float | None:
    """Elapsed wall time of the speculative run when round r was committed (None before any timing)."""
    run = main_run(events)
    times = [rv.timed.elapsed_s for rv in run.rounds if rv.timed is not None and rv.round <= r] if run else []
    return times[-1] if times else (0.0 if run is not None else None)


def _cut_by_round(evs, r):
    total = max((e.round for e in evs if e.kind in ROUND_KINDS), default=0)
    keep = []
    for e in evs:
        if e.kind in ROUND_KINDS and e.round > r:
            continue
        if e.kind == "finished" and r < total:
            continue
        keep.append(e)
    return keep


def _cut_by_time(evs, t):
    run = view_run(evs)
    late = {rv.round for rv in run.rounds if rv.timed is None or rv.timed.elapsed_s > t}
    keep = [e for e in evs if not (e.kind in ROUND_KINDS and e.round in late)]
    return [e for e in keep if e.kind != "finished"] if late else keep


def events_upto(events, r: int | None) -> list:
    """The events as they stood after round r of the main run; other runs cut at the same wall time."""
    if isinstance(events, RunSet):
        return events if r is None else events.cut(r, time_at_round(events, r))
    if r is None:
        return [e for e in map(as_event, events or []) if e is not None]
    runs = split_runs(events)
    main = main_run(events)
    if main is None:
        return []
    t = time_at_round(events, r)
    out = []
    for mode, evs in runs.items():
        out.extend(
            _cut_by_round(evs, r) if mode == main.mode else _cut_by_time(evs, t if t is not None else 0.0)
        )
    return out


def replay_frame(events, r: int | None) -> dict:
    """stream / tree / race HTML as they stood after round r (None: the whole run)."""
    events = run_set(events)
    t = None if r is None else time_at_round(events, r)
    return {
        "stream": render_stream(events, upto_round=r),
        "tree": render_tree(events, upto_round=r),
        "race": render_race(events, t=t),
    }
