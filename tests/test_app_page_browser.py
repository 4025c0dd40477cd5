"""What the page says adds up, and the first minute and the phone hold (Playwright + Debian's Chromium against
`python app.py`, the server shared with the other browser modules):
- the numbers agree: every figure of the summary line and Explain recomputes from the inputs printed beside it,
  for a chain, a heuristic-γ, an auto and a tree run (tests/numbers.py; a wrong figure planted in the page fails);
- a tree run's Verify view agrees with the tree's node counts, and nothing predicts it with a chain's E;
- Explain's what-if sliders redraw in the browser at once;
- the tour shows its prompt, its frames differ step to step, each caption's element is in view, it ends on the race;
- at 390 px: the tour caption is readable, nothing is clipped, tap targets meet WCAG 2.2; text contrast ≥ 4.5:1;
- keyboard: the prompt within the first 5 Tab stops, dropdown menus close on Tab, focus on the output after
  Generate.
SPECVIZ_SCREENSHOT=1 writes the README's screenshots (assets/tour-*.png, assets/phone.png, assets/explain-gamma16.png).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from tests.app_server import ROOT, open_derivation, open_tab, page_top, playwright_or_skip, set_number
from tests.numbers import check_explain, check_page, check_race

sync_api = playwright_or_skip()
expect = sync_api.expect
RUN_TIMEOUT_MS = 150_000
DONE = '#summary .sv-summary[data-done="1"]'
COPY = (
    "Copy this text exactly:\n\nThe honeybee is one of the most important pollinators in the world. Bees visit "
    "flowers to collect nectar and pollen, which they use as food for the colony."
)


def shot(tmp_path, name: str) -> str:
    folder = ROOT / "assets" if os.environ.get("SPECVIZ_SCREENSHOT") == "1" else tmp_path
    return str(Path(folder) / name)


def open_page(browser, url, tour=False, width=1440, height=900, speed=1):
    """A page; `speed` > 1 plays the tour that much faster (?tour_speed), for checks that time no step."""
    page = browser.new_page(viewport={"width": width, "height": height})
    page.goto(url + ("?tour=0" if not tour else f"?tour_speed={speed}" if speed != 1 else ""))
    page.wait_for_selector("#prompt textarea")
    return page


def choose(page, label: str, option: str) -> None:
    page.get_by_label(label, exact=True).click()
    page.get_by_role("option", name=option, exact=True).click()
    expect(page.get_by_label(label, exact=True)).to_have_value(option)


def run(page, prompt: str, drafter: str, max_new: int = 40, race: bool = True) -> None:
    page.fill("#prompt textarea", prompt)
    choose(page, "Drafter", drafter)
    set_number(page, "max-new", max_new)
    box = page.get_by_label("Race against autoregressive", exact=False)
    box.set_checked(race)
    old = page.locator("#summary .sv-summary").get_attribute("data-run") or ""
    page.click("#generate")
    page.wait_for_selector(f'{DONE}:not([data-run="{old}"])', timeout=RUN_TIMEOUT_MS)
    if race:
        page.wait_for_selector("#summary .sv-speedup", timeout=RUN_TIMEOUT_MS)
    expect(page.locator("#generate")).to_be_enabled(timeout=15_000)


def page_numbers(page) -> tuple[str, str]:
    page.get_by_role("tab", name="Explain").click()
    open_derivation(page)
    expect(page.locator("#explain .sv-why")).to_be_visible()
    return page.locator("#summary").inner_text(), page.locator("#explain").inner_text()


@pytest.fixture(scope="module")
def page(browser, app_url):
    p = open_page(browser, app_url)
    yield p
    p.close()


@pytest.mark.parametrize("setup", ["chain", "gamma16", "heuristic", "auto"])
def test_the_numbers_agree(page, setup, tmp_path):
    """Each figure the summary line, Explain (the what-if line and the roofline included) and the Race tab show
    for this run reproduces from the figures beside it, at γ = 16 too."""
    if setup == "heuristic":
        choose(page, "Adaptive γ", "heuristic")
    if setup == "gamma16":
        set_number(page, "gamma", 16)
    try:
        run(page, COPY, "auto" if setup == "auto" else "ngram")
    finally:
        if setup == "heuristic":
            choose(page, "Adaptive γ", "fixed")
        if setup == "gamma16":
            set_number(page, "gamma", 4)
    summary, explain = page_numbers(page)
    if setup == "gamma16":  # the README's gallery: Explain at γ = 16 (SPECVIZ_SCREENSHOT=1)
        page.locator("#explain .sv-why").screenshot(path=shot(tmp_path, "explain-gamma16.png"))
    page.get_by_role("tab", name="Race").click()
    raced = page.locator("#race").inner_text()
    assert "speedup" in raced and check_race(raced) == [], raced
    if setup == "auto" and "does not model it" in explain:  # auto verified a recycling tree in some round: no
        # chain prediction, what it prints adds up
        assert check_page(summary, explain) == [], (summary, explain)
        pytest.skip("auto chose token recycling's tree this time: the chain arithmetic is not on the page")
    assert "One round at γ" in explain and "Σ E =" in explain, explain[:2000]
    assert check_page(summary, explain) == [], (summary, explain)
    # the negative control: one displayed figure made wrong in the page itself is caught
    page.evaluate("""() => { const root = document.querySelector('#explain');
      const walk = document.createTreeWalker(root, NodeFilter.SHOW_TEXT);
      for (let n = walk.nextNode(); n; n = walk.nextNode()) {
        const m = n.textContent.match(/Σ E = ([\\d.]+)/);
        if (m) { n.textContent = n.textContent.replace(m[0], 'Σ E = ' + (parseFloat(m[1]) + 1).toFixed(2)); return; } } }""")
    assert check_page(summary, page.locator("#explain").inner_text())


def test_a_tree_run_is_accounted_as_a_tree(page):
    """Tree speculation: the Verify view's node counts equal the Tree tab's for the same round; the forward
    size is the tree's; no chain prediction appears anywhere."""
    page.locator("#tree-controls").click()  # the accordion
    set_number(page, "tree-budget", 16)
    set_number(page, "tree-branching", 3)
    try:
        run(page, "Write a short story about a fox.", "eagle", max_new=24, race=False)
    finally:
        set_number(page, "tree-budget", 0)
    page.get_by_role("tab", name="Tree").click()
    page.wait_for_selector("#tree .tree-round[data-round]", timeout=30_000)
    rounds = page.evaluate("""() => [...document.querySelectorAll('#tree .tree-round[data-round]')]
        .filter(r => r.querySelectorAll('g.node').length >= 3).map(r => r.dataset.round)""")
    assert rounds, "no round drafted a tree of 3 or more nodes"
    checked = 0
    for r in rounds[:3]:
        tree_round = page.locator(f'#tree .tree-round[data-round="{r}"]')
        counts = {
            k: tree_round.locator(f"g.node.node-{k}").count() for k in ("accepted", "rejected", "unvisited")
        }
        page.evaluate("(r) => window.specviz.select(r)", r)
        page.get_by_role("tab", name="Verify").click()
        view = page.locator(f'#verify .specviz-verify[data-round="{r}"]')
        expect(view).to_have_count(1, timeout=15_000)
        if view.get_attribute("data-nodes") is None:
            page.get_by_role("tab", name="Tree").click()
            continue  # a chain round (the drafter found one continuation only)
        shown = {k: int(view.get_attribute(f"data-tree-{k}")) for k in ("accepted", "rejected", "unvisited")}
        assert shown == counts, (r, shown, counts)
        assert int(view.get_attribute("data-nodes")) == sum(counts.values())
        checked += 1
        page.get_by_role("tab", name="Tree").click()
    assert checked >= 1
    summary, explain = page_numbers(page)
    assert "predicted" not in summary and "does not model it" in explain
    assert check_page(summary, explain) == []  # what a tree run does print (α from its counts) still adds up
    assert re.search(r"verify forward over the most common size, (\d+) positions", explain)


