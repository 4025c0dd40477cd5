"""A short explanation panel: the terms of speculative decoding and the speedup formula, filled in
with this run's numbers. Events -> HTML.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from engine import costmodel, costrule
from engine.figures import Exact, decimals_of, derive, fixed, parse, plural, quotient_terms
from engine.specs import family

from .drift import lossy_badge, lossy_note
from .history import credit, explain_paragraph
from .imported import engine_family, measured_comparison, rollback_term
from .markup import esc, recorded_by
from .roofline import fp32_roof, measured_points, roofline_chart, roofline_text
from .runs import predicted_terms, spec_summary, view_runs
from .tree_sizing import suffix_sizing, tree_sizing


def _num(x, fmt: str = ".2f") -> str:
    """x at the decimals of `fmt` (".2f"), a tie rounded as a calculator rounds it (engine.figures.fixed)."""
    if not isinstance(x, (int, float)) or isinstance(x, bool):
        return "–"
    return fixed(x, int(fmt[1:-1])) if fmt.startswith(".") and fmt.endswith("f") else format(x, fmt)


def _spread(x) -> str:
    """' (spread 12%)': the interquartile range of the per-round samples over their median."""
    return f" (spread {x:.0%})" if isinstance(x, (int, float)) and not isinstance(x, bool) else ""


def why_it_pays(s: dict, gamma, host=None, context: float = 0.0, raw: dict | None = None) -> str:
    """Why checking γ + 1 tokens costs about one step, with the c and v(n) the rule allows (s: costrule.usable's
    summary) and the run's own measured times (raw) against this machine's roofline, and when it does not pay."""
    raw = raw if raw is not None else s
    c, v = s.get("c"), s.get("v")
    n = s.get("v_n")
    measured = (
        " " + costrule.sentence(s)
        if costrule.sentence(s)
        else ""
        if not (isinstance(v, float) and n)
        else f" This run: v({n}) = {v:.2f} target steps for {n} positions."
        if v < n
        else f" But this run measured v({n}) = {v:.2f} target steps for {n} positions, no less than {n} separate "
        "steps: its verify forwards were slowed (a busy machine, or a forward this host runs badly)."
    )
    lines = [
        "<b>Why it pays.</b> Producing one token makes the target read all of its weights from memory; on "
        "this hardware that read, not the arithmetic, sets the time of a step (decoding is memory-bound). "
        "Verifying γ + 1 tokens in one forward reads the weights once, so it costs v(γ + 1) target steps, "
        "usually far less than γ + 1 separate steps." + measured
    ]
    if s.get("tree_rounds"):
        lines += tree_costs(s)
    elif c is not None and v is not None and s.get("v_n"):
        gamma = s["v_n"] - 1  # the most frequent γ of the run: the one v was measured at
        lines += run_prediction(s, gamma)
        r = one_round(s, gamma)
        if r is not None:  # from the c and v as printed in the line above
            whatif = [
                (a, costmodel.predicted_speedup(a, gamma, parse(r["c"]), parse(r["v"])))
                for a in (0.2, 0.5, 0.8)
            ]
            lines.append(
                f"It stops paying when α is low or the drafter is costly. With c = {r['c']} and "
                f"v({gamma + 1}) = {r['v']}, at γ = {gamma}: "
                + ", ".join(f"α = {a:.1f} → {_num(x)}×" for a, x in whatif)
                + " (below 1× is a slowdown)."
            )
    else:
        lines.append("The measured c and v(n) of a run appear here once it finishes.")
    share = raw.get("bandwidth")
    context = share["context"] if isinstance(share, dict) else context
    run_n = raw.get("v_n") or ((gamma or 0) + 1)  # the forward size this run verified most often
    chart = roofline_chart(measured_points(raw), host, context, run_n)
    aside = (
        "<p>The roofline below shows this run's own times as measured, beside the floors; no figure above "
        "rests on them.</p>"
        if costrule.sentence(s)
        else ""
    )
    return (
        f'<div class="sv-why">{"".join(f"<p>{line}</p>" for line in lines)}'
        f"{aside}{roofline_text(raw, host, context, run_n)}{chart}</div>"
    )


def tree_costs(s: dict) -> list[str]:
    """A tree run's costs as measured, and plainly that its expected tokens are not modelled here."""
    c, v, n = s.get("c"), s.get("v"), s.get("v_n")
    out = [
        "This run verified token <i>trees</i>: each round's draft was a tree of nodes (several candidates per "
        "position), and the target judged every node in one forward with a tree mask."
    ]
    if c is not None and v is not None and n:
        out.append(
            f"{'Measured' if not calibrated(s) else 'On the quiet calibration'}: a drafted node cost c = {c:.3f} "
            "target steps; a verify forward over the most common "
            f"size, {n} positions (the nodes + the last committed token), cost v({n}) = {v:.2f} target steps; "
            f"{_num(s.get('mean_accepted_length'))} tokens were committed per forward."
        )
    out.append(
        "A tree's expected tokens per forward depend on its shape (how many children each node has, which "
        "ones the drafter ranks first), which E = (1 − α<sup>γ+1</sup>) / (1 − α) does not describe: this "
        "page does not model it, so it predicts no speedup for a tree run; the race measures one."
    )
    return out


