"""What the page says when it refuses or waits (ui/run.py, ui/tab_runs.py, ui/app_guard.py): γ as a whole
number, the drafter's number by its box and range, beam search's drafter and the drift meter's temperature by where
they are set, a long prompt in characters, the trained heads' first load named before it happens, the busy-machine
note in one line, and a count of one in the singular."""

from __future__ import annotations

import re

import pytest

from ui import app_guard as guard
from ui import app_views as av
from ui import run, tab_runs
from ui.controls import Controls

SKIP = {"__type__": "update"}  # gr.skip(): the output keeps its value


@pytest.mark.parametrize("gamma", [2.5, 0, 17, float("nan")])
def test_a_fractional_or_out_of_range_gamma_is_refused_in_the_pages_words(gamma):
    """γ = 2.5 from the page's box is one warning naming γ's whole-number range, and no run starts."""
    with pytest.warns(UserWarning, match="γ must be a whole number from 1 to 16"):
        frames = list(run.generate(Controls(gamma=gamma, max_new=4, prompt="hello"), None))
    assert len(frames) == 1 and all(v == SKIP for name, v in frames[0]._asdict().items() if name != "summary")
    for handler in (
        tab_runs.batch_generate,
        tab_runs.beam_generate,
    ):  # the Batch and Beam search tabs read the same γ
        args = (av.EMBEDDED_PAIR, "ngram", 0, gamma, 4, "hello", False)
        if handler is tab_runs.beam_generate:
            args = (av.EMBEDDED_PAIR, "ngram", 0, gamma, 4, 2, False, "hello")
        with pytest.warns(UserWarning, match="γ must be a whole number from 1 to 16"):
            assert list(handler(*args)) == [(SKIP, SKIP)]


def test_the_api_refuses_a_fractional_gamma():
    """/generate's gamma = 2.5 is refused by name (a JSON client can send any number)."""
    ok = dict(
        prompt="hi",
        draft="ngram",
        gamma=4,
        max_new_tokens=8,
        temperature=0.0,
        seed=0,
        target="embedded",
        max_new_cap=av.MAX_NEW_TOKENS,
        max_prompt_tokens=2048,
    )
    with pytest.raises(ValueError, match="gamma must be a whole number, got 2.5"):
        guard.api_arguments(**dict(ok, gamma=2.5))
    assert guard.check_gamma(3.0, 16) == 3


def test_a_long_prompt_is_refused_in_characters():
    """A prompt over the token cap is refused in the characters the visitor sees: its length, the cap in
    characters of text like it, how much to cut; no environment variable and no token count in the page."""
    with pytest.raises(ValueError) as refused:
        guard.check_prompt_tokens(5000, 2048, chars=20_000)
    message = str(refused.value)
    assert message.startswith("prompt is 20,000 characters") and "at most about 8,192 characters" in message
    assert "Shorten it by about 11,808 characters" in message
    assert "SPECVIZ" not in message and "token" not in message
    with pytest.raises(ValueError) as refused:
        guard.check_prompt("x" * 40_000, 2048)
    assert "at most 32,768 characters" in str(refused.value) and "SPECVIZ" not in str(refused.value)
    guard.check_prompt_tokens(2048, 2048, chars=9000)  # at the cap: accepted


@pytest.mark.slow  # builds the whole page
def test_a_long_prompt_in_the_page_is_refused_in_characters():
    """Through the handler: a 20,000-character prompt over the token cap is one warning in characters."""
    prompt = " ".join(f"w{i}" for i in range(5000))[:20_000]
    with pytest.warns(UserWarning) as caught:
        frames = list(run.generate(Controls(max_new=4, prompt=prompt), None))
    # pytest.warns records every warning raised meanwhile (a ResourceWarning of an event loop collected then too)
    ours = [
        str(w.message)
        for w in caught
        if issubclass(w.category, UserWarning) and "prompt is" in str(w.message)
    ]
    assert len(ours) == 1, [str(w.message) for w in caught]
    message = ours[0]
    assert f"prompt is {len(prompt):,} characters" in message and "characters of text like it" in message
    assert "SPECVIZ" not in message and len(frames) == 1


def test_the_first_heads_run_says_it_is_loading_them_before_its_first_token():
    """eagle's first run on the embedded target reads the trained heads (seconds on a busy CPU): a status naming
    them comes before the first token; once they are loaded, the next run shows no such status."""
    from engine import load_model
    from engine.drafters import heads

    heads._HEADS.drop(load_model("embedded").model)  # as on a fresh server: no heads loaded yet
    summaries = []
    for frame in run.generate(Controls(drafter="eagle", max_new=4, prompt="Say hi."), None):
        summaries.append(str(frame.summary))
        if "tok" in str(frame.stream) and "data-round" in str(frame.stream):
            break
    first = next(i for i, s in enumerate(summaries) if "draft heads" in s)
    assert re.search(r"loading the trained draft heads \(\d+ MB\)", summaries[first])
    assert first == 0 and len(summaries) > 1  # before anything else, the run's frames after it
    again = [
        str(f.summary) for f in run.generate(Controls(drafter="eagle", max_new=4, prompt="Say hi."), None)
    ]
    assert not any("draft heads" in s for s in again)


