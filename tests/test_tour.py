"""The tour's captions and the summary line it shows mid-way, in-process (the recorded trace, no server, no model)."""

from __future__ import annotations

import re

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
