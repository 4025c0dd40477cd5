"""The app's handlers (ui/run.py, ui/replay.py, ui/session.py, ui/tour.py) called in-process (no server, no
model): queues, refusals, bounded replay, and the controls and outputs addressed by name."""

from __future__ import annotations

import dataclasses

import pytest

import app
from engine.events import trace_to_json
from specviz.demo_trace import sample_events, speculative_events
from ui import app_guard as guard
from ui import app_views as av
from ui import outputs, replay, run, server, session, tour
from ui.app_views import VIEWS
from ui.controls import FIELDS, TRACE_SETS, Controls
from ui.warmup import WARM_DATA, WARM_RUN

SKIP = {"__type__": "update"}  # gr.skip(): the output keeps its value


def hostile_events():
    """The sample run with its last round renumbered 1e12 (as a crafted trace could)."""
    return [
        dataclasses.replace(e, round=10**12) if e.kind != "run_started" and e.round == 4 else e
        for e in speculative_events(finished=False)
    ]


def test_every_compute_handler_shares_one_queue():
    """UI runs, the /generate API and trace loads share one concurrency id and limit; Stop and stepping do not, and
    Play has no server job at all (the browser steps Next at the recorded pace)."""
    fns = {fn.api_name: fn for fn in app.build_demo().fns.values()}
    assert "play" not in fns
    compute = {"run", "generate", "load_trace"}
    assert {fns[name].concurrency_id for name in compute} == {"compute"}
    assert {fns[name].concurrency_limit for name in compute} == {server.CONCURRENCY}
    assert all(fns[name].concurrency_id != "compute" for name in ("stop", "next", "show_round"))


def test_stepping_and_the_slider_are_bounded_by_the_rounds_present():
    """Next ▶ (what Play presses) on a run whose last round is numbered 1e12 steps through the 4 rounds present,
    then stays at the last."""
    state = guard.pack(hostile_events())
    seen, r = [], 0
    for _ in range(6):
        r = replay.step_on(state, r)[0]
        seen.append(r)
    assert seen == [1, 2, 3, 4, 4, 4]
    slider = outputs.settled(state, cut_reason=None)[1]
    assert slider["maximum"] == 4


def test_bad_upload_is_one_warning_and_leaves_every_output_untouched(tmp_path):
    """A bad trace gives one warning; state, slider, download and views keep their values (the last good run)."""
    bad = tmp_path / "bad.json"
    bad.write_text('{"format": "something else"}', encoding="utf-8")
    with pytest.warns(UserWarning, match="cannot load trace: not a specviz trace"):
        out = replay.loaded(str(bad))
    n = outputs.RUN_OUTPUTS
    assert list(out[:n]) == [SKIP] * n and out[n] is None  # only the drop zone is emptied
    assert list(out[n + 1 :]) == [SKIP] * len(TRACE_SETS)  # the controls stay
    # a file the app did not write is never deleted by it (Gradio's cache bound covers copies)
    assert bad.exists()
    good = tmp_path / "good.json"
    good.write_text(trace_to_json(sample_events()), encoding="utf-8")
    state = replay.loaded(str(good))[0]
    assert guard.unpack(state) == sample_events() and good.exists()


def test_bad_controls_are_one_warning_and_no_run():
    """γ out of range in the UI is a warning naming the setting; the generator yields only untouched outputs."""
    with pytest.warns(UserWarning, match="γ must be a whole number from 1 to 16, got 40"):
        frames = list(run.generate(Controls(gamma=40, max_new=8, prompt="hello"), None))
    assert len(frames) == 1 and all(v == SKIP for name, v in frames[0]._asdict().items() if name != "summary")
    assert "sv-empty" in frames[0].summary  # the summary line of the last run (none) back in place


def test_stop_says_the_run_was_stopped():
    """Stop settles the run so far with stop reason "cancelled", and keeps its tokens."""
    live = speculative_events(finished=False)
    out = outputs.settled(live)  # RunOutputs: state, slider, download, then the views by name
    assert "stopped (Stop pressed)" in out.summary and 'data-rounds="4"' in out.stream
    assert guard.unpack(out[0])[-1].stop_reason == "cancelled"