def test_the_what_if_sliders_redraw_in_the_browser(page):
    """Explain's α slider redraws the curve and its sentence at once (no server round-trip: the request count
    does not move); the first drawing is the cost model's prediction for this run's α, c and γ; the weights'
    choice redraws it on fp32's v(n), and back."""
    run(page, COPY, "ngram", race=False)
    page.get_by_role("tab", name="Explain").click()
    panel = page.locator("#explain .sv-whatif[data-drawn]")
    expect(panel).to_have_count(1, timeout=15_000)
    first = float(panel.locator(".wf-out").get_attribute("data-speedup"))
    assert first == pytest.approx(float(panel.get_attribute("data-run-pred")), abs=0.01)
    requests = []
    page.on("request", lambda req: requests.append(req.url))
    panel.locator('input[name="alpha"]').fill("0.2")  # a range input: fill sets the value and fires input
    after = float(panel.locator(".wf-out").get_attribute("data-speedup"))
    line = panel.locator(".wf-out").inner_text()
    assert after < first and "α = 0.200" in line
    assert check_explain(line) == [] and "At α = 0.200" in line  # the moved line follows the same rule
    # and a wrong one is caught
    assert check_explain(line.replace(f"→ {after:.2f}×", f"→ {after + 0.01:.2f}×"))
    # the app runs on the embedded GGUF's blocks: the same weights on fp32 redraw the curve on their v(n), one
    # each verify size flat below the ridge, so the same α and γ predict more
    panel.locator('select[name="weights"]').select_option("fp32")
    on_fp32 = float(panel.locator(".wf-out").get_attribute("data-speedup"))
    line = panel.locator(".wf-out").inner_text()
    assert "on fp32 weights" in line and check_explain(line) == [] and on_fp32 >= after, (line, after)
    assert panel.locator(".wf-run").count() == 0  # the run's own point belongs to its own weights
    panel.locator('select[name="weights"]').select_option("run")
    assert float(panel.locator(".wf-out").get_attribute("data-speedup")) == after
    assert not [u for u in requests if "/gradio_api/" in u]


