"""The beam view (specviz/beams.py) on hand-built events: B lanes, survivors and pruned cells, the best
hypothesis's path marked across lanes, the race line, escaped token text."""

from __future__ import annotations

import re

from engine.events import BeamResult, BeamStep, BeamVerified, Finished, RunStarted
from specviz import render_beams


def started(mode="speculative"):
    return RunStarted(
        round=0,
        run_id="r1",
        mode=mode,
        target="t",
        draft="ngram" if mode == "speculative" else "",
        device="cpu",
        dtype="float32",
        config={"num_beams": 2, "gamma": 2},
        prompt_text="p",
        prompt_ids=[5],
        prompt_tokens=["p"],
        pos=1,
    )


def run(mode="speculative", wall=1.0):
    """Two beams, three steps: beam 1 is pruned at step 2 (both step-2 beams extend beam 0)."""
    return [
        started(mode),
        BeamStep(
            round=1,
            pos=1,
            parents=[0, 0],
            token_ids=[10, 11],
            tokens=["a", "<b>"],
            scores=[-1.0, -2.0],
            drafted=[True, False],
            finished=[],
        ),
        BeamVerified(
            round=1,
            pos=1,
            steps=1,
            verified=[1, 0],
            origins=[0, 0],
            positions=6,
            cache_before=3,
            cache_after=1,
        ),
        BeamStep(
            round=2,
            pos=2,
            parents=[0, 0],
            token_ids=[12, 13],
            tokens=["c", "d"],
            scores=[-1.5, -2.5],
            drafted=[False, False],
            finished=[],
        ),
        BeamStep(
            round=2,
            pos=3,
            parents=[1, 0],
            token_ids=[14, 15],
            tokens=["e", "f"],
            scores=[-2.6, -2.7],
            drafted=[False, False],
            finished=[{"parent": 1, "token_id": 2, "token": "</s>", "score": -0.87}],
        ),
        BeamVerified(
            round=2,
            pos=2,
            steps=2,
            verified=[1, 0],
            origins=[0, 0],
            positions=6,
            cache_before=4,
            cache_after=3,
        ),
        BeamResult(
            round=2,
            pos=4,
            num_beams=2,
            token_ids=[[10, 13, 2], [10, 12, 15]],
            texts=["x", "y"],
            scores=[-0.87, -0.9],
        ),
        Finished(
            round=2, pos=4, stop_reason="eos", text="x", token_ids=[10, 13, 2], summary={"wall_s": wall}
        ),
    ]


def test_lanes_survivors_and_best_path():
    """One lane per beam; a cell without a child next step is pruned; the best hypothesis (10, 13, EOS)
    is marked on the cells it runs through, across lanes; where it ended is marked and that lane starred."""
    html = render_beams(run())
    assert len(re.findall(r'<div class="beam-lane[ "]', html)) == 2
    assert 'data-beams="2"' in html and 'data-steps="3"' in html
    cells = re.findall(
        r'<span class="beam-cell" data-beam="(\d)" data-parent="(\d)" data-step="(\d)">.*?'
        r'class="tok tok-beam ([^"]*)"',
        html,
    )
    marks = {(int(b), int(s)): cls for b, _, s, cls in cells}
    assert "beam-pruned" in marks[(1, 1)] and "beam-survived" in marks[(0, 1)]
    assert "beam-best" in marks[(0, 1)] and "beam-best" in marks[(1, 2)]
    assert (
        "beam-best" not in marks[(0, 2)]
        and "beam-best" not in marks[(0, 3)]
        and "beam-best" not in marks[(1, 3)]
    )
    assert re.search(r'data-beam="1" data-parent="0" data-step="2">.*?beam-end beam-end-best', html)
    assert html.count("beam-end-best") == 1
    assert "beam-drafted" in marks[(0, 1)] and "beam-drafted" not in marks[(1, 1)]
    assert '<div class="beam-lane beam-lane-best" data-beam="1">' in html
    assert "beam-hyp-best" in html and "-0.8700" in html


def test_token_text_is_escaped_and_race_line():
    """Token text is escaped; with the plain run, the race line counts forwards and gives the verdict."""
    html = render_beams(run(wall=1.0), run("ar", wall=2.0))
    assert "&lt;b&gt;" in html and "<b>>" not in html
    assert 'data-lane="speculative" data-forwards="2"' in html and "2.00× plain's speed" in html
    assert 'data-same="true"' in html
    # the ratio from the printed s
    for wall_spec, wall_plain in ((0.123456, 0.456789), (1.005, 1.995), (3.0, 0.7)):
        html = render_beams(run(wall=wall_spec), run("ar", wall=wall_plain))
        ratio, plain, spec = re.search(r"([\d.]+)× plain's speed \(([\d.]+) s ÷ ([\d.]+) s\)", html).groups()
        assert (
            f"{float(plain) / float(spec):.2f}" == ratio
            and f", {spec} s<" in html
            and f", {plain} s<" in html
        )


def test_empty_and_unknown_events():
    """No beam steps yet: an empty view; unknown event kinds are skipped."""
    assert "no beam search yet" in render_beams([])
    assert "no beam search yet" in render_beams([started(), object()])


def test_running_best_text_follows_the_parents():
    """The API's text so far is the best-scoring running beam, read back through its parents: after step 3
    beam 0 (score -2.6) extends step 2's beam 1 (d), which extends step 1's beam 0 (a)."""
    from specviz import running_best_text

    events = run()
    assert running_best_text(events[:2]) == "a"
    assert running_best_text(events[:4]) == "ac"  # step 2: beam 0 "a c" (-1.5) beats "a d" (-2.5)
    assert running_best_text(events[:5]) == "ade"
    assert running_best_text([started()]) == ""


def test_api_result_of_a_beam_run():
    """(text, summary) of a finished beam run: the engine's text and stop reason and every hypothesis best
    first; a run cut before its Finished returns the best running beam and the cut reason."""
    import json

    from ui import app_views as av

    text, summary = av.api_result(run())
    data = json.loads(summary)
    assert text == "x" and data["stop_reason"] == "eos" and data["wall_s"] == 1.0
    assert data["hypotheses"] == [{"text": "x", "score": -0.87}, {"text": "y", "score": -0.9}]
    text, summary = av.api_result(run()[:5], cut_reason="time_limit")
    assert text == "ade" and json.loads(summary)["stop_reason"] == "time_limit"
