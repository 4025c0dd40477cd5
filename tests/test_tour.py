"""The tour's captions and the summary line it shows mid-way, in-process (the recorded trace, no server, no model)."""

from __future__ import annotations

import re

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
    """Mid-tour (round 2 drafted, one token committed) the summary reads "2 rounds · 1 token", not "1 tokens";
    after round 1 alone, "1 round · 1 token"."""
    drafted = av.summary_html(t.frame_events(t.TOUR_ROUND, "drafted"))
    assert "2 rounds · 1 token" in drafted and not re.search(r"\b1 tokens", drafted)
    first = av.summary_html(t.frame_events(1, None))
    assert "1 round · 1 token" in first and not re.search(r"\b1 (rounds|tokens)", first)
    whole = av.summary_html(list(t.tour_events()))
    assert " rounds · " in whole and " tokens" in whole