def test_the_tour_builds_the_round_and_ends_in_the_race(browser, app_url, tmp_path):
    """The tour's prompt is in the box; the frames of ①..⑤ differ; each caption's element is outlined and in
    view; the last caption is the race, with its measured speedup on the Race tab."""
    page = open_page(browser, app_url, tour=True, speed=2)  # each step ≥ 2 s: its checks take ~0.6 s
    frames = []
    for step in range(1, 8):
        page.wait_for_selector(f'#tour .sv-tour[data-step="{step}"]', timeout=60_000)
        page.wait_for_timeout(500)
        focus = page.locator("#tour .sv-tour").get_attribute("data-focus")
        marked = page.locator(".sv-tour-focus")
        expect(marked.first).to_be_visible(timeout=5_000)
        box, height = marked.first.bounding_box(), page.viewport_size["height"]
        assert box["y"] < height and box["y"] + min(box["height"], 60) > 0, (step, focus, box)
        if step <= 5:
            frames.append((page.locator("#stream").inner_html(), page.locator("#verify").inner_html()))
        if step in (2, 3, 7):
            page.screenshot(path=shot(tmp_path, f"tour-{step}.png"))
    assert page.locator("#prompt textarea").input_value().startswith("Copy this text exactly")
    assert all(a != b for a, b in zip(frames, frames[1:])), (
        "a tour step showed the same frame as the one before"
    )
    assert "as fast" in page.locator("#tour").inner_text()
    expect(page.locator("#race .race-speedup")).to_be_visible()
    page.close()


TAPS = """() => {
  const small = [], sizes = {};
  /* height under 4 px: Gradio's invisible copies of the tab buttons it measures overflow with */
  const seen = el => { const r = el.getBoundingClientRect(); return r.width > 0 && r.height >= 4 && r.bottom > 0; };
  for (const el of document.querySelectorAll('button, input[type=checkbox], #stream .tok')) {
    if (!seen(el) || el.closest('.js-plotly-plot, .sv-legend')) continue;
    const r = el.getBoundingClientRect();
    const need = (el.id === 'generate' || el.id === 'stop') ? 44 : 24;
    if (r.height < need - 0.5) small.push([el.id || el.className || el.tagName, Math.round(r.height), need]);
  }
  return small;
}"""
CLIPPED = """() => {
  const w = document.documentElement.clientWidth, out = [];
  for (const el of document.querySelectorAll('.race-verdict, .race-verdict *, #tour .sv-tour, #summary .sv-summary')) {
    const r = el.getBoundingClientRect();
    if (r.width && r.right > w + 1) out.push([el.className, Math.round(r.right), w]);
  }
  return out;
}"""
CAPTION_CHARS = """() => { const t = document.querySelector('#tour .sv-tour-text');
  const c = document.createElement('canvas').getContext('2d'); c.font = getComputedStyle(t).font;
  return t.getBoundingClientRect().width / (c.measureText('abcdefghijklmnopqrstuvwxyz ').width / 27); }"""


