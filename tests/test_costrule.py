"""The one rule for a run's measured costs (engine/costrule.py) and the figures that read it: a busy run and a run
with an impossible v(n) are predicted from the host's quiet calibration, saying so in the same sentence; a quiet,
possible run keeps its own costs (the negative control)."""

from __future__ import annotations

import copy
import json
import re

import pytest

from engine import costrule
from specviz.charts import speedup_model_fig
from specviz.explain import render_explain, whatif_panel
from specviz.runs import spec_summary, usable_summary
from tests.numbers import check_explain
from ui.tour import TOUR_TRACE

TOUR = json.loads(TOUR_TRACE.read_text(encoding="utf-8"))["events"]
HOST = {
    **TOUR[0]["host"],
    "calibration": {"v": {"1": 1.0, "2": 1.0, "3": 1.02, "4": 1.09, "6": 1.14, "8": 1.3, "17": 2.5}},
}


def run(load: float = 0.0, squeeze_gamma: int | None = None, plan: bool = True) -> list[dict]:
    """The tour's recorded run (raced, quiet), its lanes' load watch set to `load`, the verify time of its rounds
    at γ = squeeze_gamma made 10 ms (under a target step: impossible), the host's kernel-plan calibration kept."""
    events = copy.deepcopy(TOUR)
    for e in events:
        if e["kind"] == "run_started" and plan:
            e["host"] = copy.deepcopy(HOST)
        if e["kind"] == "finished":
            e["summary"].update(contended_share=load, outside_cores=2 * load)
        if e["kind"] == "round_timed" and e["gamma"] == squeeze_gamma:
            e["total_s"] = e["draft_s"] + 0.01
    return events


def short(html: str) -> str:
    """Explain's text in view before the derivation is opened: the opening sentences and the what-if."""
    return re.sub(r"<[^>]+>", "", html.split('<details class="sv-derivation"')[0])


def test_a_quiet_possible_run_keeps_its_own_costs():
    """The negative control: nothing refuses the recorded quiet run; every figure is its own."""
    s = spec_summary(run())
    assert costrule.impossible(s) == [] and costrule.busy(s) == []
    u = costrule.usable(s)
    assert u["costs"]["source"] == "run" and u["v"] == s["v"] and costrule.sentence(u) == ""
    text = short(render_explain(run()))
    assert "quiet calibration" not in text and "times a plain target step" in text


@pytest.mark.parametrize(
    "why, events",
    [("measured under load", run(load=0.6)), ("v(3) = ", run(squeeze_gamma=2))],
    ids=["busy", "impossible"],
)
def test_a_refused_run_is_predicted_on_the_quiet_calibration_and_says_why(why, events):
    """Busy (the load watch saw 60% of a lane contended) or impossible (v(3) below one step): Explain's opening
    sentences, the what-if and Charts' best γ all use the host's kernel-plan calibration and say which and why;
    the race's measured speedup stays, as an observation; every printed figure still reproduces."""
    u = usable_summary(events)
    assert u["costs"]["source"] == "calibration"
    assert dict(u["v_points"])[5] == pytest.approx(1.14)  # the plan's 6-row bucket: what a 5-row call runs
    text = short(render_explain(events))
    opening = text.split("What if?")[0]
    assert (
        "This run's own costs are not used (" in opening
        and "using the quiet calibration of the host it ran on" in opening
    )
    assert "times a plain target step" not in opening  # the run's own round ÷ step ratio is gone
    assert "The race against plain decoding measured 2.37×" in opening
    assert "quiet calibration of v(n)" in whatif_panel(
        u
    ) and "This run's own costs are not used" in whatif_panel(u)
    title = speedup_model_fig(events).layout.title.text.replace("<br>", " ")
    assert "quiet calibration" in title and why in title
    assert check_explain(re.sub(r"<[^>]+>", "", render_explain(events))) == []


