"""Events -> small plotly figures. Each works on a partial run and returns an empty figure with a
note when the data it needs is not there yet. Knows nothing about HTML or gradio.
"""
from __future__ import annotations

import plotly.graph_objects as go

from engine.metrics import expected_tokens, predicted_speedup
from .runs import measured_speedup, spec_summary, split_runs, view_run, view_runs

HEIGHT = 260
UIREVISION = "specviz"
MAX_GAMMA = 16  # the engine's largest gamma
COLORS = {"accepted": "#2da44e", "corrected": "#e16f24", "bonus": "#8250df", "rejected": "#cf222e",
          "ar": "#6e7781", "speculative": "#0969da", "model": "#0969da", "measured": "#e16f24"}
ORIGINS = ("accepted", "corrected", "bonus", "ar")


def _figure(title: str, xtitle: str = "", ytitle: str = "") -> go.Figure:
    fig = go.Figure()
    fig.update_layout(template="plotly_white", height=HEIGHT, uirevision=UIREVISION,
                      title=dict(text=title, font=dict(size=13), x=0.01, xanchor="left"),
                      margin=dict(l=48, r=12, t=36, b=40), font=dict(size=11),
                      legend=dict(orientation="h", y=-0.25, x=0, font=dict(size=10)),
                      xaxis_title=xtitle, yaxis_title=ytitle)
    return fig


def empty_fig(title: str, note: str) -> go.Figure:
    """A figure with no traces and a centred note (the data is not there yet)."""
    fig = _figure(title)
    fig.add_annotation(text=note, x=0.5, y=0.5, xref="paper", yref="paper", showarrow=False,
                       font=dict(size=12, color="#6e7781"))
    fig.update_xaxes(visible=False)
    fig.update_yaxes(visible=False)
    return fig


def _spec(events):
    run = view_run(split_runs(events).get("speculative", []), "speculative")
    return run if run.rounds else None


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
            fig.add_trace(go.Bar(x=rounds, y=counts, name=origin, marker_color=COLORS[origin],
                                 hovertemplate=f"round %{{x}}: %{{y}} {origin}<extra></extra>"))
    total = sum(len(r.tokens) for r in run.rounds)
    fig.update_layout(barmode="stack", bargap=0.1,
                      title_text=f"{title} · mean {total / len(run.rounds):.2f} per target forward")
    return fig


def position_counts(events) -> tuple[list[int], list[int]]:
    """(drafted, accepted) counts per draft position 1..γ of the speculative run."""
    run = _spec(events)
    drafted, accepted = [], []
    for rv in run.rounds if run else []:
        if rv.drafted is None or rv.verified is None:
            continue
        for i, ok in enumerate(rv.verified.accepted[:rv.gamma]):
            if i >= len(drafted):
                drafted.append(0)
                accepted.append(0)
            drafted[i] += 1
            accepted[i] += bool(ok)
    return drafted, accepted


def position_acceptance_fig(events) -> go.Figure:
    """Acceptance rate at each draft position (position i is kept only if 1..i-1 were)."""
    title = "Acceptance by draft position"
    drafted, accepted = position_counts(events)
    if not drafted:
        return empty_fig(title, "no verified drafts yet")
    fig = _figure(title, "draft position", "accepted / drafted")
    x = list(range(1, len(drafted) + 1))
    fig.add_trace(go.Bar(x=x, y=[a / d for a, d in zip(accepted, drafted)], name="acceptance",
                         marker_color=COLORS["accepted"], customdata=list(zip(accepted, drafted)),
                         hovertemplate="position %{x}: %{y:.2f} (%{customdata[0]}/%{customdata[1]})<extra></extra>"))
    fig.update_yaxes(range=[0, 1.05])
    fig.update_xaxes(dtick=1)
    return fig