def test_the_phone_layout_holds(browser, app_url, tmp_path):
    """At 390 × 844: the tour caption is at least 20 characters wide; no verdict or caption runs off the right
    edge; Generate and Stop are ≥ 44 px tall, every other button, checkbox and token ≥ 24 px; drafter and γ come
    before the result tabs."""
    page = open_page(browser, app_url, tour=True, width=390, height=844)
    page.wait_for_selector('#tour .sv-tour[data-step="2"]', timeout=60_000)
    assert page.evaluate(CAPTION_CHARS) >= 20
    page.screenshot(path=shot(tmp_path, "phone.png"), full_page=False)
    page.click("#tour-skip")
    page.wait_for_selector('#tour .sv-tour[data-done="1"]', timeout=30_000)
    assert page_top(page.get_by_label("Drafter", exact=True)) < page_top(
        page.locator("#tab-verify-button, button[role=tab]").first
    )
    assert page_top(page.locator("#gamma")) < page_top(page.locator("button[role=tab]").first)
    assert page.evaluate(TAPS) == []
    open_tab(page, "Race")
    page.wait_for_timeout(800)
    assert page.evaluate(CLIPPED) == []
    page.close()


CONTRAST = """(sel) => {
  const lum = c => { const v = c.match(/[\\d.]+/g).slice(0, 3).map(Number).map(x => x / 255)
                      .map(x => x <= 0.03928 ? x / 12.92 : Math.pow((x + 0.055) / 1.055, 2.4));
                      return 0.2126 * v[0] + 0.7152 * v[1] + 0.0722 * v[2]; };
  const el = document.querySelector(sel);
  let bg = 'rgb(255, 255, 255)';
  for (let a = el; a; a = a.parentElement) {
    const c = getComputedStyle(a).backgroundColor;
    if (c && !c.startsWith('rgba(0, 0, 0, 0)') && c !== 'transparent') { bg = c; break; }
  }
  const [hi, lo] = [lum(getComputedStyle(el).color), lum(bg)].sort((a, b) => b - a);
  return (hi + 0.05) / (lo + 0.05);
}"""


@pytest.mark.parametrize("theme", ["light", "dark"])
def test_text_contrast_is_at_least_4_5(browser, app_url, theme):
    """The page's one-line description and 'What each example shows' read at ≥ 4.5:1, light and dark."""
    page = browser.new_page(viewport={"width": 1440, "height": 900})
    page.goto(app_url + f"?tour=0&__theme={theme}")
    page.wait_for_selector("#prompt textarea")
    for sel in (".sv-header p", "#expect summary"):
        page.wait_for_selector(sel)  # rendered after the prompt box at times: measure it once it is there
        assert page.evaluate(CONTRAST, sel) >= 4.5, sel
    page.close()


