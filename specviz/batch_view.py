"""A batched run's events -> the Batch tab: B lanes of colour-coded streams, per-row acceptance, and the throughput
curve against B (benchmarks/batch_bench.py's results). Knows nothing about gradio or torch.

Each lane is the single-run stream renderer (tokens.render_stream) on one row's events (`row` = b), so a lane's
colours, tooltips and p / q are exactly the Output tab's.
"""

from __future__ import annotations

import math

import plotly.graph_objects as go

from engine import costmodel
from engine.figures import derive, quotient_terms
from engine.specs import family, parse_contestant

from .charts import COLORS, _figure, empty_fig
from .markup import esc
from .tokens import render_stream

LINE = {"ar": COLORS["ar"], "auto": COLORS["accepted"]}
SHADES = ("#54aeff", "#0969da", "#0a3069", "#8250df")  # fixed-γ contestants, by γ order
DASH = {"grounded": "solid", "open": "dot"}


def row_events(events, row: int) -> list:
    """The events of row `row` of a batched run (a single run's are all row 0)."""
    return [e for e in events if getattr(e, "row", 0) == row]


def batch_rows(events) -> list[int]:
    """The rows a batched run's events hold, in order."""
    return sorted({e.row for e in events if getattr(e, "row", 0) >= 0 and e.kind == "run_started"})


def _finished(events, row: int):
    return next((e for e in events if e.kind == "finished" and e.row == row), None)


def lanes_html(events) -> str:
    """One lane per row: its stream (accepted / rejected / corrected / bonus, p and q on hover) and its numbers."""
    rows = batch_rows(events)
    if not rows:
        return '<div class="batch-lanes batch-empty">Run a batch to see its rows here.</div>'
    out = [f'<div class="batch-lanes" data-rows="{len(rows)}">']
    for row in rows:
        mine = row_events(events, row)
        done = _finished(events, row)
        s = (done.summary or {}) if done is not None else {}
        alpha = s.get("alpha")
        counts = (
            costmodel.tested_counts(s.get("accepted", 0), s.get("rejections", 0), s.get("drafted", 0))
            if done is not None and s.get("drafted")
            else "no drafts tested"
        )
        head = (
            f"row {row + 1}: {s.get('new_tokens', '…')} tokens, α {alpha:.2f} ({esc(counts)}), "
            f"{esc(done.stop_reason)}"
            if done is not None and alpha is not None
            else f"row {row + 1}: {esc(done.stop_reason) + ', ' if done is not None else 'running, '}{esc(counts)}"
        )
        out.append(
            f'<section class="batch-lane" data-row="{row}"><h4 class="batch-lane-head">{head}</h4>'
            f"{render_stream(mine)}</section>"
        )
    out.append("</div>")
    return "".join(out)


def batch_line(events) -> str:
    """The batch's summary: rows, tokens, decode throughput, γ per round, α pooled (batch_finished's numbers)."""
    done = next((e for e in events if e.kind == "batch_finished"), None)
    rounds = [e for e in events if e.kind == "batch_round"]
    if done is None:
        return (
            f'<p class="batch-line">{len(rounds)} rounds so far, '
            f"{sum(sum(e.committed) for e in rounds)} tokens committed.</p>"
            if rounds
            else ""
        )
    s = done.summary
    gammas = ", ".join(f"γ {g} × {n}" for g, n in s.get("round_gammas", []))
    alpha = s.get("alpha")
    rate = s.get("decode_tokens_per_s")
    mode = "AR (γ = 0)" if done.mode == "ar" else esc(done.draft)
    return (
        f'<p class="batch-line" data-rows="{done.rows}"><b>{done.rows} rows</b>, {mode}: {s.get("tokens")} '
        f"tokens in {s.get('rounds')} forwards ({gammas}); "
        f"{decode_rate(s)} after the prefill"
        + (f"; α {alpha:.2f} pooled over the rows" if alpha is not None else "")
        + ".</p>"
        if rate
        else f'<p class="batch-line">{done.rows} rows, {s.get("tokens")} tokens.</p>'
    )


def decode_rate(s: dict) -> str:
    """ "1,234 tokens/s (512 ÷ 0.415 s)": the decode throughput with the seconds it divides by, printed so that
    they divide to it."""
    tokens, seconds = s.get("tokens"), s["wall_s"] - s["prefill_s"]
    rate, (_, secs) = derive(lambda n, t: n / t if t > 0 else math.inf, [(tokens, 0), (seconds, 2)], 0)
    return f"{rate} tokens/s ({tokens} ÷ {secs} s)"


