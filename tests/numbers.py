"""The page's figures recomputed from the inputs printed beside them (the "numbers agree" check), on the text a
reader sees: the summary line, the Explain tab (the one-round line, the run's sum, the what-if line, the
roofline) and the Race tab. A figure agrees when the inputs *as printed* give it within its own last digit's
rounding (half a unit of it): a reader with a calculator gets the printed figure. α printed as counts ("29/30")
is exact. `check_page` returns the disagreements, each named (empty: every figure reproduces)."""

from __future__ import annotations

import re
from decimal import ROUND_HALF_UP, Decimal
from fractions import Fraction

NUM = r"(\d+(?:\.\d+)?)"
VAL = r"(\d+(?:\.\d+)?(?:/\d+)?)"  # a number or an exact ratio of counts


def value(text: str) -> float:
    if "/" in text:
        a, b = text.split("/")
        return float(Fraction(int(a), int(b)))
    return float(text)


def agrees(printed: str, computed: float) -> bool:
    """The printed figure is `computed` rounded to the printed number of decimals; a computed figure that is
    exactly a decimal tie (2110 ÷ 4000 = 0.5275) must print rounded half up (0.528), as a calculator gives it."""
    places = len(printed.split(".")[1]) if "." in printed else 0
    exact = Decimal(repr(float(computed))).scaleb(places)
    if abs(exact) % 1 == Decimal("0.5"):
        return Decimal(printed) == exact.quantize(Decimal(1), rounding=ROUND_HALF_UP).scaleb(-places)
    return abs(float(printed) - computed) <= 0.5 * 10**-places * (1 + 1e-9) + 1e-12


def expected_tokens(alpha: float, gamma: int) -> float:
    return gamma + 1.0 if alpha >= 1 else (1 - alpha ** (gamma + 1)) / (1 - alpha)


def check_summary(summary: str) -> list[str]:
    """α = accepted ÷ tested from the counts beside it; the lanes' counts while racing."""
    bad = []
    m = re.search(rf"α = {NUM} per token \((\d+) of (\d+) tested drafts? accepted", summary)
    if m and int(m.group(3)) and not agrees(m.group(1), int(m.group(2)) / int(m.group(3))):
        bad.append(f"summary α {m.group(1)} ≠ {m.group(2)}/{m.group(3)}")
    m = re.search(rf"{NUM} tokens per target forward · (\d+) rounds? · (\d+) tokens?", summary)
    if m and int(m.group(2)) and not agrees(m.group(1), int(m.group(3)) / int(m.group(2))):
        bad.append(f"summary: {m.group(3)} tokens ÷ {m.group(2)} rounds ≠ {m.group(1)} per forward")
    return bad


def _round_line(m, where: str) -> list[str]:
    bad = []
    g, c, v, cost, e, alpha, e2, cost2, ratio = m
    g = int(g)
    if not agrees(cost, g * value(c) + value(v)):
        bad.append(f"{where}: {g}·{c} + {v} ≠ {cost}")
    if not agrees(e, expected_tokens(value(alpha), g)):
        bad.append(f"{where}: E(α = {alpha}, γ = {g}) ≠ {e}")
    if (e2, cost2) != (e, cost) or not agrees(ratio, value(e) / value(cost)):
        bad.append(f"{where}: {e2} ÷ {cost2} ≠ {ratio}")
    return bad


