"""The Your engine tab on the real app (Playwright + Debian's Chromium against `python app.py`): a metrics file of
each kind shows its views, the printed τ and rate recomputing from the printed counts; pasted text and a GPU preset
give the prediction; a bad number or a bad file is refused by name and the shown views stay; and a trace recorded
from another engine (tests/fixtures/engines/*.trace.json, or one built here when none is there yet) renders in the
stream view."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from engine.config import GenerationConfig
from engine.events import trace_from_json, trace_to_json
from engine.recorders.trace import Recording, Round
from specviz import rounds_of
from tests.app_server import playwright_or_skip
from tests.test_engine_metrics import EXPECTED, FIXTURES, calc, printed_formulas

sync_api = playwright_or_skip()
expect = sync_api.expect
VIEW_MS = 30_000


@pytest.fixture(scope="module")
def page(browser, app_url):
    """One page for the module, opened on the Your engine tab (no tour)."""
    pg = browser.new_page(viewport={"width": 1440, "height": 1000})
    pg.goto(app_url + "?tour=0")
    pg.wait_for_selector("#prompt textarea")
    pg.get_by_role("tab", name="Your engine").click()
    pg.wait_for_selector("#metrics-upload input[type=file]", state="attached")
    yield pg
    pg.close()


def summary_kind(page) -> str | None:
    return page.locator("#metrics-summary .sv-metrics").first.get_attribute("data-kind")


PLOTTED = """(id) => { const p = document.querySelector('#' + id + ' .js-plotly-plot');
    if (!p || !p.data) return null;
    const t = p.data[0] || {}; const notes = (p.layout.annotations || []).map(a => a.text);
    return {x: Array.from(t.x || []), y: Array.from(t.y || []), notes: notes}; }"""


def plotted(page, elem_id: str, ok=lambda drawn: True) -> dict | None:
    """The first trace of a plotly figure as the page drew it: its x and y, and the figure's note if empty. Polls
    until `ok(drawn)` or VIEW_MS: the summary's HTML can arrive before plotly has drawn (or redrawn) the figure,
    and the module's one page still shows the last file's; returns the last drawing seen."""
    drawn, waited = None, 0
    while waited < VIEW_MS:
        drawn = page.evaluate(PLOTTED, elem_id)
        if drawn is not None and ok(drawn):
            return drawn
        page.wait_for_timeout(100)
        waited += 100
    return drawn


def choose(page, label: str, option: str) -> None:
    page.get_by_label(label, exact=True).click()
    page.get_by_role("option", name=option, exact=True).click()


@pytest.mark.parametrize("name", list(EXPECTED))
def test_a_metrics_file_of_each_kind_shows_its_views(page, name):
    """Dropping the file draws the summary (engine named, τ and rate recomputing from the counts printed beside
    them), the per-position chart (or its note that the engine gives none), the histogram and the what-ifs."""
    kind = EXPECTED[name][0]
    page.locator("#metrics-upload input[type=file]").set_input_files(str(FIXTURES / name))
    page.wait_for_selector(f'#metrics-summary .sv-metrics[data-kind="{kind}"]', timeout=VIEW_MS)
    html = page.locator("#metrics-summary").inner_html()
    formulas = printed_formulas(html)
    assert formulas
    for expr, value in formulas:
        assert f"{float(calc(expr.replace('&amp;', '&'))):.3f}" == value
    expect(page.locator("#metrics-summary .sv-metrics-speedup")).to_have_count(1)
    steps = EXPECTED[name][3]
    counts = [int(n) for n in re.findall(r'<tr data-pos="\d+"><td>\d+</td><td>([\d,]+)</td>', html)]
    want = [round(n / steps, 6) for n in counts]
    if counts:
        positions = plotted(page, "metrics-positions", lambda d: [round(y, 6) for y in d["y"]] == want)
        assert [round(y, 6) for y in positions["y"]] == want
    else:
        positions = plotted(
            page, "metrics-positions", lambda d: any("no per-position" in n for n in d["notes"])
        )
        assert any("no per-position counts" in n for n in positions["notes"])
    by_gamma = plotted(page, "metrics-whatif-gamma")
    assert by_gamma["x"] == list(range(1, 17)) and all(y > 0 for y in by_gamma["y"])


def test_pasted_text_and_a_gpu_preset_give_the_roofline_prediction(page):
    """Pasted /metrics text is read on the button; a GPU preset's costs come with the datasheet figures they use."""
    page.fill("#metrics-paste textarea", (FIXTURES / "llamacpp-metrics.prom").read_text(encoding="utf-8"))
    choose(page, "Costs", "H100 SXM: its roofline")
    page.click("#metrics-read")
    page.wait_for_selector('#metrics-summary .sv-metrics[data-kind="llamacpp-prometheus"]', timeout=VIEW_MS)
    text = page.locator("#metrics-summary").inner_text()
    assert "H100 SXM: 3.35 TB/s" in text and "c = " in text and "Predicted speedup" in text
    choose(page, "Costs", "typed: c and v below")


