"""The beam view in a real browser (Playwright + Debian's Chromium against `python app.py`)."""

from __future__ import annotations

from tests.app_server import playwright_or_skip

playwright_or_skip()  # the `browser` fixture (conftest.py) drives it


def test_browser_beam_run_renders_lanes_and_best(app_url, browser):
    """In a real browser, a beam run of width 3 (raced against plain beam search) renders 3 lanes, marks the
    best hypothesis's path and its lane, and shows the race line with the verdict."""
    url = app_url + "?tour=0"
    page = browser.new_page(viewport={"width": 1440, "height": 1000})
    page.goto(url)
    page.wait_for_selector("#prompt textarea")
    page.fill("#prompt textarea", "Copy this text exactly: the cat sat on the mat, the cat sat on the mat.")
    box = page.locator("#max-new input[type=number]").first
    box.fill("12")
    box.press("Tab")
    page.get_by_role("tab", name="Beam search").click()
    page.wait_for_selector("#beam-run")
    page.click("#beam-run")
    page.wait_for_selector("#beams .beam-verdict", timeout=180_000)
    state = page.evaluate("""() => ({
        lanes: document.querySelectorAll('#beams .beam-lane').length,
        width: +document.querySelector('#beams .specviz-beams').dataset.beams,
        best: document.querySelectorAll('#beams .beam-best').length,
        bestLane: document.querySelectorAll('#beams .beam-lane-best').length,
        hyp: (document.querySelector('#beams .beam-hyp-best') || {}).textContent || '',
        same: document.querySelector('#beams .beam-verdict').dataset.same})""")
    assert state["lanes"] == 3 and state["width"] == 3, state
    assert state["best"] >= 1 and state["bestLane"] >= 1 and state["hyp"].startswith("best"), state
    assert state["same"] == "true", state