def test_a_loaded_trace_sets_the_controls_it_ran_with(tmp_path):
    """Loading a trace moves the drafter, γ and max new tokens to what the trace ran with (a self trace says self)."""
    events = sample_events()
    events[0] = dataclasses.replace(events[0], draft="layerskip:8", target="embedded")
    good = tmp_path / "good.json"
    good.write_text(trace_to_json(events), encoding="utf-8")
    out = replay.loaded(str(good))
    controls = dict(zip(TRACE_SETS, out[outputs.RUN_OUTPUTS + 1 :]))
    assert controls["drafter"]["value"] == "layerskip" and controls["param"]["value"] == 8
    assert controls["gamma"]["value"] == 3 and controls["max_new"]["value"] == 9
    assert controls["pair"]["value"] == av.EMBEDDED_PAIR and controls["temperature"]["value"] == 0


def test_the_tour_builds_a_round_up_step_by_step_and_ends_in_the_race():
    """The tour fills the prompt box, builds round 2 up event by event (the drafts alone, then the verify pass with
    its rejection, the rollback, the commit: each step's frame differs from the one before), names the element
    each caption talks about, and ends on the race with the recorded run's measured speedup."""
    frames = [frame for frame, _ in tour.tour_frames()]
    captions, prompts = [f[-2] for f in frames], [f[-1] for f in frames]
    assert all(p == tour.TOUR_PROMPT and p.strip() for p in prompts)
    assert all("sv-tour" in c for c in captions) and "Now try your own prompt" in captions[-1]
    field = outputs.RunOutputs._fields.index
    steps = frames[:5]  # round 1, then round 2: drafted, verified (its rejection), rolled back, committed
    streams = [f[field("stream")] for f in steps]
    views = [(f[field("stream")], f[field("verify")]) for f in steps]
    assert all(a != b for a, b in zip(views, views[1:]))  # every step's frame differs from the one before
    assert "tok-pending" in streams[1] and "tok-rejected" not in streams[1]  # ① the drafts, not yet judged
    assert "tok-rejected" in streams[2]  # ② the verify pass rejects one
    assert "tok-corrected" in streams[4] and "tok-corrected" not in streams[3]  # ④ the commit adds it
    verify = frames[2][field("verify")]
    assert f'data-round="{tour.TOUR_ROUND}"' in verify and "vf-rejected" in verify
    assert "Rollback" in frames[3][field("verify")] and "Rollback" not in frames[2][field("verify")]
    assert all('data-focus="' in c for c in captions[:-1])  # every caption names its element
    race = frames[-2]
    assert 'data-tab="Race"' in captions[-2] and "as fast" in captions[-2] and "×" in captions[-2]
    assert "race-speedup" in race[field("race")]  # the recorded race's verdict is on screen


@pytest.mark.slow  # statistical / real-model: make test runs it, the inner loop does not
def test_gemma_pair_runs_in_the_app_and_shows_both_tokenisations():
    """The SmolLM2 -> Gemma-3 preset runs through the UI handler offline; the stream carries the two-row panel,
    and the pair's note (what to expect, measured) shows when the pair is chosen."""
    frames = list(
        run.generate(
            Controls(
                pair=av.GEMMA_PAIR, drafter=av.PRESET_DRAFT, max_new=12, prompt="Monday, Tuesday, Wednesday,"
            )
        )
    )
    stream = frames[-1].stream
    assert "sv-crossvocab" in stream and "draft tokens became" in stream
    note = session.pair_note_changed(av.GEMMA_PAIR)
    assert note["visible"] and "c ≈ " in note["value"] and "the speed of Gemma alone" in note["value"]
    assert not session.pair_note_changed(av.EMBEDDED_PAIR)["visible"]


