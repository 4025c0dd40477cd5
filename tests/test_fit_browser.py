"""The page fits its boxes and follows the keyboard (Playwright + Debian's Chromium against `python app.py`, the
server shared with the other browser modules):
- at 1440 x 900 no table is wider than its box (the Spec-Bench table hid its last three columns behind a scroll);
- at 390 x 844 every tab is in sight (none behind Gradio's "…" menu), the verify table's verdicts are whole and
  the replay speed's arrow does not cover its value;
- a run started from the keyboard keeps its focused output inside the viewport;
- γ = 2.5 typed in its box is marked invalid and refused by name.
A loaded trace (specviz/demo_trace.py) fills the verify table without a model run."""

from __future__ import annotations

import pytest

from tests.app_server import playwright_or_skip, set_number

sync_api = playwright_or_skip()
expect = sync_api.expect
TABS = ("Verify", "Tree", "Charts", "Race", "Explain", "Spec-Bench", "Beam search", "Batch")
DONE = '#summary .sv-summary[data-done="1"]'


@pytest.fixture(scope="module")
def trace(tmp_path_factory):
    from engine import write_trace
    from specviz.demo_trace import sample_events

    path = tmp_path_factory.mktemp("fit") / "sample.json"
    write_trace(path, sample_events())
    return str(path)


def open_with_trace(browser, url, trace, width, height):
    page = browser.new_page(viewport={"width": width, "height": height})
    page.goto(url + "?tour=0")
    page.wait_for_selector("#prompt textarea")
    page.locator("#trace-upload input[type=file]").set_input_files(trace)
    page.wait_for_selector("#verify .vf-table", timeout=30_000)
    return page


WIDE_TABLES = """() => [...document.querySelectorAll('table')].filter(t => t.getClientRects().length).map(t => {
  const box = t.parentElement, r = t.getBoundingClientRect(), b = box.getBoundingClientRect();
  return {table: t.className || t.closest('[id]').id, width: Math.round(r.width), box: box.clientWidth,
          scroll: box.scrollWidth, over: r.right > b.right + 1 || box.scrollWidth > box.clientWidth + 1};
})"""


def test_no_table_overflows_its_box_at_1440(browser, app_url, trace):
    """On every tab at 1440 x 900, each table's box is as wide as the table (no column behind a scroll): the
    Spec-Bench leaderboard and the verify table among them."""
    page = open_with_trace(browser, app_url, trace, 1440, 900)
    seen = set()
    for name in TABS:
        page.get_by_role("tab", name=name, exact=True).click()
        page.wait_for_timeout(400)
        tables = page.evaluate(WIDE_TABLES)
        assert not [t for t in tables if t["over"]], (name, tables)
        seen |= {t["table"] for t in tables}
    assert {"vf-table", "lb-table"} <= seen, seen
    page.close()


PHONE = """() => {
  const cut = [...document.querySelectorAll('#verify .vf-table td, #verify .vf-table th')]
    .filter(c => c.getClientRects().length && c.scrollWidth > c.clientWidth + 1).map(c => c.textContent.trim());
  const scroll = document.querySelector('#verify .vf-table').parentElement;
  const input = document.querySelector('#speed input'), icon = document.querySelector('#speed .icon-wrap');
  const ctx = document.createElement('canvas').getContext('2d');
  ctx.font = getComputedStyle(input).font;
  const text = input.getBoundingClientRect().left + parseFloat(getComputedStyle(input).paddingLeft)
    + ctx.measureText(input.value).width;
  return {cut, table: [scroll.scrollWidth, scroll.clientWidth], value: input.value,
          textEnd: text, arrow: icon.getBoundingClientRect().left,
          verdicts: [...document.querySelectorAll('#verify .vf-table .vf-verdict')].map(c => c.textContent.trim())};
}"""


def test_the_phone_shows_every_tab_whole_verdicts_and_the_speed(browser, app_url, trace):
    """At 390 x 844: each tab button is on screen (the tabs wrap; no "More tabs" menu); no verify table cell is cut
    (a verdict read "accep"); the Speed × value ends before its dropdown arrow begins."""
    page = open_with_trace(browser, app_url, trace, 390, 844)
    page.wait_for_timeout(500)
    expect(page.locator('button[aria-label="More tabs"]')).to_have_count(0)
    for name in TABS:
        tab = page.get_by_role("tab", name=name, exact=True)
        expect(tab).to_be_visible()
        box = tab.bounding_box()
        assert box["x"] >= 0 and box["x"] + box["width"] <= 390, (name, box)
    state = page.evaluate(PHONE)
    assert state["cut"] == [] and state["table"][0] <= state["table"][1], state
    assert "rejected" in state["verdicts"], state
    assert state["value"] == "1.0" and state["textEnd"] <= state["arrow"], state
    page.close()


def test_a_keyboard_run_keeps_the_focused_output_in_view(browser, app_url):
    """Tab from the prompt to Generate, Enter: once the run is done the focus is on the output and the output
    is inside the 900 px viewport (it sat at y = 921, below the fold)."""
    page = browser.new_page(viewport={"width": 1440, "height": 900})
    page.goto(app_url + "?tour=0")
    page.wait_for_selector("#prompt textarea")
    page.fill("#prompt textarea", "Say hi.")
    set_number(page, "max-new", 4)
    page.locator("#prompt textarea").focus()
    page.keyboard.press("Tab")
    assert page.evaluate("() => document.activeElement.id") == "generate"
    old = page.locator("#summary .sv-summary").get_attribute("data-run") or ""  # the opening run's
    page.keyboard.press("Enter")
    page.wait_for_selector(f'{DONE}:not([data-run="{old}"])', timeout=150_000)
    seen = None
    for _ in range(50):  # the focus and the scroll land a few frames after the last render on a busy machine
        seen = page.evaluate("""() => { const a = document.activeElement, r = a.getBoundingClientRect();
          return {stream: !!a.closest('#stream'), top: r.top, bottom: r.bottom, height: innerHeight}; }""")
        if seen["stream"] and seen["top"] >= 0 and seen["bottom"] <= seen["height"]:
            break
        page.wait_for_timeout(100)
    assert seen["stream"] and seen["top"] >= 0 and seen["bottom"] <= seen["height"], seen
    page.close()


def test_a_fractional_gamma_is_marked_and_refused(browser, app_url):
    """γ = 2.5 typed in γ's box: the box is invalid (step 1) and outlined; Generate warns "γ must be a whole
    number from 1 to 16" and no run starts."""
    page = browser.new_page(viewport={"width": 1440, "height": 900})
    page.goto(app_url + "?tour=0")
    page.wait_for_selector("#prompt textarea")
    page.fill("#prompt textarea", "Say hi.")
    box = page.locator("#gamma input[type=number]").first
    box.fill("2.5")
    box.press("Tab")
    assert box.evaluate("e => e.validity.stepMismatch")
    assert box.evaluate("e => getComputedStyle(e).outlineStyle") == "solid"  # marked at once
    opening = page.locator("#summary .sv-summary").get_attribute("data-run")  # the tour's recorded run
    page.click("#generate")
    expect(page.get_by_text("γ must be a whole number from 1 to 16")).to_be_visible(timeout=30_000)
    assert page.locator("#summary .sv-summary").get_attribute("data-run") == opening  # no run
    page.close()
