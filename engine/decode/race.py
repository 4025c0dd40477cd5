"""The race: two lanes (the speculative run and its AR baseline, chains or beams) advanced interleaved on one
OS thread, one round at a time, always the lane that has done the smaller share of its work.

Why by share of the work: at every moment both lanes have then done the same fraction of it, so a load that
slows the machine for a while slows the same share of each lane, and the ratio of their times survives it.
Advancing the lane whose clock is behind instead would give both lanes equal *time* under the load, and
leave the slower lane's last stretch exposed alone. Each lane's clock counts only its own compute: a lane's
generator does not count the time it is suspended.

On a CPU both lanes compute with `threads` torch threads (RACE_THREADS, runtime/threads.py): interleaving
makes a load hit both lanes, but only one thread makes it hit them alike: with several, every kernel waits
at a barrier for the thread a load has descheduled, and that wait weighs more on some kernel shapes than
others (measured in benchmarks/results/race-noise.md). The
setting is per OS thread, so it is made around each step of a lane and undone before each yield: a consumer
that resumes the race from other threads (Gradio does) and other runs are untouched. Each lane's Finished
summary also says how much CPU other processes took while it computed (runtime/loadwatch.py).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

from ..runtime.loadwatch import LoadWatch
from ..runtime.threads import torch_threads


def work(event) -> int:
    """How much of a lane's work an event completes: committed tokens (chains), beam steps (beam search)."""
    if event.kind == "committed":
        return len(event.token_ids)
    return 1 if event.kind == "beam_step" else 0


def interleave(lanes: dict, threads: int | None, watch: LoadWatch) -> Iterator[tuple[str, object]]:
    """(lane, event) from lanes {name: event generator}: each step runs, up to its round_timed, the lane that has
    done the least work; `threads` wraps each step (None: the caller's setting)."""
    done = dict.fromkeys(lanes, 0)
    try:
        while lanes:
            lane = min(lanes, key=done.__getitem__)  # the lane behind in its share of the work
            while True:
                with torch_threads(threads), watch.step(lane):
                    event = next(lanes[lane], None)
                if event is None:  # that lane has finished
                    del lanes[lane]
                    break
                if event.kind == "finished":  # what other processes took while this lane computed
                    event = dataclasses.replace(
                        event, summary={**(event.summary or {}), **watch.summary(lane)}
                    )
                yield lane, event
                done[lane] += work(event)
                if event.kind == "round_timed":
                    break
    finally:
        for gen in lanes.values():
            gen.close()
