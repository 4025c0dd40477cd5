"""Benchmark results dict (from `harness.run_bench`) -> Markdown tables and a self-contained HTML report.

Pure formatting: no models, no clocks.
"""

from __future__ import annotations

import html as _html
from pathlib import Path

import plotly.graph_objects as go
import plotly.io as pio
from plotly.colors import qualitative

from engine.figures import derive

from .bench_stats import AR, HF_GREEDY
from .common import md_table

COLUMNS = [
    "config",
    "tok/s",
    "× our AR",
    "predicted ×",
    "× HF greedy",
    "α (per token)",
    "accepted / drafted",
    "mean acc. len",
    "acceptance by position",
    "c",
    "v(γ+1)",
    "identical",
]


def _f(value, spec=".2f", suffix="") -> str:
    return "—" if value is None else f"{value:{spec}}{suffix}"


def _same(ok) -> str:
    return "yes" if ok else "**MISMATCH**"


def _config_cells(label: str, row: dict | None) -> list[str]:
    if not row:
        return [label, "failed"] + ["—"] * (len(COLUMNS) - 2)
    positions = " ".join(_f(r, ".0%") for r in row.get("per_position_acceptance") or []) or "—"
    return [
        label,
        _f(row.get("tokens_per_s"), ".1f"),
        _f(row.get("speedup_vs_ar"), ".2f", "×"),
        _f(row.get("predicted_speedup"), ".2f", "×"),
        _f(row.get("speedup_vs_hf"), ".2f", "×"),
        _f(row.get("alpha"), ".0%"),
        _f(row.get("acceptance_rate"), ".0%"),
        _f(row.get("mean_accepted_length")),
        positions,
        _f(row.get("c"), ".3f"),
        _f(row.get("v")),
        _same(row.get("identical")),
    ]


def config_table(results: dict, rows: dict) -> tuple[list, list]:
    """Header and rows (strings) of one per-config table; shared by Markdown and HTML. The "× our AR" and "× HF
    greedy" cells are the printed tok/s cells divided (engine.figures, at the cells' own digits): a reader who
    divides two cells of the table gets the ratio it prints."""
    table = [_config_cells(c["label"], rows.get(c["name"])) for c in results["configs"]]
    by_name = {c["name"]: cells for c, cells in zip(results["configs"], table)}
    for base, col in ((AR, COLUMNS.index("× our AR")), (HF_GREEDY, COLUMNS.index("× HF greedy"))):
        den = by_name.get(base, [None, "—"])[1]
        for cells in table:
            if cells[1] not in ("—", "failed") and den not in ("—", "failed", None) and float(den) > 0:
                cells[col] = (
                    derive(lambda a, b: a / b, [(float(cells[1]), 1), (float(den), 1)], most=0)[0] + "×"
                )
    return COLUMNS, table


def _machine_line(results: dict) -> str:
    m, s = results["machine"], results["settings"]
    cpu = f"{m['cpu']}, " if m.get("cpu") else ""  # results written before the host line had no CPU
    line = cpu + (
        f"{m['platform']}, Python {m['python']}, torch {m['torch']}, transformers {m['transformers']}, "
        f"{m['threads']} threads ({m['cpu_count']} CPUs), device {m['device']} ({m['dtype']})"
    )
    if m.get("gpu"):
        line += f", {m['gpu']}"
    return (
        line + f". Target `{s['target']}`, greedy, max_new_tokens={s['max_new_tokens']}, "
        f"{s['prompts']} prompts x {s['repeats']} repeats, configs interleaved per repeat, each warmed up once; "
        "medians over repeats."
    )


def position_table(results: dict) -> tuple[list, list]:
    ours = [c for c in results["configs"] if c["runner"] == "ours" and c["gamma"]]
    width = max((c["gamma"] for c in ours), default=0)
    rows = []
    for c in ours:
        row = results["overall"].get(c["name"]) or {}
        rates = row.get("per_position_acceptance") or []
        rows.append([c["label"]] + [_f(rates[i] if i < len(rates) else None, ".0%") for i in range(width)])
    return ["config"] + [f"pos {i + 1}" for i in range(width)], rows


TARGET_VS_GREEDY, TARGET_VS_ASSISTED = 1.0, 1.25  # ours ÷ transformers: AR vs greedy, drafting vs assisted


