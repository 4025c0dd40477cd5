"""The race's OS-level load watch: other processes' CPU during each lane's compute, and the flag it raises
when they wanted more cores than the race left free. Scripted counters for the rule (a negative control
included), a real race for the wiring; no timing is asserted."""

import pytest

from engine import Engine, GenerationConfig
from engine.costmodel import CONTENTION_LIMIT, contention
from engine.metrics import summarize
from engine.runtime.loadwatch import LoadWatch, busy_s
from engine.runtime.models import load_model
from engine.validate import check_summary


class Machine:
    """Scripted counters: each step lasts `dt` seconds, our thread computes all of it, others use `others` cores."""

    def __init__(self, others: float, dt: float = 0.05):
        self.t = self.busy = self.own_s = 0.0
        self.others, self.dt = others, dt

    def advance(self):
        self.t += self.dt
        self.own_s += self.dt
        self.busy += self.dt * (1 + self.others)


def watch_under(others_per_step, cores=2, threads=1):
    m = Machine(0.0)
    w = LoadWatch(threads, busy=lambda: m.busy, clock=lambda: m.t)
    w.own, w.cores, w.free = (lambda: m.own_s), cores, cores - threads
    for others in others_per_step:
        m.others = others
        with w.step("speculative"):
            m.advance()
    return w.summary("speculative")


def test_a_load_on_the_free_core_is_not_contention():
    """One other busy core beside a one-thread race on 2 cores: the race had its core; nothing to flag."""
    s = watch_under([1.0] * 40)
    assert s["outside_cores"] == pytest.approx(1.0) and s["contended_share"] == 0 and s["free_cores"] == 1
    assert contention(s) == []


def test_a_load_beyond_the_free_cores_is_flagged():
    """Others wanting 2 cores while the race uses 1 of 2, for half the run: flagged, with the share."""
    s = watch_under([0.0] * 20 + [2.0] * 20)
    assert s["contended_share"] == pytest.approx(0.5, abs=0.1)
    assert contention(s, {}) and "% of a lane" in contention(s)[0]


def test_all_threads_leave_no_free_core():
    """A race on every core has no free core: any real outside load is contention (the negative control
    for the one-thread case above: the same load, flagged)."""
    s = watch_under([1.0] * 40, threads=2)
    assert s["free_cores"] == 0 and s["contended_share"] == 1.0 and contention(s)


def test_short_blips_below_the_limit_pass():
    s = watch_under([0.0] * 95 + [3.0] * 5)
    assert s["contended_share"] <= CONTENTION_LIMIT and contention(s) == []


def test_nothing_measured_nothing_flagged():
    w = LoadWatch(1, busy=lambda: None)
    with w.step("ar"):
        pass
    assert not w.enabled and w.summary("ar") == {} and contention({}, {}) == []


@pytest.mark.skipif(busy_s() is None, reason="no /proc/stat on this OS")
def test_a_real_race_carries_the_load_fields(tiny_dirs):
    engine = Engine(load_model(tiny_dirs["target"]), "self", measure_step=False)
    lanes = {"speculative": [], "ar": []}
    for lane, event in engine.race("1, 2, 3,", GenerationConfig(gamma=2, max_new_tokens=16), threads=1):
        lanes[lane].append(event)
    for lane, events in lanes.items():
        fin = events[-1].summary
        assert fin["outside_cores"] >= 0 and 0 <= fin["contended_share"] <= 1 and fin["free_cores"] >= 0
        check_summary(fin, lane == "ar", len(events))
    s = summarize(lanes["speculative"], lanes["ar"])
    assert 0 <= s["contended_share"] <= 1
    assert (s["contended_share"] > CONTENTION_LIMIT) == any("left free" in f for f in s["timing_flags"])


def test_a_trace_cannot_claim_an_impossible_share():
    with pytest.raises(ValueError, match="contended_share"):
        check_summary({"contended_share": 1.5}, False, 10)
    with pytest.raises(ValueError, match="outside_cores"):
        check_summary({"outside_cores": -1}, False, 10)
