"""Events -> small plotly figures. Each works on a partial run and returns an empty figure with a
note when the data it needs is not there yet. Knows nothing about HTML or gradio.
"""

from __future__ import annotations

import textwrap

import plotly.graph_objects as go

from engine import costmodel, costrule, metrics
from engine.config import MAX_GAMMA
from engine.figures import Exact

from .runs import predicted_terms, spec_summary, split_runs, usable_summary, view_runs

HEIGHT = 290
UIREVISION = "specviz"
COLORS = {
    "accepted": "#2da44e",
    "corrected": "#e16f24",
    "bonus": "#8250df",
    "rejected": "#cf222e",
    "ar": "#6e7781",
    "speculative": "#0969da",
    "model": "#0969da",
    "measured": "#e16f24",
}
ORIGINS = ("accepted", "corrected", "bonus", "ar")


# a title line's most characters: at 13 px it fits a phone's chart (a 390 px screen leaves the plot ~340 px)
TITLE_CHARS = 44
TITLE_LINE_PX = 17  # the top margin grows by this much per line past the first


def title_lines(text: str, width: int = TITLE_CHARS) -> list[str]:
    """A chart title as the lines it is drawn on (Plotly never wraps a title; a phone clipped it): parts joined by
    " · " share a line while it fits `width` characters, a part too long for one breaks at spaces, "<br>" always
    breaks."""
    lines: list[str] = []
    for block in text.split("<br>"):
        start = len(lines)
        for part in block.split(" · "):
            pieces = textwrap.wrap(part, width, break_long_words=False, break_on_hyphens=False) or [""]
            if len(lines) > start and len(pieces) == 1 and len(lines[-1]) + 3 + len(part) <= width:
                lines[-1] += " · " + part
            else:
                lines += pieces
    return lines


def set_title(fig: go.Figure, text: str) -> go.Figure:
    """Set a figure's title wrapped to title_lines, the top margin grown to hold its lines."""
    lines = title_lines(text)
    fig.update_layout(title_text="<br>".join(lines), margin_t=36 + TITLE_LINE_PX * (len(lines) - 1))
    return fig


def _figure(title: str, xtitle: str = "", ytitle: str = "") -> go.Figure:
    """An empty figure in the app's style; an x axis titled "round" is marked (layout.meta.sv_x) so that
    hovering a round elsewhere on the page draws a band at it (assets/specviz.js)."""
    fig = go.Figure()
    # transparent: the figure takes the page's light or dark background (assets/app.css turns text light in dark
    # mode); the legend sits at the container's bottom edge, below the x-axis title, never across it
    fig.update_layout(
        template="plotly_white",
        height=HEIGHT,
        uirevision=UIREVISION,
        paper_bgcolor="rgba(0,0,0,0)",
        plot_bgcolor="rgba(0,0,0,0)",
        title=dict(text=title, font=dict(size=13), x=0.01, xanchor="left"),
        margin=dict(l=48, r=12, t=36, b=84),
        font=dict(size=11, color="#6e7781"),
        legend=dict(
            orientation="h",
            yref="container",
            y=0,
            yanchor="bottom",
            x=0,
            font=dict(size=10),
            bgcolor="rgba(0,0,0,0)",
        ),
        xaxis=dict(title=xtitle, gridcolor="rgba(128,128,128,.22)", zerolinecolor="rgba(128,128,128,.3)"),
        yaxis=dict(title=ytitle, gridcolor="rgba(128,128,128,.22)", zerolinecolor="rgba(128,128,128,.3)"),
        meta={"sv_x": "round"} if xtitle == "round" else None,
    )
    return set_title(fig, title)


def empty_fig(title: str, note: str) -> go.Figure:
    """A figure with no traces and a centred note (the data is not there yet)."""
    fig = _figure(title)
    fig.add_annotation(
        text=note,
        x=0.5,
        y=0.5,
        xref="paper",
        yref="paper",
        showarrow=False,
        font=dict(size=12, color="#6e7781"),
    )
    fig.update_xaxes(visible=False)
    fig.update_yaxes(visible=False)
    return fig


def _spec(events):
    run = view_runs(events).get("speculative")
    return run if run is not None and run.rounds else None