def check_explain(explain: str, summary: str = "") -> list[str]:
    """Explain's equations from the numbers printed beside them, and that it names one α, one E, one ratio, one
    prediction (the summary's and the what-if's the same)."""
    bad = []
    m = re.search(rf"α = {NUM} \((\d+) of (\d+) tested drafts? accepted", explain)
    if m and int(m.group(3)) and not agrees(m.group(1), int(m.group(2)) / int(m.group(3))):
        bad.append(f"Explain α {m.group(1)} ≠ {m.group(2)}/{m.group(3)}")
    one = re.search(
        rf"One round at γ = (\d+) costs γ·c \+ v\(\d+\) = \d+·{NUM} \+ {NUM} = {NUM} target steps and "
        rf"commits E = .*? = {NUM} tokens on average at α = {VAL}: {NUM} ÷ {NUM} = {NUM}×",
        explain,
    )
    if one:
        bad += _round_line(one.groups(), "one round")
    w = re.search(
        rf"At α = {VAL}, γ = (\d+), c = {NUM}: E = {NUM} tokens ÷ \(\d+·{NUM} \+ v\(\d+\) {NUM}\) = {NUM} "
        rf"steps → {NUM}×",
        explain,
    )
    if w:
        alpha, g, c, e, c2, v, cost, ratio = w.groups()
        bad += _round_line((g, c, v, cost, e, alpha, e, cost, ratio), "what-if")
        if c2 != c:
            bad.append(f"what-if: c printed {c} and {c2}")
        if one and (alpha, ratio) != (one.group(6), one.group(9)):
            bad.append(f"what-if says α = {alpha} → {ratio}×, Explain α = {one.group(6)} → {one.group(9)}×")
    circle = re.search(
        rf"the open circle is one round at this run's α, c and γ = \d+: {NUM}×, as above", explain
    )
    if circle and one and circle.group(1) != one.group(9):
        bad.append(f"what-if circle {circle.group(1)}× ≠ Explain's one round {one.group(9)}×")
    paying = re.search(rf"With c = {NUM} and v\((\d+)\) = {NUM}, at γ = (\d+): (.*?) \(below", explain)
    if paying:
        c, n, v, g, pairs = paying.groups()
        for a, x in re.findall(rf"α = {NUM} → {NUM}×", pairs):
            if not agrees(x, expected_tokens(value(a), int(g)) / (int(g) * value(c) + value(v))):
                bad.append(f"stops paying: α = {a} at c = {c}, v = {v} ≠ {x}×")
    m = re.search(
        rf"Σ E = {NUM} tokens ÷ Σ \(γ·c \+ v\(γ \+ 1\)\) = {NUM} target steps = predicted {NUM}×", explain
    )
    if m:
        tokens, steps, pred = m.groups()
        if not agrees(pred, value(tokens) / value(steps)):
            bad.append(f"run: {tokens} ÷ {steps} ≠ {pred}")
        for said in re.findall(rf"predicted {NUM}×", summary + " " + explain):
            if said != pred:
                bad.append(f"a prediction says {said}×, Explain's sum {pred}×")
    return bad + check_short(explain) + check_roofline(explain)


def check_short(explain: str) -> list[str]:
    """Explain's short version (tokens ÷ forwards, a round's ms ÷ a step's, their quotient) and the terms of the
    run's Σ (γ·c + v(γ + 1)), each from the figures printed beside it."""
    bad = []
    m = re.search(rf"committed (\d+) tokens? in (\d+) target forwards?: {NUM} tokens per forward", explain)
    if m and not agrees(m.group(3), int(m.group(1)) / int(m.group(2))):
        bad.append(f"short: {m.group(1)} tokens ÷ {m.group(2)} forwards ≠ {m.group(3)}")
    m = re.search(
        rf"A round took {NUM} ms on average \(.*?\), {NUM} times a plain target step of {NUM} ms", explain
    )
    if m and not agrees(m.group(2), value(m.group(1)) / value(m.group(3))):
        bad.append(f"short: {m.group(1)} ms ÷ {m.group(3)} ms ≠ {m.group(2)}")
    m = re.search(
        rf"a round at γ = (\d+) costs γ·c \+ v\(\d+\) = \d+·{NUM} \+ {NUM} = {NUM} target steps", explain
    )
    if m and not agrees(m.group(4), int(m.group(1)) * value(m.group(2)) + value(m.group(3))):
        bad.append(f"short (calibrated): {m.group(1)}·{m.group(2)} + {m.group(3)} ≠ {m.group(4)}")
    m = re.search(rf"Σ \(γ·c \+ v\(γ \+ 1\)\) = {NUM} target steps, {NUM} per round", explain)
    rounds = re.search(r"its (\d+) rounds cost", explain)
    if m and rounds and not agrees(m.group(2), value(m.group(1)) / int(rounds.group(1))):
        bad.append(f"short (calibrated): {m.group(1)} ÷ {rounds.group(1)} rounds ≠ {m.group(2)}")
    m = re.search(rf"steps per round = {NUM} ÷ {NUM} = {NUM}×", explain)
    if m and not agrees(m.group(3), value(m.group(1)) / value(m.group(2))):
        bad.append(f"short: {m.group(1)} ÷ {m.group(2)} ≠ {m.group(3)}")
    m = re.search(
        r"Its terms: (.*?) with c = ([\d.]+), (.*?) \((?:this run's verify curve|its host's quiet calibration)\) = "
        r"([\d.]+)\.",
        explain,
    )
    if m:
        terms, c, vs, steps = m.groups()
        v = {int(n): value(x) for n, x in re.findall(rf"v\((\d+)\) = {NUM}", vs)}
        total = sum(
            int(n) * (int(g) * value(c) + v[int(g) + 1])
            for n, g in re.findall(r"(\d+)·\((\d+)·c \+ v\(\d+\)\)", terms)
        )
        if not agrees(steps, total):
            bad.append(f"Σ terms: {terms} at c = {c}, {vs} ≠ {steps}")
    return bad


