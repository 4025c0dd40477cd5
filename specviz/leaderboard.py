"""The Spec-Bench view: the committed CPU run of `python -m benchmarks specbench` as the field's leaderboard
table (speedup over our AR per category and overall, the median per-question ratio beside it, tokens per target
forward, outputs that differ from AR) and one bar chart of the speedups per category, with the command, the
CPU, the date and the sample in the caption. results dict -> HTML; every text from the file is escaped.
"""

from __future__ import annotations

from engine.specbench import GROUPS

from .markup import esc

COLUMNS = (*GROUPS, "overall")
# the table's headers: words that wrap in a narrow box (a column key such as math_reasoning never would)
HEADERS = {
    "mt_bench": "MT-bench",
    "qa": "QA",
    "math_reasoning": "math reasoning",
    "rag": "RAG",
    "summarization": "summari\N{SOFT HYPHEN}zation",
    "translation": "trans\N{SOFT HYPHEN}lation",
}
W, H, L, B, T = 640, 220, 40, 46, 10


def _num(x) -> float | None:
    return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) else None


def _cell(v, spread: str = "") -> str:
    s, m = (_num(v.get("speedup")), _num(v.get("median_ratio"))) if isinstance(v, dict) else (None, None)
    if s is None or m is None:
        return "–"
    return f"{s:.2f}× <small>({m:.2f})</small>" + (
        f'<small class="lb-pass">{spread}</small>' if spread else ""
    )


def pass_range(passes: list, i: int, group: str) -> tuple[float, float] | None:
    """(lowest, highest) of row i's speedup in `group` over the passes' own leaderboards (a results file's
    "passes"), None with fewer than two; a malformed pass is skipped. The page's cells and results.md both read it."""
    vals = []
    for p in passes:
        row = p[i] if isinstance(p, list) and i < len(p) and isinstance(p[i], dict) else {}
        v = (row.get("speedups") or {}).get(group) if isinstance(row.get("speedups"), dict) else None
        vals.append(_num(v.get("speedup")) if isinstance(v, dict) else None)
    vals = [v for v in vals if v is not None]
    return (min(vals), max(vals)) if len(vals) > 1 else None


def _spread(passes: list, i: int, group: str) -> str:
    span = pass_range(passes, i, group)
    return f" {span[0]:.2f}–{span[1]:.2f}" if span else ""


def _chart(rows: list) -> str:
    """Grouped bars: per category, one bar per contestant (its speedup), a dashed line at 1× (AR)."""
    values = [[_num((r.get("speedups") or {}).get(g, {}).get("speedup")) for g in COLUMNS] for r in rows]
    top = max([v for vs in values for v in vs if v is not None] + [1.2]) * 1.1
    y = lambda s: H - B - (H - B - T) * s / top  # noqa: E731
    slot = (W - L - 8) / len(COLUMNS)
    width = max(min(slot / (len(rows) + 1), 14), 2)
    parts = [
        f'<line class="lb-one" x1="{L}" y1="{y(1):.1f}" x2="{W - 8}" y2="{y(1):.1f}"/>',
        f'<text class="lb-t" x="{L - 4}" y="{y(1) + 3:.1f}" text-anchor="end">1×</text>',
    ]
    for tick in (0.5, 1.5, 2, 3, 4):
        if tick < top and tick != 1:
            parts.append(
                f'<text class="lb-t" x="{L - 4}" y="{y(tick) + 3:.1f}" text-anchor="end">{tick:g}×</text>'
            )
    for j, group in enumerate(COLUMNS):
        x0 = L + j * slot + (slot - width * len(rows)) / 2
        parts.append(
            f'<text class="lb-t" x="{L + (j + 0.5) * slot:.1f}" y="{H - B + 14}" '
            f'text-anchor="middle">{esc(group)}</text>'
        )
        for i, (row, vs) in enumerate(zip(rows, values)):
            if vs[j] is None:
                continue
            parts.append(
                f'<rect class="lb-bar lb-c{i % 8}" x="{x0 + i * width:.1f}" y="{y(vs[j]):.1f}" '
                f'width="{width - 1:.1f}" height="{y(0) - y(vs[j]):.1f}"><title>{esc(row.get("label"))}, '
                f"{esc(group)}: {vs[j]:.2f}×</title></rect>"
            )
    legend = "".join(
        f'<span class="lb-key lb-c{i % 8}">{esc(r.get("label"))}</span>' for i, r in enumerate(rows)
    )
    return (
        f'<figure class="lb-chart"><svg viewBox="0 0 {W} {H}" role="img" aria-label="speedup over our AR per '
        f'Spec-Bench category">{"".join(parts)}</svg><figcaption>{legend}</figcaption></figure>'
    )


