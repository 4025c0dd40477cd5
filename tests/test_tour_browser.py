"""The guided tour in a real browser (Playwright + Debian's Chromium against `python app.py`, the server shared with
the other browser modules): its caption stays in view beside the element it outlines at every step, on a phone and
on a desktop; any user action stops it; Skip shows only while it plays; the summary counts "1 token"; step ② says
that the rejection is the target's own choice.
"""

from __future__ import annotations

import re

import pytest

from tests.app_server import playwright_or_skip
from ui import app_views as av
from ui import tour as t

sync_api = playwright_or_skip()
expect = sync_api.expect
STEPS = len(t.TOUR)
PLAYING = '#tour .sv-tour[data-done="0"]'
ENDED = (
    '#tour .sv-tour[data-done="1"][data-step="0"]'  # ended or stopped (a stopped caption is empty, hidden)
)

# Both rectangles at this moment, in viewport pixels, and the step they belong to.
RECTS = """() => {
  const box = n => { if (!n) return null; const r = n.getBoundingClientRect();
                     return {top: r.top, bottom: r.bottom, left: r.left, right: r.right, height: r.height}; };
  const cap = document.querySelector('#tour .sv-tour'), focus = document.querySelectorAll('.sv-tour-focus');
  return {step: cap.getAttribute('data-step'), want: cap.getAttribute('data-focus'), marked: focus.length,
          is: focus.length ? focus[0].matches(cap.getAttribute('data-focus')) : false,
          caption: box(document.querySelector('#tour')), row: box(document.querySelector('.sv-tour-row')),
          focus: box(focus[0]), w: innerWidth, h: innerHeight};
}"""


def placed(r: dict) -> bool:
    """The caption wholly inside the viewport; the outlined element inside it too and not under the caption row
    (or, when it is taller than the room above the caption, its top in that room)."""
    c, f, row, w, h = r["caption"], r["focus"], r["row"], r["w"], r["h"]
    caption_in = c["top"] >= 0 and c["bottom"] <= h and c["left"] >= 0 and c["right"] <= w
    if not (r["marked"] == 1 and r["is"] and f):
        return False
    room = row["top"]  # the caption row (caption and Skip), pinned to the viewport's bottom
    fits = f["height"] <= room - 16
    focus_in = f["top"] >= 0 and (f["bottom"] <= room if fits else f["top"] < room - 100)
    return caption_in and focus_in and f["left"] >= 0 and f["right"] <= w


def open_page(browser, url, tour=True, width=1440, height=900, speed=1):
    """A page; `speed` > 1 plays the tour that much faster (?tour_speed), for checks that time no step."""
    page = browser.new_page(viewport={"width": width, "height": height})
    page.goto(url + ("?tour=0" if not tour else f"?tour_speed={speed}" if speed != 1 else ""))
    page.wait_for_selector("#prompt textarea")
    return page


@pytest.mark.parametrize("width,height", [(390, 844), (1440, 900)], ids=["phone", "desktop"])
def test_the_caption_and_its_element_are_in_view_at_every_step(browser, app_url, width, height):
    """At 390 × 844 and 1440 × 900, at every tour step the caption (#tour) and the element it outlines
    (.sv-tour-focus) are both inside the viewport, the caption not covering the element (it was 148 to 777 px above
    the fold on a phone) and it is the one the caption names: step 1's grey plain step shows above the caption (the
    prompt was outlined while the caption spoke of the grey token); the closing caption ends whole in view (it was cut
    at the top edge); mid-tour the summary counts "1 round · 1 token" (round 2 has committed nothing yet), not
    "1 tokens"; step ② says the rejected word is the target's own choice."""
    page = open_page(browser, app_url, width=width, height=height, speed=2)  # each step ≥ 2 s: ~4x the scroll
    for step in range(1, STEPS + 1):
        page.wait_for_selector(f'#tour .sv-tour[data-step="{step}"]', timeout=60_000)
        seen = None
        for _ in range(40):  # the page scrolls ~0.2-0.5 s after the frame: poll while the step is up
            seen = page.evaluate(RECTS)
            if seen["step"] != str(step) or placed(seen):
                break
            page.wait_for_timeout(150)
        assert seen["step"] == str(step) and placed(seen), (width, step, seen)
        if step == 1:  # the caption names the grey plain step in the output: outlined, and above the caption
            grey = page.locator("#stream .tok-ar").first.bounding_box()
            assert seen["want"] == "#stream" and grey, seen
            assert 0 <= grey["y"] and grey["y"] + grey["height"] <= seen["row"]["top"], (grey, seen["row"])
        if step == 2:  # round 2 drafted, round 1's single token committed: the rounds that committed count
            summary = page.locator("#summary").inner_text()
            assert "1.00 tokens per target forward · 1 round · 1 token" in summary, summary
            assert not re.search(r"\b1 tokens", summary), summary
        if step == 3:
            text = page.locator("#tour").inner_text()
            assert (
                "the target's own choice" in text and "exactly what the target alone would write" in text
            ), text
    page.wait_for_selector('#tour .sv-tour[data-done="1"]', state="attached", timeout=60_000)
    page.wait_for_timeout(800)  # the closing caption is scrolled into view 0.2 s after the tour ends
    row = page.locator(".sv-tour-row").bounding_box()
    assert row["y"] >= 0 and row["y"] + row["height"] <= height + 1, (width, row)
    page.close()