def test_an_impossible_v_feeds_no_figure():
    """v(3) measured at 0.21 target steps is printed nowhere a figure is derived (the opening, the what-if, the
    charts, the derivation's sums); only the reason quotes it, and the roofline shows it as measured."""
    events = run(squeeze_gamma=2)
    raw = dict(spec_summary(events)["v_points"])[3]
    said = f"{raw:.2f}"
    html = render_explain(events)
    sums = re.sub(r"<[^>]+>", "", html).split("The roofline below")[0]
    reason = f"v(3) = {said}: 3 positions verified in less than one target step"
    assert reason in sums and sums.count(said) == sums.count(reason), sums  # only where it says why
    whatif = whatif_panel(usable_summary(events))
    assert whatif.count(said) == whatif.count(reason) == 1


def test_without_a_recorded_calibration_the_roofline_stands_in_and_says_it_is_a_bound():
    """An older trace (no kernel-plan calibration in its host record) falls back to the roofline's floors, named as
    an upper bound on the speedup."""
    u = usable_summary(run(load=0.6, plan=False))
    assert u["costs"]["from"] == costrule.ROOFLINE and "upper bound" in costrule.sentence(u)


def test_without_any_calibration_no_figure_is_derived():
    """A refused run whose host recorded nothing to calibrate with gets no prediction at all, and says so."""
    events = run(load=0.6, plan=False)
    events[0]["host"] = {}
    u = usable_summary(events)
    assert u["costs"]["source"] == "none" and u["predicted_speedup"] is None
    assert "no figure is derived from its timings" in costrule.sentence(u)
    assert "no figure is derived" in speedup_model_fig(events).layout.annotations[0].text.replace("<br>", " ")


def test_a_falling_verify_curve_is_impossible():
    """t(n) must not fall as n grows: v(4) well below v(3) is refused, v within NOISE of the one before is not."""
    assert costrule.impossible({"c": 0.1, "v_points": [[3, 2.14], [4, 1.40]]})
    assert costrule.impossible({"c": 0.1, "v_points": [[3, 1.50], [4, 1.45]]}) == []
    assert costrule.impossible({"c": -0.01, "v_points": []})


def test_the_verify_view_of_a_plain_round_says_plain_and_shows_no_other_round():
    """A token of round 1 (a plain target step in the tour's run) opened the latest earlier drafted round, or
    round 2: the view now says round 1 drafted nothing and links the nearest drafted round; a drafted round still
    shows itself (the control)."""
    from specviz.verify import render_verify

    events = run()
    plain = render_verify(events, 1)
    text = re.sub(r"<[^>]+>", " ", plain)
    assert "Round 1 was a plain target step: nothing was drafted" in text
    assert (
        'data-select-round="2"' in plain and "vf-row" not in plain and "Round 2" not in text.split("Show")[0]
    )
    assert 'data-round="2"' in render_verify(events, 2) and "vf-row" in render_verify(events, 2)
    assert "is not in this run" in render_verify(events, 99)


def test_a_solo_run_is_load_watched_and_a_contended_one_is_refused(tiny_dirs, monkeypatch):
    """Engine.watched (the app's solo Generate) puts the load watch's reading in the run's Finished summary, so the
    rule sees a busy solo run as it sees a busy race (the OS's busy CPU forced to `cores` more than the wall time);
    the control: the same run with no outside load is not flagged contended."""
    import time

    from engine import Engine, GenerationConfig, load_model
    from engine.runtime import loadwatch

    engine = Engine(load_model(tiny_dirs["target"]), "ngram")
    cfg = GenerationConfig(gamma=3, max_new_tokens=24, raw=True)
    prompt = "1 2 3 4 1 2 3 4 1 2 3 4 1 2"
    outside = {"cores": 0.0}
    # the machine's busy CPU seconds: this run's own plus `cores` other cores all along
    monkeypatch.setattr(
        loadwatch, "busy_s", lambda: time.thread_time() + outside["cores"] * time.perf_counter()
    )
    monkeypatch.setattr(loadwatch, "WINDOW_S", 0.001)  # a tiny model's run is shorter than a real window
    for cores, refused in ((5.0, True), (0.0, False)):
        outside["cores"] = cores
        events = [e for _, e in engine.watched(prompt, cfg)]
        s = spec_summary(events)
        assert isinstance(events[-1].summary.get("contended_share"), float)
        said = any("other processes wanted" in f for f in s["timing_flags"])
        assert said == refused, (cores, s["timing_flags"])
        if refused:
            assert "measured while other processes wanted more CPU" in " ".join(costrule.busy(s))


