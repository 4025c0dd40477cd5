"""End to end in a real browser: `python app.py` on a free port, driven by Playwright + Debian's Chromium.

Runs on the embedded model only (no hub) with short runs; the whole module takes about a minute and a
half on a busy 2-core CPU. Its screenshot goes to a temp folder; SPECVIZ_SCREENSHOT=1 writes
assets/screenshot.png (the README's screenshot) instead.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from tests.app_server import ROOT, open_derivation, playwright_or_skip, set_number

sync_api = playwright_or_skip()
GROUNDED = (
    "Copy this passage, fixing only the spelling mistakes:\n\nThe honeybee is one of the most importent "
    "pollinators in the world. Bees visit flowers to colect nectar and pollen."
)
LONG = "Write a long story about a lighthouse keeper and a storm."
RUN_TIMEOUT_MS = 120_000
DONE = '#summary .sv-summary[data-done="1"]'


@pytest.fixture(scope="module")
def url(app_url):
    """The app server (shared by the browser test modules); pages open it with the tour off."""
    return app_url + "?tour=0"


@pytest.fixture(scope="module")
def shared():
    """Values one test hands to the next (the downloaded trace)."""
    return {}


@pytest.fixture(scope="module")
def page(browser, url):
    """One browser session that the tests below drive in order (run, stop, replay)."""
    pg = browser.new_page(viewport={"width": 1440, "height": 1000})
    pg.goto(url)
    pg.wait_for_selector("#prompt textarea")
    yield pg
    pg.close()


def choose(page, label: str, option: str) -> None:
    """Pick an option of a gradio Dropdown by its label."""
    page.get_by_label(label, exact=True).click()
    page.get_by_role("option", name=option, exact=True).click()


def generate_and_wait(page) -> None:
    """Press Generate and wait until a new run (not the one on screen) has finished."""
    old = page.locator("#summary .sv-summary").get_attribute("data-run") or ""
    page.click("#generate")
    page.wait_for_selector(f'{DONE}:not([data-run="{old}"])', timeout=RUN_TIMEOUT_MS)


def settle(page, quiet_s: float = 4.0, timeout_s: float = 40.0) -> int:
    """The summary's round count once it has not changed for quiet_s seconds."""
    last, since, waited = None, 0.0, 0.0
    while waited < timeout_s:
        now = page.locator("#summary .sv-summary").get_attribute("data-rounds")
        since = since + 0.5 if now == last else 0.0
        if since >= quiet_s:
            return int(now)
        last = now
        page.wait_for_timeout(500)
        waited += 0.5
    raise AssertionError(f"rounds still changing after {timeout_s} s: the run did not stop")


def screenshot_path(tmp_path_factory) -> Path:
    """assets/screenshot.png only when asked (SPECVIZ_SCREENSHOT=1): a test run leaves tracked files alone."""
    if os.environ.get("SPECVIZ_SCREENSHOT") == "1":
        return ROOT / "assets" / "screenshot.png"
    return tmp_path_factory.mktemp("screenshot") / "screenshot.png"


def rounds_in_trace(path: str) -> int:
    from engine.events import trace_from_json
    from specviz import rounds_of

    return rounds_of(trace_from_json(Path(path).read_text(encoding="utf-8")))


