"""The verify view never shows another round than the one asked for (Playwright + Debian's Chromium against
`python app.py`, the server shared with the other browser modules): a token of a plain round (the opening run's
round 1, a plain target step) opens a view that says so, with a button to the nearest drafted round; it opened
the latest earlier drafted round, or round 2, silently."""

from __future__ import annotations

from tests.app_server import playwright_or_skip

sync_api = playwright_or_skip()
expect = sync_api.expect


def test_a_plain_rounds_token_says_plain_and_links_the_nearest_drafted_round(browser, app_url):
    """Click round 1's token (origin ar): the Verify tab says round 1 was a plain target step and shows no table; its
    button opens round 2, the nearest drafted round (the control: a drafted round's token opens its own table)."""
    page = browser.new_page(viewport={"width": 1440, "height": 900})
    page.goto(app_url + "?tour=0")
    page.wait_for_selector("#prompt textarea")
    plain = page.locator('#stream .tok-ar[data-round="1"]').first
    expect(plain).to_be_visible(timeout=30_000)
    plain.click()
    view = page.locator('#verify .specviz-verify[data-round="1"]')
    expect(view).to_contain_text("Round 1 was a plain target step: nothing was drafted", timeout=15_000)
    assert view.locator(".vf-row").count() == 0 and "Round 2" not in view.inner_text().split("Show")[0]
    view.locator(".vf-nearest").click()
    drafted = page.locator('#verify .specviz-verify[data-round="2"]')
    expect(drafted.locator(".vf-row").first).to_be_visible(timeout=15_000)
    page.close()
