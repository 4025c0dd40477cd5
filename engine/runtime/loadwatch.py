"""How much CPU other processes took while a race lane computed: read from the operating system, not
inferred from the lane's own timings (a steady load leaves no drift or spread for a timing guard to see).

Linux only (/proc/stat); elsewhere, or on a GPU, nothing is measured and nothing is flagged. The race
(Engine.race) wraps each step of a lane in `LoadWatch.step`, and so does the app's solo run (Engine.watched); the lane's Finished summary then carries
`outside_cores` (the average number of cores other work kept busy while the lane computed) and
`contended_share` (the share of the lane's compute time in windows where other work wanted more cores
than the race left free). costmodel.contention turns the latter into a timing flag.
"""

from __future__ import annotations

import os
import time
from contextlib import contextmanager
from pathlib import Path

from .. import costmodel

STAT = Path("/proc/stat")
TICK_S = 1 / os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 0.01
WINDOW_S = 0.25  # lane compute time per judged window: /proc/stat counts in 10 ms ticks, so shorter is noise
MARGIN_CORES = 0.25  # other work must want this much more than the free cores for a window to count


def busy_s() -> float | None:
    """CPU seconds all cores have spent busy since boot (steal included: a VM's neighbours), or None."""
    try:
        fields = STAT.read_text().split("\n", 1)[0].split()
    except OSError:
        return None
    if not fields or fields[0] != "cpu":
        return None
    user, nice, system, idle, iowait, irq, softirq, steal = (int(x) for x in (fields[1:9] + ["0"] * 8)[:8])
    return (user + nice + system + irq + softirq + steal) * TICK_S


class LoadWatch:
    """Per-lane accounting of other processes' CPU during that lane's own compute."""

    def __init__(self, threads: int | None, enabled: bool = True, busy=None, clock=time.perf_counter):
        self.busy = busy or busy_s
        self.clock = clock
        self.enabled = enabled and self.busy() is not None
        self.cores = os.cpu_count() or 1
        self.threads = threads
        # own CPU: with one thread, that OS thread's (so other runs in this process count as load);
        # with several, the process's (the OpenMP workers are ours)
        self.own = time.thread_time if threads == 1 else time.process_time
        self.free = max(self.cores - (threads or self.cores), 0)
        self.lanes: dict[str, dict] = {}

    @contextmanager
    def step(self, lane: str):
        if not self.enabled:
            yield
            return
        b0, o0, t0 = self.busy(), self.own(), self.clock()
        try:
            yield
        finally:
            b1, o1, t1 = self.busy(), self.own(), self.clock()
            acc = self.lanes.setdefault(
                lane, {"wall": 0.0, "outside": 0.0, "contended": 0.0, "win": [0.0, 0.0]}
            )
            outside = (b1 - b0) - (o1 - o0)
            acc["wall"] += t1 - t0
            acc["outside"] += outside
            win = acc["win"]
            win[0] += t1 - t0
            win[1] += outside
            if win[0] >= WINDOW_S:
                acc["contended"] += self._judge(win)
                acc["win"] = [0.0, 0.0]

    def _judge(self, win: list) -> float:
        """The window's time if other work wanted more than the free cores during it, else 0."""
        return win[0] if win[0] > 0 and win[1] / win[0] > self.free + MARGIN_CORES else 0.0

    def summary(self, lane: str) -> dict:
        """Fields for the lane's Finished summary ({} when nothing was measured)."""
        acc = self.lanes.get(lane)
        if not acc or acc["wall"] <= 0:
            return {}
        last = acc["win"]  # the unfinished last window counts once it is half a window long
        contended = acc["contended"] + (self._judge(last) if last[0] >= WINDOW_S / 2 else 0.0)
        return {
            "outside_cores": round(max(acc["outside"], 0.0) / acc["wall"], 3),
            "contended_share": round(min(contended / acc["wall"], 1.0), 3),
            "free_cores": self.free,
        }


def outside_cores(fn):
    """(fn(), the average number of cores other processes kept busy while it ran, or None where /proc/stat is
    not readable or fn took less than WINDOW_S, too short for its 10 ms ticks to tell): what a cached host
    measurement records beside its figures."""
    b0, o0, t0 = busy_s(), time.process_time(), time.perf_counter()
    out = fn()
    b1, o1, t1 = busy_s(), time.process_time(), time.perf_counter()
    if b0 is None or b1 is None or t1 - t0 < WINDOW_S:
        return out, None
    return out, round(max((b1 - b0) - (o1 - o0), 0.0) / (t1 - t0), 2)


MAX_TAKES = 4  # measurements of one cached figure at most, while none was quiet


def measure_again(takes: list) -> bool:
    """A cached measurement (a kernel shape, the host's rates) taken only while other processes were busy is
    measured again, at most MAX_TAKES times: the one rule for every measurement cached per host."""
    return not any(t["quiet"] for t in takes) and len(takes) < MAX_TAKES


def take(cores: float | None) -> dict:
    """A measurement's when and load: {"measured": local date and time, "outside_cores", "quiet"} (unknown load
    counts as quiet: there is nothing to wait for)."""
    return {
        "measured": time.strftime("%Y-%m-%d %H:%M"),
        "outside_cores": cores,
        "quiet": cores is None or cores < costmodel.QUIET_CORES,
    }
