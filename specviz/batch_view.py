"""A batched run's events -> the Batch tab: B lanes of colour-coded streams, per-row acceptance, and the throughput
curve against B (benchmarks/batch_bench.py's results). Knows nothing about gradio or torch.

Each lane is the single-run stream renderer (tokens.render_stream) on one row's events (`row` = b), so a lane's
colours, tooltips and p / q are exactly the Output tab's.
"""

from __future__ import annotations

import math

import plotly.graph_objects as go

from engine import metrics
from engine.figures import Exact, decimals_of, derive, plural, quotient_terms
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


# how a row's stop reason reads beside its token count ("reached" only when the count is the limit)
STOPS = {
    "eos": "ended at end-of-text",
    "max_new_tokens": "reached max_new_tokens = {limit}",
    "time_limit": "cut at the time limit",
}


def row_stats(events) -> metrics.RunStats:
    """One row's counts from its own events: the tokens, drafts and verdicts its lane shows."""
    stats = metrics.RunStats()
    for e in events:
        stats.add(e)
    return stats


def alpha_text(accepted: int, rejections: int) -> str:
    """ "α = 18/39 = 0.46": α as its counts (accepted over tested drafts) and their quotient (figures.derive)."""
    tested = accepted + rejections
    value, _ = derive(lambda a: a, [Exact.ratio(accepted, tested)], 2)
    return (
        f"α = {accepted}/{tested} = {value}"  # the counts as counted (Exact's text would reduce 18/36 to 1/2)
    )


def row_head(row: int, stats: metrics.RunStats) -> str:
    """ "row 2: 48 tokens, reached max_new_tokens = 48 · α = 18/39 = 0.46 (accepted / tested drafts; 5 more never
    tested)": every figure from the row's own events."""
    done = stats.finished
    tokens = f"{stats.new_tokens} tokens" if done is not None else f"{stats.new_tokens} tokens so far"
    if done is not None:
        reason = STOPS.get(done.stop_reason, done.stop_reason or "stopped")
        tokens += ", " + esc(reason.format(limit=stats.max_new_tokens))
    tested = stats.accepted + stats.rejections
    if tested:
        untested = max(stats.drafted - tested, 0)
        alpha = f"{alpha_text(stats.accepted, stats.rejections)} (accepted / tested drafts" + (
            f"; {untested} more never tested)" if untested else ")"
        )
    else:
        alpha = "no drafts tested" if stats.mode == "speculative" else "AR"
    return f"row {row + 1}: {tokens} · {alpha}"


def lanes_html(events) -> str:
    """One lane per row: its stream (accepted / rejected / corrected / bonus, p and q on hover) and its numbers."""
    rows = batch_rows(events)
    if not rows:
        return '<div class="batch-lanes batch-empty">Run a batch to see its rows here.</div>'
    out = [f'<div class="batch-lanes" data-rows="{len(rows)}">']
    for row in rows:
        mine = row_events(events, row)
        out.append(
            f'<section class="batch-lane" data-row="{row}"><h4 class="batch-lane-head">'
            f"{row_head(row, row_stats(mine))}</h4>{render_stream(mine)}</section>"
        )
    out.append("</div>")
    return "".join(out)


def batch_line(events, rate_decimals: int = 0) -> str:
    """The batch's summary: rows, tokens (the rows' sum, its terms printed), forwards by γ, decode throughput
    (its tokens ÷ seconds printed beside it, at `rate_decimals`), α pooled over the rows as its counts."""
    done = next((e for e in events if e.kind == "batch_finished"), None)
    rounds = [e for e in events if e.kind == "batch_round"]
    if done is None:
        return (
            f'<p class="batch-line">{plural(len(rounds), "round")} so far, '
            f"{sum(sum(e.committed) for e in rounds)} tokens committed.</p>"
            if rounds
            else ""
        )
    s = done.summary
    rows = s.get("row_tokens") or []
    tokens = f"{s.get('tokens')} tokens" + (f" ({' + '.join(map(str, rows))})" if len(rows) > 1 else "")
    if not s.get("decode_tokens_per_s"):
        return f'<p class="batch-line">{plural(done.rows, "row")}, {tokens}.</p>'
    gammas = ", ".join(f"γ {g} × {n}" for g, n in s.get("round_gammas", []))
    mode = "AR (γ = 0)" if done.mode == "ar" else esc(done.draft)
    return (
        f'<p class="batch-line" data-rows="{done.rows}"><b>{plural(done.rows, "row")}</b>, {mode}: {tokens} '
        f"in {s.get('rounds')} forwards ({gammas}); {decode_rate(s, rate_decimals)} after the prefill"
        + pooled_alpha(s)
        + ".</p>"
    )


