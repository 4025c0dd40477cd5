"""The roofline's arithmetic (engine/runtime/roofline.py): floors from the lean forward's own bytes and FLOPs, the
ridge where they meet, and the gap of a measured time to them; the measurement itself returns real rates."""

from __future__ import annotations

import time

import pytest

from engine import costmodel
from engine.runtime import loadwatch, roofline
from engine.runtime.lean import LeanForward
from tests.tiny import tiny_llama


@pytest.fixture(scope="module")
def forward():
    return LeanForward(tiny_llama())


def test_costs_count_every_weight_once(forward):
    """Weight bytes are the owned matrices' (fp32: 4 bytes a parameter); FLOPs are 2 per parameter per token."""
    costs = roofline.costs_of(forward)
    params = sum(w.in_features * w.out_features for ws in forward.weights().values() for w in ws)
    assert costs["weight_bytes"] == 4 * params and costs["flops_per_token"] == 2 * params
    assert costs["kv_bytes_per_position"] == 2 * 2 * (2 * 16) * 4  # K and V, 2 layers, 2 heads of 16, fp32


def test_the_ridge_is_where_the_floors_meet(forward):
    """Below n* the memory floor bounds a forward, above it the compute floor; at n* they are equal."""
    r = {**roofline.costs_of(forward), "bandwidth": 20e9, "flops": 200e9}
    n_star = costmodel.ridge(100, r)
    memory, compute = costmodel.floors(n_star, 100, r)
    assert compute == pytest.approx(memory, rel=1e-6)
    below, above = costmodel.floors(max(n_star / 4, 0.5), 100, r), costmodel.floors(n_star * 4, 100, r)
    assert below[0] > below[1] and above[1] > above[0]
    assert costmodel.gap(2 * max(costmodel.floors(1, 100, r)), 1, 100, r) == pytest.approx(2)


def test_bandwidth_share_is_the_memory_floor_over_the_step():
    """The share a step reached: (weights + KV at the context) ÷ bandwidth, over the measured step; by hand."""
    host = {
        "bandwidth": 10e9,
        "flops": 1e11,
        "weight_bytes": 5e8,
        "flops_per_token": 2.5e8,
        "kv_bytes_per_position": 1e5,
        "attn_flops_per_position": 1e3,
    }
    share = costmodel.bandwidth_share(0.1, 999, host)
    assert share["read_bytes"] == pytest.approx(5e8 + 1000 * 1e5)  # 0.6 GB
    assert share["floor_s"] == pytest.approx(0.06) and share["share"] == pytest.approx(0.6)
    assert share["bound_tokens_per_s"] == pytest.approx(1 / 0.06)
    assert costmodel.bandwidth_share(0.1, 999, {**host, "bandwidth": 0}) is None  # no roofline, no share
    assert costmodel.bandwidth_share(None, 999, host) is None


def test_the_measurement_returns_real_rates():
    """A small stream, copy and matmul give finite, positive bandwidths and throughput at one thread."""
    machine = roofline.measure(1, stream_mb=8, reps=3)
    assert machine["threads"] == 1 and 1e8 < machine["bandwidth"] < 1e13 and 1e8 < machine["flops"] < 1e15
    assert 1e8 < machine["copy_bandwidth"] < 1e13


def test_a_run_records_the_machine_and_the_kernels_it_used(tiny_dirs, tmp_path, monkeypatch):
    """RunStarted.host carries the measured rates, the forward's own bytes and FLOPs, and the kernel each
    projection used per row count at the run's thread count; it survives a trace round trip."""
    import torch

    from engine import Engine, GenerationConfig
    from engine.events import trace_from_json, trace_to_json
    from engine.runtime import kernels
    from engine.runtime.lean import forward_fn
    from engine.runtime.models import load_model

    monkeypatch.setattr(kernels, "CACHE_DIR", tmp_path)
    target = load_model(tiny_dirs["target"])
    events = list(
        Engine(target, "ngram", measure_step=False).generate(
            "1, 2, 3, 1, 2, 3,", GenerationConfig(gamma=3, max_new_tokens=8)
        )
    )
    host = events[0].host
    assert host["threads"] == torch.get_num_threads() == events[0].threads
    assert host["cpu"] == kernels.cpu_name() and host["bandwidth"] > 1e8 and host["flops"] > 1e8
    forward = forward_fn(target.model)
    assert host["weight_bytes"] == roofline.costs_of(forward)["weight_bytes"]
    for name, ws in forward.weights().items():
        for rows in kernels.ROWS:
            assert host["kernels"][name][str(rows)] == ws[0].kernel(rows)
    assert trace_from_json(trace_to_json(events))[0].host == host