def head_to_head_table(results: dict) -> tuple[list, list]:
    """Ours next to transformers doing the same thing, with the ratio the harness is judged by."""
    rows = []
    for r in results.get("head_to_head") or []:
        target = TARGET_VS_ASSISTED if r["kind"] == "assisted" else TARGET_VS_GREEDY
        met = "met" if r["ratio"] is not None and r["ratio"] >= target else "MISSED"
        rows.append(
            [
                r["label"],
                r["hf_label"],
                _f(r["ours_tokens_per_s"], ".1f"),
                _f(r["hf_tokens_per_s"], ".1f"),
                _f(r["ratio"], ".2f", "×"),
                f"≥ {target:.2f}×: {met}",
                _f(r["measured_over_predicted"], ".2f"),
                _same(r["identical"]),
            ]
        )
    return [
        "ours",
        "transformers",
        "ours tok/s",
        "transformers tok/s",
        "ours ÷ transformers",
        "target",
        "measured ÷ predicted",
        "identical",
    ], rows


def _md_overall(results: dict) -> list[str]:
    """Title, command, machine, the identity verdict, the overall table and ours vs transformers."""
    s = results["settings"]
    out = ["# specviz benchmark", "", f"`{results['command']}`", "", _machine_line(results), ""]
    n = results["mismatches"]
    out.append(
        f"**Identity: {n} MISMATCH(ES)** (see the list at the end)."
        if n
        else "**Identity:** every greedy output (ours and transformers') is token-identical to our AR output."
    )
    out += [
        "",
        f"## Overall ({s['prompts']} prompts)",
        "",
        md_table(*config_table(results, results["overall"])),
    ]
    if results.get("head_to_head"):
        out += [
            "",
            "## Ours vs transformers: same target, same drafter, same γ",
            "",
            "AR vs `generate()` greedy; each drafter vs assisted generation with the equivalent settings "
            "(`assistant_model`, `prompt_lookup_num_tokens`, `assistant_early_exit`, fixed γ). "
            "measured ÷ predicted = our measured speedup over our AR ÷ the formula's prediction.",
            "",
            md_table(*head_to_head_table(results)),
        ]
    return out


def _md_breakdown(results: dict) -> list[str]:
    """By category, per prompt (the prompts, then one table row per prompt and config), by draft position."""
    out = ["", "## By category"]
    for cat, rows in results["categories"].items():
        out += ["", f"### {cat}", "", md_table(*config_table(results, rows))]
    out += ["", "## Per prompt", ""]
    for p in results["prompts"]:
        text = " ".join(p["prompt"].split())
        out.append(
            f"{p['id']}. [{p['category']}] {text[:90]}{'…' if len(text) > 90 else ''} "
            f"({p['prompt_tokens']} prompt tokens)"
        )
    header, rows = COLUMNS, []
    for p in results["prompts"]:
        for c in results["configs"]:
            rows.append(
                [str(p["id"]), p["category"]] + _config_cells(c["label"], p["results"].get(c["name"]))
            )
    out += ["", md_table(["#", "category"] + header, rows)]
    if any(c["runner"] == "ours" and c["gamma"] for c in results["configs"]):
        out += ["", "## Acceptance by draft position (all prompts)", "", md_table(*position_table(results))]
    return out


def _md_predicted(results: dict) -> list[str]:
    """The formula's predicted speedup and best γ per drafter (nothing when no drafter was predicted)."""
    if not results["predicted"]:
        return []
    out = [
        "",
        "## Predicted speedup E/(γc + v(γ+1)) and its best γ",
        "",
        "α = per-token acceptance, accepted / tested positions (pooled over γ), c = median measured draft "
        "cost, v(n) the cost model's curve through the measured points (engine/costmodel.py).",
        "",
    ]
    rows = [
        [
            d,
            _f(p["alpha"], ".0%"),
            _f(p["c"], ".3f"),
            str(p["best_gamma"]),
            _f(p["best_predicted_speedup"], ".2f", "×"),
        ]
        for d, p in results["predicted"].items()
    ]
    out.append(md_table(["drafter", "α", "c", "best γ", "predicted × at best γ"], rows))
    return out