def crossover(sizes: list, ar: list, spec: list) -> int | None:
    """The smallest B from which `spec`'s median decode throughput stays below AR's at every larger B measured
    (None: it ends above AR). A dip at one B that recovers at the next is not where speculation stops paying."""
    below = [
        bool(
            a
            and s
            and a.get("decode_tokens_per_s")
            and s.get("decode_tokens_per_s") is not None
            and s["decode_tokens_per_s"] < a["decode_tokens_per_s"]
        )
        for a, s in zip(ar, spec)
    ]
    at = None
    for b, low in zip(sizes, below):
        at = (at or b) if low else None
    return at


def _name(contestant: str, gamma: int = 0) -> str:
    """ "ar" -> AR; "ngram@4" -> ngram γ=4 (the benchmark's fixed-γ contestants); auto -> auto (γ by goodput)."""
    c = parse_contestant(contestant)
    if c.spec is None:
        return "AR"
    if c.gamma is not None:
        return f"{c.drafter} γ={c.gamma}"
    return f"{c.drafter} (γ by goodput)" if family(c.drafter) == "auto" else f"{c.drafter} γ={gamma}"


def gamma_of(contestant: str, default: int) -> int:
    g = parse_contestant(contestant).gamma
    return default if g is None else g


def throughput_figure(results: dict | None) -> go.Figure:
    """Decode tokens/s of the whole batch against B, per contestant and prompt set; the crossover marked."""
    title = "Batch throughput against B (measured on this machine)"
    if not results or not results.get("curves"):
        return empty_fig(title, "no batch benchmark yet: python -m benchmarks batch")
    fig = _figure(title, "batch size B (rows per forward)", "tokens/s after the prefill")
    sizes, gamma = results["sizes"], results["gamma"]
    fixed = [n for n in results["contestants"] if parse_contestant(n).gamma is not None]
    for s, curves in results["curves"].items():
        for n, points in curves.items():
            color = (
                SHADES[fixed.index(n) % len(SHADES)]
                if n in fixed
                else LINE.get(family(n), COLORS["speculative"])
            )
            fig.add_scatter(
                x=sizes,
                y=[p["decode_tokens_per_s"] for p in points],
                mode="lines+markers",
                name=f"{_name(n, gamma)}, {s}",
                line=dict(color=color, dash=DASH.get(s, "dash")),
                hovertemplate=f"{_name(n, gamma)}, {s}<br>B=%{{x}}: %{{y:.0f}} tokens/s<extra></extra>",
            )
    for s, by in (results.get("crossover") or {}).items():
        b = by.get(f"ngram@{gamma}")
        if b:
            fig.add_vline(x=b, line=dict(color=COLORS["rejected"], dash=DASH.get(s, "dash"), width=1))
            # an annotation on a log axis takes log10(x) (Plotly's rule; x = 16 stretched the axis to 10^16), the
            # line takes x itself
            fig.add_annotation(
                x=math.log10(b),
                y=1,
                yref="paper",
                text=f"{s}: γ={gamma} below AR from B={b}",
                showarrow=False,
                xanchor="left",
                font=dict(size=10, color=COLORS["rejected"]),
            )
    fig.update_xaxes(type="log", tickvals=sizes, ticktext=[str(b) for b in sizes])
    fig.update_layout(height=360, meta={"sv_chart": "batch-throughput"})
    return fig


def roofline_note(results: dict | None) -> str:
    """Why the curve bends, from the roofline's ridge: tokens per forward B·(γ + 1) against n*."""
    if not results:
        return ""
    ridge, gamma = results.get("ridge_tokens"), results["gamma"]
    if not ridge:
        return ""
    at, (n_star,) = derive(lambda r: r / (gamma + 1), [(ridge, 0)], 1)
    return (
        f'<p class="batch-roof">On this machine ({esc(results.get("cpu", ""))}, {results.get("threads")} threads) '
        f"the roofline's ridge is n* ≈ {n_star} tokens per forward (at 256 cached tokens): below it a forward "
        f"costs about its weight reads, whatever it carries; above it, its arithmetic. A batch of B rows at "
        f"γ = {gamma} carries B × {gamma + 1} tokens, so it reaches the ridge near B ≈ {at}; AR carries only B. "
        f"Speculation spends the spare compute a batch also spends: once the forward is compute-bound, every "
        f"rejected draft costs real time, and AR's B rows per forward are the better use of it.</p>"
    )


