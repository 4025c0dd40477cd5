"""A metrics run (engine/serving/: what vLLM, SGLang, llama.cpp's server or TensorRT-LLM reported) -> its
views: the counts, τ and the acceptance rate side by side with the formula that links them for that engine, the
per-position acceptance and the histogram where given, and the cost model's prediction with its what-if. HTML
strings and plotly figures; no torch, no gradio. Every figure printed is computed from the inputs printed beside it
(engine.figures): counts exactly, the prediction's α, c and v with the digits that reproduce it.
"""

from __future__ import annotations

import plotly.graph_objects as go

from engine import costmodel
from engine import serving as em
from engine.figures import derive, fixed, parse, quotient_terms

from .charts import COLORS, _figure, empty_fig, set_title
from .markup import esc

VIEWS = (
    "summary",
    "positions",
    "histogram",
    "whatif_gamma",
    "whatif_alpha",
)  # render()'s keys, in output order
DECIMALS = 3  # τ and the rate: exact ratios of counts, so any number of decimals reproduces


def formula_html(name: str, template: str, run: em.MetricsRun, values: dict | None = None) -> str:
    """ "name = formula in the engine's field names = formula with the counts = value", the counts in a data
    attribute the page's tests recompute ("−", "×", "÷" and fractions written a/b)."""
    values = run.counts() if values is None else values
    value = em.evaluate(template, values)
    if value is None:
        return ""
    expr = em.substitute(template, values)
    return (
        f'<span class="sv-formula" data-expr="{esc(expr)}" data-value="{fixed(float(value), DECIMALS)}">'
        f"{esc(name)} = {esc(em.named(template, run.reader.names))} = {esc(expr)} = "
        f"<b>{fixed(float(value), DECIMALS)}</b></span>"
    )


def counts_html(run: em.MetricsRun) -> str:
    """The counts as the engine named them."""
    names = run.reader.names
    rows = [(names.get(key, key), value) for key, value in run.counts().items() if value is not None]
    return (
        '<table class="sv-metrics-counts">'
        + "".join(f"<tr><td>{esc(name)}</td><td>{value:,}</td></tr>" for name, value in rows)
        + "</table>"
    )


def tau_html(run: em.MetricsRun) -> str:
    r = run.reader
    if em.tau(run) is None:
        why = (
            "this report drafted nothing (0 ÷ 0)"
            if em.drafted_nothing(run)
            else f"{esc(r.engine)} counts no verify steps in it ({esc(r.names['steps'])} is absent)"
        )
        return (
            f'<div class="sv-metrics-tau" data-known="0"><b>τ</b> (mean tokens per verify step): not known from '
            f"this report: {why}</div>"
        )
    return (
        f'<div class="sv-metrics-tau" data-known="1"><b>τ</b>, mean tokens per verify step, as {esc(r.engine)} '
        f"defines it: {formula_html(r.tau_name, r.tau, run)}</div>"
    )


def rate_html(run: em.MetricsRun) -> str:
    r = run.reader
    if em.rate(run) is None:
        given = run.reported.get("rate")
        shown = f"{given:g} as {esc(r.engine)} reported it" if given is not None else "not reported"
        return f'<div class="sv-metrics-rate" data-known="0"><b>acceptance rate</b>: {shown}</div>'
    return (
        f'<div class="sv-metrics-rate" data-known="1"><b>acceptance rate</b>, drafts accepted per draft: '
        f"{formula_html(r.rate_name, r.rate, run)}</div>"
    )


def link_html(run: em.MetricsRun) -> str:
    """τ written with the rate: how the two figures tie together for this engine (rate as an exact fraction)."""
    rate = em.rate(run)
    if rate is None or em.tau(run) is None:
        return ""
    values = {**run.counts(), "rate": rate}
    return f'<p class="sv-metrics-link">They tie together as: {formula_html("τ", run.reader.link, run, values)}</p>'


def reported_html(run: em.MetricsRun) -> str:
    r = run.reader
    names = {"tau": r.tau_name, "rate": r.rate_name}
    parts = [f"{esc(names[k])} = {v:g}" for k, v in run.reported.items()]
    return (
        f'<p class="sv-metrics-reported">As reported beside the counts, and agreeing: {", ".join(parts)}.</p>'
        if parts
        else ""
    )