def test_keyboard_prompt_first_menus_close_and_focus_follows_generate(browser, app_url):
    """The prompt is among the first 5 Tab stops; tabbing through the page leaves no dropdown menu open; after
    Generate the focus is on the output, not lost to <body>."""
    page = open_page(browser, app_url)
    page.locator("body").click(position={"x": 5, "y": 5})
    stops = []
    for _ in range(5):
        page.keyboard.press("Tab")
        stops.append(
            page.evaluate(
                "() => document.activeElement.closest('#prompt') ? 'prompt' : document.activeElement.tagName"
            )
        )
    assert "prompt" in stops, stops
    for _ in range(25):
        page.keyboard.press("Tab")
        page.wait_for_timeout(60)
    open_menus, focused_open = settled(
        page,
        lambda: (
            page.locator("ul.options:visible, [role=listbox]:visible").count(),
            page.evaluate("() => document.activeElement.getAttribute('aria-expanded') === 'true'"),
        ),
        lambda state: state[0] == int(state[1]),
    )
    assert open_menus == int(focused_open), (open_menus, focused_open)  # only the focused dropdown's, if any
    page.fill("#prompt textarea", "Say hi.")
    set_number(page, "max-new", 4)
    old = page.locator("#summary .sv-summary").get_attribute("data-run") or ""  # the opening run's
    page.click("#generate")
    page.wait_for_selector(f'{DONE}:not([data-run="{old}"])', timeout=RUN_TIMEOUT_MS)
    in_stream = settled(
        page, lambda: page.evaluate("() => !!document.activeElement.closest('#stream')"), bool
    )
    assert in_stream, page.evaluate("() => document.activeElement.outerHTML.slice(0, 120)")
    page.close()


def settled(page, read, done, seconds: float = 10.0):
    """read() polled every 100 ms until done(it) or `seconds` pass, then its last value: a busy machine closes a
    menu or moves the focus a few hundred ms late (a fixed 300 ms wait failed under load), and a menu that never
    closes, or focus that never arrives, still fails once the time is up."""
    value = read()
    for _ in range(int(seconds * 10)):
        if done(value):
            break
        page.wait_for_timeout(100)
        value = read()
    return value


def test_choosing_a_token_brings_its_verify_view_into_view(browser, app_url):
    """Clicking a token on the Tree tab's neighbour (the stream) opens the Verify tab with that round, scrolled
    into the viewport; scrolling the token away closes its tooltip instead of leaving it over other controls."""
    page = open_page(browser, app_url, height=700)
    run(page, COPY, "ngram", race=False)
    page.get_by_role("tab", name="Tree").click()
    token = page.locator("#stream .tok-accepted").nth(4)
    r = token.get_attribute("data-round")
    token.click()
    view = page.locator(f'#verify .specviz-verify[data-round="{r}"]')
    expect(view).to_be_visible(timeout=15_000)
    page.wait_for_timeout(600)
    box = view.bounding_box()
    assert box["y"] < page.viewport_size["height"] and box["y"] + box["height"] > 0
    token_seen = page.evaluate(
        "() => { const r = document.querySelectorAll('#stream .tok-accepted')[4]"
        ".getBoundingClientRect(); return r.bottom > 0 && r.top < innerHeight; }"
    )
    # pinned while its token shows, else closed
    assert page.locator(".specviz-tipbox").is_visible() == token_seen
    page.mouse.wheel(0, 3000)
    page.wait_for_timeout(600)
    gone = page.evaluate(
        "() => { const r = document.querySelectorAll('#stream .tok-accepted')[4]"
        ".getBoundingClientRect(); return r.bottom < 0 || r.top > innerHeight; }"
    )
    assert gone  # the page scrolled the token away ...
    expect(page.locator(".specviz-tipbox")).to_be_hidden()  # ... and its tooltip went with it
    page.close()


def test_a_trace_uploaded_during_the_tour_replays_itself(browser, app_url, tmp_path):
    """Loading a trace while the tour plays stops the tour first: the trace's own run stays on screen, its
    prompt in the box (a tour frame used to land after it, 1 time in ~5)."""
    from engine import write_trace
    from specviz.demo_trace import sample_events

    trace = tmp_path / "t.json"
    write_trace(trace, sample_events())
    for _ in range(3):
        page = open_page(browser, app_url, tour=True, speed=4)  # no step over 2.5 s
        page.wait_for_selector('#tour .sv-tour[data-step="2"]', timeout=60_000)
        page.locator("#trace-upload input[type=file]").set_input_files(str(trace))
        expect(page.locator("#summary .sv-summary")).to_contain_text("target-test", timeout=15_000)
        page.wait_for_timeout(3000)  # longer than any tour step
        assert "target-test" in page.locator("#summary").inner_text()
        assert page.locator("#prompt textarea").input_value() == "Hi"
        page.close()