def one_round(s: dict, gamma: int) -> dict | None:
    """One round at this run's α (its exact counts, accepted/tested), c and v(γ + 1): the printed texts of
    α, c, v, the cost γ·c + v, E and the ratio E ÷ cost, each reproducing from the ones printed beside it
    (engine.figures). Explain and the what-if panel print these same texts. None before c and v are measured, and
    where the cost prints as 0 (no ratio follows from the printed figures)."""
    tested = s.get("accepted", 0) + s.get("rejections", 0)
    c, v = s.get("c"), s.get("v")
    if not tested or c is None or v is None:
        return None
    a = Exact.ratio(s["accepted"], tested)
    e_true, cost_true = costmodel.expected_tokens(float(a.value), gamma), gamma * c + v
    ratio, (e, cost) = derive(lambda x, y: x / y if y > 0 else math.inf, [(e_true, 2), (cost_true, 2)])
    e = fixed(e_true, decimals_of(e))  # from the exact α: reproduces at any number of decimals
    _, (c_text, v_text) = derive(lambda x, y: gamma * x + y, [(c, 3), (v, 2)], decimals_of(cost))
    cost = fixed(gamma * parse(c_text) + parse(v_text), decimals_of(cost))
    if parse(cost) <= 0:
        return None
    ratio = fixed(parse(e) / parse(cost), 2)
    return {
        "gamma": gamma,
        "alpha": a.text(),
        "alpha_value": float(a.value),
        "c": c_text,
        "v": v_text,
        "cost": cost,
        "e": e,
        "ratio": ratio,
    }


def run_prediction(s: dict, gamma: int) -> list[str]:
    """The prediction as the cost model computes it, each figure from the ones printed beside it: one round at
    this run's γ, then the run's own sum over its rounds (whose γ may vary, plain rounds included)."""
    out = []
    r = one_round(s, gamma)
    if r is not None:
        out.append(
            f"One round at γ = {gamma} costs γ·c + v({gamma + 1}) = {gamma}·{r['c']} + {r['v']} = {r['cost']} "
            f"target steps and commits E = (1 − α<sup>{gamma + 1}</sup>) / (1 − α) = {r['e']} tokens on "
            f"average at α = {r['alpha']}: {r['e']} ÷ {r['cost']} = {r['ratio']}× for that round."
        )
    tokens, steps, hist = s.get("model_tokens"), s.get("model_steps"), s.get("round_gammas") or []
    terms = predicted_terms(s)
    if terms is not None:
        rounds = sum(n for _, n in hist)
        mix = ", ".join(f"{n} at γ = {g}" for g, n in hist)
        pred, tokens, steps = terms
        out.append(
            f"This run's prediction sums over its {rounds} rounds ({mix}): Σ E = {tokens} tokens ÷ "
            f"Σ (γ·c + v(γ + 1)) = {steps} target steps = predicted {pred}× (measured: "
            f"{_num(s.get('speedup'))}×)."
            + sum_terms(s, hist, steps)
            + (" ⚠ Unreliable: the timings were disturbed (below)." if s.get("timing_flags") else "")
        )
    return out


