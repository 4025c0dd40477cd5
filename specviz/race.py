"""The race: the AR output beside the speculative output, each replayable on its own measured
timeline (a round's tokens appear at its RoundTimed.elapsed_s), with times, tokens/s and each lane's
progress against the token target. The engine runs the two lanes interleaved on one thread, each
timing only its own compute; the verdict (speedup, identical or not) appears only once both have
finished. Events -> HTML; every token text is escaped.
"""

from __future__ import annotations

from engine import costrule
from engine.figures import plural, quotient_terms
from engine.metrics import greedy_drift

from .drift import drift_meter, lossy_badge, lossy_rule
from .imported import engine_family, measured_comparison
from .markup import esc, stream_text
from .roofline import bandwidth_line
from .runs import predicted_terms, spec_summary, view_runs

LANES = (
    ("ar", "Autoregressive", "target only, one token per forward"),
    ("speculative", "Speculative", "draft proposes, target verifies"),
)


def visible_tokens(run, t) -> int:
    """Tokens a lane shows at wall time t of its own clock (what the race panel and the summary both count)."""
    return sum(len(r.tokens) for r in _visible_rounds(run, t))


def _visible_rounds(run, t):
    """Rounds whose tokens are committed by wall time t (untimed rounds count only when t is None)."""
    if t is None:
        return list(run.rounds)
    return [r for r in run.rounds if r.timed is not None and r.timed.elapsed_s <= t]


def _lane(mode: str, title: str, subtitle: str, run, t, rate: str | None = None) -> str:
    """One lane; `rate` the tok/s as the verdict's speedup divides it (None: the lane's own, one decimal)."""
    if run is None:
        return (
            f'<div class="race-lane race-missing" data-mode="{mode}"><div class="race-head"><b>{title}</b>'
            f'<small>{subtitle}</small></div><div class="race-out sv-empty">not run</div></div>'
        )
    rounds = _visible_rounds(run, t)
    shown = sum(len(r.tokens) for r in rounds)
    total = run.n_tokens()
    wall = run.elapsed_s()
    now = wall if t is None or wall is None else min(t, wall)
    tps = run.tokens_per_s()
    spans = "".join(
        f'<span class="tok tok-{esc(o)}" data-round="{r.round}" data-pos="{r.committed.pos + i}">'
        f'<span class="tok-text">{stream_text(text)}</span></span>'
        for r in rounds
        for i, (text, o) in enumerate(zip(r.tokens, r.origins))
    )
    state = "done" if run.done and len(rounds) == len(run.rounds) else "running"
    goal = total if run.done else max(run.target_tokens, total, 1)  # the token target until the lane is done
    clock = f"{now:.2f} s" if now is not None else "–"
    if wall is not None and t is not None:
        clock += f" / {wall:.2f} s"
    stats = (
        f'<span class="race-stat">{clock}</span><span class="race-stat">{shown}/{goal} tokens</span>'
        f'<span class="race-stat">{rate or (f"{tps:.1f}" if tps else "–")} tok/s</span>'
    )
    bar = f'<progress class="race-progress" max="{goal}" value="{shown}"></progress>'
    return (
        f'<div class="race-lane race-{state}" data-mode="{mode}" data-tokens="{shown}" data-goal="{goal}">'
        f'<div class="race-head"><b>{title}</b><small>{subtitle}</small></div>'
        f'<div class="race-stats">{stats}</div>{bar}<div class="race-out">{spans}</div></div>'
    )


def live_time(spec, ar) -> float | None:
    """While racing, both lanes are shown at one moment of their own clocks: the earlier of the two lanes'
    latest times. The engine keeps the lanes at equal shares of their work, so the faster lane's clock is
    behind; showing both at its time lets each lane grow at its own measured pace. The slower lane's last
    stretch appears with the verdict."""
    times = [run.elapsed_s() for run in (spec, ar)]
    return min(times) if None not in times else 0.0


def _first_difference(spec, ar) -> str:
    d = greedy_drift(spec.token_ids(), ar.token_ids())
    return (
        "outputs identical on this run" if d["first"] is None else f"outputs differ at token {d['first'] + 1}"
    )


