"""The training-free drafters and the lossy mode in the browser (Playwright + Debian's Chromium against
`python app.py`, the server shared with the other browser modules): lookahead's Jacobi grid beside its rounds,
recycling's trees, and a lossy run's badge in every view with its drift meter (greedy from the race, sampled on
demand in Explain)."""

from __future__ import annotations

import pytest

from tests.app_server import playwright_or_skip, set_number
from tests.test_app_page_browser import RUN_TIMEOUT_MS, choose, open_page, run

sync_api = playwright_or_skip()
expect = sync_api.expect
STORY = "Write a short story about a lighthouse keeper and a storm."


@pytest.fixture(scope="module")
def page(browser, app_url):
    p = open_page(browser, app_url)
    yield p
    p.close()


def test_lookahead_shows_its_jacobi_window_beside_each_round(page):
    """A lookahead run: every drafted round in the Tree tab carries a grid of (N − 1) levels × W guesses (the
    defaults 3 × 4) with the target's predictions under it, and the caption counts its fixed points."""
    run(page, STORY, "lookahead", max_new=32, race=False)
    page.get_by_role("tab", name="Tree").click()
    grids = page.locator("#tree .la-window")
    expect(grids.first).to_be_visible(timeout=30_000)
    assert grids.count() >= 20  # one per drafted round of 32 tokens (a round commits at most 1 + 3 here)
    first = grids.first
    assert first.locator("tr").count() == 3 + 1 and first.locator("tr").first.locator("td").count() == 4
    assert "Jacobi window 3 × 4" in first.inner_text() and "fixed points" in first.inner_text()
    assert page.locator("#tree .la-cell.la-fixed").count() >= 1  # some guess converged somewhere
    assert page.locator("#tree .sv-lossy").count() == 0  # the exact rule: no badge


def test_recycle_verifies_trees_filled_from_the_target_own_top_k(page):
    """A recycle run drafts token trees (rounds with several nodes) in the Tree tab, within its small template. How
    many nodes pay follows this host's measured verify curve (a loaded machine's is steep: 2-node trees), so the
    test asks for trees, not a size."""
    run(page, STORY, "recycle", max_new=32, race=False)
    page.get_by_role("tab", name="Tree").click()
    page.wait_for_selector("#tree .tree-branches", timeout=30_000)
    sizes = page.evaluate(
        "() => [...document.querySelectorAll('#tree .tree-branches')].map(r => +r.dataset.nodes)"
    )
    assert sizes and max(sizes) >= 2 and all(n <= 13 for n in sizes)  # the small template: 13 nodes at most


def test_a_lossy_run_is_badged_everywhere_and_shows_its_drift(page):
    """accept=typical: the LOSSY badge in the summary, the output, the Tree, Verify, Race and Explain tabs; the
    greedy drift meter (from the race's AR lane) in the summary and the race; then, sampled, the drift measured on
    demand: both rules' TV of the first two tokens' law."""
    page.get_by_role("button", name="Sampling").click()  # the accordion the rule sits in
    choose(page, "Acceptance rule", "typical:0.3,0.55")
    try:
        run(page, STORY, "ngram", max_new=32, race=True)
        for where in ("#summary", "#stream"):
            expect(page.locator(f"{where} .sv-lossy")).to_have_count(1)
        meter = page.locator('#summary .sv-drift[data-drift="greedy"]')
        expect(meter).to_have_count(1)
        assert "drift:" in meter.inner_text() and "speedup" in meter.inner_text()
        for tab, view in (
            ("Tree", "#tree"),
            ("Verify", "#verify"),
            ("Race", "#race"),
            ("Explain", "#explain"),
        ):
            page.get_by_role("tab", name=tab).click()
            expect(page.locator(f"{view} .sv-lossy").first).to_be_visible(timeout=15_000)
        expect(page.locator('#race .sv-drift[data-drift="greedy"]')).to_have_count(1)
        assert "LOSSY" in page.locator("#race .race-verdict-text").inner_text()
        assert "This run is lossy" in page.locator("#explain").inner_text()
        set_number(page, "temperature", 1)
        set_number(page, "max-new", 8)
        page.get_by_role("tab", name="Explain").click()
        page.click("#drift-measure")
        result = page.locator("#drift-out .sv-drift-result")
        # 2 × SPECVIZ_DRIFT_SAMPLES two-token runs
        expect(result).to_have_count(1, timeout=2 * RUN_TIMEOUT_MS)
        assert result.get_attribute("data-accept") == "typical:0.3,0.55"
        assert (
            float(result.get_attribute("data-tv")) >= 0 and float(result.get_attribute("data-tv-exact")) >= 0
        )
    finally:
        choose(page, "Acceptance rule", "exact")
        set_number(page, "temperature", 0)