def pooled_alpha(s: dict) -> str:
    """ "; α = 37/76 = 0.49 pooled over the rows": the rows' accepted over their tested drafts (a summary without
    the counts, a trace from before they were kept, prints α alone)."""
    if s.get("alpha") is None:
        return ""
    accepted, rejections = s.get("accepted"), s.get("rejections")
    alpha = (
        alpha_text(accepted, rejections)
        if isinstance(accepted, int) and isinstance(rejections, int) and accepted + rejections
        else f"α {s['alpha']:.2f}"
    )
    return f"; {alpha} pooled over the rows (their accepted / tested drafts)"


def decode_rate(s: dict, decimals: int = 0) -> str:
    """ "1,234 tokens/s (512 ÷ 0.415 s)": the decode throughput with the seconds it divides by, printed so that
    they divide to it."""
    tokens, seconds = s.get("tokens"), s["wall_s"] - s["prefill_s"]
    rate, (_, secs) = derive(lambda n, t: n / t if t > 0 else math.inf, [(tokens, 0), (seconds, 2)], decimals)
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


def measured_on(r: dict) -> str:
    """ "Intel(R) Xeon(R) Processor, 2 threads": the machine a curve was measured on, as its record names it."""
    threads = r.get("threads")
    return esc(r.get("cpu") or "an unnamed CPU") + (f", {plural(threads, 'thread')}" if threads else "")


def throughput_figure(results: dict | None, live: dict | None = None) -> go.Figure:
    """Decode tokens/s of the whole batch against B: the committed benchmark's curves per contestant and prompt
    set (their crossover marked), titled with the machine they were measured on; `live`, this host's own curve
    (ui/batch_tab.host_curve: AR and the tab's drafter raced at each B), drawn over them with its machine named."""
    committed = bool(results and results.get("curves"))
    here = bool(live and live.get("sizes"))
    # each source on its own line, named by its machine ("this machine" only ever for the one measured here)
    sources = ([f"lines: {measured_on(results)}"] if committed else []) + (
        [f"★: this host, {measured_on(live)}"] if here else []
    )
    title = "Batch throughput against B" + "".join(f"<br>{s}" for s in sources)
    if not committed and not here:
        return empty_fig(title, "no batch benchmark yet: python -m benchmarks batch")
    fig = _figure(title, "batch size B (rows per forward)", "decode tokens/s")
    sizes = sorted(set((results or {}).get("sizes", [])) | set((live or {}).get("sizes", [])))
    if committed:
        _committed_curves(fig, results)
    if here:
        for lane, points in live["curves"].items():
            name = f"{live['names'][lane]}, this host"
            fig.add_scatter(
                x=live["sizes"],
                y=[p["decode_tokens_per_s"] for p in points],
                mode="lines+markers",
                name=name,
                line=dict(color=COLORS["ar"] if lane == "ar" else COLORS["corrected"], width=3),
                marker=dict(symbol="star", size=11),
                hovertemplate=f"{esc(name)}<br>B=%{{x}}: %{{y:.0f}} tokens/s<extra></extra>",
            )
    fig.update_xaxes(type="log", tickvals=sizes, ticktext=[str(b) for b in sizes])
    # tall: on a phone its twelve legend entries take a row each below the plot
    fig.update_layout(height=440 + 17 * (len(sources) - 1), meta={"sv_chart": "batch-throughput"})
    return fig


def _committed_curves(fig: go.Figure, results: dict) -> None:
    """The benchmark's curves, one per contestant and prompt set, and where fixed γ falls below AR."""
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
    for i, (s, by) in enumerate((results.get("crossover") or {}).items()):
        b = by.get(f"ngram@{gamma}")
        if b:
            fig.add_vline(x=b, line=dict(color=COLORS["rejected"], dash=DASH.get(s, "dash"), width=1))
            # an annotation on a log axis takes log10(x) (Plotly's rule; x = 16 stretched the axis to 10^16), the
            # line takes x itself; one row per set inside the plot, clear of the title and of each other
            fig.add_annotation(
                x=math.log10(b),
                y=1 - 0.08 * i,
                yref="paper",
                yanchor="top",
                text=f"{s}: γ={gamma} below AR from B={b}",
                showarrow=False,
                xanchor="right" if b == max(sizes) else "left",
                font=dict(size=10, color=COLORS["rejected"]),
            )


