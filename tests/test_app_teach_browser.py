"""The teaching and polish features in a real browser (Playwright + Debian's Chromium against `python app.py`,
the server shared with the other browser modules): the guided tour, the verify view, the SVG tree at γ = 16
and at the largest tree budget, linked hover, the phone layout, dark charts, one error per bad upload, Generate disabled while running.

SPECVIZ_SCREENSHOT=1 writes the README's screenshots (assets/tour.png, verify.png, tree-gamma16.png); otherwise
they go to a temp folder.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.app_server import ROOT, open_tab, page_top, playwright_or_skip, set_number

sync_api = playwright_or_skip()
expect = sync_api.expect
RUN_TIMEOUT_MS = 120_000
DONE = '#summary .sv-summary[data-done="1"]'


@pytest.fixture
def shot(tmp_path):
    """Path of a screenshot: under assets/ only when asked (SPECVIZ_SCREENSHOT=1)."""

    def path(name: str) -> str:
        folder = ROOT / "assets" if os.environ.get("SPECVIZ_SCREENSHOT") == "1" else tmp_path
        return str(Path(folder) / name)

    return path


def open_page(browser, url, tour=False, width=1440, height=1000, theme=None):
    query = [] if tour else ["tour=0"]
    if theme:
        query.append(f"__theme={theme}")
    page = browser.new_page(viewport={"width": width, "height": height})
    page.goto(url + ("?" + "&".join(query) if query else ""))
    page.wait_for_selector("#prompt textarea")
    return page


def run_example(page, max_new: int, gamma: int | None = None, drafter: str | None = None) -> None:
    """The first example (copy a passage, n-gram unless `drafter`), short; checks Generate is disabled while it
    runs."""
    page.locator("#examples button").first.click()
    if drafter is not None:
        expect(page.get_by_label("Drafter", exact=True)).to_have_value("ngram")  # the example's, before ours
        page.get_by_label("Drafter", exact=True).click()
        page.get_by_role("option", name=drafter, exact=True).click()
        expect(page.get_by_label("Drafter", exact=True)).to_have_value(drafter)
    set_number(page, "max-new", max_new)
    if gamma is not None:
        set_number(page, "gamma", gamma)
        expect(page.locator("#gamma input[type=number]").first).to_have_value(str(gamma))
    old = page.locator("#summary .sv-summary").get_attribute("data-run") or ""
    page.click("#generate")
    expect(page.locator("#generate")).to_be_disabled(timeout=10_000)  # no second run while this one streams
    expect(page.locator("#stop")).to_be_enabled()
    page.wait_for_selector(f'{DONE}:not([data-run="{old}"])', timeout=RUN_TIMEOUT_MS)
    expect(page.locator("#generate")).to_be_enabled(timeout=15_000)
    expect(page.locator("#stop")).to_be_disabled()


def skip_tour(page) -> None:
    page.wait_for_selector('#tour .sv-tour[data-step="1"], #tour .sv-tour[data-step="2"]', timeout=60_000)
    page.click("#tour-skip")
    page.wait_for_selector(
        '#tour .sv-tour[data-done="1"]:has-text("Now try your own prompt")', timeout=30_000
    )


def test_tour_plays_without_a_click_and_can_be_skipped(browser, app_url, shot):
    """On page load the recorded run plays with numbered captions and no click; Skip hands over at once;
    the tour replays from its button by keyboard."""
    page = open_page(browser, app_url, tour=True)
    page.wait_for_selector('#tour .sv-tour[data-step="3"]', timeout=60_000)  # it advanced on its own
    # what is on screen (a tour frame covers the page's own view, hidden beneath it)
    assert (
        page.locator("#stream .tok:visible").count() > 0
        and page.locator("#verify .vf-row:visible").count() == 4
    )
    page.screenshot(path=shot("tour.png"))
    page.click("#tour-skip")
    page.wait_for_selector(
        '#tour .sv-tour[data-done="1"]:has-text("Now try your own prompt")', timeout=30_000
    )
    page.wait_for_timeout(6000)  # a skipped tour stays skipped: no caption comes back
    assert page.locator('#tour .sv-tour[data-done="1"]').count() == 1
    rounds = int(page.locator("#stream .specviz-stream").get_attribute("data-rounds"))
    assert rounds > 2  # the whole recorded run is left to explore
    page.focus("#tour-replay")
    page.keyboard.press("Enter")
    page.wait_for_selector('#tour .sv-tour[data-step="1"]', timeout=30_000)
    page.focus("#tour-skip")
    page.keyboard.press("Enter")
    page.wait_for_selector('#tour .sv-tour[data-done="1"]', timeout=30_000)
    page.close()


def test_verify_view_shows_bars_for_each_drafted_position(browser, app_url, shot):
    """Clicking a token selects its round: the verify view shows a q and a p bar and a verdict per drafted
    position, and where the round stopped; Generate was disabled while the run streamed."""
    page = open_page(browser, app_url)
    run_example(page, 32)
    token = page.locator("#stream .tok-accepted").nth(6)
    r = token.get_attribute("data-round")
    token.click()
    view = page.locator(f'#verify .specviz-verify[data-round="{r}"]')
    expect(view).to_have_count(1, timeout=15_000)
    n = int(view.get_attribute("data-positions"))
    assert n >= 1 and view.locator(".vf-row").count() == n
    assert view.locator(".vf-row .vf-q").count() == n and view.locator(".vf-row .vf-p").count() == n
    assert view.locator(".vf-why").inner_text().strip()
    page.mouse.move(5, 5)
    page.locator("#verify").screenshot(path=shot("verify.png"))
    page.close()


TREE_FONTS = """() => {  /* the font size of every element of the tree that holds text of its own */
  const sizes = [];
  for (const el of document.querySelectorAll('#tree .specviz-tree *')) {
    if (![...el.childNodes].some(n => n.nodeType === 3 && n.textContent.trim())) continue;
    if (el.getClientRects().length === 0) continue;  /* closed <details> */
    sizes.push(parseFloat(getComputedStyle(el).fontSize));
  }
  return sizes;
}"""


def open_tree(page) -> None:
    page.get_by_role("tab", name="Tree").click()
    page.wait_for_selector("#tree svg.tree-svg g.node", timeout=30_000)


def test_tree_is_an_svg_readable_at_gamma_16(browser, app_url, shot):
    """At γ = 16 each round is an SVG laid out by position whose smallest text is at least 12 px (measured with
    getComputedStyle, labels included); the accepted path is marked on nodes and edges; nodes have p / q
    tooltips; the zoom buttons enlarge the tree and never shrink it below its own size."""
    page = open_page(browser, app_url)
    run_example(page, 40, gamma=16)
    open_tree(page)
    sizes = page.evaluate(TREE_FONTS)
    widest = page.evaluate(
        "Math.max(...[...document.querySelectorAll('#tree .tree-round')].map(r => r.querySelectorAll('g.node').length))"
    )
    assert widest >= 10 and sizes and min(sizes) >= 12, (widest, min(sizes))
    assert page.locator("#tree g.node.on-path.node-accepted").count() > 0
    assert page.locator("#tree path.edge.on-path").count() > 0
    assert (
        page.locator("#tree g.node[data-tip] rect").count() == page.locator("#tree g.node[data-tip]").count()
    )
    node = page.locator("#tree g.node-accepted").first
    node.hover()
    expect(page.locator("#specviz-tipbox")).to_be_visible()
    assert "target p" in page.locator("#specviz-tipbox").inner_text()
    page.mouse.move(5, 5)
    page.locator("#tree").screenshot(path=shot("tree-gamma16.png"))
    svg = page.locator("#tree svg.tree-svg").last
    width = svg.bounding_box()["width"]
    page.click('#tree [data-tree-zoom="in"]')  # zoom: the tree grows, and stays grown across re-renders
    assert svg.bounding_box()["width"] > 1.2 * width
    page.click('#tree [data-tree-zoom="out"]')
    page.click('#tree [data-tree-zoom="out"]')  # never below 1
    assert abs(svg.bounding_box()["width"] - width) < 1
    page.close()


def test_tree_at_the_largest_budget_on_a_phone(browser, app_url):
    """γ = 16 with a 64-node tree of branching 8 (the sliders' maxima), at 390 px: every tree text is at least
    12 px, the tree rounds are SVGs with their accepted path, and nothing is wider than the screen."""
    page = open_page(browser, app_url, width=390, height=844)
    page.locator("#tree-controls").get_by_text("Tree speculation", exact=True).click()
    set_number(page, "tree-budget", 64)
    set_number(page, "tree-branching", 8)
    expect(page.locator("#tree-budget input[type=number]").first).to_have_value("64")
    # a model drafter: every round a tree (n-gram's trie is a chain here)
    run_example(page, 24, gamma=16, drafter="self")
    open_tree(page)
    page.wait_for_selector("#tree .tree-branches svg.tree-svg", timeout=30_000)  # may land after the summary
    assert page.locator("#tree .tree-branches g.node.on-path").count() > 0
    sizes = page.evaluate(TREE_FONTS)
    assert sizes and min(sizes) >= 12, min(sizes)
    assert (
        max(
            int(n)
            for n in page.locator("#tree .tree-branches").evaluate_all("rs => rs.map(r => r.dataset.nodes)")
        )
        > 32
    )
    result = page.evaluate(WIDER)
    assert result["scroll"] <= result["w"] and not result["bad"], result
    page.close()


def test_linked_hover_between_stream_tree_and_charts(browser, app_url):
    """Hovering a stream token marks its round in the tree and draws a band at that round on the charts whose
    x axis is the round; hovering a round's bar marks it in the stream; hovering a tree node marks the round's
    tokens in the stream; the tree's arrow keys do the same from the keyboard. Uses the tour's recorded run
    (no model)."""
    page = open_page(browser, app_url, tour=True)
    skip_tour(page)
    page.get_by_role("tab", name="Charts").click()
    page.wait_for_function("document.querySelectorAll('.js-plotly-plot .legend').length >= 2", timeout=30_000)
    token = page.locator("#stream .tok-accepted").nth(5)
    r = token.get_attribute("data-round")
    token.hover()
    expect(page.locator(f'.js-plotly-plot .sv-chart-mark[data-round="{r}"]')).to_have_count(2)  # length and α
    expect(page.locator(f'#stream .sv-round[data-round="{r}"].is-linked')).to_have_count(1)
    page.mouse.move(5, 5)
    expect(page.locator(".sv-chart-mark")).to_have_count(0)
    page.locator(".js-plotly-plot .bars path").nth(2).hover(force=True)  # a round's bar links back
    expect(page.locator("#stream .sv-round.is-linked")).to_have_count(1)
    page.mouse.move(5, 5)
    open_tree(page)
    token.hover()
    linked = page.locator(f'#tree .tree-round[data-round="{r}"].is-linked')
    expect(linked).to_have_count(1)
    panel, box = page.locator("#tree .specviz-tree").bounding_box(), linked.bounding_box()
    # scrolled into view
    assert box["y"] < panel["y"] + panel["height"] and box["y"] + box["height"] > panel["y"]
    page.mouse.move(5, 5)
    other = page.locator("#tree g.node-accepted[data-round]").first
    other.scroll_into_view_if_needed()
    r2 = other.get_attribute("data-round")
    other.hover()
    expect(page.locator(f'#stream .sv-round[data-round="{r2}"].is-linked')).to_have_count(1)
    expect(page.locator("#stream .sv-round.is-linked")).to_have_count(1)
    page.mouse.move(5, 5)
    page.focus("#tree .specviz-tree")
    page.keyboard.press("ArrowRight")
    active = page.locator("#tree g.node.is-active")
    expect(active).to_have_count(1)
    expect(
        page.locator(f'#stream .sv-round[data-round="{active.get_attribute("data-round")}"].is-linked')
    ).to_have_count(1)
    page.close()


WIDER = """() => {
  const w = document.documentElement.clientWidth, bad = [];
  const clipped = el => { for (let a = el.parentElement; a; a = a.parentElement) {
      const o = getComputedStyle(a).overflowX; if (o === 'auto' || o === 'scroll' || o === 'hidden') return true; }
    return false; };
  for (const el of document.querySelectorAll('body *')) {
    const r = el.getBoundingClientRect();
    if (r.width === 0 || getComputedStyle(el).visibility === 'hidden') continue;
    if ((r.right > w + 1 || (r.left < -1 && r.right > 0)) && !clipped(el))  /* plotly measures text in an svg parked off-screen */ bad.push(el.tagName + '.' + el.className + ' ' + Math.round(r.left) + '..' + Math.round(r.right));
  }
  return {w, scroll: document.documentElement.scrollWidth, bad: bad.slice(0, 8)};
}"""


def test_phone_width_puts_the_prompt_first_and_nothing_overflows(browser, app_url):
    """At 390 px the prompt and Generate come before the controls, and no element is wider than the viewport
    (outside a scrolling panel), on every tab, with the tour's run on screen."""
    page = open_page(browser, app_url, tour=True, width=390, height=844)
    skip_tour(page)
    assert (
        page_top(page.locator("#prompt"))
        < page_top(page.locator("#generate"))
        < page_top(page.get_by_label("Drafter", exact=True))
    )
    for tab in ("Verify", "Tree", "Charts", "Race", "Explain"):
        open_tab(page, tab)  # narrow screens fold the later tabs into gradio's overflow menu
        page.wait_for_timeout(800)
        result = page.evaluate(WIDER)
        assert result["scroll"] <= result["w"] and not result["bad"], (tab, result)
    page.close()


LUMA = """(c) => { const m = c.match(/[\\d.]+/g).map(Number); return (0.2126 * m[0] + 0.7152 * m[1] + 0.0722 * m[2]) / 255; }"""
CHART_COLORS = """() => {
  const plot = document.querySelector('.js-plotly-plot');
  let bg = 'rgb(255, 255, 255)';
  for (let a = plot; a; a = a.parentElement) {
    const c = getComputedStyle(a).backgroundColor;
    if (c && c !== 'transparent' && !c.startsWith('rgba(0, 0, 0, 0)')) { bg = c; break; }
  }
  const paper = plot.querySelector('.main-svg').style.background || getComputedStyle(plot.querySelector('.main-svg')).backgroundColor;
  const text = getComputedStyle(plot.querySelector('.xtitle, .gtitle')).fill;
  const box = s => { const e = plot.querySelector(s); return e ? e.getBoundingClientRect().toJSON() : null; };
  return {bg, paper, text, legend: box('.legend'), xtitle: box('.xtitle')};
}"""


def test_dark_mode_charts_are_dark_and_legends_clear_the_axis_titles(browser, app_url):
    """In dark mode a chart shows the page's dark background with light text; its legend does not overlap the
    x-axis title."""
    page = open_page(browser, app_url, tour=True, theme="dark")
    skip_tour(page)
    page.get_by_role("tab", name="Charts").click()
    page.wait_for_function("document.querySelectorAll('.js-plotly-plot .legend').length >= 2", timeout=30_000)
    colors = page.evaluate(CHART_COLORS)
    luma = lambda c: page.evaluate(LUMA, c)  # noqa: E731
    assert luma(colors["bg"]) < 0.3 and luma(colors["text"]) > 0.6, colors
    assert "255, 255, 255" not in colors["paper"], colors
    lg, xt = colors["legend"], colors["xtitle"]
    assert lg and xt and (lg["top"] >= xt["bottom"] or lg["bottom"] <= xt["top"]), colors
    page.close()


def test_one_bad_upload_shows_one_error(browser, app_url, tmp_path):
    """A bad trace is one message, once, and no red Error pill over the other panels."""
    page = open_page(browser, app_url)
    bad = tmp_path / "bad.json"
    bad.write_text('{"format": "something else"}', encoding="utf-8")
    page.locator("#trace-upload input[type=file]").set_input_files(str(bad))
    expect(page.get_by_text("not a specviz trace", exact=False).first).to_be_visible(timeout=15_000)
    page.wait_for_timeout(1500)
    assert page.get_by_text("not a specviz trace", exact=False).count() == 1
    assert page.get_by_text("Error", exact=True).count() == 0
    page.close()
