"""The Batch tab's figures reproduce from the rows it shows, on live batches: each lane's tokens and α counted from
its own token spans, its stop reason against its length, the batch line's tokens as the rows' sum, its pooled α as
their counts, every rate as its tokens ÷ seconds, the verdict as its two rates; and the throughput chart and its note
name the machine each curve was measured on. `batch_figures` returns the disagreements, each named (empty: every
figure reproduces); the negative controls tamper with one row and see it fail."""

from __future__ import annotations

import dataclasses
import html
import re
import time

import pytest

import specviz
from engine import Engine, GenerationConfig, load_model
from engine.runtime.kernels import cpu_name
from specviz.charts import TITLE_CHARS, title_lines
from specviz.demo_trace import sample_events
from tests.numbers import NUM, agrees

# the Batch tab's example (ui/tab_runs.BATCH_EXAMPLE: a copy that ends early, three that run to the limit), and
# sixteen short ones, some answered in a few tokens
FOUR = [
    "Copy this sentence exactly: the quick brown fox jumps over the lazy dog.",
    "List the numbers from 1 to 20, separated by commas.",
    "Write a haiku about the sea.",
    "Explain in two sentences why the sky is blue.",
]
SIXTEEN = FOUR + [
    "Copy this exactly: red, green, blue.",
    "Say yes.",
    "Reply with one word: hello.",
    "List the days of the week.",
    "What is 2 + 2?",
    "Name a colour.",
    "Copy this: one two three four five.",
    "Count from 1 to 10.",
    "Say the word cat.",
    "Write one short sentence about rain.",
    "What is the capital of France?",
    "Repeat after me: speculative decoding is lossless.",
]
MAX_NEW = 12  # small: rows both end early (end-of-text) and reach the limit

LANE = re.compile(r'<section class="batch-lane" data-row="(\d+)">(.*?)</section>', re.S)
HEAD = re.compile(
    r"row (\d+): (\d+) tokens, (ended at end-of-text|reached max_new_tokens = (\d+)|cut at the time limit) · "
    r"(?:α = (\d+)/(\d+) = (\d+\.\d+) \(accepted / tested drafts(?:; (\d+) more never tested)?\)|no drafts tested)$"
)
LINE = re.compile(
    rf"(\d+) rows?, (.+?): (\d+) tokens \(([\d + ]+)\) in (\d+) forwards \(([^)]*)\); {NUM} tokens/s "
    rf"\((\d+) ÷ {NUM} s\) after the prefill(?:; α = (\d+)/(\d+) = {NUM} pooled over the rows)?"
)
VERDICT = re.compile(
    rf"ran at {NUM}× the AR batch \({NUM} ÷ {NUM} tokens/s, .*?\)(?:; (\d+) of (\d+) rows token-identical to AR)?"
)
COMMITTED = ("tok-accepted", "tok-corrected", "tok-bonus", "tok-ar")


def text(fragment: str) -> str:
    """What a reader sees: tags dropped, entities read."""
    return html.unescape(re.sub(r"<[^>]+>", "", fragment)).strip()


def lane_figures(lane_html: str, max_new: int) -> tuple[dict, list[str]]:
    """One lane's printed figures, checked against its own token spans: (its figures, the disagreements)."""
    head = text(re.search(r'<h4 class="batch-lane-head">(.*?)</h4>', lane_html, re.S).group(1))
    m = HEAD.fullmatch(head)
    if m is None:
        return {}, [f"lane head not in the printed form: {head!r}"]
    row, tokens, reason, limit, acc, tested, alpha, untested = m.groups()
    tokens, bad = int(tokens), []
    spans = re.findall(r'class="tok ([^"]*)"', lane_html)
    shown = sum(c in COMMITTED for c in spans)
    if shown != tokens:
        bad.append(f"row {row}: {tokens} tokens printed, {shown} shown")
    acc, tested = (int(acc), int(tested)) if acc is not None else (0, 0)
    if spans.count("tok-accepted") != acc or spans.count("tok-rejected") + acc != tested:
        bad.append(f"row {row}: α counts {acc}/{tested}, the stream shows others")
    if alpha is not None and not agrees(alpha, acc / tested):
        bad.append(f"row {row}: {acc}/{tested} ≠ {alpha}")
    if int(untested or 0) != spans.count("tok-rejected tok-discarded"):
        bad.append(f"row {row}: {untested or 0} never tested, the stream shows others")
    ok = {"ended at end-of-text": tokens <= max_new, "cut at the time limit": tokens < max_new}.get(
        reason, limit is not None and int(limit) == max_new == tokens
    )
    if not ok:
        bad.append(f"row {row}: {tokens} tokens with the stop reason {reason!r} (max_new_tokens {max_new})")
    return {"tokens": tokens, "accepted": acc, "tested": tested}, bad