def test_the_machine_is_measured_once_per_host_then_read_from_the_cache(tmp_path, monkeypatch):
    """machine() measures and stores under the cache dir; the next call reads it (never measures again) until
    --refresh; another thread count is another host key."""
    from engine.runtime import kernels

    monkeypatch.setattr(kernels, "CACHE_DIR", tmp_path)
    monkeypatch.setattr(roofline, "outside_cores", lambda fn: (fn(), 0.0))  # a quiet machine
    calls = []
    monkeypatch.setattr(
        roofline,
        "measure",
        lambda threads, dtype, device: (
            calls.append(threads)
            or {"threads": threads, "bandwidth": 1e10 * (1 + len(calls)), "flops": 1e11, "dtype": "float32"}
        ),
    )
    first = roofline.machine(1)
    assert roofline.machine(1) == first and calls == [1] and len(list(tmp_path.glob("roofline-*.json"))) == 1
    assert roofline.machine(2)["threads"] == 2 and calls == [1, 2]
    assert roofline.machine(1, refresh=True)["bandwidth"] != first["bandwidth"] and calls == [1, 2, 1]


@pytest.mark.parametrize(
    "bad, message",
    [
        ({"bandwidth": -1.0}, "run_started.host.bandwidth must be a number >= 0"),
        ({"cpu": "x" * 500}, "run_started.host.cpu must be a string of at most 200"),
        ({"kernels": {"qkv": {"1": "rm -rf"}}}, "run_started.host.kernels must map"),
        ({"secret": 1}, "run_started.host has unknown keys"),
    ],
)
def test_a_trace_with_a_bad_host_is_refused_by_name(bad, message):
    from engine.validate import check_host

    with pytest.raises(ValueError, match=message):
        check_host(bad)
    check_host({})  # an older trace: no host recorded


def test_a_host_measured_under_load_is_measured_again_and_keeps_its_best(tmp_path, monkeypatch):
    """A take while other processes kept cores busy is not trusted: the next load measures again, the figures are
    the best take's, each take records when and under what load; a quiet take ends it, and so does MAX_TAKES.
    Negative control: with every take quiet, the second load measures nothing."""
    from engine.runtime import kernels

    monkeypatch.setattr(kernels, "CACHE_DIR", tmp_path)
    loads, calls = [1.5, 0.9, 0.1, 2.0], []

    def measure(threads, dtype, device):
        calls.append(threads)
        return {
            "threads": threads,
            "bandwidth": {1: 8e9, 2: 12e9, 3: 10e9}.get(len(calls), 9e9),
            "flops": 1e11,
        }

    monkeypatch.setattr(roofline, "measure", measure)
    monkeypatch.setattr(
        roofline, "outside_cores", lambda fn: (lambda out: (out, loads[len(calls) - 1]))(fn())
    )
    first = roofline.machine(1)
    assert first["bandwidth"] == 8e9 and not first["takes"][0]["quiet"] and first["outside_cores"] == 1.5
    second = roofline.machine(1)  # busy before: measured again, the better take kept
    assert len(calls) == 2 and second["bandwidth"] == 12e9 and second["outside_cores"] == 0.9
    third = roofline.machine(1)  # still no quiet take: a third, quiet and slower; the best stays
    assert len(calls) == 3 and third["bandwidth"] == 12e9 and third["takes"][-1]["quiet"]
    assert roofline.machine(1) == third and len(calls) == 3  # a quiet take: read from the cache from now on
    assert [t["outside_cores"] for t in third["takes"]] == [1.5, 0.9, 0.1]

    monkeypatch.setattr(roofline, "outside_cores", lambda fn: (fn(), 3.0))  # never quiet: MAX_TAKES ends it
    for _ in range(loadwatch.MAX_TAKES + 2):
        roofline.machine(2)
    assert calls.count(2) == loadwatch.MAX_TAKES

    monkeypatch.setattr(roofline, "outside_cores", lambda fn: (fn(), 0.0))  # negative control: quiet at once
    roofline.machine(3), roofline.machine(3)
    assert calls.count(3) == 1