def verdict(spec, ar) -> str:
    """Plain-text verdict, only once both lanes have finished: greedy runs must match token for token; sampled runs
    are two draws from one law, the same draws where the lanes share a seed and every draft was a deterministic
    guess (engine/sampling/draws.py)."""
    if spec is None or ar is None:
        if ar is None and engine_family(
            spec
        ):  # an imported run: what its recorder measured, never a race to run
            return measured_comparison(spec)
        return "Run both to compare (AR baseline missing)." if ar is None else "Speculative run missing."
    if not (spec.done and ar.done):
        return "Racing: the verdict appears when both lanes have finished."
    if lossy_rule(spec):  # a lossy acceptance rule: the drift meter beside this says how far it went
        return (
            f"LOSSY rule ({spec.config.get('accept')}): the speculative lane is not the target's output"
            + ("." if not spec.greedy else f"; {_first_difference(spec, ar)}.")
        )
    a, b = spec.token_ids(), ar.token_ids()
    if not spec.greedy:
        how = (
            "the outputs match too (one seed: a position draws the same token in both lanes unless a draft "
            "sampled from q was tested there)"
            if a == b
            else "outputs differ (another seed, or drafts sampled from q tested with other draws)"
        )
        return f"Distributions identical (sampling): {how}; both are exact samples of the target."
    diff = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), None)
    if diff is None and len(a) == len(b):
        return "Outputs identical (greedy)."
    return f"Outputs differ at token {(diff if diff is not None else min(len(a), len(b))) + 1}."


def render_race(events, t: float | None = None) -> str:
    """HTML of both outputs as committed by wall time t (None: everything), their speed and, once both
    lanes have finished, the verdict with the measured (and predicted) speedup."""
    runs = view_runs(events)
    spec, ar = runs.get("speculative"), runs.get("ar")
    if spec is None and ar is None:
        return '<div class="specviz specviz-race sv-empty">No runs yet.</div>'
    if t is None and spec is not None and ar is not None and not (spec.done and ar.done):
        t = live_time(spec, ar)
    summary = spec_summary(events) if spec is not None and ar is not None else {}
    rates = None
    # the lanes' tok/s divide to the printed speedup
    if summary.get("speedup") and summary.get("ar_tokens_per_s"):
        ar_rate = summary["ar_tokens_per_s"]
        rates = quotient_terms(summary["speedup"] * ar_rate, ar_rate, least=1)
    shown = dict(zip(("speculative", "ar"), rates[1:])) if rates else {}
    lanes = "".join(_lane(mode, title, sub, runs.get(mode), t, shown.get(mode)) for mode, title, sub in LANES)
    speed, warn = "", ""
    if summary.get("speedup") is not None:
        # the prediction on the costs the rule allows (engine.costrule), saying when they are not the run's own
        used = costrule.usable(summary)
        pred = predicted_terms(used)
        quiet = (
            " on its host's quiet calibration"
            if (used.get("costs") or {}).get("source") == "calibration"
            else ""
        )
        speed = (
            f'<span class="race-speedup" data-speedup="{summary["speedup"]:.3f}">speedup '
            f"{rates[0] if rates else format(summary['speedup'], '.2f')}×</span>"
            + (f'<span class="race-predicted">predicted {pred[0]}×{quiet}</span>' if pred is not None else "")
        )
    if speed and t is not None:  # a replay: the lanes stand at time t, the verdict is the whole run's
        speed = '<span class="race-scope">whole run:</span>' + speed
    if summary.get("threads") and spec is not None and spec.done and ar is not None and ar.done:
        n = summary["threads"]
        speed += (
            f'<span class="race-threads" title="Engine.race computes both lanes with the same thread count '
            f"(SPECVIZ_RACE_THREADS) so that an outside load slows them alike; a solo run may use more "
            f'threads and show more tok/s, not a different ratio.">both lanes on {plural(n, "CPU thread")}</span>'
        )
    if spec is not None and spec.done and ar is not None and ar.done and ar.started is not None:
        speed += bandwidth_line(summary, getattr(ar.started, "host", {}))
    if summary.get("timing_flags"):
        warn = (
            f'<span class="race-warn sv-warn">⚠ machine was busy: timing unreliable ('
            f"{esc('; '.join(summary['timing_flags']))})</span>"
        )
    if spec is not None and spec.done and ar is not None and ar.done:
        warn += drift_meter(spec, ar, summary.get("speedup"))
    text = verdict(spec, ar)
    ok = "same" if text.startswith(("Outputs identical", "Distributions")) else "differ"
    if spec is None or ar is None or not (spec.done and ar.done):
        ok = "pending"
    at = "" if t is None else f' data-t="{t:.3f}"'
    return (
        f'<div class="specviz specviz-race"{at}>'
        f'{lossy_badge(spec)}<div class="race-lanes">{lanes}</div>'
        f'<div class="race-verdict race-{ok}">{speed}<span class="race-verdict-text">{esc(text)}</span>{warn}</div>'
        f"</div>"
    )