def accepted_length_fig(events) -> go.Figure:
    """Committed tokens per round, stacked by origin (accepted drafts + the corrected/bonus token)."""
    title = "Tokens committed per round"
    run = _spec(events)
    if run is None:
        return empty_fig(title, "no speculative rounds yet")
    fig = _figure(title, "round", "tokens")
    rounds = [r.round for r in run.rounds]
    for origin in ORIGINS:
        counts = [r.origins.count(origin) for r in run.rounds]
        if any(counts):
            fig.add_trace(
                go.Bar(
                    x=rounds,
                    y=counts,
                    name=origin,
                    marker_color=COLORS[origin],
                    hovertemplate=f"round %{{x}}: %{{y}} {origin}<extra></extra>",
                )
            )
    total = sum(len(r.tokens) for r in run.rounds)
    fig.update_layout(barmode="stack", bargap=0.1)
    return set_title(fig, f"{title} · mean {total / len(run.rounds):.2f} per target forward")


def position_counts(events) -> tuple[list[int], list[int]]:
    """(drafted, accepted) counts per draft position 1..γ of the speculative run (the engine's one count)."""
    return metrics.position_counts(split_runs(events).get("speculative", []))


def position_acceptance_fig(events) -> go.Figure:
    """Acceptance rate at each draft position (position i is kept only if 1..i-1 were)."""
    title = "Acceptance by draft position"
    drafted, accepted = position_counts(events)
    if not drafted:
        return empty_fig(title, "no verified drafts yet")
    fig = _figure(title, "draft position", "accepted / drafted")
    x = list(range(1, len(drafted) + 1))
    fig.add_trace(
        go.Bar(
            x=x,
            y=[a / d for a, d in zip(accepted, drafted)],
            name="accepted / drafted",
            marker_color=COLORS["accepted"],
            customdata=list(zip(accepted, drafted)),
            hovertemplate="position %{x}: %{y:.2f} (%{customdata[0]}/%{customdata[1]})<extra></extra>",
        )
    )
    alpha = spec_summary(events).get("alpha")
    if alpha is not None:  # the i.i.d. model behind E: position i is kept with probability α^i
        fig.add_trace(
            go.Scatter(
                x=x,
                y=[alpha**i for i in x],
                mode="lines+markers",
                name=f"model α<sup>i</sup>, α={alpha:.2f}",
                line=dict(color=COLORS["model"], dash="dot"),
                marker=dict(size=5),
                hovertemplate="position %{x}: α<sup>i</sup> = %{y:.2f}<extra></extra>",
            )
        )
    fig.update_yaxes(range=[0, 1.05])
    fig.update_xaxes(dtick=1)
    return fig


def running_acceptance_fig(events) -> go.Figure:
    """α so far after each round (accepted / tested positions, the cost model's α), plus each round's own
    α (its accepted over its tested positions): one definition on the one axis."""
    title = "Running acceptance rate"
    run = _spec(events)
    rows = [rv for rv in (run.rounds if run else []) if rv.gamma and rv.verified is not None]
    if not rows:
        return empty_fig(title, "no verified drafts yet")
    fig = _figure(title, "round", "α (per token)")
    x, own, running, acc, rej = [], [], [], 0, 0
    for rv in rows:
        rejected = rv.first_rejected is not None
        acc, rej = acc + rv.n_accepted, rej + rejected
        x.append(rv.round)
        own.append(costmodel.alpha(rv.n_accepted, rejected))
        running.append(costmodel.alpha(acc, rej))
    fig.add_trace(
        go.Scatter(
            x=x,
            y=own,
            mode="markers",
            name="this round's α: accepted / tested",
            opacity=0.35,
            marker=dict(color=COLORS["accepted"], size=5),
            hovertemplate="round %{x}: %{y:.2f}<extra>this round</extra>",
        )
    )
    fig.add_trace(
        go.Scatter(
            x=x,
            y=running,
            mode="lines",
            name="running α",
            line=dict(color=COLORS["model"]),
            hovertemplate="after round %{x}: α = %{y:.3f}<extra></extra>",
        )
    )
    fig.update_yaxes(range=[0, 1.05])
    return fig