def render_leaderboard(results, source: str = "") -> str:
    """The committed run as Spec-Bench's table and chart ('no committed run' when the file is missing)."""
    if not isinstance(results, dict) or not isinstance(results.get("leaderboard"), list):
        return (
            '<div class="specviz specviz-leaderboard sv-empty">No committed Spec-Bench run: '
            "<code>python -m benchmarks specbench</code> writes one.</div>"
        )
    s, m, rows = results.get("settings") or {}, results.get("machine") or {}, results["leaderboard"]
    head = "".join(
        f"<th>{esc(HEADERS.get(c, c))}</th>"
        for c in ("method", *COLUMNS, "tokens / forward", "tok/s", "host / round", "outputs ≠ AR")
    )
    body, passes = [], results.get("passes") if isinstance(results.get("passes"), list) else []
    for i, r in enumerate(rows):
        sp = r.get("speedups") or {}
        tpf, tps = _num(r.get("tokens_per_forward")), _num(r.get("tokens_per_s"))
        body.append(
            f'<tr data-config="{esc(r.get("config"))}"><th>{esc(r.get("label"))}</th>'
            + "".join(f"<td>{_cell(sp.get(g), _spread(passes, i, g))}</td>" for g in COLUMNS)
            + f"<td>{f'{tpf:.2f}' if tpf else '–'}</td><td>{f'{tps:.1f}' if tps else '–'}</td>"
            f"<td>{esc(host_text(r))}</td>"
            f"<td>{esc(r.get('differ_from_ar'))}/{esc(s.get('questions'))}</td></tr>"
        )
    caption = (
        f"Spec-Bench (Xia et al. 2024), {esc(s.get('questions'))} questions ({esc(s.get('per_category'))} per "
        f"category, seed {esc(s.get('seed'))}; MT-bench both turns), greedy, γ = {esc(s.get('gamma'))}, at most "
        f"{esc(s.get('max_new_tokens'))} new tokens per turn, target {esc(s.get('target'))}; measured "
        f"{esc(results.get('date'))} on {esc(m.get('cpu'))} ({esc(m.get('threads'))} threads), "
        f"<code>{esc(results.get('command'))}</code>{f' ({esc(source)})' if source else ''}. Speedup = mean "
        "tok/s of the method ÷ mean tok/s of our AR over a column's questions, as Spec-Bench computes it; the "
        "median per-question ratio in brackets"
        + (
            f"; each turn's time is its median over {len(passes)} passes over the sample, and the small figures "
            "after it are the lowest and highest speedup of one pass alone"
            if len(passes) > 1
            else ""
        )
        + ". Host / round: a round's time outside its verify forward "
        "(drafting, the acceptance rule, the drafter's feedback, the events) in ms, and its share of t(1), our "
        "AR's forward (– where the run did not time it apart)."
    )
    return (
        f'<div class="specviz specviz-leaderboard" data-rows="{len(rows)}"><p class="lb-caption">{caption}</p>'
        f'<div class="lb-scroll"><table class="lb-table"><thead><tr>{head}</tr></thead>'
        f"<tbody>{''.join(body)}</tbody></table></div>{_chart(rows)}</div>"
    )


def host_text(row: dict) -> str:
    """A leaderboard row's host work per round and its share of t(1), our AR's verify forward: "0.45 ms (7.3%)"
    (the page's table and results.md both print it)."""
    host, t1 = _num(row.get("host_ms_per_round")), _num(row.get("ar_forward_ms"))
    if host is None or not t1:
        return "–"
    return f"{host:.2f} ms ({100 * host / t1:.1f}%)"


def question_label(q: dict) -> str:
    """A dropdown label for a Spec-Bench question: its column, its id and the start of its first turn."""
    text = " ".join(str(q["turns"][0]).split())
    return f"{q['group']} · #{q['question_id']} · {text[:90]}{'…' if len(text) > 90 else ''}"
