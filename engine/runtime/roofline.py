"""This machine's roofline for the target's forward: how fast it can read weights, how fast it multiplies, and
what one forward must read and compute. The arithmetic on these numbers (the floors, the ridge n*, the share
of the bandwidth bound a step reached) is the cost model's (engine/costmodel.py); this module measures.

Bandwidth is a plain tensor copy (read + write), throughput a large matmul in the model's dtype, each the best
of repeated runs at a given thread count (noise only ever slows a run, so the best is the machine's rate),
measured here, never assumed, and cached per host (CPU, flags, torch build, threads) like the kernel plan:
`python -m engine roofline [--refresh]` prints both, the floors and the measured t(n) beside them.

A run records `host_record(...)` in RunStarted.host: the machine, the forward's bytes and FLOPs, and the
kernel each projection used at each row count, so a trace says what it was measured on and with what.
"""

from __future__ import annotations

import time

import torch

from . import kernels, loadwatch
from .lean import LeanForward, forward_fn
from .loadwatch import outside_cores
from .permodel import PerModel
from .threads import synchronizer, torch_threads

COPY_MB = 256  # the copied tensor: far larger than any cache
REPS = 7  # timed copies and matmuls, the best kept
MAX_TAKES = 4  # measurements of one host at most, while none was quiet


def _best_s(fn, reps: int, sync) -> float:
    best = float("inf")
    for _ in range(reps):
        sync()
        t = time.perf_counter()
        fn()
        sync()
        best = min(best, time.perf_counter() - t)
    return best


def measure(
    threads: int,
    dtype: torch.dtype = torch.float32,
    copy_mb: int = COPY_MB,
    reps: int = REPS,
    device: str = "cpu",
) -> dict:
    """{"threads", "bandwidth" (bytes/s, a copy counted as read + write), "flops" (of a large matmul), "dtype",
    "device"} with `threads` torch threads."""
    dev = torch.device(device)
    sync = synchronizer(dev)
    with torch_threads(threads if dev.type == "cpu" else None), torch.inference_mode():
        n = copy_mb * 2**20 // 4
        src, dst = torch.rand(n, device=dev), torch.empty(n, device=dev)
        dst.copy_(src)
        copy_s = _best_s(lambda: dst.copy_(src), reps, sync)
        a, b = torch.rand(512, 2048, device=dev).to(dtype), torch.rand(2048, 2048, device=dev).to(dtype)
        torch.mm(a, b)
        mm_s = _best_s(lambda: torch.mm(a, b), reps, sync)
    return {
        "threads": threads,
        "bandwidth": 2 * n * 4 / copy_s,
        "flops": 2 * 512 * 2048 * 2048 / mm_s,
        "dtype": str(dtype).replace("torch.", ""),
        "device": dev.type,
    }


def machine(
    threads: int, dtype: torch.dtype = torch.float32, device: str = "cpu", refresh: bool = False
) -> dict:
    """measure(), per host, cached under ~/.cache/specviz with each take's time and load: a host measured while
    other processes were busy is measured again at the next load (up to MAX_TAKES takes) until one take is quiet;
    the figures are the best over the takes (noise only ever slows a copy or a matmul). refresh: start over."""
    key = {**kernels.host_key(threads), "dtype": str(dtype), "device": device}
    cached = None if refresh else kernels.read_cached("roofline", key)
    takes = takes_of(cached)
    if cached is not None and (any(t["quiet"] for t in takes) or len(takes) >= MAX_TAKES):
        return cached
    rates, cores = outside_cores(lambda: measure(threads, dtype, device=device))
    takes.append({**loadwatch.take(cores), "bandwidth": rates["bandwidth"], "flops": rates["flops"]})
    best = max(takes, key=lambda t: t["bandwidth"])
    cached = {
        **rates,
        "bandwidth": best["bandwidth"],
        "flops": max(t["flops"] for t in takes),
        "measured": best["measured"],
        "outside_cores": best["outside_cores"],
        "takes": takes,
    }
    kernels.write_cached("roofline", key, cached)
    return cached


def takes_of(cached: dict | None) -> list[dict]:
    """The takes a cached record holds; a record from before takes were kept is one take of unknown load that is
    not trusted as quiet (it is measured again once)."""
    if cached is None:
        return []
    if "takes" in cached:
        return list(cached["takes"])
    old = {k: cached.get(k) for k in ("bandwidth", "flops", "measured")}
    return [{**old, "outside_cores": None, "quiet": False}]


def costs_of(forward) -> dict:
    """What one forward must do: the weight bytes it reads, 2 FLOPs per matmul parameter per token, and the
    keys and values per cached position. forward: the lean forward (its owned weights) or a transformers
    module (its Linear layers; the embedding is a lookup, not read whole, unless it is the tied LM head)."""
    if isinstance(forward, LeanForward):
        weights = [w for ws in forward.weights().values() for w in ws]  # their shapes (a native layout pads)
        mats = [torch.empty(w.out_features, w.in_features, dtype=w.w.dtype, device="meta") for w in weights]
        layers, kv, heads, hd = (
            len(forward.layers),
            forward.kv_heads * forward.head_dim,
            forward.heads,
            forward.head_dim,
        )
    else:
        mats = [m.weight for m in forward.modules() if isinstance(m, torch.nn.Linear)]
        cfg = forward.config
        hd = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
        layers, heads, kv = cfg.num_hidden_layers, cfg.num_attention_heads, cfg.num_key_value_heads * hd
    elt = mats[0].element_size()
    return {
        "weight_bytes": float(sum(m.numel() * m.element_size() for m in mats)),
        "flops_per_token": 2.0 * sum(m.numel() for m in mats),
        "kv_bytes_per_position": 2.0 * layers * kv * elt,
        "attn_flops_per_position": 4.0 * layers * heads * hd,
    }


def kernels_used(forward) -> dict:
    """{projection: {rows: "native" | "mkl" | "onednn"}} at the current thread count, for the measured row counts
    (what the lean forward's Weights do now); {} for the transformers forward."""
    if not isinstance(forward, LeanForward):
        return {}
    return {name: {str(r): ws[0].kernel(r) for r in kernels.ROWS} for name, ws in forward.weights().items()}


_HOST = PerModel()  # model -> {threads: its host record}


def host_record(model, device: torch.device, dtype: torch.dtype) -> dict:
    """What RunStarted.host records: the CPU (or GPU), the machine's measured rates at this thread count, the
    forward's bytes and FLOPs, and its kernels. {} when measuring fails (the run goes on without a roofline)."""
    threads = torch.get_num_threads() if device.type == "cpu" else 0

    def build() -> dict:
        forward = forward_fn(model)
        try:
            rates = machine(max(threads, 1), dtype, device.type)
        except (RuntimeError, OSError, MemoryError):
            return {}
        name = torch.cuda.get_device_name(device) if device.type == "cuda" else kernels.cpu_name()
        return {
            "cpu" if device.type == "cpu" else "gpu": name,
            "flags": kernels.cpu_flags(),
            "torch": torch.__version__,
            **{k: v for k, v in rates.items() if k != "takes"},  # the figures used and their best take's load
            **costs_of(forward if isinstance(forward, LeanForward) else model),
            "forward": "lean" if isinstance(forward, LeanForward) else "transformers",
            "kernels": kernels_used(forward),
        }

    return _HOST.get(model, ("host", threads, device.type), build)
