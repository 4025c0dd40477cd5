"""app.py's handlers called in-process (no server, no model): queues, refusals and bounded replay."""
from __future__ import annotations

import dataclasses

import pytest

import app
from engine.events import trace_to_json
from specviz import app_guard as guard
from specviz.sample import sample_events, speculative_events

SKIP = {"__type__": "update"}  # gr.skip(): the output keeps its value


def hostile_events():
    """The sample run with its last round renumbered 1e12 (as a crafted trace could)."""
    return [dataclasses.replace(e, round=10**12) if e.kind != "run_started" and e.round == 4 else e
            for e in speculative_events(finished=False)]


def test_every_compute_handler_shares_one_queue():
    """UI runs, the /generate API, trace loads and Play share one concurrency id and limit; Stop and stepping do not."""
    fns = {fn.api_name: fn for fn in app.build_demo().fns.values()}
    compute = {"run", "generate", "load_trace", "play"}
    assert {fns[name].concurrency_id for name in compute} == {"compute"}
    assert {fns[name].concurrency_limit for name in compute} == {app.CONCURRENCY}
    assert all(fns[name].concurrency_id != "compute" for name in ("stop", "next", "show_round"))


def test_play_and_the_slider_are_bounded_by_the_rounds_present():
    """Play on a run whose last round is numbered 1e12 steps through the 4 rounds present, then ends."""
    state = guard.pack(hostile_events())
    frames = list(app.play(state, 0, 1000.0))
    assert [f[0] for f in frames] == [1, 2, 3, 4]
    slider = app.settled(state, cut_reason=None)[1]
    assert slider["maximum"] == 4


def test_bad_upload_is_one_warning_and_leaves_every_output_untouched(tmp_path):
    """A bad trace gives one warning; state, slider, download and views keep their values (the last good run)."""
    bad = tmp_path / "bad.json"
    bad.write_text('{"format": "something else"}', encoding="utf-8")
    with pytest.warns(UserWarning, match="cannot load trace: not a specviz trace"):
        out = app.load_trace(str(bad))
    assert list(out[:-1]) == [SKIP] * app.RUN_OUTPUTS and out[-1] is None  # only the drop zone is emptied
    assert not bad.exists()  # the upload is not kept on disk
    good = tmp_path / "good.json"
    good.write_text(trace_to_json(sample_events()), encoding="utf-8")
    state = app.load_trace(str(good))[0]
    assert guard.unpack(state) == sample_events() and not good.exists()


def test_bad_controls_are_one_warning_and_no_run():
    """γ out of range in the UI is a warning naming the setting; the generator yields only untouched outputs."""
    with pytest.warns(UserWarning, match="gamma must be between 1 and 16"):
        frames = list(app.generate(app.av.EMBEDDED_PAIR, "ngram", 0, 40, "fixed", 0.4, 0, 0, 1, 0, 8, 0, 2, False,
                                   "hello", progress=None))
    assert frames == [(SKIP,) * app.RUN_OUTPUTS]


def test_stop_says_the_run_was_stopped():
    """Stop settles the run so far with stop reason "cancelled", and keeps its tokens."""
    live = speculative_events(finished=False)
    out = app.settled(live)  # state, slider, download, then stream, tree, race, explain, summary, figures
    assert "stop: cancelled" in out[7] and 'data-rounds="4"' in out[3]
    assert guard.unpack(out[0])[-1].stop_reason == "cancelled"


def test_gemma_pair_runs_in_the_app_and_shows_both_tokenisations():
    """The SmolLM2 -> Gemma-3 preset runs through the UI handler offline; the stream carries the two-row panel,
    and the pair's note (what to expect, measured) shows when the pair is chosen."""
    frames = list(app.generate(app.av.GEMMA_PAIR, app.av.PRESET_DRAFT, 0, 4, "fixed", 0.4, 0, 0, 1, 0, 12, 0, 2,
                               False, "Monday, Tuesday, Wednesday,", progress=None))
    stream = frames[-1][3]
    assert "sv-crossvocab" in stream and "draft tokens became" in stream
    note = app.pair_note_changed(app.av.GEMMA_PAIR)
    assert note["visible"] and "c ≈ 0.7" in note["value"]
    assert not app.pair_note_changed(app.av.EMBEDDED_PAIR)["visible"]