def test_run_shows_tokens_tooltips_tree_charts_and_trace(page, shared, tmp_path_factory):
    """A raced n-gram run on a grounded prompt: coloured tokens, p/q tooltips, tree rounds = trace rounds, 5 charts."""
    page.fill("#prompt textarea", GROUNDED)
    choose(page, "Drafter", "ngram")
    set_number(page, "max-new", 40)
    page.get_by_label("Race against autoregressive", exact=False).check()
    generate_and_wait(page)
    page.wait_for_selector("#summary .sv-speedup", timeout=RUN_TIMEOUT_MS)  # the AR race finished too
    page.wait_for_selector("#download:not([disabled])", timeout=RUN_TIMEOUT_MS)  # the run has settled

    stream = page.locator("#stream")
    assert stream.locator(".tok-accepted").count() > 0
    assert stream.locator(".tok-accepted, .tok-corrected, .tok-bonus, .tok-rejected").count() > 5

    stream.locator(".tok-accepted").nth(2).hover()
    tip = page.locator(".specviz-tipbox")
    sync_api.expect(tip).to_be_visible()
    assert re.search(r"draft q\s*[\d.]+", tip.inner_text()) and re.search(
        r"target p\s*[\d.]+", tip.inner_text()
    )
    page.screenshot(path=str(screenshot_path(tmp_path_factory)), full_page=True)
    page.mouse.move(5, 5)

    with page.expect_download() as dl:
        page.click("#download")
    trace = tmp_path_factory.mktemp("trace") / "trace.json"
    dl.value.save_as(trace)
    rounds = rounds_in_trace(str(trace))
    assert rounds >= 2
    page.get_by_role("tab", name="Tree").click()  # gradio draws a tab's content once it is opened
    sync_api.expect(page.locator("#tree .tree-round[data-round]")).to_have_count(rounds)
    assert int(page.locator("#summary .sv-summary").get_attribute("data-rounds")) == rounds
    assert int(stream.locator(".specviz-stream").get_attribute("data-rounds")) == rounds
    page.get_by_role("tab", name="Race").click()
    sync_api.expect(page.locator("#race .race-lane")).to_have_count(2)
    share = page.locator("#race .race-roofline")  # the AR lane against this machine's bandwidth bound
    sync_api.expect(share).to_contain_text("of the bandwidth bound")
    assert 0.05 < float(share.get_attribute("data-share")) < 2
    page.get_by_role("tab", name="Explain").click()
    open_derivation(page)
    roof = page.locator("#explain .sv-roofline")
    sync_api.expect(roof.locator("svg .rf-memory")).to_have_count(1)  # the floors of this run's machine
    assert roof.locator("svg .rf-bar").count() >= 2  # t(1) and at least one verify size, measured
    sync_api.expect(page.locator("#explain")).to_contain_text("memory floor")
    roof.screenshot(path=str(screenshot_path(tmp_path_factory).with_name("roofline.png")))
    page.get_by_role("tab", name="Charts").click()
    page.wait_for_function("document.querySelectorAll('.js-plotly-plot').length >= 5", timeout=30_000)
    page.get_by_role("tab", name="Tree").click()
    shared["trace"] = str(trace)  # for the replay test


def test_stop_then_new_run(page):
    """Stop during a long run halts it and says so; a new short tree-speculation run then completes and draws its branches."""
    page.fill("#prompt textarea", LONG)
    page.get_by_label("Race against autoregressive", exact=False).uncheck()
    # the slowest drafter and the longest run: it cannot end before Stop lands
    choose(page, "Drafter", "layerskip")
    set_number(page, "max-new", 512)
    page.click("#generate")
    page.wait_for_selector('#summary .sv-summary[data-done="0"]', timeout=RUN_TIMEOUT_MS)  # streaming
    page.click("#stop", timeout=60_000)
    stopped = settle(page)  # updates already sent may still arrive; then nothing more
    assert stopped > 0 and "stopped (Stop pressed)" in page.locator("#summary").inner_text()  # it says so
    sync_api.expect(page.locator("#generate")).to_be_enabled()
    sync_api.expect(page.locator("#stop")).to_be_disabled()
    assert page.locator(DONE).count() == 1  # settled: replay and download work on what was generated

    set_number(page, "max-new", 12)
    choose(page, "Drafter", "self")  # a model drafter: every round a tree (its chain + top-q siblings)
    page.locator("#tree-controls").get_by_text("Tree speculation", exact=True).click()
    set_number(page, "tree-budget", 8)
    sync_api.expect(page.locator("#tree-budget input[type=number]").first).to_have_value("8")
    sync_api.expect(page.locator("#max-new input[type=number]").first).to_have_value("12")
    generate_and_wait(page)
    assert page.locator("#stream .tok").count() > 0
    page.get_by_role("tab", name="Tree").click()
    page.wait_for_selector("#tree .tree-branches", timeout=30_000)  # the tree view may land after the summary
    assert (
        page.locator("#tree .tree-branches").count() > 0 and page.locator("#tree .node-unvisited").count() > 0
    )
    set_number(page, "tree-budget", 0)