def test_a_cached_copy_rate_is_not_taken_for_the_read_rate(tmp_path, monkeypatch):
    """A record cached before the floor used the read rate (its bandwidth a copy's, read + write counted, up to
    1.5× a read-only stream's) is never read: the host is measured afresh. Negative control: a record under the
    read rate's key is read and nothing is measured."""
    import torch

    from engine.runtime import kernels

    monkeypatch.setattr(kernels, "CACHE_DIR", tmp_path)
    old = {**kernels.host_key(1), "dtype": str(torch.float32), "device": "cpu"}
    take = {"bandwidth": 9e9, "flops": 1e11, "measured": "2026-01-01", "outside_cores": 0.0, "quiet": True}
    kernels.write_cached("roofline", old, {"threads": 1, **take, "takes": [take]})
    calls = []
    monkeypatch.setattr(
        roofline,
        "measure",
        lambda t, d, device: (
            calls.append(t) or {"threads": t, "bandwidth": 4e9, "copy_bandwidth": 6e9, "flops": 2e11}
        ),
    )
    monkeypatch.setattr(roofline, "outside_cores", lambda fn: (fn(), 0.0))
    r = roofline.machine(1)
    assert calls == [1] and r["bandwidth"] == 4e9 and r["copy_bandwidth"] == 6e9 and r["flops"] == 2e11
    kernels.write_cached("roofline", {**old, "bandwidth": "read"}, {"threads": 1, **take, "takes": [take]})
    assert roofline.machine(1)["bandwidth"] == 9e9 and calls == [1]


def test_explain_says_how_busy_the_machine_was_when_its_rates_were_measured():
    """The roofline paragraph names the load its rates were measured under; nothing when it was not recorded."""
    from specviz.roofline import measured_load

    assert measured_load({"outside_cores": 0.05}) == ", on a quiet machine"
    assert "other processes kept 0.80 cores busy" in measured_load({"outside_cores": 0.8})
    assert measured_load({}) == measured_load({"outside_cores": None}) == ""


def test_the_load_of_a_measurement_too_short_to_tell_is_unknown(monkeypatch):
    """/proc/stat counts 10 ms ticks: a measurement shorter than WINDOW_S records no load (None, taken as quiet),
    so a tiny shape is not measured again and again for a tick of noise; a long one records what it saw."""
    from engine.runtime import loadwatch

    # busy_s before and after: 0.5 CPU-s of other work, then 100 (over any wall time a busy box gives the sleep)
    ticks = iter([0.0, 0.5, 10.0, 110.0])
    monkeypatch.setattr(loadwatch, "busy_s", lambda: next(ticks))
    assert loadwatch.outside_cores(lambda: 7) == (7, None)
    out, cores = loadwatch.outside_cores(lambda: time.sleep(loadwatch.WINDOW_S + 0.05))
    assert out is None and cores is not None and cores > 0.25


