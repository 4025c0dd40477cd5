"""The one cost model: every panel shows the same α, E and prediction; impossible timings are flagged."""

import json

import pytest

from benchmarks.bench_stats import AR, aggregate, summarize_prompt
from benchmarks.timing import Sample
from engine import costmodel
from engine.metrics import summarize
from specviz import render_explain, render_race, speedup_model_fig
from specviz.demo_trace import ar_events, sample_events, speculative_events
from specviz.runs import split_runs
from ui import app_views as av


class Cfg:
    """A speculative bench config as the harness's statistics read it."""

    name, runner, gamma, drafter, label = "ours/x", "ours", 3, "x", "x"


class ArCfg:
    name, runner, gamma, drafter, label = AR, "ours", 0, "", "AR"


def test_alpha_counts_only_tested_positions():
    """α = accepted / (accepted + rejections): untested positions after a rejection are not failures."""
    assert costmodel.alpha(5, 2) == pytest.approx(5 / 7)
    assert costmodel.alpha(0, 0) is None
    assert costmodel.expected_tokens(1.0, 4) == 5.0
    assert costmodel.expected_tokens(0.5, 2) == pytest.approx(1.75)


def test_maths_is_float_and_bounded():
    """A hostile α or γ (e.g. from a trace) is computed in floats, never as an exact big-integer power
    (an int (-3) ** (3e7 + 1) held the GIL for seconds): int inputs give float results, α is clamped."""
    e = costmodel.expected_tokens(-3, 3 * 10**7)
    s = costmodel.predicted_speedup(-3, 10**9, 0.1, 1.5)
    assert type(e) is float and type(s) is float
    assert e == 1.0 and s >= 0
    assert type(costmodel.expected_tokens(1, 3)) is float and costmodel.expected_tokens(2, 3) == 4.0
    assert costmodel.predicted_speedup(0.5, 3, 0.0, 0.0) is None  # c = v = 0: no division by zero


def test_one_trace_one_set_of_numbers():
    """The summary line, Explain, the speedup chart, the race and the bench statistics show the same α, E
    and prediction for one trace (they all call the cost model)."""
    events = sample_events()
    s = summarize(split_runs(events)["speculative"], split_runs(events)["ar"])
    alpha, E, pred, measured = s["alpha"], s["expected_tokens"], s["predicted_speedup"], s["speedup"]
    assert alpha == pytest.approx(5 / 7) and pred is not None and measured is not None

    summary = av.summary_html(events)
    assert f"α = {alpha:.2f} per token" in summary and f"predicted {pred:.2f}×" in summary
    assert f"{measured:.2f}× vs autoregressive" in summary
    explain = render_explain(events)
    assert (
        f"α = {alpha:.3f}" in explain
        and f"{E:.2f} on average over this run's rounds" in explain
        and f"predicted {pred:.2f}×" in explain
    )
    fig = speedup_model_fig(events)
    assert "α=5/7" in fig.data[0].name and fig.data[1].y[0] == pytest.approx(pred)
    assert f"predicted {pred:.2f}×" in render_race(events)

    # the bench harness summarises the same run through the same functions
    spec_s = summarize(split_runs(events)["speculative"])  # no AR lane: t(1) from the probe, as in the bench
    sample = Sample(list(range(9)), s["wall_s"], spec_s, [3, 3, 3], [2, 2, 1])
    ar = Sample(list(range(9)), s["ar_wall_s"], summarize(split_runs(events)["ar"]))
    row = summarize_prompt({"ours/x": [sample], AR: [ar]}, [Cfg, ArCfg])["ours/x"]
    overall = aggregate([{"ours/x": row, AR: summarize_prompt({AR: [ar]}, [ArCfg])[AR]}], [Cfg, ArCfg])[
        "ours/x"
    ]
    assert overall["alpha"] == pytest.approx(alpha)
    assert overall["predicted_speedup"] == pytest.approx(spec_s["predicted_speedup"])


def test_bench_prediction_covers_every_run_or_none():
    """A prompt's or a config's predicted speedup pools Σ E / Σ cost over all its runs; when one run has no
    prediction (tree rounds), none is printed, never one pooled over the other runs beside a speedup measured
    over all of them (auto's recycling trees once showed 1.95× predicted next to 1.13× measured)."""

    def run(tokens, steps):
        summary = {
            "alpha": 0.5,
            "c": 0.05,
            "v": 1.2,
            "drafted": 6,
            "accepted": 3,
            "rejections": 2,
            "rounds": 4,
            "model_tokens": tokens,
            "model_steps": steps,
            "predicted_speedup": None if tokens is None else tokens / steps,
        }
        return Sample(list(range(8)), 0.1, summary, [2, 2, 2], [2, 1, 0])

    ar = Sample(list(range(8)), 0.1, {})
    ar_row = summarize_prompt({AR: [ar]}, [ArCfg])[AR]

    def overall(prompts):
        rows = [
            dict(summarize_prompt({"ours/x": runs, AR: [ar] * len(runs)}, [Cfg, ArCfg]), **{AR: ar_row})
            for runs in prompts
        ]
        return rows, aggregate(rows, [Cfg, ArCfg])["ours/x"]

    rows, pooled = overall([[run(8.0, 4.0), run(6.0, 4.0)], [run(5.0, 5.0)]])
    assert rows[0]["ours/x"]["model_tokens"] == 14.0 and pooled["predicted_speedup"] == pytest.approx(19 / 13)
    rows, pooled = overall([[run(8.0, 4.0), run(None, None)], [run(5.0, 5.0)]])
    assert rows[0]["ours/x"]["predicted_speedup"] is None and rows[0]["ours/x"]["model_tokens"] is None
    assert rows[1]["ours/x"]["predicted_speedup"] == pytest.approx(1.0)
    assert pooled["predicted_speedup"] is None and pooled["alpha"] is not None


