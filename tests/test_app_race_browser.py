"""The race in a real browser: both lanes grow side by side during a run, and the verdict appears only
when both have finished (Playwright + Debian's Chromium against `python app.py`)."""

from __future__ import annotations

import time

from tests.app_server import playwright_or_skip

playwright_or_skip()  # the `browser` fixture (conftest.py) drives it
PROMPT = "Write a long story about a lighthouse keeper and a storm."
LANES = """() => {
  const lane = m => document.querySelector(`#race .race-lane[data-mode="${m}"]`);
  const s = lane('speculative'), a = lane('ar');
  const summary = document.querySelector('#summary .sv-summary');
  return {spec: s ? +s.dataset.tokens : -1, ar: a ? +a.dataset.tokens : -1,
          specGoal: s ? +s.dataset.goal : -1, arGoal: a ? +a.dataset.goal : -1,
          specDone: !!(s && s.classList.contains('race-done')), arDone: !!(a && a.classList.contains('race-done')),
          speedup: !!document.querySelector('#race .race-speedup'),
          verdict: (document.querySelector('#race .race-verdict-text') || {}).textContent || '',
          summary: summary ? summary.textContent : '', done: summary ? summary.dataset.done : '',
          run: summary ? summary.dataset.run || '' : ''};
}"""


def test_two_lanes_grow_together_and_the_verdict_waits(app_url, browser):
    """During a raced run both lanes show partial progress at the same time with no speedup on screen;
    the speedup and 'Outputs identical' appear once both lanes are done."""
    url = app_url + "?tour=0"
    page = browser.new_page(viewport={"width": 1440, "height": 1000})
    page.goto(url)
    page.wait_for_selector("#prompt textarea")
    page.fill("#prompt textarea", PROMPT)
    box = page.locator("#max-new input[type=number]").first
    box.fill("64")
    box.press("Tab")
    page.get_by_label("Race against autoregressive", exact=False).check()
    page.get_by_role("tab", name="Race").click()
    page.wait_for_selector("#race")
    opening = page.evaluate(LANES)["run"]  # the page opens on the tour's recorded race
    page.click("#generate")
    samples, deadline = [], time.monotonic() + 240
    while time.monotonic() < deadline:
        state = page.evaluate(LANES)
        if state["run"] != opening or state["done"] != "1":  # this run's frames only
            samples.append(state)
            if state["specDone"] and state["arDone"] and state["speedup"] and state["done"] == "1":
                break
        time.sleep(0.15)
    running = [s for s in samples if not (s["specDone"] and s["arDone"]) and s["spec"] >= 0]
    both_growing = [s for s in running if 0 < s["spec"] < s["specGoal"] and 0 < s["ar"] < s["arGoal"]]
    assert both_growing, f"never saw both lanes part-way at once: {samples[-5:]}"
    assert all(not s["speedup"] and "vs autoregressive" not in s["summary"] for s in running)
    assert any("racing: speculative" in s["summary"] for s in running)
    assert all(s["arGoal"] == 64 for s in both_growing)  # progress is against the token target, not "full"
    final = samples[-1]
    assert final["speedup"] and final["specDone"] and final["arDone"], final
    assert "Outputs identical (greedy)." in final["verdict"] and "vs autoregressive" in final["summary"]