def test_an_example_or_a_setting_changed_mid_tour_stops_it(browser, app_url):
    """Clicking an example while the tour plays stops it: the caption ends and no later tour frame overwrites the
    example's prompt; editing γ during a replayed tour stops it too (before, only Generate and the replay buttons
    did)."""
    page = open_page(browser, app_url, speed=2)  # step 2 lasts 2.5 s
    page.wait_for_selector('#tour .sv-tour[data-step="2"]', timeout=60_000)
    page.locator("#examples button.gallery-item").nth(1).click()
    example = av.EXAMPLES[1][1]
    page.wait_for_selector(ENDED, state="attached", timeout=15_000)
    expect(page.locator("#prompt textarea")).to_have_value(example, timeout=15_000)
    page.wait_for_timeout(4000)  # longer than step 2: a tour still playing would have moved on
    assert page.locator(ENDED).count() == 1 and page.locator(PLAYING).count() == 0
    assert page.locator("#prompt textarea").input_value() == example
    expect(page.locator("#tour-replay")).to_be_visible()

    page.click("#tour-replay")
    page.wait_for_selector('#tour .sv-tour[data-step="2"]', timeout=60_000)
    gamma = page.locator("#gamma input[type=number]").first
    gamma.fill("6")
    page.wait_for_selector(ENDED, state="attached", timeout=15_000)
    page.wait_for_timeout(4000)
    assert page.locator(PLAYING).count() == 0 and gamma.input_value() == "6"
    # the visitor's prompt is given back with their run (the replay had shown the tour's)
    assert page.locator("#prompt textarea").input_value() == example
    page.close()


def test_skip_shows_only_while_a_tour_plays(browser, app_url):
    """No tour (a page opened with ?tour=0): Replay shows and Skip is hidden (it stayed visible and enabled beside an
    empty caption); Replay plays the tour even there; while it plays Skip shows and Replay is hidden; skipped,
    Replay comes back."""
    page = open_page(browser, app_url, tour=False)
    expect(page.locator("#tour-replay")).to_be_visible()
    expect(page.locator("#tour-skip")).to_be_hidden()
    page.click("#tour-replay")
    page.wait_for_selector('#tour .sv-tour[data-step="1"]', timeout=60_000)
    expect(page.locator("#tour-skip")).to_be_visible()
    expect(page.locator("#tour-replay")).to_be_hidden()
    page.click("#tour-skip")
    page.wait_for_selector(
        '#tour .sv-tour[data-done="1"]:has-text("Now try your own prompt")', timeout=30_000
    )
    expect(page.locator("#tour-skip")).to_be_hidden()
    expect(page.locator("#tour-replay")).to_be_visible()
    page.close()


def test_the_tour_costs_the_server_nothing(browser, app_url):
    """The whole tour plays, is replayed and skipped without one request to the server's queue or run routes (it was
    a server-side generator holding a queue place ~45 s per visitor: 50 visitors filled the queue); the page opens
    on the recorded run, and stopping the tour leaves that run in view."""
    page = browser.new_page(viewport={"width": 1440, "height": 900})
    calls = []
    page.on("request", lambda r: calls.append(r.url) if "/queue/" in r.url or "/run/" in r.url else None)
    page.goto(app_url + "?tour_speed=4")
    page.wait_for_selector('#tour .sv-tour[data-step="3"]', timeout=60_000)
    assert page.locator("#stream .sv-tour-layer").count() == 1  # a frame covers the view
    page.click("#tour-skip")
    page.wait_for_selector(
        '#tour .sv-tour[data-done="1"]:has-text("Now try your own prompt")', timeout=10_000
    )
    assert page.locator(".sv-tour-layer").count() == 0
    page.click("#tour-replay")
    page.wait_for_selector(f'#tour .sv-tour[data-step="{STEPS}"]', timeout=90_000)
    page.wait_for_selector(ENDED, state="attached", timeout=30_000)
    assert calls == [], calls
    assert "tok-corrected" in page.locator("#stream").inner_html()  # the recorded run, whole
    page.close()


