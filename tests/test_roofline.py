"""The roofline's arithmetic (engine/runtime/roofline.py): floors from the lean forward's own bytes and FLOPs, the
ridge where they meet, and the gap of a measured time to them; the measurement itself returns real rates."""
from __future__ import annotations

import pytest

from engine.runtime import roofline
from engine.runtime.fastllama import FastLlama
from tests.tiny import tiny_llama


@pytest.fixture(scope="module")
def forward():
    return FastLlama(tiny_llama())


def test_costs_count_every_weight_once(forward):
    """Weight bytes are the owned matrices' (fp32: 4 bytes a parameter); FLOPs are 2 per parameter per token."""
    costs = roofline.costs_of(forward)
    params = sum(w.t.numel() for ws in forward.weights().values() for w in ws)
    assert costs.weight_bytes == 4 * params and costs.flops_per_token == 2 * params
    assert costs.kv_bytes_per_position == 2 * 2 * (2 * 16) * 4  # K and V, 2 layers, 2 heads of 16, fp32


def test_the_ridge_is_where_the_floors_meet(forward):
    """Below n* the memory floor bounds a forward, above it the compute floor; at n* they are equal."""
    costs = roofline.costs_of(forward)
    machine = roofline.Machine(threads=1, bandwidth=20e9, flops=200e9, dtype="float32")
    n_star = roofline.ridge(100, costs, machine)
    memory, compute = roofline.floors(n_star, 100, costs, machine)
    assert compute == pytest.approx(memory, rel=1e-6)
    below, above = roofline.floors(max(n_star / 4, 0.5), 100, costs, machine), roofline.floors(n_star * 4, 100, costs,
                                                                                             machine)
    assert below[0] > below[1] and above[1] > above[0]
    assert roofline.gap(2 * max(roofline.floors(1, 100, costs, machine)), 1, 100, costs, machine) == pytest.approx(2)


def test_the_measurement_returns_real_rates():
    """A small copy and matmul give finite, positive bandwidth and throughput at one thread."""
    machine = roofline.measure(1, copy_mb=8, reps=3)
    assert machine.threads == 1 and 1e8 < machine.bandwidth < 1e13 and 1e8 < machine.flops < 1e15