def test_bad_input_and_offline_hub_model_show_errors(page):
    """An empty prompt and an unreachable hub model give the engine's message as an error; the app keeps working."""
    page.fill("#prompt textarea", "")
    page.click("#generate")
    sync_api.expect(page.get_by_text("prompt is empty", exact=False).first).to_be_visible(timeout=20_000)

    page.fill("#prompt textarea", "Hello")
    choose(page, "Model pair (draft → target)", "SmolLM2 135M → 360M (needs the Hugging Face hub)")
    sync_api.expect(page.get_by_label("Drafter", exact=True)).to_have_value("preset draft model")
    page.click("#generate")
    sync_api.expect(page.get_by_text("cannot load model", exact=False).first).to_be_visible(timeout=60_000)
    choose(page, "Model pair (draft → target)", "SmolLM2-135M-Instruct (embedded)")
    set_number(page, "max-new", 6)
    generate_and_wait(page)


def test_upload_trace_replays_in_a_separate_session(browser, url, page, shared):
    """A saved trace replays in another session without a model; stepping changes the views, not page 1's."""
    before = page.locator("#stream .specviz-stream").get_attribute("data-rounds")
    other = browser.new_page(viewport={"width": 1280, "height": 900})
    other.goto(url)
    other.wait_for_selector("#prompt textarea")
    # a fresh session sees none of page 1's run: the page's opening run, the tour's recording
    mine = page.locator("#summary .sv-summary").get_attribute("data-run")
    assert other.locator("#summary .sv-summary").get_attribute("data-run") not in (None, mine)
    other.get_by_role("tab", name="Tree").click()  # gradio draws a tab's content once it is opened
    other.locator("#trace-upload input[type=file]").set_input_files(shared["trace"])
    rounds = rounds_in_trace(shared["trace"])
    other.wait_for_selector(f'#stream .specviz-stream[data-rounds="{rounds}"]', timeout=30_000)
    assert other.locator("#tree .tree-round").count() == rounds

    other.click("#prev")
    other.wait_for_selector(f'#stream .specviz-stream[data-rounds="{rounds - 1}"]', timeout=15_000)
    assert other.locator("#tree .tree-round").count() == rounds - 1
    set_number(other, "round", 1)
    other.wait_for_selector('#stream .specviz-stream[data-rounds="1"]', timeout=15_000)
    assert other.locator("#tree .tree-round").count() == 1
    other.click("#next")
    other.wait_for_selector('#stream .specviz-stream[data-rounds="2"]', timeout=15_000)
    other.click("#play")
    other.wait_for_selector(f'#stream .specviz-stream[data-rounds="{rounds}"]', timeout=30_000)

    bad = Path(shared["trace"]).with_name("bad.json")
    bad.write_text('{"format": "something else"}', encoding="utf-8")
    other.locator("#trace-upload input[type=file]").set_input_files(str(bad))
    sync_api.expect(other.get_by_text("not a specviz trace", exact=False).first).to_be_visible(timeout=15_000)
    other.wait_for_timeout(1000)  # let any output update of the refused upload land
    # the last good run stays
    assert other.locator("#stream .specviz-stream").get_attribute("data-rounds") == str(rounds)
    assert other.get_by_text("Error", exact=True).count() == 0  # no error pill over the output panels
    assert page.locator("#stream .specviz-stream").get_attribute("data-rounds") == before
    other.close()


def test_a_visitor_drafts_from_their_own_earlier_runs_and_not_from_anothers(browser, url):
    """Suffix speculation in the real app: the second run of a visitor's prompt drafts tree nodes from the first
    (the Tree tab's tooltips say "your previous run"); another visitor asking the same has no such node."""
    prompt = "Name three primary colours, one per line."

    def run(pg) -> str:
        pg.fill("#prompt textarea", prompt)
        choose(pg, "Drafter", "suffix")
        set_number(pg, "max-new", 24)
        generate_and_wait(pg)
        pg.wait_for_selector("#download:not([disabled])", timeout=RUN_TIMEOUT_MS)  # settled
        pg.get_by_role("tab", name="Tree").click()
        pg.wait_for_selector("#tree .tree-round", timeout=30_000)
        return pg.locator("#tree").inner_html()

    def from_last_run(html: str) -> bool:  # a node's tooltip names the session's previous run
        return "your previous run" in html.replace("&#39;", "'")

    mine, other = (browser.new_page(viewport={"width": 1280, "height": 900}) for _ in range(2))
    for pg in (mine, other):
        pg.goto(url)
        pg.wait_for_selector("#prompt textarea")
    assert not from_last_run(run(mine))  # a first run has no earlier one
    assert from_last_run(run(mine))  # the same visitor asking again drafts from it
    assert not from_last_run(run(other))  # another visitor's session holds none of it
    mine.close()
    other.close()