def test_the_default_example_is_served_from_the_start_up_recording_then_live(browser, app_url):
    """The default example's Generate shows the run recorded at start-up on this host at once, flagged as such, with
    no request to the queue (a room pressing it costs the server no run); Generate again runs it live."""
    page = open_page(browser, app_url, tour=False)
    joins = []
    page.on("request", lambda r: joins.append(r.url) if "/queue/join" in r.url else None)
    page.locator("#examples button.gallery-item").nth(0).click()
    expect(page.locator("#prompt textarea")).to_have_value(av.EXAMPLES[0][1])
    expect(page.locator("#race-on input[type=checkbox]")).to_be_checked()  # the example's third value
    page.click("#generate")
    try:
        expect(page.locator("#summary .sv-recorded")).to_contain_text("Recorded at start-up on this host")
    except AssertionError as e:
        raise AssertionError(f"{e}\nthe server's errors:\n{app_url.errors()}") from None
    expect(page.locator("#summary .sv-speedup")).to_have_count(1)  # the raced run, its speedup
    assert joins == []
    expect(page.locator("#generate")).to_be_enabled()
    page.click("#generate")
    expect(page.locator('#summary .sv-summary[data-done="1"]')).to_have_count(1, timeout=120_000)
    expect(page.locator("#summary .sv-recorded")).to_have_count(0)
    assert len(joins) == 1
    page.close()
    # a second visitor gets the same recording, whole: its replay slider at the last round, its trace to download
    # (the shared outputs were consumed by Gradio on the first serve)
    other = open_page(browser, app_url, tour=False)
    other.locator("#examples button.gallery-item").nth(0).click()
    expect(other.locator("#prompt textarea")).to_have_value(av.EXAMPLES[0][1])
    other.click("#generate")
    expect(other.locator("#summary .sv-recorded")).to_contain_text("Recorded at start-up on this host")
    expect(other.locator("#download")).to_be_enabled()
    rounds = other.locator("#stream .specviz-stream").get_attribute("data-rounds")
    assert other.locator("#round input[type=number]").first.input_value() == rounds
    other.close()


def test_escape_stops_the_tour_and_the_next_generate_races_as_the_tour_did(browser, app_url):
    """Escape stops a playing tour as Skip does (it did nothing); the tour ended on its race, so the race box is on
    for the visitor's first Generate (it was off: their first run showed no speedup); a box the visitor set stays."""
    page = open_page(browser, app_url, tour=False)
    box = page.locator("#race-on input[type=checkbox]")
    expect(box).not_to_be_checked()
    page.click("#tour-replay")
    page.wait_for_selector('#tour .sv-tour[data-step="1"]', timeout=60_000)
    page.keyboard.press("Escape")
    page.wait_for_selector(
        '#tour .sv-tour[data-done="1"]:has-text("Now try your own prompt")', timeout=30_000
    )
    expect(page.locator("#tour-skip")).to_be_hidden()
    expect(box).to_be_checked()
    box.uncheck()  # the visitor's own choice: a replayed tour leaves it
    page.click("#tour-replay")
    page.wait_for_selector('#tour .sv-tour[data-step="1"]', timeout=60_000)
    page.keyboard.press("Escape")
    page.wait_for_selector(
        '#tour .sv-tour[data-done="1"]:has-text("Now try your own prompt")', timeout=30_000
    )
    expect(box).not_to_be_checked()
    page.close()


def test_the_replay_slider_shows_the_tours_round(browser, app_url):
    """While the tour's caption talks about round 1 the replay slider shows 1 (it stayed at the last round); Skip
    puts back what it showed before."""
    page = open_page(browser, app_url, tour=False)
    number = page.locator("#round input[type=number]")
    before = number.input_value()
    page.click("#tour-replay")
    page.wait_for_selector('#tour .sv-tour[data-step="1"]', timeout=60_000)
    assert number.input_value() == "1" != before
    page.click("#tour-skip")
    page.wait_for_selector(
        '#tour .sv-tour[data-done="1"]:has-text("Now try your own prompt")', timeout=30_000
    )
    assert number.input_value() == before
    page.close()