def test_the_kernel_plan_gives_the_calibration_and_a_trace_keeps_it():
    """plan_calibration sums each projection's planned kernel's time per row count over its time at 1 row; a host
    record with it passes the trace validator, a negative v is refused by name."""
    from engine.events import trace_from_json
    from engine.runtime.roofline import plan_calibration

    def trace_to_json(events):
        return json.dumps({**json.loads(TOUR_TRACE.read_text(encoding="utf-8")), "events": events})

    class Forward:
        plans = {
            1: {
                "qkv": {
                    1: {"mkl": 1.0, "onednn": 2.0, "kernel": "mkl"},
                    4: {"mkl": 1.5, "onednn": 1.2, "kernel": "onednn"},
                },
                "o": {1: {"mkl": 1.0, "kernel": "mkl"}, 4: {"mkl": 1.8, "kernel": "mkl"}},
            }
        }

    assert plan_calibration(Forward(), 1) == {"v": {"1": 1.0, "4": 1.5}}  # (1.2 + 1.8) ÷ (1.0 + 1.0)
    assert plan_calibration(Forward(), 2) == {} and plan_calibration(object(), 1) == {}
    # a take at 6 rows cheaper than at 4: the load slowed the 4-row one (each is a best), which reads as 6 rows
    Forward.plans[1]["o"][6] = {"mkl": 1.0, "kernel": "mkl"}
    Forward.plans[1]["qkv"][6] = {"mkl": 1.5, "kernel": "mkl"}
    assert plan_calibration(Forward(), 1) == {"v": {"1": 1.0, "4": 1.25, "6": 1.25}}  # (1.5 + 1.0) ÷ 2
    events = run()
    assert trace_from_json(trace_to_json(events))[0].host["calibration"] == HOST["calibration"]
    events[0]["host"]["calibration"] = {"v": {"2": -1.0}}
    with pytest.raises(ValueError, match="run_started.host.calibration"):
        trace_from_json(trace_to_json(events))


def test_a_block_runs_what_if_offers_the_same_weights_on_fp32_at_the_rooflines_floors():
    """On a run on a GGUF's blocks the what-if offers the weights' format: fp32's v(k) is max(memory, compute floor)
    at k ÷ at 1 from the roofline's inputs (the fp32 bytes, the run's context), each value in the page; its sentence
    quotes them; an fp32 run, or a block run's record without the fp32 size, offers no choice."""
    from engine import costmodel
    from specviz.explain import WHATIF_GAMMA

    events = run()
    host = events[0]["host"]
    host.update(weights="gguf", weight_bytes_fp32=host["weight_bytes"], weight_bytes=97.3e6)
    html = render_explain(events)
    assert html.count('<select name="weights"') == 1
    alt = json.loads(re.search(r"data-v-fp32='([^']+)'", html)[1])
    s = usable_summary(events)
    r = {**costmodel.roof(host), "weight_bytes": host["weight_bytes_fp32"]}
    step = [max(costmodel.floors(k, s["bandwidth"]["context"], r)) for k in range(WHATIF_GAMMA + 2)]
    assert alt == [None] + [round(step[k] / step[1], 4) for k in range(1, WHATIF_GAMMA + 2)]
    assert 1.0 == alt[1] <= alt[2] <= alt[WHATIF_GAMMA + 1]
    n = s["v_n"]
    said = re.search(rf"v\({n}\) = ([0-9.]+) at the roofline's floors", html)
    assert said and float(said[1]) == pytest.approx(alt[n], abs=0.005)
    fp32 = run()
    assert 'name="weights"' not in render_explain(fp32)
    del host["weight_bytes_fp32"]
    assert 'name="weights"' not in render_explain(events)