def sum_terms(s: dict, hist: list, steps: str) -> str:
    """The terms of Σ (γ·c + v(γ + 1)) as printed: c and v(n) at every γ + 1 the run's rounds verified (v(1) = 1:
    a plain round is one target step), printed so that Σ over the rounds of the printed terms gives `steps`."""
    at = costmodel.verify_curve({1: 1.0, **dict(s.get("v_points") or [])})
    c = s.get("c")
    if c is None or not hist:
        return ""
    sizes = [g + 1 for g, _ in hist]

    def total(c_, *vs):
        return sum(n * (g * c_ + v) for (g, n), v in zip(hist, vs))

    figure, printed = derive(total, [(c, 3)] + [(at(n), 2) for n in sizes], decimals_of(steps))
    if figure != steps:  # on a rounding edge: say nothing rather than terms that do not give the sum
        return ""
    terms = " + ".join(f"{n}·({g}·c + v({g + 1}))" for g, n in hist)
    vs = ", ".join(f"v({n}) = {v}" for n, v in zip(sizes, printed[1:]))
    curve = "this run's verify curve" if calibrated(s) is None else "its host's quiet calibration"
    return f" Its terms: {terms} with c = {printed[0]}, {vs} ({curve}) = {steps}."


def calibrated(s: dict) -> str | None:
    """costrule.sentence of a usable summary when its costs are not the run's own, else None."""
    return costrule.sentence(s) or None


def what_happened(s: dict, spec) -> str:
    """The short version, three sentences: tokens per target forward, what a round cost, and why that gave this
    speedup; each figure from the ones printed beside it. "" for a run that has not finished."""
    if spec is None or not spec.rounds or not spec.done or spec.mode != "speculative":
        return ""
    rounds = [r for r in spec.rounds if r.committed is not None]
    tokens, forwards = spec.n_tokens(), spec.forwards()
    if not forwards:
        return ""
    per = fixed(tokens / forwards, 2)
    tested = s.get("accepted", 0) + s.get("rejections", 0)
    first = (
        f"This run committed {plural(tokens, 'token')} in {plural(forwards, 'target forward')}: {per} tokens per "
        "forward, where plain decoding makes 1"
        + (
            f" ({costmodel.tested_counts(s['accepted'], s['rejections'], s.get('drafted', 0))})."
            if tested
            else "."
        )
    )
    if calibrated(s):
        observed = raced(s) or measured_comparison(spec)  # the race's, or an imported run's recorder's
        return f'<p class="sv-short"><b>What happened.</b> {first} {calibrated_round(s, per, observed)}</p>'
    timed = [r.timed for r in rounds if r.timed is not None]
    step = s.get("target_step_s")
    if not timed or not isinstance(step, (int, float)) or step <= 0:
        return f'<p class="sv-short"><b>What happened.</b> {first} {measured_comparison(spec)}</p>'
    round_ms = sum(t.total_s for t in timed) / len(timed) * 1e3
    draft_ms = sum(t.draft_s for t in timed) / len(timed) * 1e3
    steps, round_text, step_text = quotient_terms(round_ms, step * 1e3, 2, least=1)
    second = (
        f"A round took {round_text} ms on average ({fixed(draft_ms, 1)} ms of it drafting), {steps} times a plain "
        f"target step of {step_text} ms."
    )
    about = fixed(parse(per) / parse(steps), 2) if parse(steps) > 0 else "–"
    measured = s.get("speedup")
    third = (
        f"So the speedup is about tokens per round ÷ steps per round = {per} ÷ {steps} = {about}×"
        + (
            f"; the race against plain decoding measured {measured:.2f}×."
            if isinstance(measured, float)
            else f". {measured_comparison(spec)}"
            if engine_family(spec)
            else "; turn on the race to measure it against plain decoding."
        )
        + (
            " Below 1×, drafting and verifying cost more than the extra tokens gave."
            if about != "–" and parse(about) < 1
            else ""
        )
    )
    return f'<p class="sv-short"><b>What happened.</b> {first} {second} {third}</p>'


def raced(s: dict) -> str:
    """The race's measured speedup, an observation, with the load it ran under ("" before it finished)."""
    measured, share = s.get("speedup"), s.get("contended_share")
    if not isinstance(measured, float):
        return ""
    load = (
        f", while other processes wanted more CPU than it left free for {share:.0%} of a lane's compute"
        if isinstance(share, (int, float)) and share > costmodel.CONTENTION_LIMIT
        else ""
    )
    return f"The race against plain decoding measured {measured:.2f}×{load}: that is what this run observed."