def line_figures(line: str, where: str) -> tuple[dict, list[str]]:
    """A batch line's figures, each checked against the others printed beside it."""
    m = LINE.search(line)
    if m is None:
        return {}, [f"{where}: line not in the printed form: {line!r}"]
    rows, _, tokens, terms, forwards, gammas, rate, n, secs, acc, tested, alpha = m.groups()
    terms = [int(t) for t in terms.split(" + ")]
    bad = []
    if int(tokens) != sum(terms) or int(n) != int(tokens) or len(terms) != int(rows):
        bad.append(f"{where}: {tokens} tokens ≠ the sum of {terms}")
    if int(forwards) != sum(int(k) for k in re.findall(r"γ \d+ × (\d+)", gammas)):
        bad.append(f"{where}: {forwards} forwards ≠ the γ counts ({gammas})")
    if not agrees(rate, int(n) / float(secs)):
        bad.append(f"{where}: {n} ÷ {secs} s ≠ {rate} tokens/s")
    if alpha is not None and not agrees(alpha, int(acc) / int(tested)):
        bad.append(f"{where}: pooled {acc}/{tested} ≠ {alpha}")
    return {"terms": terms, "rate": rate, "accepted": acc, "tested": tested}, bad


def batch_figures(lanes_html: str, summary_html: str, max_new: int) -> list[str]:
    """Every printed Batch figure against the rows shown: [] when each reproduces."""
    lanes = [lane_figures(body, max_new) for _, body in LANE.findall(lanes_html)]
    bad = [b for _, errors in lanes for b in errors]
    rows = [f for f, _ in lanes]
    lines = [text(p) for p in re.findall(r'<p class="batch-line"[^>]*>(.*?)</p>', summary_html, re.S)]
    if len(lines) != 2 or not rows:
        return bad + [f"expected the speculative and the AR batch lines, got {lines}"]
    (spec, spec_bad), (ar, ar_bad) = line_figures(lines[0], "batch line"), line_figures(lines[1], "AR line")
    bad += spec_bad + ar_bad
    if spec.get("terms") != [r.get("tokens") for r in rows]:
        bad.append(f"batch line: tokens {spec.get('terms')} ≠ the rows' {[r.get('tokens') for r in rows]}")
    pooled = (sum(r.get("accepted", 0) for r in rows), sum(r.get("tested", 0) for r in rows))
    if spec.get("tested") is not None and (int(spec["accepted"]), int(spec["tested"])) != pooled:
        bad.append(
            f"batch line: pooled {spec['accepted']}/{spec['tested']} ≠ the rows' {pooled[0]}/{pooled[1]}"
        )
    verdict = VERDICT.search(text(summary_html))
    if verdict is None:
        return bad + ["no verdict"]
    ratio, rs, ra, same, of = verdict.groups()
    if not agrees(ratio, float(rs) / float(ra)):
        bad.append(f"verdict: {rs} ÷ {ra} ≠ {ratio}×")
    if (rs, ra) != (spec.get("rate"), ar.get("rate")):
        bad.append(f"verdict's rates {rs}, {ra} ≠ the lines' {spec.get('rate')}, {ar.get('rate')}")
    if same is not None and (
        int(of) != len(rows) or int(same) != len(rows) or ar.get("terms") != spec.get("terms")
    ):
        bad.append(f"greedy rows differ from AR: {same} of {of}, AR's tokens {ar.get('terms')}")
    return bad