def check_roofline(text: str) -> list[str]:
    """The floors at n = 1 and n from the printed weights, KV, bandwidth, FLOPs and context; the share and the
    bound from the printed floor and step; t(n) over max(floors)."""
    bad = []
    m = re.search(
        rf"(?:stream reads|copy moves \(read \+ write counted\)|over its largest weight matrix read) {NUM} GB/s"
        rf"(?: \((?:that machine's best take:|above that machine's earlier best take,) [\d.]+ GB/s\),)? and a large matmul runs at {NUM} GFLOP/s"
        rf"(?: \(the best takes measured [^)]*\))?\. "
        rf"A forward over n new tokens after "
        rf"(\d+) cached ones reads the weights, {NUM} GB, and the keys and values of \d+ \+ n positions, "
        rf"{NUM} MB each.*?It computes {NUM} GFLOP per token plus {NUM} MFLOP",
        text,
    )
    floors = re.search(
        rf"At n = 1 these are {NUM} ms and {NUM} ms(?:; at n = (\d+), {NUM} ms and {NUM} ms)?\. "
        rf"They meet at the ridge n\* ≈ (\d+)",
        text,
    )
    if "The roofline of the machine this run ran on" in text and not (
        m and floors
    ):  # a sentence the checker cannot read is not checked
        bad.append("the roofline's sentences do not parse: the check would skip them")
    if m and floors:
        bw, fl, ctx, w, kv, f, a = map(float, m.groups())

        def at(n):
            return (1e3 * (w + (ctx + n) * kv / 1e3) / bw, 1e3 * n * (f + (ctx + n) * a / 1e3) / fl)

        m1, c1, n, mn, cn, ridge = floors.groups()
        for k, (mem, comp) in ((1, (m1, c1)),) + (((int(n), (mn, cn)),) if n else ()):
            want = at(k)
            if not (agrees(mem, want[0]) and agrees(comp, want[1])):
                bad.append(
                    f"roofline at n = {k}: printed {mem}, {comp} ms, the inputs give {want[0]:.3f}, {want[1]:.3f}"
                )
        # the crossing lies in (lo − 1, lo]
        lo = next((k for k in range(1, 100000) if at(k)[1] >= at(k)[0]), None)
        if lo is not None and not lo - 1.5 <= int(ridge) <= lo + 0.5:
            bad.append(f"roofline: the floors cross between n = {lo - 1} and {lo}, printed n* ≈ {ridge}")
    s = re.search(
        rf"t\(1\) = {NUM} ms is (\d+)% of the bandwidth bound \(memory floor {NUM} ms ÷ step {NUM} ms; "
        rf"the bound is 1000 ÷ {NUM} = {NUM} tok/s\)",
        text,
    )
    if s:
        step, pct, floor, step2, floor2, bound = s.groups()
        if step2 != step or floor2 != floor or (floors and floor != floors.group(1)):
            bad.append(
                f"roofline: the floor or step printed twice differently ({floor}, {floor2}; {step}, {step2})"
            )
        if not agrees(pct, 100 * value(floor) / value(step)) or not agrees(bound, 1e3 / value(floor)):
            bad.append(f"roofline: {floor} ÷ {step} ≠ {pct}% or 1000 ÷ {floor} ≠ {bound}")
    g = re.search(rf"took t\((\d+)\) = {NUM} ms, {NUM}× the roofline max\({NUM}, {NUM}\) ms", text)
    if g:
        n, t, ratio, mem, comp = g.groups()
        if not agrees(ratio, value(t) / max(value(mem), value(comp))):
            bad.append(f"roofline: t({n}) {t} ÷ max({mem}, {comp}) ≠ {ratio}")
        if floors and floors.group(3) == n and (mem, comp) != (floors.group(4), floors.group(5)):
            bad.append(f"roofline: the floors at n = {n} printed twice differently")
    return bad