def calibrated_round(s: dict, per: str, observed: str = "") -> str:
    """What happened's cost sentences when the run's own costs cannot be used (costrule): which costs stand in and
    why, one round's cost in target steps on them, the speedup that gives, and the race's observation."""
    hist = s.get("round_gammas") or []
    steps_sum, rounds = s.get("model_steps"), sum(n for _, n in hist)
    if not steps_sum or not rounds:
        return f"{calibrated(s)} {observed}".strip()
    if len(hist) == 1 and (r := one_round(s, hist[0][0])) is not None:
        g = hist[0][0]
        steps = r["cost"]
        cost = f"a round at γ = {g} costs γ·c + v({g + 1}) = {g}·{r['c']} + {r['v']} = {steps} target steps"
    else:
        steps, (total,) = derive(lambda x: x / rounds, [(steps_sum, 2)], 2)
        cost = f"its {rounds} rounds cost Σ (γ·c + v(γ + 1)) = {total} target steps, {steps} per round"
    about = fixed(parse(per) / parse(steps), 2) if parse(steps) > 0 else "–"
    return (
        f"{calibrated(s)} On those costs {cost}, so the speedup is about tokens per round ÷ steps per round = "
        f"{per} ÷ {steps} = {about}×. {observed}"
    ).strip()


WHATIF_GAMMA = 16  # the what-if panel's largest γ


def fp32_curve(s: dict, r: dict) -> list:
    """v(k) for k = 1..WHATIF_GAMMA + 1 on roofline r (roofline.fp32_roof: the run's weights de-quantized to fp32),
    at the run's context: max(memory floor, compute floor) at k ÷ the same at 1, as the what-if's table ([None]
    first)."""
    step = lambda k: max(costmodel.floors(k, s["bandwidth"]["context"], r))  # noqa: E731
    return [None] + [round(step(k) / step(1), 4) for k in range(1, WHATIF_GAMMA + 2)]


def weights_choice(s: dict, host, v: str) -> tuple[str, str]:
    """The what-if's weight-format choice on a run on a GGUF's blocks: (the attribute with fp32's v(n) (fp32_curve),
    the select and the sentence comparing the two at the run's verify size n, v the run's v(n) as the panel prints
    it), both "" for an fp32 run or a record without the roofline or the fp32 size."""
    r = fp32_roof(costmodel.roof(host), host or {})
    if r is None or not isinstance(s.get("bandwidth"), dict):
        return "", ""
    alt = fp32_curve(s, r)
    mine, other = fixed(host["weight_bytes"] / 1e6, 0), fixed(r["weight_bytes"] / 1e6, 0)
    n = s["v_n"]
    memory, compute = costmodel.floors(n, s["bandwidth"]["context"], r)
    bound = (
        "below the ridge (bound by its bytes)"
        if memory >= compute
        else "above the ridge (bound by its FLOPs)"
    )
    select = (
        '<label>weights <select name="weights" aria-label="weight format">'
        f"<option value=\"run\" selected>this run's: the GGUF's blocks, {mine} MB a step (its v(n))</option>"
        f'<option value="fp32">the same de-quantized to fp32, {other} MB a step (v(n) at the roofline\'s floors)'
        "</option></select></label>"
    )
    why = (
        f'<p class="wf-format sv-note">On the blocks a verify of {n} tokens costs v({n}) = {v} '
        f"steps; on fp32 the same forward reads {other} MB instead of {mine} MB and sits {bound}: v({n}) = "
        f"{fixed(alt[n], 2)} at the roofline's floors (max(memory, compute) at n = {n} ÷ at n = 1, from the "
        "derivation's inputs at this run's context)."
        + (
            " Fewer bytes make each step cheaper and each extra verified token dearer.</p>"
            if parse(v) > alt[n]
            else "</p>"
        )
    )
    return f" data-v-fp32='{json.dumps(alt)}'", select + why