def test_a_record_without_takes_is_measured_again(tmp_path, monkeypatch):
    """A cached record that holds no takes (hand-edited, or a development build's) does not crash a run: the host
    is measured again."""
    import torch

    from engine.runtime import kernels

    monkeypatch.setattr(kernels, "CACHE_DIR", tmp_path)
    key = {**kernels.host_key(1), "dtype": str(torch.float32), "device": "cpu", "bandwidth": "read"}
    kernels.write_cached("roofline", key, {"threads": 1, "bandwidth": 9e9, "flops": 1e11})
    monkeypatch.setattr(
        roofline, "measure", lambda t, d, device: {"threads": t, "bandwidth": 4e9, "flops": 2e11}
    )
    monkeypatch.setattr(roofline, "outside_cores", lambda fn: (fn(), 0.0))
    assert roofline.machine(1)["bandwidth"] == 4e9


def test_a_tree_drafter_curve_before_a_plain_step_is_timed():
    """VerifyTimes: before t(1) is timed, sizes below the smallest timed one are not free (t(1) is that size's time
    less the prior's slope); once timed, t(1) is the measured one. Negative control: the curve is flat only where
    the times are."""
    from engine import costmodel

    times = costmodel.VerifyTimes()
    assert times.curve()(5) == pytest.approx(1 + costmodel.PRIOR_SLOPE * 4)  # nothing timed: the prior line
    times.observe(4, 0.013)
    t = times.curve()
    assert t(1) == 1.0 and t(4) == pytest.approx(1 + costmodel.PRIOR_SLOPE * 3)  # 4 rows are not free
    times.observe(1, 0.010)
    t = times.curve()
    assert t(4) == pytest.approx(1.3) and times.measured() == [1, 4]
    flat = costmodel.VerifyTimes()
    for n in (1, 4):
        flat.observe(n, 0.01)
    assert flat.curve()(4) == 1.0


def test_each_run_reads_the_bandwidth_at_its_start_beside_the_host_best(tiny_dirs, tmp_path, monkeypatch):
    """RunStarted.host's bandwidth is read at each run's start over the forward's largest weight (the rate of
    the moment, which the floors use); the host's best take stays beside it as bandwidth_best, never below what a
    run read: a run that reads more than the cached take raises it. Control: runs that read less leave it."""
    from engine import Engine, GenerationConfig
    from engine.runtime import kernels
    from engine.runtime.lean import forward_fn
    from engine.runtime.models import load_model

    monkeypatch.setattr(kernels, "CACHE_DIR", tmp_path)
    monkeypatch.setattr(roofline, "_BEST", {})  # this process's best reads: the test's own
    target = load_model(tiny_dirs["target"])
    tensors = roofline.weight_tensors(target.model)
    forward = forward_fn(target.model)
    # every matrix the forward reads, in its kernels' layouts (a native panel layout may pad)
    assert sum(t.numel() * t.element_size() for t in tensors) >= roofline.costs_of(forward)["weight_bytes"]
    largest = roofline.largest_weight(target.model)
    assert all(t.numel() <= largest.numel() for t in tensors) and any(t is largest for t in tensors)
    assert 1e8 < roofline.read_rate(largest, roofline.RUN_REPS) < 1e13
    roofline.host_record(target.model, target.device, target.dtype)  # the host measured and cached first
    rates, read = iter([7e9, 9e9, 1e13]), []
    monkeypatch.setattr(roofline, "read_rate", lambda src, reps, sync: read.append(src) or next(rates))
    engine = Engine(target, "ngram", measure_step=False)
    cfg = GenerationConfig(gamma=3, max_new_tokens=4)
    hosts = [next(iter(engine.generate("1, 2, 3, 1, 2, 3,", cfg))).host for _ in range(2)]
    assert [h["bandwidth"] for h in hosts] == [7e9, 9e9] and all(src is largest for src in read)
    # the host's best take, the same for both runs (the per-model record), not what either run read
    assert hosts[0]["bandwidth_best"] == hosts[1]["bandwidth_best"] > 1e8
    assert hosts[0]["bandwidth_best"] not in (7e9, 9e9)
    above = next(iter(engine.generate("1, 2, 3, 1, 2, 3,", cfg))).host  # a run that reads more than the cache
    assert above["bandwidth"] == above["bandwidth_best"] == 1e13