def test_the_busy_machine_note_is_one_short_line():
    """Disturbed timings are flagged in a few words on the summary line; the reasons (often long clauses) are one
    click away in a <details>, not a paragraph pushing the output down."""
    from engine.metrics import summarize
    from specviz.demo_trace import ar_events, speculative_events
    from specviz.runs import split_runs

    # the AR lane's second half at 3x the step time (an outside load), as test_costmodel
    slow, elapsed = ([], 0.02)
    for e in ar_events():
        if e.kind == "round_timed":
            total = e.total_s * (3 if e.round > 4 else 1)
            elapsed += total
            e = type(e)(**{**e.__dict__, "total_s": total, "elapsed_s": round(elapsed, 3)})
        slow.append(e)
    events = speculative_events() + slow
    flags = summarize(split_runs(events)["speculative"], split_runs(events)["ar"])["timing_flags"]
    assert flags
    html = av.summary_html(events)
    note = re.search(r'<details class="sv-busy[^"]*".*?</details>', html, re.S)
    assert note, html
    visible = re.sub(
        r"<[^>]+>", "", re.search(r"<summary[^>]*>(.*?)</summary>", note.group(0), re.S).group(1)
    )
    assert len(visible) <= 40 and "\n" not in visible, visible
    assert all(av.esc(f) in note.group(0) for f in flags)  # the reasons, behind the click
    assert all(av.esc(f) not in re.sub(r"<details.*?</details>", "", html, flags=re.S) for f in flags)


@pytest.mark.parametrize(
    "drafter, param, words",
    [
        (
            "ngram",
            -3,
            "n / L / W / k (0 = default) must be 0 (ngram's default) or a whole number from 1 to 8",
        ),
        ("ngram", 9, "n / L / W / k (0 = default) must be 0 (ngram's default) or a whole number from 1 to 8"),
        (
            "layerskip",
            -1,
            "n / L / W / k (0 = default) must be 0 (layerskip's default) or a whole number at least 1",
        ),
        ("self", -2, "n / L / W / k (0 = default) must be at least 0, got -2"),
    ],
)
def test_the_drafters_number_out_of_range_is_one_warning_naming_its_box(drafter, param, words):
    """-3 in "n / L / W / k" got Gradio's "Value -3 is less than minimum value 0." (no field named) or the spec parser's
    "ngram[:N] needs 1 <= N <= 8, got 'ngram:-3'": the run and the Batch and Beam search tabs answer with the box's
    label and this drafter's range, and start nothing."""
    with pytest.warns(UserWarning, match=re.escape(words)):
        frames = list(run.generate(Controls(drafter=drafter, param=param, max_new=4, prompt="hello"), None))
    assert len(frames) == 1
    with pytest.warns(UserWarning, match=re.escape(words)):
        assert list(tab_runs.batch_generate(av.EMBEDDED_PAIR, drafter, param, 4, 4, "hello", False)) == [
            (SKIP, SKIP)
        ]
    with pytest.warns(UserWarning, match=re.escape(words)):
        assert list(tab_runs.beam_generate(av.EMBEDDED_PAIR, drafter, param, 4, 4, 2, False, "hello")) == [
            (SKIP, SKIP)
        ]


def test_beam_search_with_a_drafter_it_cannot_use_says_where_the_drafter_is_set():
    """Beam search under `auto` said "drafts with 'ngram[:N]' or 'self', got draft 'auto'" while the Drafter control sits
    beside Generate, far from the Beam search tab: the warning names the control, where it is and what to choose."""
    with pytest.warns(
        UserWarning, match="got draft 'auto': choose ngram or self in Drafter, beside Generate"
    ):
        assert list(tab_runs.beam_generate(av.EMBEDDED_PAIR, "auto", 0, 4, 8, 3, True, "Copy: a b c")) == [
            (SKIP, SKIP)
        ]


def test_the_drift_meter_at_temperature_0_names_temperature_and_its_range():
    """The drift meter at T 0 said "needs temperature > 0" in a toast only: it names the Temperature control, where it
    is and its range (the button's label says so beforehand: tests/test_app_page_browser.py)."""
    with pytest.warns(UserWarning, match=r"needs Temperature above 0 \(Sampling: from 0\.05 to 2\)"):
        assert list(tab_runs.measure_drift(*Controls(temperature=0.0, prompt="hi").values())) == [SKIP]


def test_a_count_of_one_is_singular(monkeypatch):
    """Explain printed "1 rejections" and the waiting line "1 runs at once": a count of one takes the singular noun
    (engine.figures.plural)."""
    from specviz.demo_trace import speculative_events
    from specviz.explain import render_explain
    from specviz.replay import events_upto

    explain = render_explain(events_upto(speculative_events(), 1))  # round 1: one rejection
    assert "1 rejection)" in explain and "1 rejections" not in explain
    monkeypatch.setattr(run, "CONCURRENCY", 1)
    line = run.running_buttons("you are 2nd in line")[2]
    assert "(1 run at once on this server)" in line, line