def whatif_panel(s: dict, host=None) -> str:
    """α, γ and c sliders that redraw the predicted speedup E(α, γ) / (γc + v(γ + 1)) in the browser at once
    (assets/specviz.js), on this run's measured v(n): the table v(1..γ+1) is the cost model's (verify_curve), so
    the page only evaluates E and the ratio. The run's own round is marked and, until a slider moves, the line
    under the curve is Explain's one-round line (one_round: the same α, E and ratio). When the run's timings were
    flagged, the curve is the cost model's fitted line (not the noisy points), drawn with a band from the measured
    spread of c and v and a warning on the chart itself. "" before c and v are measured and for tree runs. On a run on a GGUF's
    blocks, a choice of weights swaps the curve's v(n) for the same weights' on fp32 at the roofline's floors
    (fp32_curve)."""
    alpha, c, n = s.get("alpha"), s.get("c"), s.get("v_n")
    r = one_round(s, n - 1) if n else None
    if alpha is None or c is None or r is None or s.get("tree_rounds"):
        return ""
    points = {1: 1.0, **dict(s.get("v_points") or [])}
    noisy = bool(s.get("timing_flags"))
    at = costmodel.verify_curve(points, fitted=noisy)
    table = [None] + [round(at(k), 4) for k in range(1, WHATIF_GAMMA + 2)]  # v(k) at index k
    band = ""
    if noisy:  # the measured spread (interquartile range ÷ median) of v and c, around the fitted line
        raw, dv, dc = (
            costmodel.verify_curve(points),
            (s.get("v_spread") or 0) / 2,
            (s.get("c_spread") or 0) / 2,
        )
        lo = [None] + [round(min(at(k), raw(k)) * (1 - dv), 4) for k in range(1, WHATIF_GAMMA + 2)]
        hi = [None] + [round(max(at(k), raw(k)) * (1 + dv), 4) for k in range(1, WHATIF_GAMMA + 2)]
        band = f" data-v-lo='{json.dumps(lo)}' data-v-hi='{json.dumps(hi)}' data-c-spread=\"{dc:.4f}\""
    g = n - 1
    alt, choice = weights_choice(s, host, r["v"])
    slider = (
        '<label>{label} <input type="range" name="{name}" min="{lo}" max="{hi}" step="{step}" value="{value}" '
        'aria-label="{label}"><output>{shown}</output></label>'
    )
    controls = "".join(
        slider.format(label=label, name=name, lo=lo, hi=hi, step=step, value=value, shown=shown)
        for label, name, lo, hi, step, value, shown in (
            ("α", "alpha", 0, 1, 0.001, f"{alpha:.3f}", r["alpha"]),
            ("γ", "gamma", 1, WHATIF_GAMMA, 1, g, g),
            ("c", "c", 0, 1.5, 0.001, f"{c:.3f}", r["c"]),
        )
    )
    line = (
        f"At α = {r['alpha']}, γ = {g}, c = {r['c']}: E = {r['e']} tokens ÷ ({g}·{r['c']} + v({g + 1}) {r['v']}) = "
        f"{r['cost']} steps → {r['ratio']}×" + (" (a slowdown)" if float(r["ratio"]) < 1 else "")
    )
    curve = "this run's measured v(n)" if not calibrated(s) else "its host's quiet calibration of v(n)"
    warn = (
        '<p class="wf-noisy sv-warn">⚠ This run\'s timings were disturbed: the curve is the fitted line '
        "through its verify times and the band their measured spread; read no best γ off it.</p>"
        if noisy
        else ""
    )
    return (
        f"<div class=\"sv-whatif{' wf-is-noisy' if noisy else ''}\" data-v='{json.dumps(table)}'{band}{alt} "
        f'data-run-gamma="{g}" data-run-pred="{r["ratio"]}" data-alpha="{r["alpha_value"]!r}" '
        f'data-alpha-text="{r["alpha"]}" data-c="{parse(r["c"])!r}">'
        f"<p><b>What if?</b> Move α, γ and c: the curve is E(α, γ) / (γc + v(γ + 1)) over γ, with {curve}; "
        f"the open circle is one round at this run's α, c and γ = {g}: {r['ratio']}×, as above.</p>"
        + (f'<p class="wf-costs sv-note">{calibrated(s)}</p>' if calibrated(s) else "")
        + f'<div class="wf-controls">{controls}{choice}</div>{warn}<svg class="wf-svg" viewBox="0 0 380 190" role="img" '
        f'aria-label="predicted speedup over γ for the chosen α and c"></svg>'
        f'<p class="wf-out" aria-live="polite" data-speedup="{r["ratio"]}">{line}</p></div>'
    )