def test_a_bad_number_or_file_is_refused_by_name_and_the_views_stay(page, tmp_path):
    """c out of its range and a report missing a counter: one warning each, naming the field; the views stay."""
    page.fill("#metrics-paste textarea", (FIXTURES / "vllm-metrics.prom").read_text(encoding="utf-8"))
    page.click("#metrics-read")
    page.wait_for_selector('#metrics-summary .sv-metrics[data-kind="vllm-prometheus"]', timeout=VIEW_MS)
    page.fill("#metrics-c input", "12")
    page.click("#metrics-read")
    expect(page.get_by_text("must be from 0 to 10, got 12", exact=False).first).to_be_visible(timeout=VIEW_MS)
    page.fill("#metrics-c input", "0.05")
    bad = tmp_path / "no-drafts.prom"
    text = (FIXTURES / "vllm-metrics.prom").read_text(encoding="utf-8")
    bad.write_text(text.replace("vllm:spec_decode_num_drafts_total{", "vllm:other_total{"), encoding="utf-8")
    page.fill("#metrics-paste textarea", "")
    page.locator("#metrics-upload input[type=file]").set_input_files(str(bad))
    expect(page.get_by_text("vllm:spec_decode_num_drafts is missing", exact=False).first).to_be_visible(
        timeout=VIEW_MS
    )
    page.wait_for_timeout(1000)  # any update of the refused read would have landed
    assert summary_kind(page) == "vllm-prometheus"


# -- recorded traces of other engines -------------------------------------------------------------------------
WORDS = [" The", " honeybee", " is", " one", " of", " the", " most", " important", " pollinators", "."]


class Words:
    """A stub tokenizer: token i is WORDS[i % 10]."""

    def decode(self, ids, skip_special_tokens=False):
        return "".join(WORDS[i % len(WORDS)] for i in ids)


def built_trace(folder: Path) -> Path:
    """A trace built with the recorders' Recording (engine/recorders/trace.py), for when no recorder's fixture is
    there yet: a prompt-lookup-like run of four rounds (all kept, one kept, a plain step, none kept)."""
    rec = Recording(
        engine={"name": "stub", "version": "0", "method": "prompt lookup"},
        target="stub-target",
        draft="prompt lookup",
        tokenizer=Words(),
        prompt_ids=[0, 1],
        cfg=GenerationConfig(gamma=3, max_new_tokens=12),
    )
    for proposal, kept, next_id in (([2, 3, 4], 3, 5), ([6, 7, 2], 1, 8), ([], 0, 9), ([4, 2], 0, 3)):
        g = len(proposal)
        rec.add(
            Round(
                proposal=proposal,
                kept=kept,
                next_id=next_id,
                p=[0.9 if i < kept else 0.1 for i in range(g)],
                next_p=0.8,
                accept_prob=[1.0 if i < kept else 0.0 for i in range(g)],
                draft_s=0.001,
                verify_s=0.01,
            )
        )
    rec.finish("max_new_tokens", Words().decode(rec.new_ids))
    path = folder / "stub-engine.trace.json"
    path.write_text(trace_to_json(rec.events), encoding="utf-8")
    return path


def recorded_traces() -> list:
    return sorted(FIXTURES.glob("*.trace.json")) or [None]


@pytest.mark.parametrize("trace", recorded_traces(), ids=lambda p: p.name if p else "built-here")
def test_a_trace_recorded_from_another_engine_renders_in_the_stream(page, trace, tmp_path):
    """The trace loads through the Your engine drop zone and the stream view shows its rounds and its tokens."""
    path = trace or built_trace(tmp_path)
    events = trace_from_json(path.read_text(encoding="utf-8"))
    rounds = rounds_of(events)
    run_id = next(e.run_id for e in events if e.kind == "run_started")
    page.locator("#engine-trace-upload input[type=file]").set_input_files(str(path))
    page.wait_for_selector(f'#summary .sv-summary[data-run="{run_id}"]', timeout=VIEW_MS)  # this trace's run
    page.wait_for_selector(f'#stream .specviz-stream[data-rounds="{rounds}"]', timeout=VIEW_MS)
    committed = [t.strip() for e in events if e.kind == "committed" for t in e.tokens if t.strip()]
    stream = page.locator("#stream").inner_text()
    assert committed and all(t in stream for t in committed[:8]), (committed[:8], stream[:300])