def race(engine: Engine, prompts: list[str], max_new: int = MAX_NEW) -> dict:
    """The Batch tab's race, its events kept per lane as ui/tab_runs.batch_generate keeps them."""
    lanes = {"speculative": [], "ar": []}
    ids = [engine.encode(p) for p in prompts]
    for lane, event in engine.race_batch(ids, GenerationConfig(gamma=4, max_new_tokens=max_new)):
        lanes[lane].append(event)
    return lanes


def rendered(lanes: dict) -> tuple[str, str]:
    return specviz.render_batch_lanes(lanes["speculative"]), specviz.batch_summary_html(lanes)


def off_by_one(lanes_html: str) -> str:
    """Negative control: the second row's printed tokens one more than it shows."""
    return re.sub(r"(row 2: )(\d+)( tokens)", lambda m: f"{m[1]}{int(m[2]) + 1}{m[3]}", lanes_html, count=1)


def drop_last_commit(lanes: dict) -> dict:
    """Negative control: the second row's last committed token gone from its lane (what a count taken before the
    row's last round, the old bug, showed)."""
    spec = list(lanes["speculative"])
    at = max(i for i, e in enumerate(spec) if e.kind == "committed" and e.row == 1)
    e = spec[at]
    spec[at] = dataclasses.replace(
        e, token_ids=e.token_ids[:-1], tokens=e.tokens[:-1], origins=e.origins[:-1], p=e.p[:-1]
    )
    return {**lanes, "speculative": spec}


@pytest.mark.parametrize("rows", [4, 16])
@pytest.mark.parametrize("spec", ["ngram", "auto"])
def test_live_batch_figures_reproduce_from_the_rows_shown(embedded, spec, rows):
    """A live race on the embedded model, B = 4 and 16, ngram and auto: every printed figure reproduces from the
    rows shown (the issue's 137 shown against 145 printed, α 0.49 against the rows' 0.46, "max_new_tokens" at 45 of
    48 tokens); a row's tokens off by one, in print or in its stream, fails."""
    lanes = race(Engine(embedded, spec), (FOUR if rows == 4 else SIXTEEN)[:rows])
    lanes_html, summary = rendered(lanes)
    assert batch_figures(lanes_html, summary, MAX_NEW) == [], text(lanes_html + summary)
    reasons = {e.stop_reason for e in lanes["speculative"] if e.kind == "finished"}
    assert {"eos", "max_new_tokens"} <= reasons, reasons  # both stop reasons are checked
    assert batch_figures(off_by_one(lanes_html), summary, MAX_NEW)
    assert batch_figures(rendered(drop_last_commit(lanes))[0], summary, MAX_NEW)


def test_tiny_batch_figures_reproduce_and_a_tampered_row_fails(tiny_dirs):
    """The same check in the inner loop, on a tiny random target (rows run to the limit, α near 0)."""
    engine = Engine(load_model(tiny_dirs["target"]), "ngram", measure_step=False)
    lanes = race(engine, FOUR, 8)
    lanes_html, summary = rendered(lanes)
    assert batch_figures(lanes_html, summary, 8) == [], text(lanes_html + summary)
    assert batch_figures(off_by_one(lanes_html), summary, 8)
    assert batch_figures(rendered(drop_last_commit(lanes))[0], summary, 8)
    assert batch_figures(lanes_html, summary, 9)  # "reached max_new_tokens = 8" is not a limit of 9