def throughput_fig(events) -> go.Figure:
    """Cumulative tokens vs wall time for the speculative and the AR run (each on its own clock)."""
    title = "Tokens vs wall time"
    runs = view_runs(events)
    fig = _figure(title, "elapsed (s)", "tokens")
    for mode, name in (("speculative", "speculative"), ("ar", "autoregressive")):
        run = runs.get(mode)
        points = run.timeline() if run else []
        if not points:
            continue
        fig.add_trace(
            go.Scatter(
                x=[0.0] + [t for t, _ in points],
                y=[0] + [n for _, n in points],
                mode="lines",
                name=name,
                line=dict(color=COLORS[mode], shape="hv"),
                hovertemplate=f"{name}: %{{y}} tokens at %{{x:.2f}} s<extra></extra>",
            )
        )
    if not fig.data:
        return empty_fig(title, "no timed rounds yet")
    return fig


def speedup_model_fig(events) -> go.Figure:
    """Predicted speedup E/(γc + v(γ+1)) over γ = 1..16 from this run's α, c and measured v(n), with the
    run's own prediction and, once the race has finished, the measured speedup. All from the cost model;
    costs the one rule refuses (engine.costrule: impossible, or measured under load) give way to this host's
    quiet calibration, and the title says so."""
    title = "Predicted speedup vs γ"
    summary = usable_summary(events)
    alpha, c, v_points = summary.get("alpha"), summary.get("c"), dict(summary.get("v_points") or [])
    gamma_run = summary.get("gamma") or 0
    costs = summary.get("costs") or {}
    if summary.get("tree_rounds"):
        return empty_fig(
            title,
            "not modelled for token trees: a tree's expected tokens per forward<br>depend on its "
            "shape (E(α, γ) is a chain's); the race measures its speedup",
        )
    if costs.get("source") == "none":
        return empty_fig(title, "<br>".join(title_lines(costrule.sentence(summary), 60)[:5]))
    if alpha is None or c is None or not v_points or not gamma_run:
        return empty_fig(title, "needs a finished speculative run with timing (α, c, v)")
    fig = _figure(title, "γ (draft tokens per round)", "speedup over AR (×)")
    points = costmodel.curve(alpha, c, v_points, MAX_GAMMA)
    gammas, es, ys = [g for g, _, _ in points], [e for _, e, _ in points], [y for _, _, y in points]
    tested = summary.get("accepted", 0) + summary.get("rejections", 0)
    shown = Exact.ratio(summary["accepted"], tested).text() if tested else f"{alpha:.3f}"  # exact, as Explain
    calibrated = costs.get("source") == "calibration"
    label = f"E/(γc+v(γ+1)): α={shown}, c={c:.3f}, " + (
        "quiet calibration of v(n)" if calibrated else "measured v(n)"
    )
    fig.add_trace(
        go.Scatter(
            x=gammas,
            y=ys,
            mode="lines+markers",
            name=label,
            customdata=es,
            line=dict(color=COLORS["model"]),
            marker=dict(size=4),
            hovertemplate="γ=%{x}: %{y:.2f}× (E=%{customdata:.2f})<extra></extra>",
        )
    )
    predicted = summary.get("predicted_speedup")
    if predicted is not None:
        fig.add_trace(
            go.Scatter(
                x=[gamma_run],
                y=[predicted],
                mode="markers",
                name=f"this run (predicted {(predicted_terms(summary) or ('–',))[0]}×)",
                marker=dict(color=COLORS["model"], size=11, symbol="circle-open", line=dict(width=2)),
                hovertemplate="this run: predicted %{y:.2f}×<extra></extra>",
            )
        )
    measured = summary.get("speedup")
    if measured is not None:
        fig.add_trace(
            go.Scatter(
                x=[gamma_run],
                y=[measured],
                mode="markers",
                name=f"measured {measured:.2f}× (race)",
                marker=dict(color=COLORS["measured"], size=11, symbol="diamond"),
                hovertemplate="γ=%{x}: measured %{y:.2f}×<extra></extra>",
            )
        )
    best = max(points, key=lambda p: p[2])
    fig.add_hline(y=1.0, line_dash="dot", line_color="#6e7781")
    why = (
        f" on its host's quiet calibration, not this run's costs ({costrule.short(summary)})"
        if calibrated
        else ""
    )
    return set_title(fig, f"{title} · best γ={best[0]} ({best[2]:.2f}×){why}")
