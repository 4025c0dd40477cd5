"""The tour's captions and the summary line it shows mid-way, in-process (the recorded trace, no server, no model)."""

from __future__ import annotations

import re

from specviz.explain import render_explain
from tests import numbers
from ui import app_views as av
from ui import tour as t


def test_the_rejection_step_says_the_target_chose_its_own_word():
    """Step ② names the word the target rejected and the one it chose, and says this is the target's own choice,
    which speculation keeps: a newcomer should not conclude that verification made the copy worse."""
    runs = av.view_runs(list(t.tour_events()))
    step = next(i for i, row in enumerate(t.TOUR, 1) if row[:2] == (t.TOUR_ROUND, "verified"))
    text = t.caption_text(step, runs)
    assert "“indeed”" in text and "“one”" in text  # greedy n-gram drafting: the same round on every host
    assert "the target's own choice" in text and "exactly what the target alone would write" in text
    assert "never makes it worse than the target" in text
    others = [t.caption_text(i, runs) for i in range(1, len(t.TOUR) + 1) if i != step]
    assert not any("own choice" in o for o in others)


def test_the_summary_counts_one_token_and_one_round_in_the_singular():
    """Mid-tour (round 2 drafted, one token committed) the summary counts the rounds that committed: "1.00 tokens
    per target forward · 1 round · 1 token" (the round caught mid-way has committed nothing), never "1 tokens";
    every frame's tokens per forward is its tokens ÷ its rounds (it read 5.00 beside "2 rounds · 5 tokens")."""
    drafted = av.summary_html(t.frame_events(t.TOUR_ROUND, "drafted"))
    assert "1.00 tokens per target forward · 1 round · 1 token" in drafted
    assert not re.search(r"\b1 tokens", drafted)
    frames = [t.frame_events(*row[:2]) for row in t.TOUR]
    for summary in [av.summary_html(events) for events in frames if events is not None]:
        assert not numbers.check_summary(re.sub("<[^>]+>", "", summary)), summary
    first = av.summary_html(t.frame_events(1, None))
    assert "1 round · 1 token" in first and not re.search(r"\b1 (rounds|tokens)", first)
    whole = av.summary_html(list(t.tour_events()))
    assert " rounds · " in whole and " tokens" in whole


def test_the_race_caption_quotes_the_recorded_runs_explain():
    """Caption ⑤'s figures are the recorded run's own, as its Explain prints them: the race's speedup and v(n) at
    the run's verify size (it said "verifying 5 tokens costs about as much as generating 1" beside v(5) = 1.50);
    the host is named as the recording's, not "this machine"."""
    runs = t.guard.runs(t.tour_runs())
    caption = t.race_caption(runs)
    explain = re.sub(r"<[^>]+>", "", render_explain(runs))
    v = re.search(r"v\((\d+)\) = ([\d.]+) target steps in this run", caption)
    assert v and f"This run: v({v.group(1)}) = {v.group(2)} target steps" in explain, (
        caption,
        explain[:3000],
    )
    speed = re.search(r"speculation was ([\d.]+)× as fast", caption).group(1)
    assert f"the race against plain decoding measured {speed}×" in explain
    assert "machine that recorded this run" in caption and "this machine" not in caption


def test_the_captions_counts_are_the_recorded_rounds():
    """①, ② and ④ name γ = 4, 4 drafts and 4 tokens committed for one forward: the recorded round 2's counts
    (a re-recorded tour whose round 2 differs fails here, not on a visitor's screen)."""
    spec = av.view_runs(list(t.tour_events()))["speculative"]
    r = next(x for x in spec.rounds if x.round == t.TOUR_ROUND)
    texts = " ".join(row[2] for row in t.TOUR)
    assert r.gamma == 4 and "γ = 4 tokens" in texts and "checks all 4 drafts" in texts
    assert len(r.tokens) == 4 and "4 tokens for one target forward" in texts
    assert r.first_rejected == 3  # "the 4th rejected"
