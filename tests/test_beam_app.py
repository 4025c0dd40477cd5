"""The app's Beam search handler (ui/tab_runs.py) called in-process: bad settings are one warning, and it shares
the compute queue."""

from __future__ import annotations

import pytest

import app
from ui import app_views as av
from ui import server, tab_runs

SKIP = {"__type__": "update"}


def test_beam_handler_shares_the_compute_queue():
    """A beam run counts against the same concurrency limit as every other run."""
    fns = {fn.api_name: fn for fn in app.build_demo().fns.values()}
    assert fns["beam"].concurrency_id == "compute" and fns["beam"].concurrency_limit == server.CONCURRENCY


@pytest.mark.parametrize(
    "drafter, beams, message", [("auto", 3, "drafts with 'ngram"), ("ngram", 9, "num_beams must be")]
)
def test_bad_beam_settings_are_one_warning(drafter, beams, message):
    """A drafter beams cannot use, or a width out of range: one warning naming it, the view left as it was."""
    with pytest.warns(UserWarning, match=message):
        out = list(tab_runs.beam_generate(av.EMBEDDED_PAIR, drafter, 0, 4, 8, beams, True, "Copy: a b c"))
    assert out == [(SKIP, SKIP)]
