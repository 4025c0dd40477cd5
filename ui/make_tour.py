"""Record the tour's run (assets/tour-trace.json): the first example (n-gram copies a passage, γ = 4, greedy,
40 new tokens, top-3 alternatives) raced against AR on this machine, both lanes in one trace.

    .venv/bin/python -m ui.make_tour

Greedy n-gram drafting is deterministic, so the rounds the captions walk through (round 2: 4 drafted, the 4th
rejected) are the same on every host; the times, the speedup and the machine are this host's, as recorded.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from engine import Engine, GenerationConfig, write_trace
from engine.runtime.models import load_model
from ui import app_views as av

from .tour import TOUR_PROMPT, TOUR_ROUND, TOUR_TRACE


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(prog="python -m ui.make_tour", description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--out", type=Path, default=TOUR_TRACE, help="where to write the trace (default: the tour's own)"
    )
    out = ap.parse_args(argv).out
    engine = Engine(load_model("embedded"), "ngram")
    cfg = GenerationConfig(gamma=4, max_new_tokens=40, record_topk=3)
    result = engine.run(TOUR_PROMPT, cfg, compare_ar=True)
    spec = av.view_runs(result.events)["speculative"]
    r = next(rv for rv in spec.rounds if rv.round == TOUR_ROUND)
    assert r.gamma == 4 and r.verified.first_rejected == 3, (
        "the captions walk through 4 drafts, the 4th rejected"
    )
    write_trace(out, result.events)
    s = result.summary
    print(f"wrote {out}: speedup {s['speedup']:.2f}x, identical {s['identical_to_ar']}")


if __name__ == "__main__":
    main()
