"""The one rule for measured costs on the page (Playwright + Debian's Chromium against `python app.py`, the server
shared with the other browser modules): a recorded run replayed with its load watch forced busy, then with an
impossible v(n) injected, opens Explain, the what-if and Charts' best γ on the host's quiet calibration and says so;
the same run as recorded (quiet) keeps its own costs."""

from __future__ import annotations

import json
import re

import pytest

from tests.app_server import playwright_or_skip
from tests.numbers import check_explain
from tests.test_costrule import TOUR_TRACE, run

sync_api = playwright_or_skip()
expect = sync_api.expect


@pytest.fixture(scope="module")
def page(browser, app_url):
    p = browser.new_page(viewport={"width": 1440, "height": 900})
    p.goto(app_url + "?tour=0")
    p.wait_for_selector("#prompt textarea")
    yield p
    p.close()


def replay(page, tmp_path, name: str, events: list) -> tuple[str, str]:
    """Upload `events` as a trace; (Explain's text in view, Charts' speedup-model title) once it has replayed."""
    trace = json.loads(TOUR_TRACE.read_text(encoding="utf-8"))
    for e in events:  # its own run id: the page shows when this replay has replaced the last one
        if e["kind"] == "run_started":
            e["run_id"] = f"costrule-{name}"
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps({**trace, "events": events}), encoding="utf-8")
    page.get_by_role("tab", name="Charts").click()
    page.locator("#trace-upload input[type=file]").set_input_files(str(path))
    page.wait_for_selector(f'#summary .sv-summary[data-run="costrule-{name}"][data-done="1"]', timeout=30_000)
    title = page.locator(".js-plotly-plot .gtitle", has_text="Predicted speedup")
    expect(title).to_have_count(1, timeout=15_000)
    page.get_by_role("tab", name="Explain").click()
    expect(page.locator("#explain .sv-short")).to_be_visible()
    lines = (
        "e => Array.from(e.querySelectorAll('tspan.line')).map(t => t.textContent).join(' ') || e.textContent"
    )
    return page.locator("#explain").inner_text(), title.evaluate(lines)


@pytest.mark.parametrize(
    "case, events, why",
    [
        ("quiet", run(), None),
        (
            "busy",
            run(load=0.6),
            "measured while other processes wanted more CPU than the race left free for 60%",
        ),
        ("impossible", run(squeeze_gamma=2), "3 positions verified in less than one target step"),
    ],
)
def test_a_busy_or_impossible_run_is_explained_on_the_quiet_calibration(page, tmp_path, case, events, why):
    """Busy (the load watch forced: 60% of a lane contended) or impossible (v(3) = 0.21 injected): Explain's opening
    sentences, the what-if and Charts' best γ use the quiet calibration and say why; the recorded quiet run, the
    negative control, uses its own costs. Every printed figure reproduces either way."""
    explain, title = replay(page, tmp_path, case, events)
    opening = explain.split("What if?")[0]
    whatif = explain.split("What if?")[1].split("The derivation")[0]
    if why is None:
        assert "quiet calibration" not in explain + title and "times a plain target step" in opening
        assert "this run's measured v(n)" in whatif
    else:
        assert "This run's own costs are not used" in opening and why in opening
        assert "using the quiet calibration of the host it ran on" in opening
        assert "quiet calibration of v(n)" in whatif and why in whatif
        assert "quiet calibration" in title and "best γ=" in title
        assert "measured 2.37×" in opening  # the race's observation stays
    if case == "impossible":
        said = re.findall(r"0\.21", opening + whatif + title)  # only where a reason quotes it
        reasons = (opening + whatif).count("v(3) = 0.21: 3 positions") + title.count(
            "v(3) = 0.21 is impossible"
        )
        assert len(said) == reasons, (opening, whatif, title)
    assert check_explain(explain) == [], explain[:3000]