def positions_html(run: em.MetricsRun) -> str:
    """Per position: the count, the engine's per-position rate (÷ steps), α_i (÷ the position before)."""
    if not run.per_position or not run.steps:
        return ""
    alphas = em.position_alphas(run)
    rows = []
    for i, n in enumerate(run.per_position):
        before = run.steps if i == 0 else run.per_position[i - 1]
        alpha = f"{n} ÷ {before} = {fixed(float(alphas[i]), DECIMALS)}" if i < len(alphas) else "–"
        rows.append(
            f'<tr data-pos="{i + 1}"><td>{i + 1}</td><td>{n:,}</td>'
            f"<td>{n} ÷ {run.steps} = {fixed(n / run.steps, DECIMALS)}</td><td>{alpha}</td></tr>"
        )
    return (
        '<table class="sv-metrics-positions"><tr><th>draft position</th><th>steps that accepted it</th>'
        "<th>per-position rate (÷ steps)</th><th>α: accepted once the drafts before it were</th></tr>"
        + "".join(rows)
        + "</table>"
    )


def notes_html(run: em.MetricsRun) -> str:
    notes = run.notes + run.reader.notes
    return (
        '<ul class="sv-metrics-notes">' + "".join(f"<li>{esc(n)}</li>" for n in notes) + "</ul>"
        if notes
        else ""
    )


def scope_html(run: em.MetricsRun) -> str:
    """Which model of the report, and the window, where it says."""
    parts = [f"model {esc(run.model)}"] if run.model else []
    if run.window:
        parts.append(f"a window over {run.window['scrapes']} scrapes")
    return "".join(f' · <span class="sv-metrics-scope">{p}</span>' for p in parts)


def summary_html(run: em.MetricsRun) -> str:
    """The report: who wrote it and what the reader follows, its counts, τ and the rate with their link."""
    r = run.reader
    return (
        f'<div class="sv-metrics" data-kind="{esc(r.kind)}">'
        f'<p class="sv-metrics-head"><b>{esc(r.engine)}</b> · {esc(r.source)}{scope_html(run)}</p>'
        f'<p class="sv-metrics-follows">Read as {esc(r.engine)} defines its figures; the reader follows {esc(r.follows)}.</p>'
        f'{counts_html(run)}<div class="sv-metrics-pair">{tau_html(run)}{rate_html(run)}</div>'
        f"{link_html(run)}{reported_html(run)}{positions_html(run)}{notes_html(run)}</div>"
    )


# -- the prediction -------------------------------------------------------------------------------------------------
def ms(seconds: float) -> str:
    return fixed(seconds * 1e3, 3)


def preset_lines(costs: em.Costs, gamma: int) -> tuple[list, str, str]:
    """A GPU preset's costs, each from the figures printed before it: t(n) = max(weights ÷ bandwidth, FLOPs ÷ rate)
    for the target at 1 and γ + 1 tokens and the draft at 1, then c and v(γ + 1) as their quotients."""
    gpu, n = costs.gpu, gamma + 1
    tt1, td1, ttn = (  # in ms
        1e3 * em.forward_seconds(1, gpu, costs.target_params),
        1e3 * em.forward_seconds(1, gpu, costs.draft_params),
        1e3 * em.forward_seconds(n, gpu, costs.target_params),
    )
    c, td_text, tt_text = quotient_terms(td1, tt1, 3, least=3)
    v, ttn_text, tt1_text = quotient_terms(ttn, tt1, 2, least=3)
    memory, compute = costmodel.floors(n, 0.0, em.roofline(gpu, costs.target_params))
    lines = [
        f"{esc(gpu.name)}: {gpu.bandwidth / 1e12:g} TB/s, {gpu.flops / 1e12:g} TFLOP/s dense bf16 ({esc(gpu.source)}).",
        f"A forward over n tokens at the roofline: t(n) = max({em.BYTES_PER_PARAM} bytes × parameters ÷ bandwidth, "
        f"{em.FLOPS_PER_PARAM} FLOPs × parameters × n ÷ FLOP rate) (weights only: the KV cache and attention left "
        "out, so a floor: a real forward costs more).",
        f"Target ({costs.target_params / 1e9:g} B): t(1) = {tt_text} ms, t({n}) = max({ms(memory)}, {ms(compute)}) = "
        f"{ttn_text} ms; draft ({costs.draft_params / 1e9:g} B): t(1) = {td_text} ms.",
        f"c = {td_text} ÷ {tt_text} = <b>{c}</b>; v({n}) = {ttn_text} ÷ {tt1_text} = <b>{v}</b>.",
    ]
    return lines, c, v