def _md_overhead(results: dict) -> list[str]:
    """The event stream's measured cost (nothing when the run did not measure it)."""
    o = results.get("overhead")
    if not o:
        return []
    verdict = "within" if o["within_target"] else "OVER"
    return [
        "",
        "## Event-stream overhead",
        "",
        f"`{o['drafter']}` γ={o['gamma']}, {o['max_new_tokens']} tokens, {o['pairs']} interleaved pairs: "
        f"events consumed normally (record_topk=5, kept in a list) vs record_topk=0 drained by "
        f"`deque(maxlen=0)`. Time ratio (fastest of each) {_f(o['ratio'], '.3f')} "
        f"({_f(o['overhead_pct'], '+.1f', '%')}; median of pairs {_f(o.get('median_pair_ratio'), '.3f')}; "
        f"raw incl. calibration {_f(o['raw_ratio'], '.3f')}): "
        f"{verdict} the {o['target_pct']:.0f}% target.",
    ]


def _md_notes(results: dict) -> list[str]:
    """Drafters transformers cannot run, its failures and every identity mismatch, as a list of flags."""
    notes = []
    if results["hf_unsupported"]:
        notes.append(
            "No transformers counterpart for: " + ", ".join(f"`{d}`" for d in results["hf_unsupported"])
        )
    for e in results["errors"]:
        notes.append(f"transformers `{e['config']}` failed (prompt {e['prompt']}): {e['error'][:300]}")
    for m in results["mismatch_details"]:
        notes.append(
            f"**MISMATCH**: `{m['config']}` on prompt {m['prompt']} ({m['category']}) differs from our AR "
            f"output at generated token {m['first_diff']}"
        )
    if not notes:
        return []
    return ["", "## Notes and flags", ""] + [f"- {x}" for x in notes]


def markdown(results: dict) -> str:
    """results.md: overall, per category, per prompt, acceptance by position, prediction, overhead, flags."""
    out = _md_overall(results) + _md_breakdown(results)
    out += _md_predicted(results) + _md_overhead(results) + _md_notes(results)
    return "\n".join(out) + "\n"