HEADS_RECORD = Path(__file__).resolve().parent.parent / "assets" / "heads" / "smollm2-135m-heads.json"


def heads_note(draft: str, path: Path = HEADS_RECORD) -> str:
    """What the trained heads are and how they were trained, with their held-out accuracy ("" for other drafters)."""
    if family(draft) not in ("medusa", "eagle", "auto"):
        return ""
    try:
        rec = json.loads(Path(path).read_text(encoding="utf-8"))
        medusa = ", ".join(f"head {k + 1}: {a:.0%}" for k, a in enumerate(rec["medusa_top1"]))
        eagle = ", ".join(f"step {k + 1}: {a:.0%}" for k, a in enumerate(rec["eagle_top1"]))
    except (OSError, ValueError, KeyError, TypeError):
        return ""
    read = "texts it read and " if "--text-tokens" in str(rec.get("command", "")) else ""
    return (
        "<p><b>Trained heads.</b> <i>medusa</i> and <i>eagle</i> draft from the target's own last hidden state "
        "(the feature its LM head reads), computed by the verify forward anyway. Medusa head k guesses the token "
        "k after the last one from that feature alone (one residual block each, Cai et al. 2024); EAGLE runs one "
        "small decoder layer that predicts the next feature from the current one and the next token, and feeds "
        "its own predictions back to draft a chain or a tree (Li et al. 2024). Both decode with the target's own "
        f"LM head cut to the {esc(rec.get('draft_vocab'))} most frequent tokens; the target verifies with its full "
        "distribution, so the output is unchanged. They were trained on this CPU by self-distillation: the "
        f"target's own next-token choices on {esc(rec.get('train_tokens'))} tokens ({read}its answers to "
        f"{esc(rec.get('prompts'))} prompts), seed {esc(rec.get('seed'))} "
        f"(<code>{esc(rec.get('command', ''))}</code>). Held-out top-1 accuracy, i.e. the chance a greedy draft "
        f"token is accepted: Medusa {esc(medusa)}; EAGLE {esc(eagle)}. <i>auto</i> prices them next to what "
        "n-gram lookup has and asks one when its measured c and α predict the best gain, then verifies only "
        "the positions the head is sure enough of (its confidence, max q, against the hit rate it measured at "
        "that confidence on held-out text).</p>"
    )


def _definitions(s: dict, spec, alpha, gamma) -> str:
    """The terms (target, draft, γ, α, rollback), each tied to this run's numbers, as a <dl>'s items."""
    target = spec.started.target if spec and spec.started else "the target model"
    draft = spec.started.draft if spec and spec.started else "a cheaper drafter"
    rollbacks = sum(1 for r in spec.rounds if r.rolled_back is not None) if spec else 0
    dropped = (
        sum(len(r.rolled_back.positions) for r in spec.rounds if r.rolled_back is not None) if spec else 0
    )
    terms = [
        (
            "target",
            f"the model whose output we want ({esc(target)}). One forward over γ+1 positions checks a whole draft.",
        ),
        (
            "draft",
            f"a cheap proposer ({esc(draft)}) that guesses the next γ tokens; q is its probability, p the target's.",
        ),
        ("γ (gamma)", f"tokens drafted per round. This run: γ = {esc(gamma if gamma else '–')}."),
        (
            "α (acceptance)",
            "each draft token is kept with probability min(1, p/q) (greedy: if it is the target's argmax); "
            "the first rejected token is replaced by a corrected token, and if all γ pass the target adds a "
            "bonus token. α is the chance one tested draft token is kept: accepted ÷ (accepted + rejections), "
            "counting only positions the target tested (those after a rejection never were). This run: "
            f"α = {_num(alpha, '.3f')} ({costmodel.tested_counts(s.get('accepted', 0), s.get('rejections', 0), s.get('drafted', 0))}; "
            f"{plural(s.get('rejections', 0), 'rejection')}).",
        ),
        ("rollback", rollback_term(spec, rollbacks, dropped)),
    ]
    return "".join(f"<dt>{k}</dt><dd>{d}</dd>" for k, d in terms)