def test_the_spec_bench_tab_shows_the_leaderboard_and_races_a_question(browser, app_url):
    """The Spec-Bench tab renders the committed table (a row per contestant, its caption with the command and
    the CPU); choosing a question puts its first turn in the prompt box, turns the race on and names its
    category."""
    import json

    from ui.specbench import RESULTS, RUNS, questions

    page = open_page(browser, app_url)
    page.get_by_role("tab", name="Spec-Bench").click()
    boards = page.locator("#leaderboard .specviz-leaderboard")
    expect(boards.first).to_be_visible(timeout=15_000)
    runs = [json.loads(p.read_text()) for p in RUNS if p.exists()]
    assert boards.count() == len(runs) >= 1 and RUNS[0] == RESULTS  # one table per committed run
    for board, results in zip(boards.all(), runs):
        rows = results["leaderboard"]
        assert int(board.get_attribute("data-rows")) == len(rows) == board.locator("tbody tr").count()
        assert "python -m benchmarks specbench" in board.inner_text()
    label = next(lbl for lbl, q in questions().items() if q["group"] == "rag")
    box = page.get_by_label("Race a Spec-Bench question", exact=True)
    box.click()
    qid = questions()[label]["question_id"]
    box.press_sequentially(f"#{qid} ·", delay=20)  # the dropdown filters its 480 choices as keys are typed
    page.get_by_role("option").filter(has_text=f"#{qid} ·").first.click()
    page.click("#sb-use")
    expect(page.locator("#sb-note")).to_contain_text("category rag", timeout=15_000)
    assert page.locator("#prompt textarea").input_value() == questions()[label]["turns"][0]
    assert page.get_by_label("Race against autoregressive", exact=False).is_checked()
    page.close()


def test_compact_mode_folds_long_rejected_tails(page):
    """At γ = 16 a rejected draft can drag up to 15 struck-through tokens into the text: the compact box hides the
    discarded ones (their count shows as "+N" after the rejected draft) and keeps every committed token; off again,
    they are back."""
    set_number(page, "gamma", 16)
    try:
        run(page, "Write a short story about a fox who learns to fly.", "ngram", max_new=48, race=False)
    finally:
        set_number(page, "gamma", 4)
    stream = page.locator("#stream .specviz-stream")
    visible = "els => els.filter(e => e.getClientRects().length).length"
    discarded, committed = stream.locator(".tok-discarded"), stream.locator(".tok:not(.tok-rejected)")
    n_committed = committed.evaluate_all(visible)
    if discarded.count() == 0:
        pytest.skip("no round rejected a draft with drafts after it this time")
    assert discarded.evaluate_all(visible) == discarded.count()
    page.locator("#compact input").check()
    expect(page.locator("#stream.sv-compact")).to_have_count(1)
    assert discarded.evaluate_all(visible) == 0 and committed.evaluate_all(visible) == n_committed
    plus = page.evaluate("""() => [...document.querySelectorAll('#stream .sv-tail')].map(
        t => getComputedStyle(t, '::after').content)""")
    assert plus and all(re.fullmatch(r'"\+\d+"', p) for p in plus), plus
    page.locator("#compact input").uncheck()
    expect(page.locator("#stream.sv-compact")).to_have_count(0)
    assert discarded.evaluate_all(visible) == discarded.count()


SLIDERS_OUT = """() => [...document.querySelectorAll('input[type=range]')].filter(i => i.getClientRects().length)
  .flatMap(i => { const box = i.closest('.block').getBoundingClientRect(), r = i.getBoundingClientRect();
    const fold = i.closest('.gr-accordion'), f = fold ? fold.getBoundingClientRect() : box;
    const inside = b => r.left >= b.left && r.right <= b.right;
    return inside(box) && inside(f) ? [] : [i.closest('.block').innerText.split('\\n')[0]]; })"""


