"""The page's figures recomputed from the inputs printed beside them (the "numbers agree" check), on the text of
the summary line and the Explain tab as a reader sees it. Each check names what disagreed; `check_page` returns
the list of disagreements (empty: every figure reproduces within its printed rounding)."""
from __future__ import annotations

import re

NUM = r"(\d+(?:\.\d+)?)"


def close(a: float, b: float, tol: float) -> bool:
    return abs(a - b) <= tol


def expected_tokens(alpha: float, gamma: int) -> float:
    return gamma + 1.0 if alpha >= 1 else (1 - alpha ** (gamma + 1)) / (1 - alpha)


def check_summary(summary: str) -> list[str]:
    """α = accepted ÷ tested from the counts beside it."""
    bad = []
    m = re.search(rf"α = {NUM} per token \((\d+) of (\d+) tested drafts? accepted", summary)
    if m:
        alpha, acc, tested = float(m.group(1)), int(m.group(2)), int(m.group(3))
        if tested and not close(alpha, acc / tested, 0.005 + 1e-9):
            bad.append(f"summary α {alpha} ≠ {acc}/{tested}")
    return bad


def check_explain(explain: str, summary: str) -> list[str]:
    """One round: γ·c + v = cost, E(α, γ) at the printed α, E ÷ cost; the run: Σ E ÷ Σ cost = the prediction,
    and the summary's prediction is the same figure; α's definition line: α = accepted ÷ tested."""
    bad = []
    m = re.search(rf"α = {NUM} \((\d+) of (\d+) tested drafts? accepted", explain)
    alpha3 = float(m.group(1)) if m else None
    if m and int(m.group(3)) and not close(alpha3, int(m.group(2)) / int(m.group(3)), 0.0005 + 1e-9):
        bad.append(f"Explain α {alpha3} ≠ {m.group(2)}/{m.group(3)}")
    m = re.search(rf"One round at γ = (\d+) costs γ·c \+ v\(\d+\) = (\d+)·{NUM} \+ {NUM} = {NUM} target steps and "
                  rf"commits E = .*? = {NUM} tokens on average at α = {NUM}: {NUM} ÷ {NUM} = {NUM}×", explain)
    if m:
        g, g2, c, v, cost, e, a, e2, cost2, ratio = m.groups()
        g, c, v, cost, e, ratio = int(g), float(c), float(v), float(cost), float(e), float(ratio)
        # each printed figure is off by at most half its last digit: the checks allow exactly those sums
        if not close(cost, g * c + v, 0.005 + g * 0.0005 + 0.005 + 1e-9):
            bad.append(f"one round: {g}·{c} + {v} ≠ {cost}")
        if alpha3 is not None:
            lo, hi = expected_tokens(max(alpha3 - 0.0005, 0), g), expected_tokens(min(alpha3 + 0.0005, 1), g)
            if not lo - 0.005 - 1e-9 <= e <= hi + 0.005 + 1e-9:
                bad.append(f"one round: E(α = {alpha3}, γ = {g}) ≠ {e}")
        if not (e - 0.005) / (cost + 0.005) - 0.005 - 1e-9 <= ratio <= (e + 0.005) / (cost - 0.005) + 0.005 + 1e-9:
            bad.append(f"one round: {e} ÷ {cost} ≠ {ratio}")
    m = re.search(rf"Σ E = {NUM} tokens ÷ Σ \(γ·c \+ v\(γ \+ 1\)\) = {NUM} target steps = predicted {NUM}×", explain)
    if m:
        tokens, steps, pred = map(float, m.groups())
        if not (tokens - 0.005) / (steps + 0.005) - 0.005 - 1e-9 <= pred <= (tokens + 0.005) / (steps - 0.005) + 0.005 + 1e-9:
            bad.append(f"run: {tokens} ÷ {steps} ≠ {pred}")
        said = re.search(rf"\(predicted {NUM}×\)", summary)
        if said and float(said.group(1)) != pred:
            bad.append(f"summary says predicted {said.group(1)}×, Explain {pred}×")
    return bad


def check_page(summary: str, explain: str) -> list[str]:
    return check_summary(summary) + check_explain(explain, summary)
