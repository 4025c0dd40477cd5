"""Plotly figures on hand-built event lists: trace counts and values equal what the events imply."""

import pytest

from engine.costmodel import expected_tokens, predicted_speedup
from specviz import (
    accepted_length_fig,
    position_acceptance_fig,
    running_acceptance_fig,
    speedup_model_fig,
    throughput_fig,
)
from specviz.demo_trace import ar_events, sample_events, speculative_events

FIGS = (
    accepted_length_fig,
    position_acceptance_fig,
    running_acceptance_fig,
    throughput_fig,
    speedup_model_fig,
)


def test_accepted_length_stacks_origins_per_round():
    """Bars per round split by origin; totals are the tokens each round committed."""
    fig = accepted_length_fig(sample_events())
    bars = {t.name: list(t.y) for t in fig.data}
    assert bars == {
        "accepted": [2, 3, 0, 0],
        "corrected": [1, 0, 1, 0],
        "bonus": [0, 1, 0, 0],
        "ar": [0, 0, 0, 1],
    }
    assert list(fig.data[0].x) == [1, 2, 3, 4]
    assert "mean 2.25" in fig.layout.title.text


def test_position_acceptance_is_accepted_over_drafted():
    """Position i's rate counts rounds whose i-th draft was accepted; beside it the model's α^i."""
    fig = position_acceptance_fig(sample_events())
    assert len(fig.data) == 2
    assert list(fig.data[0].y) == pytest.approx([2 / 3, 2 / 3, 1 / 3])
    # α = 5 accepted / 7 tested
    assert list(fig.data[1].y) == pytest.approx([(5 / 7) ** i for i in (1, 2, 3)])


def test_running_acceptance_after_each_round():
    """Running α = accepted so far / (accepted + rejections) so far: the cost model's per-token α."""
    fig = running_acceptance_fig(sample_events())
    assert len(fig.data) == 2
    assert list(fig.data[1].x) == [1, 2, 3]
    assert list(fig.data[1].y) == pytest.approx([2 / 3, 5 / 6, 5 / 7])


def test_throughput_has_both_runs_on_their_clocks():
    """Cumulative tokens vs elapsed_s for the speculative and the AR run."""
    fig = throughput_fig(sample_events())
    assert [t.name for t in fig.data] == ["speculative", "autoregressive"]
    assert list(fig.data[0].x) == [0.0, 0.086, 0.152, 0.218, 0.258]
    assert list(fig.data[0].y) == [0, 3, 7, 8, 9]
    assert list(fig.data[1].y) == list(range(10))
    assert len(throughput_fig(speculative_events()).data) == 1


def test_speedup_model_curve_and_points():
    """Curve E/(γc+v(γ+1)) for γ = 1..16 from the run's α, c and measured v, plus predicted and measured points."""
    fig = speedup_model_fig(sample_events())
    curve, predicted, measured = fig.data
    alpha, c, v4 = 5 / 7, 0.05, 1.5  # 5 accepted of 7 tested; draft 6 ms per token, verify 60 ms, step 40 ms
    assert list(curve.x) == list(range(1, 17))
    assert curve.y[2] == pytest.approx(predicted_speedup(alpha, 3, c, v4))  # γ = 3: v measured at n = 4
    assert all(y <= expected_tokens(alpha, g) / (g * c + 1) for g, y in zip(curve.x, curve.y))  # v(n) >= 1
    # rounds γ = 3, 3, 3 and one plain step
    run = (3 * expected_tokens(alpha, 3) + 1) / (3 * (3 * c + v4) + 1)
    assert list(predicted.y) == pytest.approx([run])
    assert list(measured.y) == pytest.approx([0.38 / 0.26]) and list(measured.x) == [3]
    assert any(s.y0 == 1.0 and s.y1 == 1.0 for s in fig.layout.shapes)
    assert len(speedup_model_fig(speculative_events()).data) == 2  # no AR run: no measured point


def test_figures_are_small_and_keep_zoom():
    """Every figure is compact, transparent (it takes the light or dark page's background), keeps its legend in
    the bottom margin (below the x-axis title) and has a constant uirevision."""
    from specviz.charts import HEIGHT

    for make in FIGS:
        fig = make(sample_events())
        assert fig.layout.height == HEIGHT <= 300 and fig.layout.uirevision == "specviz"
        assert fig.layout.paper_bgcolor == fig.layout.plot_bgcolor == "rgba(0,0,0,0)"
        assert (
            fig.layout.legend.yref == "container" and fig.layout.legend.y == 0 and fig.layout.margin.b >= 80
        )


def test_figures_degrade_to_a_note():
    """Missing or partial data gives an empty figure with an annotation, never an error."""
    for make in FIGS:
        fig = make([])
        assert len(fig.data) == 0 and fig.layout.annotations
    partial = speculative_events(finished=False)[:8]
    assert len(speedup_model_fig(partial).data) == 0  # c, v unknown until the run finishes
    assert len(accepted_length_fig(partial).data) >= 1
    assert position_acceptance_fig(ar_events()).layout.annotations


def test_the_batch_charts_crossover_label_sits_inside_its_log_axis():
    """The crossover's label on the log B axis is placed at log10(B) (Plotly's rule for annotations): at x = B = 16
    it stretched the axis to 10^16 and squashed every curve into the plot's left 5%. Its line stays at B."""
    import math

    from specviz import throughput_figure

    points = [{"decode_tokens_per_s": 100.0 * b} for b in (1, 2, 4, 8, 16)]
    fig = throughput_figure(
        {
            "sizes": [1, 2, 4, 8, 16],
            "gamma": 4,
            "contestants": ["ar", "ngram@4"],
            "curves": {"grounded": {"ar": points, "ngram@4": points}},
            "crossover": {"grounded": {"ngram@4": 16}},
        }
    )
    assert fig.layout.xaxis.type == "log"
    (label,) = fig.layout.annotations
    assert 0 <= label.x <= math.log10(16) and label.x == pytest.approx(math.log10(16))
    assert [shape.x0 for shape in fig.layout.shapes] == [16]


def test_printed_terms_divide_to_the_printed_quotient():
    """quotient_terms over 2,000 seeded pairs (rates from 0.01 to 10^4, ratios near 1 included): the printed terms
    divide to the printed quotient; the control, terms always at 0 decimals, fails on the batch verdict's 16 ÷ 16."""
    import random

    from engine.figures import quotient_terms
    from tests.numbers import agrees

    rng = random.Random(0)
    for _ in range(2000):
        den = 10 ** rng.uniform(-2, 4)
        num = den * rng.choice([rng.uniform(0.9, 1.1), 10 ** rng.uniform(-1, 1)])
        q, a, b = quotient_terms(num, den)
        # a tie prints half up, as a calculator rounds it (tests.numbers.agrees is strict there)
        assert agrees(q, float(a) / float(b)) and agrees(q, num / den), (num, den, q, a, b)
    q, a, b = quotient_terms(16.4, 15.8)
    assert (q, a, b) == ("1.04", "16.4", "15.8") and f"{round(16.4) / round(15.8):.2f}" != q  # "16 ÷ 16"
    assert quotient_terms(120.0, 60.0) == ("2.00", "120", "60")  # no digits where none are needed
