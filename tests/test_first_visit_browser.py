"""The first visit explains itself (Playwright + Debian's Chromium against `python app.py`, the server shared with
the other browser modules):
- the session's history: a second run of one prompt with `suffix` says how many accepted drafts came from the
  first and marks them ⟲; a run in a fresh session (another browser context) shows none; Forget my history too;
- after a mouse click on Generate at 1440 × 900 the first output token is inside the viewport;
- Enter on a token reached with the arrow keys opens that token's round in the verify view, in view;
(the tour at 1440 × 900 and 390 × 844, each step's outlined element the one its caption names and the closing
caption whole: tests/test_tour_browser.py)
SPECVIZ_SCREENSHOT=1 writes the README's screenshots (assets/session-history.png, assets/explain-short.png).
"""

from __future__ import annotations

import re

from tests.app_server import (
    playwright_or_skip,  # noqa: E402  (skips the module without Playwright)
    set_number,
)
from tests.test_app_page_browser import DONE, RUN_TIMEOUT_MS, choose, open_page, shot

expect = playwright_or_skip().expect
SKY = "Explain in three sentences why the sky is blue."
IN_VIEW = """(sel) => { const n = document.querySelector(sel); if (!n) return null; const r = n.getBoundingClientRect();
  return r.top >= 0 && r.bottom <= innerHeight && r.height > 0; }"""


def generate(page, prompt: str, drafter: str, max_new: int = 32) -> None:
    """One run, started with a mouse click on Generate, waited for to its end."""
    page.fill("#prompt textarea", prompt)
    choose(page, "Drafter", drafter)
    set_number(page, "max-new", max_new)
    old = page.locator("#summary .sv-summary").get_attribute("data-run") or ""
    page.click("#generate")
    page.wait_for_selector(f'{DONE}:not([data-run="{old}"])', timeout=RUN_TIMEOUT_MS)
    expect(page.locator("#generate")).to_be_enabled(timeout=15_000)


def clip_of(page, first: str, last: str) -> dict:
    """The page region from the top of `first` to the bottom of `last` (scrolled into view), full width of both."""
    page.locator(first).scroll_into_view_if_needed()
    a, b = page.locator(first).bounding_box(), page.locator(last).bounding_box()
    x, y = min(a["x"], b["x"]), a["y"]
    return {
        "x": x,
        "y": y,
        "width": max(a["x"] + a["width"], b["x"] + b["width"]) - x,
        "height": b["y"] + b["height"] - y,
    }


def history_count(page) -> int:
    """The summary's count of accepted drafts taken from the session's earlier runs (0: it says none)."""
    said = page.locator("#summary .sv-history")
    return int(said.get_attribute("data-from-history")) if said.count() else 0


def test_the_second_run_says_what_it_drew_from_the_first(browser, app_url, tmp_path):
    page = open_page(browser, app_url)
    generate(page, SKY, "suffix")
    assert history_count(page) == 0 and page.locator("#stream .tok-hist").count() == 0
    generate(page, SKY, "suffix")
    n = history_count(page)
    assert n > 0, page.locator("#summary").inner_text()
    summary = page.locator("#summary").inner_text()
    assert re.search(rf"{n} of \d+ accepted drafts? came from your previous run in this session", summary)
    expect(page.locator("#stream .tok-hist")).to_have_count(n)
    page.screenshot(path=shot(tmp_path, "session-history.png"), clip=clip_of(page, "#summary", "#stream"))
    page.get_by_role("tab", name="Explain").click()
    explain = page.locator("#explain")
    expect(explain.locator(".sv-short")).to_be_visible()
    expect(explain.locator(".sv-history-note")).to_contain_text(f"{n} of this run's")
    expect(explain.locator("details.sv-derivation")).not_to_have_attribute("open", "")
    page.screenshot(
        path=shot(tmp_path, "explain-short.png"),
        clip=clip_of(page, "#explain .sv-short", "#explain .sv-whatif"),
    )
    # the control: the same prompt in a fresh session (its own cookies and page state) drew on nothing
    fresh = browser.new_context(viewport={"width": 1440, "height": 900})
    other = fresh.new_page()
    other.goto(app_url + "?tour=0")
    other.wait_for_selector("#prompt textarea")
    generate(other, SKY, "suffix")
    assert history_count(other) == 0 and other.locator("#stream .tok-hist").count() == 0
    fresh.close()
    # Forget my history: the next run in this session drafts from its own text only
    page.click("#forget-history")
    expect(page.get_by_text("Forgot 2 earlier runs")).to_be_visible(timeout=10_000)
    generate(page, SKY, "suffix")
    assert history_count(page) == 0
    page.close()


def test_a_mouse_click_on_generate_brings_the_output_into_view(browser, app_url):
    page = open_page(browser, app_url, width=1440, height=900)
    page.fill("#prompt textarea", "Name three colours.")
    set_number(page, "max-new", 24)
    page.evaluate("() => window.scrollTo(0, 0)")
    old = page.locator("#summary .sv-summary").get_attribute("data-run") or ""
    page.click("#generate")  # a mouse click (detail 1), not Enter
    page.wait_for_selector(f'{DONE}:not([data-run="{old}"])', timeout=RUN_TIMEOUT_MS)
    page.wait_for_timeout(300)
    assert page.evaluate(IN_VIEW, "#stream .specviz-stream .tok"), page.evaluate("() => scrollY")
    page.close()


def test_enter_on_a_token_opens_its_own_round_in_view(browser, app_url):
    """Arrowing through the output to a token of round r and pressing Enter shows round r in the verify view,
    scrolled into view, even with the pointer resting over a token of another round."""
    page = open_page(browser, app_url, width=1440, height=700)
    # the first visit's output drawn before the keyboard reaches it (on a busy host it comes after the prompt box:
    # a focus given before it lands on an element the drawing replaces)
    page.wait_for_selector("#stream .specviz-stream .tok", timeout=RUN_TIMEOUT_MS)
    stream = page.locator("#stream .specviz-stream")
    stream.focus()
    rounds = []
    for _ in range(12):
        page.keyboard.press("ArrowRight")
        rounds.append(page.locator("#stream .tok.is-active").get_attribute("data-round"))
    r = rounds[-1]
    other = page.locator(f'#stream .tok:not([data-round="{r}"])').last  # the pointer rests over another round
    other.hover()
    stream.focus()  # the focus stays with the keyboard user
    page.keyboard.press("Enter")
    view = page.locator(f'#verify .specviz-verify[data-round="{r}"]')
    expect(view).to_have_count(1, timeout=15_000)
    page.wait_for_timeout(800)
    box = view.bounding_box()
    assert box and 0 <= box["y"] < page.viewport_size["height"], box
    page.close()
