"""A short explanation panel: the terms of speculative decoding and the speedup formula, filled in
with this run's numbers. Events -> HTML.
"""
from __future__ import annotations

from engine.metrics import expected_tokens, predicted_speedup
from .markup import esc
from .runs import measured_speedup, spec_summary, view_runs


def _num(x, fmt: str = ".2f") -> str:
    return format(x, fmt) if isinstance(x, (int, float)) else "–"


def render_explain(events) -> str:
    """Definitions of draft, target, γ, acceptance, rollback and E/(γc+v), tied to this run's numbers."""
    runs = view_runs(events)
    spec = runs.get("speculative")
    summary = spec_summary(events) if spec else {}
    alpha, c, v = summary.get("acceptance_rate"), summary.get("c"), summary.get("v")
    gamma = summary.get("gamma") or (spec.gamma if spec else None)
    target = spec.started.target if spec and spec.started else "the target model"
    draft = spec.started.draft if spec and spec.started else "a cheaper drafter"
    rollbacks = sum(1 for r in spec.rounds if r.rolled_back is not None) if spec else 0
    dropped = sum(len(r.rolled_back.positions) for r in spec.rounds if r.rolled_back is not None) if spec else 0
    E = expected_tokens(alpha, int(gamma)) if alpha is not None and gamma else None
    pred = predicted_speedup(alpha, int(gamma), c, v) if None not in (alpha, c, v) and gamma else None
    measured = measured_speedup(events)
    terms = [
        ("target", f"the model whose output we want ({esc(target)}). One forward over γ+1 positions checks a whole draft."),
        ("draft", f"a cheap proposer ({esc(draft)}) that guesses the next γ tokens; q is its probability, p the target's."),
        ("γ (gamma)", f"tokens drafted per round. This run: γ = {esc(gamma if gamma else '–')}."),
        ("acceptance", "each draft token is kept with probability min(1, p/q) (greedy: if it is the target's argmax); "
                       "the first rejected token is replaced by a corrected token, and if all γ pass the target adds a "
                       f"bonus token. This run: α = accepted / drafted = {_num(alpha, '.3f')}."),
        ("rollback", "the target cache already holds the rejected positions; moving its length pointer back drops them "
                     f"in O(1). This run: {rollbacks} rollbacks, {dropped} positions dropped."),
    ]
    dl = "".join(f"<dt>{k}</dt><dd>{d}</dd>" for k, d in terms)
    lines = [
        f"<code>E = (1 − α<sup>γ+1</sup>) / (1 − α)</code> = {_num(E)} tokens per target forward",
        f"<code>speedup ≈ E / (γc + v)</code> with c = {_num(c, '.3f')} (draft step ÷ target step), "
        f"v = {_num(v)} (verify forward ÷ target step) → predicted {_num(pred)}×",
        f"measured: {_num(measured)}× (speculative tok/s ÷ AR tok/s)" if measured is not None
        else "measured: run the AR baseline to measure the real speedup",
    ]
    note = "" if pred is not None else '<p class="sv-note">c and v appear once the speculative run finishes.</p>'
    formula = "".join(f"<li>{line}</li>" for line in lines)
    return (f'<div class="specviz specviz-explain"><dl>{dl}</dl>'
            f'<ul class="sv-formula">{formula}</ul>{note}</div>')