def ridge_sentence(r: dict, gamma: int, where: str) -> str:
    """ "On {where} the roofline's ridge is n* ≈ 24.3 tokens per forward (...); a batch at γ = 4 carries B × 5
    tokens, so it reaches the ridge near B ≈ 4.9", or "" without a measured ridge."""
    ridge = r.get("ridge_tokens")
    if not ridge or not math.isfinite(ridge):
        return ""
    at, (n_star,) = derive(lambda x: x / (gamma + 1), [(ridge, 0)], 1)
    return (
        f"On {where} the roofline's ridge is n* ≈ {n_star} tokens per forward (at 256 cached tokens); a batch of B "
        f"rows at γ = {gamma} carries B × {gamma + 1} tokens, so it reaches the ridge near B ≈ {at}. "
    )


# the words the curves' legend and the contestants' names use, said where they appear
TERMS = (
    '<p class="batch-terms"><b>grounded</b>: prompts whose answer lies in the prompt itself (translation, '
    "summarization, retrieval-augmented questions), so drafts copied from the prompt are often accepted; "
    "<b>open</b>: prompts the model answers from its own knowledge (MT-Bench, questions, math reasoning), where "
    "copied drafts rarely match; <b>goodput</b>: tokens committed per second over the rest of the batch, what "
    "auto's γ maximises (a γ that lets one row finish sooner while the others keep the batch busy gains none).</p>"
)


def roofline_note(results: dict | None, live: dict | None = None) -> str:
    """Why the curves bend, from the roofline's ridge: tokens per forward B·(γ + 1) against n*, on the machine the
    committed curves were measured on and, once measured, on this host."""
    if not (results or live):
        return ""
    parts = []
    if results:
        parts.append(
            ridge_sentence(
                results, results["gamma"], f"the machine the lines were measured on ({measured_on(results)})"
            )
        )
    if live:
        parts.append(ridge_sentence(live, live["gamma"], f"this host ({measured_on(live)})"))
    if not any(parts):
        return TERMS
    return TERMS + (
        f'<p class="batch-roof">{"".join(parts)}Below the ridge a forward costs about its weight reads, whatever '
        f"it carries; above it, its arithmetic. AR carries only B tokens per forward. Speculation spends the spare "
        f"compute a batch also spends: once the forward is compute-bound, every rejected draft costs real time, "
        f"and AR's B rows per forward are the better use of it.</p>"
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
    measured in one interleaved race, decode throughput after each one's own prefill). The lines print their rates
    as the ratio's terms print them: one text per figure."""
    spec, ar = lanes.get("speculative") or [], lanes.get("ar") or []
    s, a = (next((e for e in run if e.kind == "batch_finished"), None) for run in (spec, ar))
    rs = s.summary.get("decode_tokens_per_s") if s is not None else None
    ra = a.summary.get("decode_tokens_per_s") if a is not None else None
    verdict, decimals = "", 0
    if rs and ra:
        ar_rows = {e.row: e.token_ids for e in ar if e.kind == "finished"}
        same = sum(e.token_ids == ar_rows.get(e.row) for e in spec if e.kind == "finished")
        greedy = next((e.config.get("temperature") == 0 for e in spec if e.kind == "run_started"), False)
        # the printed rates reproduce the printed ratio
        ratio, spec_rate, ar_rate = quotient_terms(rs, ra)
        decimals = decimals_of(spec_rate)
        verdict = (
            f'<p class="batch-verdict" data-ratio="{rs / ra:.3f}">Batched speculation ran at '
            f"<b>{ratio}×</b> the AR batch ({spec_rate} ÷ {ar_rate} tokens/s, the two raced round by round "
            f"on one thread)"
            + (f"; {same} of {s.rows} rows token-identical to AR" if greedy else "")
            + ".</p>"
        )
    out = ['<div class="batch-summary">', batch_line(spec, decimals)]
    if ar:
        out.append(batch_line(ar, decimals))
    out += [verdict, "</div>"]
    return "".join(out)
