"""A transformers trace on the page (Playwright + Debian's Chromium against `python app.py`, the server shared with
the other browser modules): Race and Explain show the recorder's measured plain vs speculative times, labelled with
the engine; no sentence names a pointer rollback; the "not seen" caveat reads at ≥ 4.5:1, light and dark."""

from __future__ import annotations

import re

import pytest

from engine.events import write_trace
from engine.recorders import hf
from tests.app_server import playwright_or_skip
from tests.test_app_page_browser import CONTRAST

sync_api = playwright_or_skip()
expect = sync_api.expect


@pytest.fixture(scope="module")
def trace(tiny_dirs, tmp_path_factory):
    """A transformers run recorded with its plain run beside it (hf.run), on the tiny target."""
    out = hf.run(
        tiny_dirs["target"], "prompt-lookup", "1 2 3 4 1 2 3 4 1 2 3 4", gamma=3, max_new_tokens=12, raw=True
    )
    path = tmp_path_factory.mktemp("hf") / "hf.trace.json"
    write_trace(str(path), out["events"])
    return path, out


@pytest.mark.parametrize("theme", ["light", "dark"])
def test_a_transformers_trace_shows_its_measured_comparison(browser, app_url, trace, theme):
    """Race and Explain print "transformers measured by its recorder … plain decoding X s, this speculative run Y s";
    no "pointer" and no "turn on the race" anywhere; the caveat's contrast is at least 4.5:1 in this theme."""
    path, out = trace
    page = browser.new_page(viewport={"width": 1440, "height": 900})
    page.goto(app_url + f"?tour=0&__theme={theme}")
    page.wait_for_selector("#prompt textarea")
    page.locator("#trace-upload input[type=file]").set_input_files(str(path))
    run_id = out["events"][0].run_id
    page.wait_for_selector(f'#summary .sv-summary[data-run="{run_id}"][data-done="1"]', timeout=30_000)
    said = re.compile(r"plain decoding [\d.]+ s, this speculative run [\d.]+ s, so [\d.]+ ÷ [\d.]+ = [\d.]+×")
    page.get_by_role("tab", name="Race").click()
    race = page.locator("#race").inner_text()
    assert "transformers measured by its recorder" in race and said.search(race), race
    page.get_by_role("tab", name="Explain").click()
    expect(page.locator("#explain .sv-short")).to_be_visible()
    explain = page.locator("#explain").inner_text()
    assert "transformers measured by its recorder" in explain.split("What if?")[0], explain[:2000]
    for text in (race, explain):
        assert "pointer" not in text and "turn on the race" not in text and "Run both" not in text
    note = "#explain .sv-engine .sv-note"
    expect(page.locator(note)).to_contain_text("not seen")
    assert page.evaluate(CONTRAST, note) >= 4.5, theme
    page.close()