def test_api_summary_is_the_same_summary():
    """The /generate API's JSON carries the cost model's numbers, including the race's once finished."""
    text, data = av.api_result(sample_events())
    data = json.loads(data)
    s = summarize(split_runs(sample_events())["speculative"], split_runs(sample_events())["ar"])
    assert data["alpha"] == pytest.approx(s["alpha"]) and data["speedup"] == pytest.approx(s["speedup"])
    assert data["timing_reliable"] is True and data["timing_flags"] == []


def _run(rounds, step=0.04):
    """(γ, draft_s, round_s) rounds through the cost model with t(1) = step."""
    return costmodel.costs(rounds, step, "test", [step] * 8)


def test_impossible_verify_cost_is_flagged():
    """A verify of 5 tokens measured at a tenth of a step cannot be right: flagged, not trusted."""
    out = _run([(4, 0.001, 0.005)] * 6)
    assert out["v"] == pytest.approx(0.1) and any("less than one step" in f for f in out["timing_flags"])
    assert not _run([(4, 0.001, 0.061)] * 6)["timing_flags"]  # v = 1.5: plausible
    assert any("far above" in f for f in _run([(1, 0.0, 0.4)] * 6)["timing_flags"])  # v(2) = 10


def test_drift_and_busy_lanes_are_flagged():
    """A step time that moves by more than 30% during a run, or two lanes that disagree, are flagged."""
    steady = costmodel.costs([(4, 0.001, 0.061)] * 6, 0.04, "ar", [0.04] * 10)
    assert not steady["timing_flags"]
    moved = costmodel.costs([(4, 0.001, 0.061)] * 6, 0.04, "ar", [0.04] * 5 + [0.07] * 5)
    assert any("moved" in f for f in moved["timing_flags"])
    bursty = costmodel.costs([(4, 0.001, 0.061)] * 6, 0.04, "ar", [0.04, 0.09] * 5)  # a load on and off
    assert any("varied by" in f for f in bursty["timing_flags"])
    assert costmodel.compare_lanes(0.04, 0.041) == []
    assert costmodel.compare_lanes(0.04, 0.1)


def test_flagged_timing_is_not_plotted_as_truth():
    """A race whose AR lane was slowed mid-run: the summary, Explain and chart all say so, and predict on the host's
    quiet calibration (engine.costrule), not on the disturbed times."""
    spec = speculative_events()
    ar = ar_events()
    slow = []  # the AR lane's second half at 3x the step time (an outside load)
    elapsed = 0.02
    for e in ar:
        if e.kind == "round_timed":
            total = e.total_s * (3 if e.round > 4 else 1)
            elapsed += total
            e = type(e)(**{**e.__dict__, "total_s": total, "elapsed_s": round(elapsed, 3)})
        slow.append(e)
    events = spec + slow
    s = summarize(split_runs(events)["speculative"], split_runs(events)["ar"])
    assert s["timing_flags"] and s["timing_reliable"] is False
    assert costmodel.BUSY in av.summary_html(events)
    assert "× on its host's quiet calibration)" in av.summary_html(events)
    explain = render_explain(events)
    assert costmodel.BUSY in explain and "This run's own costs are not used (v(4) = 0.50" in explain
    assert "on its host's quiet calibration" in render_race(events)
    fig = speedup_model_fig(events)
    title = fig.layout.title.text.replace("<br>", " ")
    assert "quiet calibration" in title and "v(4) = 0.50 is impossible" in title


def test_no_provisional_speedup_while_racing():
    """While the AR lane runs, no speedup or verdict is shown: only each lane's progress against the target."""
    spec, ar = speculative_events(), ar_events()
    partial = spec + ar[:7]  # AR lane: 3 of 9 tokens, not finished
    s = summarize(split_runs(partial)["speculative"], split_runs(partial)["ar"])
    assert s["speedup"] is None and s["race_done"] is False
    summary = av.summary_html(partial)
    assert "vs autoregressive" not in summary and "autoregressive 3/9 tokens" in summary
    race = render_race(partial)
    assert "data-speedup" not in race and "verdict appears when both lanes have finished" in race
    assert 'data-mode="ar" data-tokens="3" data-goal="9"' in race  # the bar is against the token target