def typed_lines(costs: em.Costs, gamma: int) -> tuple[list, str, str]:
    n, points = gamma + 1, dict(costs.points)
    c = f"{costs.c:g}"
    if n in points:
        v = f"{points[n]:g}"
        where = "as typed"
    else:
        v = fixed(costs.v(n), 3)
        where = "from the typed points by the cost model's line (costmodel.verify_curve)"
    listed = ", ".join(f"v({k}) = {x:g}" for k, x in sorted(points.items()))
    return [f"Costs as typed: c = {c}, {listed}; v({n}) {where} = <b>{v}</b>."], c, v


def prediction_html(run: em.MetricsRun, costs: em.Costs, gamma: int) -> str:
    """The cost model at γ: the α the counts imply, E from them, the round's cost γ·c + v(γ + 1) and the speedup
    E ÷ cost, each printed from the figures beside it."""
    p = em.predict(run, gamma, costs)
    lines, c_text, v_text = (preset_lines if costs.gpu else typed_lines)(costs, gamma)
    e_text, alpha_texts = derive(lambda *a: costmodel.expected_tokens_each(a), list(p.alphas.inputs), 2)
    cost_text = fixed(gamma * parse(c_text) + parse(v_text), 2)
    speedup = fixed(parse(e_text) / parse(cost_text), 2) if parse(cost_text) > 0 else "–"
    subs = "".join(f"α{_sub(i + 1)} = {t}, " for i, t in enumerate(alpha_texts))
    lines += [
        f"α: {esc(p.alphas.how)}: {subs.rstrip(', ')}.",
        f"E = 1 + α₁ + α₁α₂ + … = <b>{e_text}</b> tokens per verify at γ = {gamma}.",
        f"A round costs γ·c + v({gamma + 1}) = {gamma}·{c_text} + {v_text} = <b>{cost_text}</b> target steps.",
        f'Predicted speedup E ÷ cost = {e_text} ÷ {cost_text} = <b class="sv-metrics-speedup" '
        f'data-e="{e_text}" data-cost="{cost_text}">{speedup}×</b> over plain decoding (below 1× is a slowdown).',
    ]
    return '<div class="sv-metrics-prediction">' + "".join(f"<p>{line}</p>" for line in lines) + "</div>"


SUBSCRIPTS = str.maketrans("0123456789", "₀₁₂₃₄₅₆₇₈₉")


def _sub(i: int) -> str:
    return str(i).translate(SUBSCRIPTS)


# -- the figures ----------------------------------------------------------------------------------------------------
def positions_fig(run: em.MetricsRun) -> go.Figure:
    """Per draft position: the engine's per-position rate (steps that accepted it ÷ steps) and α_i."""
    title = f"Acceptance by draft position · {run.reader.engine}"
    if not run.per_position or not run.steps:
        return empty_fig(title, f"{run.reader.engine} reports no per-position counts here")
    x = list(range(1, len(run.per_position) + 1))
    fig = _figure(title, "draft position", "share")
    fig.add_trace(
        go.Bar(
            x=x,
            y=[float(r) for r in em.position_rates(run)],
            name="per-position rate: accepted ÷ steps",
            marker_color=COLORS["accepted"],
            customdata=[[n, run.steps] for n in run.per_position],
            hovertemplate="position %{x}: %{customdata[0]} ÷ %{customdata[1]} = %{y:.3f}<extra></extra>",
        )
    )
    alphas = em.position_alphas(run)
    fig.add_trace(
        go.Scatter(
            x=x[: len(alphas)],
            y=[float(a) for a in alphas],
            mode="lines+markers",
            name="α: accepted once the drafts before it were",
            line=dict(color=COLORS["model"], dash="dot"),
            hovertemplate="position %{x}: α = %{y:.3f}<extra></extra>",
        )
    )
    fig.update_yaxes(range=[0, 1.05])
    fig.update_xaxes(dtick=1)
    return fig