def check_race(race: str) -> list[str]:
    """The lanes' tok/s divide to the printed speedup; the AR lane's share of the bound from its floor and step."""
    bad = []
    rates = re.findall(rf"{NUM} tok/s", race)
    speed = re.search(rf"speedup {NUM}×", race)
    if speed and len(rates) >= 2:  # the lanes in page order: autoregressive, then speculative
        ar, spec = rates[0], rates[1]
        if not agrees(speed.group(1), value(spec) / value(ar)):
            bad.append(f"race: {spec} ÷ {ar} tok/s ≠ {speed.group(1)}×")
    b = re.search(
        rf"AR at (\d+)% of the bandwidth bound \(floor {NUM} GB ÷ {NUM} GB/s = {NUM} ms ÷ step {NUM} ms\)",
        race,
    )
    if b:
        pct, gb, bw, floor, step = b.groups()
        if not agrees(floor, 1e3 * value(gb) / value(bw)) or not agrees(
            pct, 100 * value(floor) / value(step)
        ):
            bad.append(f"race: {gb} ÷ {bw} ≠ {floor} ms or {floor} ÷ {step} ≠ {pct}%")
    return bad


def check_batch(text: str) -> list[str]:
    """The batch lines' tokens ÷ seconds and the verdict's rate ÷ rate."""
    bad = []
    for rate, tokens, secs in re.findall(rf"{NUM} tokens/s \((\d+) ÷ {NUM} s\)", text):
        if not agrees(rate, value(tokens) / value(secs)):
            bad.append(f"batch: {tokens} ÷ {secs} s ≠ {rate} tokens/s")
    v = re.search(rf"ran at {NUM}× the AR batch \({NUM} ÷ {NUM} tokens/s", text)
    if v and not agrees(v.group(1), value(v.group(2)) / value(v.group(3))):
        bad.append(f"batch verdict: {v.group(2)} ÷ {v.group(3)} ≠ {v.group(1)}×")
    return bad


def check_page(summary: str, explain: str, race: str = "") -> list[str]:
    """Every check; the race's prediction must be Explain's unless the race says it is the whole run's (a replay
    cut: Explain sums the rounds up to the cut)."""
    same_scope = race if "whole run:" not in race else ""
    return check_summary(summary) + check_explain(explain, summary + " " + same_scope) + check_race(race)


def check_suffix_sizing(text: str) -> list[str]:
    """Explain's suffix sizing line: E = 1 + the printed scores exactly, E ÷ t(k + 1) and (E + score) ÷ t(k + 2) from
    the printed inputs, and the verdict that follows from the two rates."""
    m = re.search(
        r"scored ([\d., ]+): E = " + NUM + r" tokens expected, E ÷ t\((\d+)\) = \S+ ÷ " + NUM + " = " + NUM,
        text,
    )
    if m is None:
        return ["suffix sizing: the round's line is missing"]
    scores, e, k1, t, now = m.groups()
    out = []
    exact = 1 + sum(Fraction(x) for x in scores.split(", "))
    if Fraction(e) != exact:
        out.append(f"suffix sizing: E = {e}, but 1 + the printed scores = {float(exact)}")
    if not agrees(now, value(e) / value(t)):
        out.append(f"suffix sizing: E ÷ t({k1}) = {e} ÷ {t} printed {now}")
    nxt = re.search(
        r"\(E \+ " + NUM + r"\) ÷ t\(\d+\) = \(\S+ \+ \S+\) ÷ " + NUM + " = " + NUM + r": (it \w+)", text
    )
    if nxt is not None:
        s, t2, then, verdict = nxt.groups()
        if not agrees(then, (value(e) + value(s)) / value(t2)):
            out.append(f"suffix sizing: ({e} + {s}) ÷ {t2} printed {then}")
        if (verdict == "it did") != (value(then) <= value(now)):  # "it did not pay" / "it would have paid"
            out.append(f"suffix sizing: the verdict '{verdict}' does not follow from {then} against {now}")
    return out