def test_each_row_summary_counts_its_last_round(tiny_dirs):
    """A row's Finished summary counts every round it ran: its tokens are its token_ids, and the rows' counts add
    up to the batch's (rows that ended were summarised before their last round was counted)."""
    engine = Engine(load_model(tiny_dirs["target"]), "ngram", measure_step=False)
    events = list(engine.generate_batch(FOUR, GenerationConfig(gamma=3, max_new_tokens=9, raw=True)))
    done = [e for e in events if e.kind == "finished"]
    batch = events[-1].summary
    assert all(e.summary["new_tokens"] == len(e.token_ids) for e in done)
    assert sum(e.summary["new_tokens"] for e in done) == batch["tokens"]
    assert sum(e.summary["accepted"] for e in done) == batch["accepted"]
    assert sum(e.summary["rejections"] for e in done) == batch["rejections"]


def test_the_chart_and_note_name_the_machine_each_curve_was_measured_on(tiny_dirs):
    """The committed curves are titled and noted with the CPU they were measured on, never "this machine"; this
    host's curve (Measure on this host) is titled with this host's CPU; every title line fits a phone."""
    from ui import batch_tab as ub

    committed = ub.results()
    fig, note = ub.figure(), text(ub.note())
    title = html.unescape(fig.layout.title.text)
    assert committed["cpu"] in title and committed["cpu"] in note
    assert "this machine" not in title + note and f"This host: {cpu_name()}" in note
    engine = Engine(load_model(tiny_dirs["target"]), "ngram", measure_step=False)
    ids = [engine.encode(p) for p in FOUR[:2]]
    cfg = GenerationConfig(gamma=2, max_new_tokens=4)
    curve = list(ub.host_curve(engine, ids, cfg, (1, 2), time.monotonic() + 60))
    live = curve[-1]
    assert live["sizes"] == [1, 2] and live["cpu"] == cpu_name() and live["cut"] is None
    fig, note = ub.figure(live), text(ub.note(live))
    title = html.unescape(fig.layout.title.text)
    assert f"this host, {cpu_name()}" in title and committed["cpu"] in title
    assert f"This host ({cpu_name()}" in note and "ngram γ=2 raced against AR at B = 1, 2" in note
    assert {t.name for t in fig.data} >= {"AR, this host", "ngram γ=2, this host"}
    assert all(len(line) <= TITLE_CHARS for line in title.split("<br>")), title
    # a deadline already past: no B measured, the curve says where it was cut
    assert list(ub.host_curve(engine, ids, cfg, (1, 2), time.monotonic() - 1)) == []


def test_chart_titles_wrap_to_a_phone_and_the_model_curve_has_a_superscript():
    """A title too long for a 390 px screen wraps (the phone clipped "…mean 2.88 per target forw…"); the model's
    curve is named α<sup>i</sup>, not with a literal caret."""
    lines = title_lines("Tokens committed per round · mean 2.88 per target forward")
    assert lines == ["Tokens committed per round", "mean 2.88 per target forward"]
    assert title_lines("Predicted speedup vs γ · best γ=4 (1.23×)") == [
        "Predicted speedup vs γ · best γ=4 (1.23×)"
    ]
    assert all(len(line) <= TITLE_CHARS for line in title_lines("a " * 60))
    fig = specviz.position_acceptance_fig(sample_events())
    names = [t.name for t in fig.data]
    assert any("α<sup>i</sup>" in n for n in names) and not any("^" in n for n in names)
    fig = specviz.accepted_length_fig(sample_events())
    assert all(len(line) <= TITLE_CHARS for line in fig.layout.title.text.split("<br>"))
    assert fig.layout.margin.t > 36  # room for the second line


def test_the_batch_tabs_terms_are_explained_beside_the_curves():
    """ "grounded", "open" and "goodput" name the curves and auto's contestant; the note under the chart says what
    each means (they were never explained); with no curve at all there is nothing to explain (the control)."""
    from specviz.batch_view import roofline_note
    from ui import batch_tab

    note = re.sub(r"<[^>]+>", "", batch_tab.note())
    if batch_tab.results() is None:
        pytest.skip("no committed batch benchmark")
    for term in (
        "grounded: prompts whose answer lies in the prompt",
        "open: prompts the model answers",
        "goodput:",
    ):
        assert term in note, note
    assert roofline_note(None, None) == ""
