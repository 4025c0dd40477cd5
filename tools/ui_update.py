"""UI work per round of a streaming run: the app's views (stream, tree, race, explain, summary, verify; no
figures, which refresh at most once a second) after every round of a 500-token run, and the stream's bytes
per token. On a checkout without specviz.runs.RunSet (before the incremental views) it times the old way:
views of the whole event list so far, every round.

    /work/bin/cpu-quiet .venv/bin/python tools/ui_update.py
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path.cwd()))

from specviz import render_stream  # noqa: E402
from specviz.demo_trace import long_events  # noqa: E402
from ui import app_views as av  # noqa: E402

try:
    from specviz.runs import RunSet
except ImportError:
    RunSet = None


def main(rounds: int = 125) -> None:
    events = long_events(rounds)  # 4 tokens per round: 500 tokens
    times = []
    runs = RunSet() if RunSet is not None else None
    so_far = []
    for e in events:
        if runs is not None:
            runs.add(e)
        else:
            so_far.append(e)
        if e.kind == "round_timed":
            t0 = time.perf_counter()
            av.views(runs if runs is not None else so_far, figures=False)
            times.append(time.perf_counter() - t0)
    html = render_stream(events)
    n = html.count('class="tok ')
    print(
        f"{'incremental (RunSet)' if runs is not None else 'whole list every round'}: {len(times)} rounds, "
        f"{n} tokens"
    )
    print(
        f"views per round: first {times[0] * 1e3:.1f} ms, last {times[-1] * 1e3:.1f} ms, "
        f"all rounds together {sum(times):.2f} s"
    )
    print(f"stream: {len(html.encode()) / n:.0f} bytes per token")


if __name__ == "__main__":
    main()