# -- HTML ----------------------------------------------------------------------------------------
def _html_table(header: list, rows: list) -> str:
    head = "".join(f"<th>{_html.escape(h)}</th>" for h in header)
    body = "".join(
        "<tr>"
        + "".join(
            f'<td class="{"bad" if "MISMATCH" in c else ""}">{_html.escape(c.replace("**", ""))}</td>'
            for c in row
        )
        + "</tr>"
        for row in rows
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _measured(configs: list, overall: dict, runner: str, drafter: str) -> list[tuple]:
    """(γ, overall row) of one runner's configs of this drafter, those that produced a row."""
    rows = [
        (c["gamma"], overall.get(c["name"]))
        for c in configs
        if c["runner"] == runner and c["drafter"] == drafter
    ]
    return [(g, r) for g, r in rows if r]


def _add_drafter_speed(speed, results: dict, d: str, color: str) -> None:
    """One drafter's traces on the speedup figure: ours measured and predicted, the formula's curve, HF assisted."""
    configs, overall = results["configs"], results["overall"]
    ours = _measured(configs, overall, "ours", d)
    speed.add_scatter(
        x=[g for g, _ in ours],
        y=[r["speedup_vs_ar"] for _, r in ours],
        mode="lines+markers",
        name=f"ours {d} (measured)",
        line_color=color,
    )
    speed.add_scatter(
        x=[g for g, _ in ours],
        y=[r.get("predicted_speedup") for _, r in ours],
        mode="markers",
        name=f"ours {d} (predicted, engine α)",
        marker=dict(color=color, symbol="circle-open", size=10),
    )
    pred = results["predicted"].get(d)
    if pred:
        speed.add_scatter(
            x=[g for g, _ in pred["curve"]],
            y=[v for _, v in pred["curve"]],
            mode="lines",
            name=f"E/(γc+v) {d}: α={pred['alpha']:.2f}, c={pred['c']:.2f}",
            line=dict(color=color, dash="dot"),
        )
    hf = _measured(configs, overall, "hf", d)
    if hf:
        speed.add_scatter(
            x=[g for g, _ in hf],
            y=[r["speedup_vs_ar"] for _, r in hf],
            mode="lines+markers",
            name=f"HF assisted {d}",
            line=dict(color=color, dash="dash"),
            marker_symbol="square",
        )


def _speed_figure(results: dict) -> go.Figure:
    """Speedup over our AR vs γ, one colour per drafter, with HF greedy as a reference line."""
    palette = qualitative.Plotly
    configs, overall = results["configs"], results["overall"]
    drafters = list(dict.fromkeys(c["drafter"] for c in configs if c["drafter"]))
    speed = go.Figure()
    speed.add_hline(y=1.0, line_dash="dot", line_color="grey", annotation_text="our AR")
    if overall.get("hf/greedy"):
        speed.add_hline(
            y=overall["hf/greedy"]["speedup_vs_ar"],
            line_dash="dash",
            line_color="black",
            annotation_text="HF greedy",
            annotation_position="bottom right",
        )
    for k, d in enumerate(drafters):
        _add_drafter_speed(speed, results, d, palette[k % len(palette)])
    speed.update_layout(
        title="Speedup vs γ (over our AR baseline, all prompts)",
        xaxis_title="γ (draft tokens)",
        yaxis_title="speedup ×",
        template="plotly_white",
    )
    return speed


def _acceptance_figure(results: dict) -> go.Figure:
    """Acceptance by draft position, one line per drafting config of ours."""
    configs, overall = results["configs"], results["overall"]
    accept = go.Figure()
    for c in configs:
        row = overall.get(c["name"]) if c["runner"] == "ours" and c["gamma"] else None
        if row and row.get("per_position_acceptance"):
            rates = row["per_position_acceptance"]
            accept.add_scatter(
                x=list(range(1, len(rates) + 1)), y=rates, mode="lines+markers", name=c["label"]
            )
    accept.update_layout(
        title="Acceptance by draft position (all prompts)",
        xaxis_title="draft position",
        yaxis_title="accepted / drafted",
        yaxis_range=[0, 1.05],
        template="plotly_white",
    )
    return accept


def _category_figure(results: dict) -> go.Figure:
    """Tokens/s per category, one bar per config."""
    cats = list(results["categories"])
    bars = go.Figure()
    for c in results["configs"]:
        bars.add_bar(
            x=cats,
            y=[(results["categories"][k].get(c["name"]) or {}).get("tokens_per_s") for k in cats],
            name=c["label"],
        )
    bars.update_layout(
        title="Tokens/s by category", barmode="group", yaxis_title="tokens/s", template="plotly_white"
    )
    return bars


def figures(results: dict) -> list:
    """The report's plotly figures: speedup vs γ, acceptance by position, tokens/s by category."""
    return [_speed_figure(results), _acceptance_figure(results), _category_figure(results)]


def html(results: dict) -> str:
    """report.html: one self-contained page (plotly.js inlined once)."""

    parts = [
        pio.to_html(fig, include_plotlyjs=(i == 0), full_html=False) for i, fig in enumerate(figures(results))
    ]
    n = results["mismatches"]
    flag = (
        f'<p class="bad">{n} greedy output(s) differ from our AR output.</p>'
        if n
        else "<p>Every greedy output is token-identical to our AR output.</p>"
    )
    body = [
        f"<h1>specviz benchmark</h1><p><code>{_html.escape(results['command'])}</code></p>",
        f"<p>{_html.escape(_machine_line(results))}</p>",
        flag,
        parts[0],
        parts[1],
        "<h2>Overall</h2>",
        _html_table(*config_table(results, results["overall"])),
    ]
    if results.get("head_to_head"):
        body += [
            "<h2>Ours vs transformers: same drafter, same γ</h2>",
            _html_table(*head_to_head_table(results)),
        ]
    for cat, rows in results["categories"].items():
        body += [f"<h3>{_html.escape(cat)}</h3>", _html_table(*config_table(results, rows))]
    body.append(parts[2])
    o = results.get("overhead")
    if o:
        body.append(
            f"<p>Event-stream overhead ({_html.escape(o['drafter'])}, γ={o['gamma']}): ratio "
            f"{_f(o['ratio'], '.3f')} ({_f(o['overhead_pct'], '+.1f', '%')}), target ≤ 3%.</p>"
        )
    style = (
        "body{font-family:system-ui,sans-serif;max-width:1200px;margin:2em auto;padding:0 1em}"
        "table{border-collapse:collapse;font-size:13px;margin:.5em 0}"
        "td,th{border:1px solid #ddd;padding:3px 8px;text-align:right}td:first-child{text-align:left}"
        ".bad{color:#b00;font-weight:bold}"
    )
    return (
        '<!DOCTYPE html><html><head><meta charset="utf-8"><title>specviz benchmark</title>'
        f"<style>{style}</style></head><body>" + "\n".join(body) + "</body></html>\n"
    )


def write_reports(results: dict, out) -> None:
    """results.md and report.html beside results.json in folder `out`."""

    out = Path(out)
    (out / "results.md").write_text(markdown(results), encoding="utf-8")
    (out / "report.html").write_text(html(results), encoding="utf-8")
