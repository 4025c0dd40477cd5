"""This machine's roofline for the lean forward: how fast it can read weights, how fast it multiplies, and
from those the two floors of a forward over n new tokens.

    memory floor(n)  = bytes a forward must read (every weight once, plus the cached keys and values) / bandwidth
    compute floor(n) = n · FLOPs per token / matmul throughput
    ridge n*         = the n where the two meet: below it a forward costs about one weight read, whatever n

Decoding one token sits far left of the ridge (memory-bound), which is why verifying γ + 1 tokens can cost
about one step; past n* it stops doing so. Bandwidth is a plain tensor copy (read + write), throughput a
large fp32 (or bf16) matmul, both medians of repeated runs at a given thread count, measured here, never
assumed. `python -m engine roofline` prints both, the floors and the measured t(n) beside them.
"""
from __future__ import annotations

import statistics
import time
from dataclasses import dataclass

import torch

from .threads import torch_threads


@dataclass(frozen=True)
class Machine:
    """What was measured: copy bandwidth and matmul throughput at one thread count."""
    threads: int
    bandwidth: float  # bytes per second, a tensor copy counted as read + write
    flops: float  # floating-point operations per second of a large matmul
    dtype: str


@dataclass(frozen=True)
class Costs:
    """What one forward must do: the weight bytes it reads and the FLOPs of its matmuls per new token."""
    weight_bytes: float
    flops_per_token: float  # 2 · (parameters in the matmuls), LM head included
    kv_bytes_per_position: float  # keys and values of one cached position, every layer
    attn_flops_per_position: float  # q·k and p·v of one new token against one cached position, every layer


def _median_s(fn, reps: int) -> float:
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def measure(threads: int, dtype: torch.dtype = torch.float32, copy_mb: int = 256, reps: int = 7) -> Machine:
    """Copy bandwidth and matmul throughput with `threads` torch threads."""
    with torch_threads(threads), torch.inference_mode():
        n = copy_mb * 2**20 // 4
        src, dst = torch.rand(n), torch.empty(n)
        dst.copy_(src)
        copy_s = _median_s(lambda: dst.copy_(src), reps)
        a, b = torch.rand(512, 2048, dtype=dtype), torch.rand(2048, 2048, dtype=dtype)
        torch.mm(a, b)
        mm_s = _median_s(lambda: torch.mm(a, b), reps)
    return Machine(threads, 2 * n * 4 / copy_s, 2 * 512 * 2048 * 2048 / mm_s, str(dtype).replace("torch.", ""))


def costs_of(forward) -> Costs:
    """The lean forward's (FastLlama's) bytes and FLOPs, from the weights it owns."""
    weights = [w for ws in forward.weights().values() for w in ws]
    weight_bytes = sum(w.t.numel() * w.t.element_size() for w in weights)
    params = sum(w.t.numel() for w in weights)
    layers, kv = len(forward.layers), forward.kv_heads * forward.head_dim
    elt = forward.head.t.element_size()
    return Costs(weight_bytes=weight_bytes, flops_per_token=2.0 * params,
                 kv_bytes_per_position=2.0 * layers * kv * elt,
                 attn_flops_per_position=4.0 * layers * forward.heads * forward.head_dim)


def floors(n: int, context: int, costs: Costs, machine: Machine) -> tuple[float, float]:
    """(memory floor, compute floor) in seconds of a forward over n new tokens after `context` cached ones."""
    memory = (costs.weight_bytes + (context + n) * costs.kv_bytes_per_position) / machine.bandwidth
    compute = n * (costs.flops_per_token + (context + n) * costs.attn_flops_per_position) / machine.flops
    return memory, compute


def ridge(context: int, costs: Costs, machine: Machine) -> float:
    """n* where the compute floor reaches the memory floor (the KV terms at this context included)."""
    lo, hi = 0.0, 1.0
    while floors(hi, context, costs, machine)[1] < floors(hi, context, costs, machine)[0]:
        lo, hi = hi, hi * 2
        if hi > 1e7:
            return float("inf")
    for _ in range(60):  # the compute floor grows with n faster than the memory floor: bisect the crossing
        mid = (lo + hi) / 2
        memory, compute = floors(mid, context, costs, machine)
        lo, hi = (mid, hi) if compute < memory else (lo, mid)
    return (lo + hi) / 2


def gap(measured_s: float, n: int, context: int, costs: Costs, machine: Machine) -> float:
    """Measured time over the roofline, max(memory, compute floor): 1 is the roofline itself."""
    return measured_s / max(floors(n, context, costs, machine))
