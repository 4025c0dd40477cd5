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
    n = app.RUN_OUTPUTS
    assert list(out[:n]) == [SKIP] * n and out[n] is None  # only the drop zone is emptied
    assert list(out[n + 1:]) == [SKIP] * len(app.CONTROL_NAMES)  # the controls stay
    assert not bad.exists()  # the upload is not kept on disk
    good = tmp_path / "good.json"
    good.write_text(trace_to_json(sample_events()), encoding="utf-8")
    state = app.load_trace(str(good))[0]
    assert guard.unpack(state) == sample_events() and not good.exists()


def test_bad_controls_are_one_warning_and_no_run():
    """γ out of range in the UI is a warning naming the setting; the generator yields only untouched outputs."""
    with pytest.warns(UserWarning, match="gamma must be between 1 and 16"):
        frames = list(app.generate(app.av.EMBEDDED_PAIR, "ngram", 0, 40, "fixed", 0.4, 0, 0, 1, 0, 8, 0, 2, False,
                                   "hello", None))
    assert len(frames) == 1 and all(v == SKIP for i, v in enumerate(frames[0]) if i != app.SUMMARY)
    assert "sv-empty" in frames[0][app.SUMMARY]  # the summary line of the last run (none) back in place


def test_stop_says_the_run_was_stopped():
    """Stop settles the run so far with stop reason "cancelled", and keeps its tokens."""
    live = speculative_events(finished=False)
    out = app.settled(live)  # state, slider, download, then stream, tree, race, explain, summary, figures
    assert "stopped (Stop pressed)" in out[app.SUMMARY] and 'data-rounds="4"' in out[3]
    assert guard.unpack(out[0])[-1].stop_reason == "cancelled"


def test_a_loaded_trace_sets_the_controls_it_ran_with(tmp_path):
    """Loading a trace moves the drafter, γ and max new tokens to what the trace ran with (a self trace says self)."""
    events = sample_events()
    events[0] = dataclasses.replace(events[0], draft="layerskip:8", target="embedded")
    good = tmp_path / "good.json"
    good.write_text(trace_to_json(events), encoding="utf-8")
    out = app.load_trace(str(good))
    controls = dict(zip(app.CONTROL_NAMES, out[app.RUN_OUTPUTS + 1:]))
    assert controls["drafter"]["value"] == "layerskip" and controls["param"]["value"] == 8
    assert controls["gamma"]["value"] == 3 and controls["max_new"]["value"] == 9
    assert controls["pair"]["value"] == app.av.EMBEDDED_PAIR and controls["temperature"]["value"] == 0


def test_the_tour_walks_one_round_then_hands_over(monkeypatch):
    """The tour shows the recorded run round by round with numbered captions (no model, no click), stays on the
    round with a rejection for the five steps, and ends on the hand-over caption with the whole run on screen."""
    monkeypatch.setattr(app.time, "sleep", lambda s: None)
    frames = list(app.tour(None))
    captions = [f[-1] for f in frames]
    assert all("sv-tour" in c for c in captions) and "Now try your own prompt" in captions[-1]
    rounds = [f[1]["value"] for f in frames[:-1]]
    assert rounds[:6] == [1] + [app.TOUR_ROUND] * 5 and rounds == sorted(rounds)
    assert 'data-step="6"' in captions[5] and "rejected" in captions[3]
    verify = frames[3][3 + app.av.VIEWS.index("verify")]
    assert f'data-round="{app.TOUR_ROUND}"' in verify and "vf-rejected" in verify


def test_gemma_pair_runs_in_the_app_and_shows_both_tokenisations():
    """The SmolLM2 -> Gemma-3 preset runs through the UI handler offline; the stream carries the two-row panel,
    and the pair's note (what to expect, measured) shows when the pair is chosen."""
    frames = list(app.generate(app.av.GEMMA_PAIR, app.av.PRESET_DRAFT, 0, 4, "fixed", 0.4, 0, 0, 1, 0, 12, 0, 2,
                               False, "Monday, Tuesday, Wednesday,"))
    stream = frames[-1][3]
    assert "sv-crossvocab" in stream and "draft tokens became" in stream
    note = app.pair_note_changed(app.av.GEMMA_PAIR)
    assert note["visible"] and "c ≈ 0.7" in note["value"]
    assert not app.pair_note_changed(app.av.EMBEDDED_PAIR)["visible"]


def test_the_first_update_carries_tokens_before_any_chart(monkeypatch):
    """The first streamed update shows the first round's tokens without waiting for five plotly figures to be
    built (first-token latency); the finished run brings the charts."""
    monkeypatch.setattr(app, "prepare", lambda *args: None)
    monkeypatch.setattr(app, "stream_events", lambda *args: (("speculative", e) for e in sample_events()))
    frames = list(app.generate(app.av.EMBEDDED_PAIR, "ngram", 0, 4, "fixed", 0.4, 0, 0, 1, 0, 8, 0, 2, False,
                               "hello", None))
    first, last = frames[0], frames[-1]
    assert 'class="tok ' in first[3]  # the stream
    assert list(first[-5:]) == [{"__type__": "update"}] * 5  # the charts keep their place until later
    assert all(hasattr(fig, "to_plotly_json") for fig in last[-5:])