def auto_gaps(results: dict) -> dict:
    """{set: per B, auto's median throughput ÷ the best of AR and every fixed-γ contestant's} (auto = 1 is as good
    as the best fixed choice made in hindsight)."""
    out = {}
    for s, curves in results["curves"].items():
        auto = next((n for n in curves if family(n) == "auto"), None)
        if auto is None:
            continue
        # AR and every fixed-γ contestant (not the adaptive ones)
        rivals = [n for n in curves if (c := parse_contestant(n)).spec is None or c.gamma is not None]
        out[s] = [
            p["decode_tokens_per_s"] / max(curves[n][i]["decode_tokens_per_s"] for n in rivals)
            if p["decode_tokens_per_s"]
            else None
            for i, p in enumerate(curves[auto])
        ]
    return out


def throughput_markdown(results: dict) -> str:
    """The benchmark's table: median decode tokens/s per B, contestant and set, the crossover and the command."""
    sizes, gamma = results["sizes"], results["gamma"]
    lines = [
        f"# Batched throughput ({results['target']}, {results['cpu']}, {results['threads']} threads, greedy, "
        f"{results['max_new_tokens']} new tokens per row)",
        "",
        f"`{results['command']}` ({results['seconds'] / 60:.1f} min; medians of {results['repeats']} interleaved "
        f"repeats; decode tokens/s of the whole batch, after the prefill)",
        "",
    ]
    for s, curves in results["curves"].items():
        lines += [
            f"## {s} prompts ({', '.join(results['sets'][s])})",
            "",
            "| contestant | " + " | ".join(f"B={b}" for b in sizes) + " |",
            "|---|" + "---|" * len(sizes),
        ]
        ar = curves["ar"]
        for n, points in curves.items():
            cells = []
            for p, a in zip(points, ar):
                v, base = p["decode_tokens_per_s"], a["decode_tokens_per_s"]
                ratio = (
                    derive(lambda x, y: x / y, [(v, 0), (base, 0)], most=0)[0] if n != "ar" and base else None
                )
                # of the printed cells, as printed
                cells.append(f"{v:.0f}" + (f" ({ratio}×)" if ratio else ""))
            lines.append(f"| {_name(n, gamma)} | " + " | ".join(cells) + " |")
        cross = results["crossover"][s]
        lines += [
            "",
            "; ".join(
                f"{_name(n, gamma)}: "
                + (f"below AR from B = {b} on" if b else f"above AR at B = {sizes[-1]}")
                for n, b in cross.items()
            ),
            "",
        ]
    for s, by in auto_gaps(results).items():
        lines.append(
            f"auto ÷ the better of AR and the best fixed γ, {s}: "
            + ", ".join(f"B={b} {r:.2f}" for b, r in zip(sizes, by) if r is not None)
        )
    lines.append(f"Outputs differing from AR's (greedy, every row): {results['mismatches']}.")
    if results.get("ridge_tokens"):
        at, (n_star,) = derive(lambda r: r / (gamma + 1), [(results["ridge_tokens"], 0)], 1)
        lines.append(
            f"Roofline ridge: n* ≈ {n_star} tokens per forward at 256 cached tokens "
            f"(a batch at γ = {gamma} reaches it near B ≈ {at})."
        )
    return "\n".join(lines) + "\n"


def batch_summary_html(lanes: dict) -> str:
    """The Batch tab's summary: the speculative batch's line, the AR batch's when raced, and their ratio (both
    measured in one interleaved race, decode throughput after each one's own prefill)."""
    spec, ar = lanes.get("speculative") or [], lanes.get("ar") or []
    out = ['<div class="batch-summary">', batch_line(spec)]
    if ar:
        out.append(batch_line(ar))
        s, a = (next((e for e in run if e.kind == "batch_finished"), None) for run in (spec, ar))
        rs = s.summary.get("decode_tokens_per_s") if s is not None else None
        ra = a.summary.get("decode_tokens_per_s") if a is not None else None
        if rs and ra:
            ar_rows = {e.row: e.token_ids for e in ar if e.kind == "finished"}
            same = sum(e.token_ids == ar_rows.get(e.row) for e in spec if e.kind == "finished")
            greedy = next((e.config.get("temperature") == 0 for e in spec if e.kind == "run_started"), False)
            # the printed rates reproduce the printed ratio
            ratio, spec_rate, ar_rate = quotient_terms(rs, ra)
            out.append(
                f'<p class="batch-verdict" data-ratio="{rs / ra:.3f}">Batched speculation ran at '
                f"<b>{ratio}×</b> the AR batch ({spec_rate} ÷ {ar_rate} tokens/s, the two raced round by round "
                f"on one thread)"
                + (f"; {same} of {s.rows} rows token-identical to AR" if greedy else "")
                + ".</p>"
            )
    out.append("</div>")
    return "".join(out)