def test_the_settings_column_holds_its_controls(browser, app_url):
    """At 1440 × 900 and 1024 × 768, Sampling and Tree speculation open: every slider's track lies inside its own box
    and its accordion (top-p's spilled out of the Sampling box, the tree's two by a few pixels); the "Load a trace"
    label does not cover the drop zone's upload icon (it floated over it)."""
    for width, height in ((1440, 900), (1024, 768)):
        page = open_page(browser, app_url, width=width, height=height)
        for fold in ("Sampling", "Tree speculation"):
            page.get_by_text(fold, exact=True).click()
        expect(page.get_by_role("slider", name="range slider for top-p")).to_be_visible()
        expect(page.locator("#tree-branching input[type=range]")).to_be_visible()
        page.wait_for_timeout(300)  # the accordions' opening
        spilled = page.evaluate(SLIDERS_OUT)
        label = page.locator('#trace-upload > label[data-testid="block-label"]').bounding_box()
        icon = page.locator('#trace-upload [data-testid="upload-icon"]').bounding_box()
        overlap_x = min(label["x"] + label["width"], icon["x"] + icon["width"]) - max(label["x"], icon["x"])
        overlap_y = min(label["y"] + label["height"], icon["y"] + icon["height"]) - max(label["y"], icon["y"])
        covered = overlap_x > 0 and overlap_y > 0
        assert (spilled, covered) == ([], False), (width, spilled, label, icon)
        page.close()


def test_bold_text_is_drawn_in_one_font(browser, app_url):
    """ "AR" read "Aʀ" and "GB" "Gʙ" on the race line: Gradio's weight-600 face holds a few glyphs (A, B, the space)
    and the rest came from another font, letter by letter. The race line's bold spans and the Generate button are
    each drawn in one font, with no small caps."""
    page = open_page(browser, app_url)
    page.get_by_role("tab", name="Race", exact=True).click()
    expect(page.locator("#race .race-speedup")).to_be_visible()
    page.evaluate("document.fonts.ready.then(() => true)")
    page.wait_for_timeout(300)
    cdp = page.context.new_cdp_session(page)
    root = cdp.send("DOM.getDocument", {"depth": 0})["root"]["nodeId"]
    cdp.send("CSS.enable")
    for sel in ("#race .race-speedup", "#race .race-threads", "#race .race-roofline", "#generate"):
        if page.locator(sel).count() == 0:
            continue
        node = cdp.send("DOM.querySelector", {"nodeId": root, "selector": sel})["nodeId"]
        fonts = {f["familyName"] for f in cdp.send("CSS.getPlatformFontsForNode", {"nodeId": node})["fonts"]}
        assert len(fonts) == 1, (sel, fonts)
        assert page.locator(sel).evaluate("e => getComputedStyle(e).fontVariantCaps") == "normal"
    assert page.locator("#race .race-roofline").count() == 1  # the recorded run's line with "AR" and "GB"
    page.close()


def test_numbers_out_of_range_are_answered_by_name(browser, app_url):
    """γ 0 typed in its box ran as γ 1 silently; -3 in "n / L / W / k" got Gradio's "Value -3 is less than minimum
    value 0." (or nothing); beam search under auto named no control; the drift button failed at T 0 with a toast
    only. Now γ 0 is answered as its box is left, -3 when Generate is pressed, each naming the setting and its range;
    the Beam search tab and the drift button say what they need beforehand."""
    page = open_page(browser, app_url)
    box = page.locator("#gamma input[type=number]")
    box.fill("0")
    box.press("Tab")
    expect(page.get_by_text("γ (draft tokens per round) must be from 1 to 16, got 0")).to_be_visible(
        timeout=30_000
    )
    expect(box).to_have_value("1")  # Gradio's clamp, now said
    param = page.get_by_label("n / L / W / k (0 = default)", exact=True)
    param.fill("-3")
    param.press("Tab")
    page.click("#generate")
    expect(
        page.get_by_text(
            "n / L / W / k (0 = default) must be 0 (ngram's default) or a whole number from 1 to 8"
        )
    ).to_be_visible(timeout=RUN_TIMEOUT_MS)
    page.get_by_role("tab", name="Explain", exact=True).click()
    expect(page.locator("#drift-measure")).to_contain_text("at Temperature > 0")
    page.get_by_role("tab", name="Beam search", exact=True).click()
    expect(page.get_by_text("beam search drafts with ngram or self", exact=False)).to_be_visible()
    page.close()