def test_the_first_update_carries_tokens_before_any_chart(monkeypatch):
    """The first streamed update shows the first round's tokens without waiting for five plotly figures to be
    built (first-token latency); the finished run brings the charts."""
    monkeypatch.setattr(run, "prepare", lambda target, draft, *args: (target, draft))
    monkeypatch.setattr(run, "stream_events", lambda *args: (("speculative", e) for e in sample_events()))
    frames = list(run.generate(Controls(max_new=8, prompt="hello"), None))
    first, last = frames[0], frames[-1]
    assert 'class="tok ' in first.stream
    assert list(first[-5:]) == [{"__type__": "update"}] * 5  # the charts keep their place until later
    assert all(hasattr(fig, "to_plotly_json") for fig in last[-5:])


def test_the_run_button_is_wired_by_the_controls_names():
    """The run endpoint takes one input per Controls field, in FIELDS order, then the two states; the warm-up run
    through the queue sends exactly that; outputs are RunOutputs by name (state, slider, download, the views)."""
    demo = app.build_demo()
    run = next(d for d in demo.config["dependencies"] if d.get("api_name") == "run")
    labels = {c["id"]: c["props"].get("label") for c in demo.config["components"]}
    assert len(run["inputs"]) == len(FIELDS) + 2 == len(WARM_DATA)
    assert [labels[i] for i in run["inputs"][:3]] == [
        "Model pair (draft → target)",
        "Drafter",
        "n / L / W / k (0 = default)",
    ]
    assert labels[run["inputs"][FIELDS.index("prompt")]] == "Prompt"
    assert (
        outputs.RunOutputs._fields == ("state", "slider", "download", *VIEWS)
        and len(run["outputs"]) == outputs.RUN_OUTPUTS
    )
    assert Controls.of(WARM_RUN.values()) == WARM_RUN and WARM_RUN.max_new == 8


def test_a_loaded_trace_restores_its_confidence_threshold(tmp_path):
    """A run made with the confidence rule comes back with the rule and its p_min (it used to come back at 0.4)."""
    events = sample_events()
    events[0] = dataclasses.replace(events[0], config={**events[0].config, "adaptive": "fixed", "p_min": 0.6})
    good = tmp_path / "good.json"
    good.write_text(trace_to_json(events), encoding="utf-8")
    controls = dict(zip(TRACE_SETS, replay.loaded(str(good))[outputs.RUN_OUTPUTS + 1 :]))
    assert controls["adaptive"]["value"] == "confidence (p_min)" and controls["p_min"]["value"] == 0.6


@pytest.mark.slow  # a real model through the handler
def test_a_session_drafts_from_its_own_earlier_runs_and_no_other():
    """Two runs of suffix speculation in one session: the second drafts nodes from the first (its tooltip says so)
    and the history holds both; another session's history is its own. The bound is checked at start-up."""
    ask = Controls(drafter="suffix", max_new=24, prompt="List three primary colours.")
    mine, other = session.session_history(), session.session_history()
    assert mine is not other and mine.max_tokens == server.HISTORY_TOKENS
    list(run.generate(ask, None, mine))
    second = list(run.generate(ask, None, mine))[-1]
    events = guard.unpack(second.state)
    origins = [o for e in events if e.kind == "suffix_match" for o in e.origins]
    assert any(ago == 1 for ago, _ in origins)
    assert "your previous run" in second.tree
    assert len(mine.runs) == 2 and not other.runs
    first_alone = guard.unpack(list(run.generate(ask, None, other))[-1].state)
    assert not any(ago for e in first_alone if e.kind == "suffix_match" for ago, _ in e.origins)


def test_the_history_bound_is_checked_with_its_name_and_range(monkeypatch):
    monkeypatch.setattr(session, "HISTORY_TOKENS", 10**9)
    with pytest.raises(ValueError, match="SPECVIZ_HISTORY_TOKENS must be between 0 and 16384"):
        session.session_history()
    monkeypatch.setattr(session, "HISTORY_TOKENS", 0)
    assert session.session_history() is None