def running_acceptance_fig(events) -> go.Figure:
    """Acceptance rate accepted/drafted so far, after each round (plus each round's own rate)."""
    title = "Running acceptance rate"
    run = _spec(events)
    rows = [rv for rv in (run.rounds if run else []) if rv.gamma and rv.verified is not None]
    if not rows:
        return empty_fig(title, "no verified drafts yet")
    fig = _figure(title, "round", "α (accepted / drafted)")
    x, own, running, acc, dr = [], [], [], 0, 0
    for rv in rows:
        acc, dr = acc + rv.n_accepted, dr + rv.gamma
        x.append(rv.round)
        own.append(rv.n_accepted / rv.gamma)
        running.append(acc / dr)
    fig.add_trace(go.Scatter(x=x, y=own, mode="markers", name="this round", opacity=0.35,
                             marker=dict(color=COLORS["accepted"], size=5),
                             hovertemplate="round %{x}: %{y:.2f}<extra>this round</extra>"))
    fig.add_trace(go.Scatter(x=x, y=running, mode="lines", name="running α", line=dict(color=COLORS["model"]),
                             hovertemplate="after round %{x}: α = %{y:.3f}<extra></extra>"))
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
        fig.add_trace(go.Scatter(x=[0.0] + [t for t, _ in points], y=[0] + [n for _, n in points],
                                 mode="lines", name=name, line=dict(color=COLORS[mode], shape="hv"),
                                 hovertemplate=f"{name}: %{{y}} tokens at %{{x:.2f}} s<extra></extra>"))
    if not fig.data:
        return empty_fig(title, "no timed rounds yet")
    return fig


def speedup_model_fig(events) -> go.Figure:
    """Predicted speedup E/(γc+v) over γ = 1..16 from this run's α, c, v, with the measured point.

    Assumption (stated in the legend): v, the cost of one verify forward in target steps, is
    measured only at this run's γ+1 tokens and is held constant at that value for every γ.
    """
    title = "Predicted speedup vs γ"
    summary = spec_summary(events)
    alpha, c, v = summary.get("acceptance_rate"), summary.get("c"), summary.get("v")
    gamma_run = int(summary.get("gamma") or 0)
    if alpha is None or c is None or v is None or not gamma_run:
        return empty_fig(title, "needs a finished speculative run with timing (α, c, v)")
    fig = _figure(title, "γ (draft tokens per round)", "speedup over AR (×)")
    gammas = list(range(1, MAX_GAMMA + 1))
    ys = [predicted_speedup(alpha, g, c, v) for g in gammas]
    es = [expected_tokens(alpha, g) for g in gammas]
    label = f"E/(γc+v), α={alpha:.2f}, c={c:.3f}, v held at measured {v:.2f}"
    fig.add_trace(go.Scatter(x=gammas, y=ys, mode="lines+markers", name=label, customdata=es,
                             line=dict(color=COLORS["model"]), marker=dict(size=4),
                             hovertemplate="γ=%{x}: %{y:.2f}× (E=%{customdata:.2f})"
                                           f"<extra>assumes v={v:.2f} at every γ</extra>"))
    fig.add_trace(go.Scatter(x=[gamma_run], y=[predicted_speedup(alpha, gamma_run, c, v)], mode="markers",
                             name=f"this run's γ={gamma_run} (predicted)",
                             marker=dict(color=COLORS["model"], size=11, symbol="circle-open", line=dict(width=2)),
                             hovertemplate="γ=%{x}: predicted %{y:.2f}×<extra></extra>"))
    measured = measured_speedup(events)
    if measured is not None:
        fig.add_trace(go.Scatter(x=[gamma_run], y=[measured], mode="markers", name="measured (spec ÷ AR tok/s)",
                                 marker=dict(color=COLORS["measured"], size=11, symbol="diamond"),
                                 hovertemplate="γ=%{x}: measured %{y:.2f}×<extra></extra>"))
    best = gammas[max(range(len(ys)), key=ys.__getitem__)]
    fig.add_hline(y=1.0, line_dash="dot", line_color="#6e7781")
    fig.update_layout(title_text=f"{title} · best γ={best} ({max(ys):.2f}×)")
    return fig