def _formula(s: dict, c, v, E, measured, flags, imported: str = "") -> str:
    """E, the speedup formula and the measured speedup, each with this run's numbers, as list items."""
    r = one_round(s, s["v_n"] - 1) if s.get("v_n") else None  # c and v as the one-round line prints them
    c_text, v_text = (r["c"], r["v"]) if r is not None else (_num(c, ".3f"), _num(v))
    lines = [
        f"<code>E = (1 − α<sup>γ+1</sup>) / (1 − α)</code>: tokens per target forward predicted from α, "
        f"{_num(E)} on average over this run's rounds (measured: {_num(s.get('mean_accepted_length'))}; they differ "
        "when acceptance is not independent from token to token, e.g. n-gram matches run in streaks)",
        f"<code>speedup ≈ Σ E / Σ (γc + v)</code> over the rounds, with c = {c_text}{_spread(s.get('c_spread'))} (draft step ÷ "
        f"target step), v = {v_text}{_spread(s.get('v_spread'))} ("
        + ("verify round ÷ target step, measured" if not calibrated(s) else "its host's quiet calibration")
        + "), target step "
        f"t(1) = {_num((s.get('target_step_s') or 0) * 1e3, '.1f')} ms{_spread(s.get('step_spread'))} from "
        f"{esc(s.get('step_source') or '–')} → "
        + (
            "predicted: not modelled for token trees"
            if s.get("tree_rounds")
            else f"predicted {predicted_terms(s)[0] if predicted_terms(s) else '–'}×"
        )
        + (" (⚠ unreliable: the timings it rests on were disturbed, see below)" if flags else ""),
        f"measured: {_num(measured)}× (speculative tok/s ÷ AR tok/s, raced side by side)"
        if measured is not None
        else f"measured: {imported}"
        if imported
        else "measured: turn on the race against AR to measure the real speedup",
    ]
    return "".join(f"<li>{line}</li>" for line in lines)


def render_explain(events) -> str:
    """Definitions of draft, target, γ, α, rollback and E/(γc+v), tied to this run's numbers.

    Every number is the run summary's (engine.metrics via engine.costmodel): the same α, E and
    prediction the summary line and the charts show."""
    runs = view_runs(events)
    spec = runs.get("speculative")
    raw = spec_summary(events) if spec else {}
    s = costrule.usable(
        raw
    )  # the costs every derived figure rests on (the run's own, or the host's quiet ones)
    alpha, c, v, gamma = (
        s.get("alpha"),
        s.get("c"),
        s.get("v"),
        s.get("gamma") or (spec.gamma if spec else None),
    )
    draft = spec.started.draft if spec and spec.started else "a cheaper drafter"
    E, pred, measured, flags = (
        s.get("expected_tokens"),
        s.get("predicted_speedup"),
        s.get("speedup"),
        raw.get("timing_flags") or [],
    )
    dl = _definitions(s, spec, alpha, gamma)
    formula = _formula(s, c, v, E, measured, flags, measured_comparison(spec) if spec else "")
    note = (
        ""
        if pred is not None or s.get("tree_rounds")
        else '<p class="sv-note">c and v appear once the speculative run finishes.</p>'
    )
    if flags:
        note += f'<p class="sv-note sv-warn">⚠ {costmodel.BUSY}: ' + "; ".join(esc(f) for f in flags) + "</p>"
    heads = heads_note(spec.started.draft or "") if spec and spec.started else ""
    host = getattr(spec.started, "host", {}) if spec and spec.started else {}
    short = what_happened(s, spec) + explain_paragraph(credit(spec), esc(draft))
    derivation = (
        f"{why_it_pays(s, gamma if isinstance(gamma, int) else None, host, raw=raw)}"
        f"{suffix_sizing(spec)}{tree_sizing(spec)}"
        f'<dl>{dl}</dl><ul class="sv-formula">{formula}</ul>{note}{heads}'
    )
    if short:  # two layers: the short version and the what-if in view, the derivation a click away
        derivation = (
            '<details class="sv-derivation"><summary>The derivation: every figure from its inputs (the roofline, '
            f"c, v(n), E and the prediction)</summary>{derivation}</details>"
        )
    return (
        f'<div class="specviz specviz-explain">{recorded_by(spec.started if spec else None)}'
        f"{lossy_badge(spec)}{lossy_note(spec)}"
        f"{short}{whatif_panel(s, host)}{derivation}</div>"
    )
