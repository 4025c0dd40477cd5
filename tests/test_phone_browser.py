"""At 390 × 844 (Playwright + Debian's Chromium against `python app.py`, the server shared with the other browser
modules): the Your engine tab's tables keep each number and header on one line (the table scrolls sideways; it
printed "2,11 / 0" for 2,110), and after Generate the summary line is in view (it sat 513 px above the viewport)."""

from __future__ import annotations

import pytest

from tests.app_server import open_tab, playwright_or_skip, set_number
from tests.test_app_page_browser import DONE, RUN_TIMEOUT_MS
from tests.test_engine_metrics import EXPECTED, FIXTURES

sync_api = playwright_or_skip()
expect = sync_api.expect

# words (a number, a name) in the metrics tables' cells that are broken across two lines: a header may wrap between
# its words, never inside one
SPLIT = """() => { const out = [];
  document.querySelectorAll('#metrics-summary table :is(td, th)').forEach(c => {
    const walk = document.createTreeWalker(c, NodeFilter.SHOW_TEXT);
    for (let n = walk.nextNode(); n; n = walk.nextNode()) {
      for (const m of n.textContent.matchAll(/\\S+/g)) {
        const r = document.createRange(); r.setStart(n, m.index); r.setEnd(n, m.index + m[0].length);
        const tops = new Set(Array.from(r.getClientRects()).map(x => Math.round(x.top)));
        if (tops.size > 1) out.push(m[0]);
      } } });
  return out; }"""
IN_VIEW = """(sel) => { const r = document.querySelector(sel).getBoundingClientRect();
  return r.top >= -1 && r.bottom <= innerHeight + 1; }"""


@pytest.fixture(scope="module")
def phone(browser, app_url):
    page = browser.new_page(viewport={"width": 390, "height": 844})
    page.goto(app_url + "?tour=0")
    page.wait_for_selector("#prompt textarea")
    yield page
    page.close()


def test_the_metrics_tables_keep_each_number_on_one_line(phone):
    """Every metrics file's tables at 390 px: no cell's number or header wraps; the control: the same table squeezed
    to 60 px with the old rule (overflow-wrap: anywhere) does split, so the check can fail."""
    open_tab(phone, "Your engine")
    phone.wait_for_selector("#metrics-upload input[type=file]", state="attached")
    for name, (kind, *_) in EXPECTED.items():
        phone.locator("#metrics-upload input[type=file]").set_input_files(str(FIXTURES / name))
        phone.wait_for_selector(f'#metrics-summary .sv-metrics[data-kind="{kind}"]', timeout=30_000)
        expect(phone.locator("#metrics-summary table").first).to_be_visible()
        assert phone.evaluate(SPLIT) == [], name
    phone.evaluate("""() => { const t = document.querySelector('#metrics-summary table');
      t.style.width = '60px'; t.querySelectorAll('td, th').forEach(c => {
        c.style.whiteSpace = 'normal'; c.style.overflowWrap = 'anywhere'; }); }""")
    assert phone.evaluate(SPLIT)


def test_the_summary_is_in_view_after_generate(phone):
    """A short run at 390 × 844: once it is done, its summary line (tok/s, α, the stop reason) is in the viewport."""
    phone.get_by_role("tab", name="Verify").click()
    phone.fill("#prompt textarea", "Name three colours.")
    set_number(phone, "max-new", 12)
    phone.evaluate("() => window.scrollTo(0, 0)")
    old = phone.locator("#summary .sv-summary").get_attribute("data-run") or ""
    phone.click("#generate")
    phone.wait_for_selector(f'{DONE}:not([data-run="{old}"])', timeout=RUN_TIMEOUT_MS)
    phone.wait_for_timeout(500)
    where = "() => [scrollY, document.querySelector('#summary .sv-summary').getBoundingClientRect().top, innerHeight]"
    assert phone.evaluate(IN_VIEW, "#summary .sv-summary"), phone.evaluate(where)


def test_arrow_keys_home_and_end_move_between_tabs(browser, app_url):
    """The ARIA tabs pattern on the views' tab strip: → opens the next tab, ← the one before (wrapping), End the last,
    Home the first; the control: a letter key moves nothing."""
    page = browser.new_page(viewport={"width": 1440, "height": 900})
    page.goto(app_url + "?tour=0")
    page.wait_for_selector("#prompt textarea")
    verify = page.get_by_role("tab", name="Verify", exact=True)
    verify.click()
    strip = verify.locator("xpath=ancestor::*[@role='tablist'][1]")
    names = [n.strip() for n in strip.locator("[role=tab]:visible").all_inner_texts()]
    selected = "() => document.activeElement.getAttribute('aria-selected') + ' ' + document.activeElement.textContent.trim()"
    verify.focus()
    i = names.index("Verify")
    page.keyboard.press("ArrowRight")
    expect(page.get_by_role("tab", name=names[i + 1], exact=True)).to_have_attribute("aria-selected", "true")
    assert page.evaluate(selected) == f"true {names[i + 1]}"
    page.keyboard.press("ArrowLeft")
    expect(verify).to_have_attribute("aria-selected", "true")
    page.keyboard.press("End")
    expect(page.get_by_role("tab", name=names[-1], exact=True)).to_have_attribute("aria-selected", "true")
    page.keyboard.press("ArrowRight")  # wraps to the first
    expect(page.get_by_role("tab", name=names[0], exact=True)).to_have_attribute("aria-selected", "true")
    page.keyboard.press("End")
    page.keyboard.press("Home")
    expect(page.get_by_role("tab", name=names[0], exact=True)).to_have_attribute("aria-selected", "true")
    page.keyboard.press("x")
    expect(page.get_by_role("tab", name=names[0], exact=True)).to_have_attribute("aria-selected", "true")
    page.close()


def test_a_capped_lane_shows_that_it_scrolls(browser, app_url):
    """The race's lanes (capped at 260 px) carry the scroll cue: shadows at the edge with more beyond it."""
    page = browser.new_page(viewport={"width": 390, "height": 844})
    page.goto(app_url + "?tour=0")
    page.wait_for_selector("#prompt textarea")
    cue = page.evaluate(
        """() => { const d = document.createElement('div'); d.className = 'specviz specviz-race';
          d.innerHTML = '<div class="race-out"></div>'; document.body.appendChild(d);
          const s = getComputedStyle(d.firstChild); return [s.maxHeight, s.backgroundImage, s.backgroundAttachment]; }"""
    )
    assert cue[0] == "260px" and cue[1].count("gradient(") == 4 and "local" in cue[2], cue
    page.close()
