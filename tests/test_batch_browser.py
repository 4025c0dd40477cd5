"""The Batch tab in a real browser (Playwright + Debian's Chromium against `python app.py`)."""

from __future__ import annotations

from tests.app_server import playwright_or_skip

playwright_or_skip()  # the `browser` fixture (conftest.py) drives it


def test_browser_batch_tab_renders_b_lanes_and_the_throughput_chart(app_url, browser):
    """Three prompts make a batch of B = 3: three lanes of colour-coded tokens (with their p on hover), the race
    verdict against the AR batch, and the measured throughput-against-B chart with its curves; a batch of 17 lines
    is refused with the range named and the lanes stay."""
    page = browser.new_page(viewport={"width": 1440, "height": 1000})
    page.goto(app_url + "?tour=0")
    page.wait_for_selector("#prompt textarea")
    box = page.locator("#max-new input[type=number]").first
    box.fill("10")
    box.press("Tab")
    page.get_by_role("tab", name="Batch").click()
    page.wait_for_selector("#batch-run")
    page.fill(
        "#batch-prompts textarea",
        "Copy this: the cat sat on the mat.\nList 1 to 9.\nWrite a haiku about rain.",
    )
    page.click("#batch-run")
    page.wait_for_selector("#batch-summary .batch-verdict", timeout=180_000)
    state = page.evaluate("""() => ({
        lanes: document.querySelectorAll('#batch-lanes .batch-lane').length,
        rows: +document.querySelector('#batch-lanes .batch-lanes').dataset.rows,
        tokens: document.querySelectorAll('#batch-lanes .batch-lane .tok').length,
        tips: document.querySelectorAll('#batch-lanes .batch-lane [data-tip]').length,
        verdict: document.querySelector('#batch-summary .batch-verdict').textContent,
        curves: document.querySelectorAll('#batch-throughput .scatterlayer .trace').length,
        xtitle: (document.querySelector('#batch-throughput .xtitle') || {}).textContent || ''})""")
    assert state["lanes"] == 3 and state["rows"] == 3, state
    assert state["tokens"] >= 3 and state["tips"] >= 3, state
    assert "3 of 3 rows token-identical to AR" in state["verdict"], state
    assert state["curves"] >= 4 and "batch size B" in state["xtitle"], state
    page.fill("#batch-prompts textarea", "\n".join(f"prompt {i}" for i in range(17)))
    page.click("#batch-run")
    page.wait_for_selector("text=write 1 to 16 prompts", timeout=30_000)
    assert page.locator("#batch-lanes .batch-lane").count() == 3  # the last batch stays
    page.close()


CURVE_SPAN = """() => {
  const plot = document.querySelector('#batch-throughput .js-plotly-plot');
  const area = plot.querySelector('.draglayer .xy .nsewdrag').getBoundingClientRect();  // the plot area
  const lines = [...plot.querySelectorAll('.scatterlayer .trace path.js-line')].map(p => p.getBoundingClientRect())
    .filter(r => r.width > 0);
  return {area: [area.left, area.width], curves: lines.length, left: Math.min(...lines.map(r => r.left)),
          right: Math.max(...lines.map(r => r.right))};
}"""


def test_browser_batch_throughput_curves_span_the_plot(app_url, browser):
    """The measured throughput-against-B curves fill most of the chart's width (their drawn paths' pixel x): an
    annotation placed at x = B on the log axis once stretched it to 10^16 and squashed every curve into its
    left 5%."""
    page = browser.new_page(viewport={"width": 1440, "height": 900})
    page.goto(app_url + "?tour=0")
    page.get_by_role("tab", name="Batch").click()
    page.wait_for_selector("#batch-throughput .scatterlayer .trace path.js-line")
    span = page.evaluate(CURVE_SPAN)
    (left, width), covered = span["area"], span["right"] - span["left"]
    assert span["curves"] >= 4, span
    assert covered >= 0.6 * width and span["left"] < left + 0.2 * width, span
    page.close()


def test_browser_measure_on_this_host_draws_this_hosts_curve_named_by_its_cpu(app_url, browser):
    """The chart's title names the CPU the committed curves were measured on, not "this machine"; Measure on this
    host adds this host's own curves (AR and the drafter, B = 1 to 16), its CPU named in the title and the note."""
    from engine.runtime.kernels import cpu_name
    from ui import batch_tab as ub

    page = browser.new_page(viewport={"width": 1440, "height": 1000})
    page.goto(app_url + "?tour=0")
    page.wait_for_selector("#prompt textarea")
    box = page.locator("#max-new input[type=number]").first
    box.fill("6")
    box.press("Tab")
    page.get_by_role("tab", name="Batch").click()
    page.wait_for_selector("#batch-throughput .gtitle")
    title = page.locator("#batch-throughput .gtitle").text_content()
    assert ub.results()["cpu"] in title and "this machine" not in title, title
    assert f"This host: {cpu_name()}" in page.locator("#batch-note").text_content()
    page.click("#batch-measure")
    page.wait_for_selector("#batch-note .batch-host[data-cpu]", timeout=180_000)
    page.wait_for_function(
        "() => document.querySelector('#batch-note .batch-host').textContent.includes('B = 1, 2, 4, 8, 16')",
        timeout=180_000,
    )
    title = page.locator("#batch-throughput .gtitle").text_content()
    names = page.locator("#batch-throughput .legendtext").all_text_contents()
    assert f"this host, {cpu_name()}" in title and ub.results()["cpu"] in title, title
    assert "AR, this host" in names and "ngram γ=4, this host" in names, names
    page.close()
