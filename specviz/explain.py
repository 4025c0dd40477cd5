"""A short explanation panel: the terms of speculative decoding and the speedup formula, filled in
with this run's numbers. Events -> HTML.
"""
from __future__ import annotations

from engine import costmodel
from .markup import esc
from .runs import spec_summary, view_runs


def _num(x, fmt: str = ".2f") -> str:
    return format(x, fmt) if isinstance(x, (int, float)) and not isinstance(x, bool) else "–"


def _spread(x) -> str:
    """ ' (spread 12%)': the interquartile range of the per-round samples over their median."""
    return f" (spread {x:.0%})" if isinstance(x, (int, float)) and not isinstance(x, bool) else ""


def render_explain(events) -> str:
    """Definitions of draft, target, γ, α, rollback and E/(γc+v), tied to this run's numbers.

    Every number is the run summary's (engine.metrics via engine.costmodel): the same α, E and
    prediction the summary line and the charts show."""
    runs = view_runs(events)
    spec = runs.get("speculative")
    s = spec_summary(events) if spec else {}
    alpha, c, v, gamma = s.get("alpha"), s.get("c"), s.get("v"), s.get("gamma") or (spec.gamma if spec else None)
    target = spec.started.target if spec and spec.started else "the target model"
    draft = spec.started.draft if spec and spec.started else "a cheaper drafter"
    rollbacks = sum(1 for r in spec.rounds if r.rolled_back is not None) if spec else 0
    dropped = sum(len(r.rolled_back.positions) for r in spec.rounds if r.rolled_back is not None) if spec else 0
    E, pred, measured, flags = s.get("expected_tokens"), s.get("predicted_speedup"), s.get("speedup"), s.get("timing_flags") or []
    terms = [
        ("target", f"the model whose output we want ({esc(target)}). One forward over γ+1 positions checks a whole draft."),
        ("draft", f"a cheap proposer ({esc(draft)}) that guesses the next γ tokens; q is its probability, p the target's."),
        ("γ (gamma)", f"tokens drafted per round. This run: γ = {esc(gamma if gamma else '–')}."),
        ("α (acceptance)", "each draft token is kept with probability min(1, p/q) (greedy: if it is the target's argmax); "
                           "the first rejected token is replaced by a corrected token, and if all γ pass the target adds a "
                           "bonus token. α is the chance one tested draft token is kept: accepted ÷ (accepted + rejections), "
                           "counting only positions the target tested (those after a rejection never were). This run: "
                           f"α = {_num(alpha, '.3f')} ({s.get('accepted', 0)} of {s.get('drafted', 0)} drafted tokens "
                           f"accepted, {s.get('rejections', 0)} rejections)."),
        ("rollback", "the target cache already holds the rejected positions; moving its length pointer back drops them "
                     f"in O(1). This run: {rollbacks} rollbacks, {dropped} positions dropped."),
    ]
    dl = "".join(f"<dt>{k}</dt><dd>{d}</dd>" for k, d in terms)
    lines = [
        f"<code>E = (1 − α<sup>γ+1</sup>) / (1 − α)</code> = {_num(E)} tokens per target forward predicted from α "
        f"(measured: {_num(s.get('mean_accepted_length'))}; they differ when acceptance is not independent from token "
        "to token, e.g. n-gram matches run in streaks)",
        f"<code>speedup ≈ E / (γc + v)</code> with c = {_num(c, '.3f')}{_spread(s.get('c_spread'))} (draft step ÷ "
        f"target step), v = {_num(v)}{_spread(s.get('v_spread'))} (verify round ÷ target step, measured), target step "
        f"t(1) = {_num((s.get('target_step_s') or 0) * 1e3, '.1f')} ms{_spread(s.get('step_spread'))} from "
        f"{esc(s.get('step_source') or '–')} → predicted {_num(pred)}×",
        f"measured: {_num(measured)}× (speculative tok/s ÷ AR tok/s, raced side by side)" if measured is not None
        else "measured: turn on the race against AR to measure the real speedup",
    ]
    note = "" if pred is not None else '<p class="sv-note">c and v appear once the speculative run finishes.</p>'
    if flags:
        note += (f'<p class="sv-note sv-warn">⚠ {costmodel.BUSY}: ' + "; ".join(esc(f) for f in flags) + "</p>")
    formula = "".join(f"<li>{line}</li>" for line in lines)
    return (f'<div class="specviz specviz-explain"><dl>{dl}</dl>'
            f'<ul class="sv-formula">{formula}</ul>{note}</div>')