def histogram_fig(run: em.MetricsRun) -> go.Figure:
    title = "Verify steps by drafts accepted"
    if not run.histogram:
        return empty_fig(title, f"{run.reader.engine} reports no acceptance histogram here")
    fig = _figure(title, "drafts accepted in the step", "verify steps")
    fig.add_trace(
        go.Bar(
            x=list(range(len(run.histogram))),
            y=list(run.histogram),
            name="steps",
            marker_color=COLORS["speculative"],
            hovertemplate="%{y} steps accepted %{x} drafts<extra></extra>",
        )
    )
    fig.update_xaxes(dtick=1)
    return fig


def whatif_gamma_fig(run: em.MetricsRun, costs: em.Costs, gamma: int) -> go.Figure:
    """Predicted speedup against γ, the run's α and the costs kept; the chosen γ marked."""
    rows = [(g, s) for g, s in em.whatif_gamma(run, costs) if s is not None]
    fig = _figure("What if: speedup against γ", "γ (drafts per round)", "predicted speedup ×")
    fig.add_trace(
        go.Scatter(
            x=[g for g, _ in rows],
            y=[s for _, s in rows],
            mode="lines+markers",
            name="E ÷ (γ·c + v(γ + 1))",
            line=dict(color=COLORS["model"]),
            hovertemplate="γ = %{x}: %{y:.2f}×<extra></extra>",
        )
    )
    chosen = dict(rows).get(gamma)
    if chosen is not None:
        fig.add_trace(
            go.Scatter(
                x=[gamma],
                y=[chosen],
                mode="markers",
                name=f"your γ = {gamma}",
                marker=dict(color=COLORS["measured"], size=10),
                hovertemplate="your γ: %{y:.2f}×<extra></extra>",
            )
        )
    fig.add_hline(y=1, line_dash="dash", line_color=COLORS["ar"])
    fig.update_xaxes(dtick=2)
    return fig


def whatif_alpha_fig(run: em.MetricsRun, costs: em.Costs, gamma: int) -> go.Figure:
    """Predicted speedup against one α at every position, at γ; the α equivalent to the run's (same E) marked."""
    rows = [(a, s) for a, s in em.whatif_alpha(gamma, costs) if s is not None]
    fig = _figure(
        f"What if: speedup against α at γ = {gamma}", "α (per-token acceptance)", "predicted speedup ×"
    )
    fig.add_trace(
        go.Scatter(
            x=[a for a, _ in rows],
            y=[s for _, s in rows],
            mode="lines",
            name="E(α, γ) ÷ (γ·c + v(γ + 1))",
            line=dict(color=COLORS["model"]),
            hovertemplate="α = %{x:.3f}: %{y:.2f}×<extra></extra>",
        )
    )
    p = em.predict(run, gamma, costs)
    equivalent = em.alpha_for_tokens(p.tokens, gamma)
    if p.speedup is not None:
        fig.add_trace(
            go.Scatter(
                x=[equivalent],
                y=[p.speedup],
                mode="markers",
                name=f"this run: α ≈ {equivalent:.3f} (same E)",
                marker=dict(color=COLORS["measured"], size=10),
                hovertemplate="this run: %{y:.2f}×<extra></extra>",
            )
        )
    fig.add_hline(y=1, line_dash="dash", line_color=COLORS["ar"])
    fig.update_xaxes(range=[0, 1])
    return set_title(fig, f"What if: speedup against α at γ = {gamma}")


NO_PREDICTION = (
    '<div class="sv-metrics-prediction" data-known="0"><p>No prediction: this report drafted nothing, so its '
    "counts imply no α.</p></div>"
)


def render(run: em.MetricsRun, gamma: int, costs: em.Costs) -> dict:
    """Every view of a metrics run by name (VIEWS); a run that drafted nothing has no prediction."""
    if not em.predictable(run):
        blank = "load a report that drafted"
        return {
            "summary": summary_html(run) + NO_PREDICTION,
            "positions": positions_fig(run),
            "histogram": histogram_fig(run),
            "whatif_gamma": empty_fig("What if: speedup against γ", blank),
            "whatif_alpha": empty_fig("What if: speedup against α", blank),
        }
    return {
        "summary": summary_html(run) + prediction_html(run, costs, gamma),
        "positions": positions_fig(run),
        "histogram": histogram_fig(run),
        "whatif_gamma": whatif_gamma_fig(run, costs, gamma),
        "whatif_alpha": whatif_alpha_fig(run, costs, gamma),
    }
