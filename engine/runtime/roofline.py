"""This machine's roofline for the target's forward: how fast it can read weights, how fast it multiplies, and
what one forward must read and compute. The arithmetic on these numbers (the floors, the ridge n*, the share
of the bandwidth bound a step reached) is the cost model's (engine/costmodel.py); this module measures.

Bandwidth is the rate a read-only stream reaches (a sum over a tensor far larger than any cache): a forward reads
its weights and writes almost nothing, so that is the rate its memory floor is bound by. A plain copy (read +
write counted) is measured beside it and printed, not used: on some hosts it counts up to 1.5× the read rate
(reads and writes overlapping), a floor no forward can reach. Throughput is a large matmul in the model's dtype.
Each is the best of repeated runs at a given thread count (noise only ever slows a run, so the best is the
machine's rate),
measured here, never assumed, and cached per host (CPU, flags, torch build, threads) like the kernel plan:
`python -m engine roofline [--refresh]` prints both, the floors and the measured t(n) beside them.

A run records `host_record(...)` in RunStarted.host: the machine, the forward's bytes and FLOPs, and the
kernel each projection used at each row count, so a trace says what it was measured on and with what. Its
`bandwidth` is read at the run's start, over the forward's largest weight matrix (the LM head of a small LM:
113 MB for SmolLM2-135M; best of RUN_REPS reads, before the clock starts; a read of every matrix one by one
measured ~10% under a flat stream on the AMD EPYC host, from per-call overheads a stream does not have; a
model whose largest matrix fits in the last-level cache reads a cache's rate): a host's memory rate can halve
and double within minutes (a neighbour's load, the memory clock), so the cached best take (kept beside it as
`bandwidth_best`) is a rate a run rarely sees, and a floor from it would make every step look far from a bound
it could not have reached then.
"""

from __future__ import annotations

import copy
import threading
import time

import torch

from . import kernels, loadwatch, native
from .lean import LeanForward, forward_fn
from .loadwatch import outside_cores
from .permodel import PerModel
from .threads import synchronizer, torch_threads

STREAM_MB = 256  # the streamed tensor: far larger than any cache
REPS = 7  # timed copies and matmuls, the best kept
RUN_REPS = 5  # reads of the largest weight at a run's start, the best kept
RATES = ("bandwidth", "copy_bandwidth", "flops")  # a take's figures; the record keeps each one's best


def _best_s(fn, reps: int, sync) -> float:
    best = float("inf")
    for _ in range(reps):
        sync()
        t = time.perf_counter()
        fn()
        sync()
        best = min(best, time.perf_counter() - t)
    return best


def read_rate(src: torch.Tensor, reps: int = REPS, sync=lambda: None) -> float:
    """Bytes per second a read-only stream over `src` reaches (a sum; the best of `reps`)."""
    return src.numel() * src.element_size() / _best_s(lambda: src.sum(), reps, sync)


def weight_tensors(model) -> list[torch.Tensor]:
    """The matrices a forward of `model` reads: the lean forward's owned ones (its kernels' layouts), else the
    Linear layers' (the tied LM head among them)."""
    forward = forward_fn(model)
    if isinstance(
        forward, LeanForward
    ):  # blocks' bytes read as floats (a sum of bytes would not be memory-bound)
        return [
            w.w.view(torch.float32) if w.w.dtype == torch.uint8 else w.w
            for ws in forward.weights().values()
            for w in ws
        ]
    return [m.weight for m in model.modules() if isinstance(m, torch.nn.Linear)]


def largest_weight(model) -> torch.Tensor:
    """The largest matrix a forward of `model` reads (what a run's start streams to read the bandwidth)."""
    return max(weight_tensors(model), key=lambda t: t.numel() * t.element_size())


def measure(
    threads: int,
    dtype: torch.dtype = torch.float32,
    stream_mb: int = STREAM_MB,
    reps: int = REPS,
    device: str = "cpu",
) -> dict:
    """{"threads", "bandwidth" (bytes/s a read-only stream reaches), "copy_bandwidth" (bytes/s of a copy, read +
    write counted), "flops" (of a large matmul), "dtype", "device"} with `threads` torch threads."""
    dev = torch.device(device)
    sync = synchronizer(dev)
    with torch_threads(threads if dev.type == "cpu" else None), torch.inference_mode():
        n = stream_mb * 2**20 // 4
        src, dst = torch.rand(n, device=dev), torch.empty(n, device=dev)
        dst.copy_(src)
        read = read_rate(src, reps, sync)
        copy_s = _best_s(lambda: dst.copy_(src), reps, sync)
        a, b = torch.rand(512, 2048, device=dev).to(dtype), torch.rand(2048, 2048, device=dev).to(dtype)
        torch.mm(a, b)
        mm_s = _best_s(lambda: torch.mm(a, b), reps, sync)
    return {
        "threads": threads,
        "bandwidth": read,
        "copy_bandwidth": 2 * n * 4 / copy_s,
        "flops": 2 * 512 * 2048 * 2048 / mm_s,
        "dtype": str(dtype).replace("torch.", ""),
        "device": dev.type,
    }


def machine(
    threads: int, dtype: torch.dtype = torch.float32, device: str = "cpu", refresh: bool = False
) -> dict:
    """measure(), per host, cached under ~/.cache/specviz with each take's time and load: a host measured while
    other processes were busy is measured again at the next load (up to MAX_TAKES takes) until one take is quiet;
    the figures are the best over the takes (noise only ever slows a stream or a matmul). refresh: start over."""
    key = {**kernels.host_key(threads), "dtype": str(dtype), "device": device, "bandwidth": "read"}
    cached = None if refresh else kernels.read_cached("roofline", key)
    takes = takes_of(cached)
    if cached is not None and not loadwatch.measure_again(takes):
        return cached
    rates, cores = outside_cores(lambda: measure(threads, dtype, device=device))
    takes.append({**loadwatch.take(cores), **{k: rates[k] for k in RATES if k in rates}})
    best = max(takes, key=lambda t: t["bandwidth"])
    cached = {
        **rates,
        **{k: max(t[k] for t in takes if k in t) for k in RATES if any(k in t for t in takes)},
        "measured": best["measured"],
        "outside_cores": best["outside_cores"],
        "takes": takes,
    }
    kernels.write_cached("roofline", key, cached)
    return cached


def takes_of(cached: dict | None) -> list[dict]:
    """The takes a cached record holds (records of the copy rate, from before the floor used the read rate, sit
    under another key and are never read)."""
    return list(cached.get("takes") or []) if cached is not None else []  # none: measured again


def costs_of(forward) -> dict:
    """What one forward must do: the weight bytes it reads, 2 FLOPs per matmul parameter per token, and the
    keys and values per cached position. forward: the lean forward (its owned weights) or a transformers
    module (its Linear layers; the embedding is a lookup, not read whole, unless it is the tied LM head)."""
    if isinstance(forward, LeanForward):
        weights = [w for ws in forward.weights().values() for w in ws]  # their shapes (a native layout pads)
        params = sum(w.out_features * w.in_features for w in weights)
        # the bytes a step reads: fp32 matrices, or the GGUF's blocks (Weight.nbytes / BlockWeight.nbytes)
        read, elt = float(sum(w.nbytes for w in weights)), forward.norm.element_size()
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
        params, elt = sum(m.numel() for m in mats), mats[0].element_size()
        read = float(sum(m.numel() * m.element_size() for m in mats))
    return {
        "weight_bytes": read,
        "weights": getattr(forward, "weight_format", "fp32"),  # "gguf": the file's blocks; "fp32": matrices
        "weight_bytes_fp32": 4.0 * params,  # what the same weights de-quantized to fp32 would read
        "flops_per_token": 2.0 * params,
        "kv_bytes_per_position": 2.0 * layers * kv * elt,
        "attn_flops_per_position": 4.0 * layers * heads * hd,
    }


HOT_BYTES = 1 << 18  # a slice of a projection this small stays in a core's cache while it is timed


def kernel_floor(forward, n: int, reps: int = REPS) -> float | None:
    """The block kernels' own compute floor of a forward's projections over n rows, in seconds: each projection's
    kernel timed (best of reps) on a slice of its panels small enough to stay in the cache, so the kernel waits on
    no memory, scaled to the projection's panels, summed over the layers. On 4-bit blocks a CPU rebuilds every
    weight in registers (5-7 instructions a vector of weights) before its FMAs: this floor, not the bytes, can bound
    a step. None for fp32 weights (there the matmul rate's compute floor stands)."""
    if getattr(forward, "weight_format", "fp32") != "gguf":
        return None
    total = 0.0
    with torch.inference_mode():
        for weights in forward.weights().values():
            # one timing per block type a projection comes in (Gemma's Q4_K_M mixes two across its layers)
            by_kind: dict[str, list] = {}
            for w in weights:
                by_kind.setdefault(w.kind, []).append(w)
            for same in by_kind.values():
                w = same[0]
                k = max(1, min(w.panels, HOT_BYTES // max(1, w.w.shape[1])))
                hot = copy.copy(w)
                hot.w, hot.panels, hot.out_features = w.w[:k], k, k * native.panel()  # the first k panels
                x = torch.randn(n, w.in_features)
                hot._native(x)  # warm: the slice in the cache
                best = _best_s(lambda hot=hot, x=x: hot._native(x), reps, lambda: None)
                total += best * w.panels / k * len(same)
    return total


def kernels_used(forward) -> dict:
    """{projection: {rows: "native" | "mkl" | "onednn"}} at the current thread count, for the measured row counts
    (what the lean forward's Weights do now); {} for the transformers forward."""
    if not isinstance(forward, LeanForward):
        return {}
    return {name: {str(r): ws[0].kernel(r) for r in kernels.ROWS} for name, ws in forward.weights().items()}


def plan_calibration(forward, threads: int) -> dict:
    """{"v": {rows: one pass of every timed projection with its planned kernel at `rows` rows ÷ at 1 row}}: the
    kernel plan's medians (the best over its takes: load only slows one), what costrule.usable predicts with when a
    run's own v(n) cannot be used; {} without a plan at this thread count (the transformers forward)."""
    if getattr(forward, "weight_format", "fp32") == "gguf":
        return block_calibration(forward, threads)
    plan = (getattr(forward, "plans", None) or {}).get(threads) or {}
    total: dict[int, float] = {}
    for by_rows in plan.values():
        for rows, timed in by_rows.items():
            total[int(rows)] = total.get(int(rows), 0.0) + timed[timed["kernel"]]
    if not total.get(1):
        return {}
    return {"v": _non_decreasing(total)}


def block_calibration(forward, threads: int) -> dict:
    """On a GGUF's blocks (no kernel plan: one kernel per row count), {"v": {rows: max(memory floor, the block
    kernels' cache-hot time) at rows ÷ the same at 1 row}, "of": "blocks"}: each factor a best of REPS, so a busy
    moment only slows a take, and the ratio of two such floors is what a step's work sets, not the load."""
    rates = machine(max(threads, 1))
    memory = forward.weight_bytes / rates["bandwidth"]
    with torch_threads(threads):
        cost = {
            rows: max(memory, kernel_floor(forward, rows))
            for rows in kernels.ROWS
            if rows <= native.NATIVE_ROWS
        }
    return {"v": _non_decreasing(cost), "of": "blocks"}


def _non_decreasing(seconds: dict[int, float]) -> dict[str, float]:
    """{rows: seconds} -> {"rows": v(rows)}, v = seconds ÷ seconds at 1 row, never below 1 and never above a larger
    row count's: a forward over more rows does all of a smaller one's work, and each take is a best (the load only
    slows one), so a smaller row count timed above a larger one was slowed: it gets the larger one's time."""
    out, ceiling = {}, float("inf")
    for rows, s in sorted(seconds.items(), reverse=True):
        ceiling = min(ceiling, s)
        out[str(rows)] = round(max(ceiling / seconds[1], 1.0), 4)
    return dict(sorted(out.items(), key=lambda kv: int(kv[0])))


_HOST = PerModel()  # model -> {threads: its host record}
_BEST: dict = {}  # (threads, device) -> the best read rate seen in this process (the cached take or a run's)
_BEST_LOCK = threading.Lock()


def host_record(model, device: torch.device, dtype: torch.dtype) -> dict:
    """What RunStarted.host records: the CPU (or GPU), the machine's measured rates at this thread count, the
    forward's bytes and FLOPs, and its kernels; `bandwidth` read now over the forward's largest weight, the
    cached best take beside it as `bandwidth_best`. {} when measuring fails (the run goes on without a roofline)."""
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
            "calibration": plan_calibration(forward, max(threads, 1)),
        }

    key = ("host", threads, device.type)
    record = _HOST.get(model, key, build)
    if not record:
        return record
    try:
        with torch.inference_mode():  # a transformers model's Parameters: no autograd record of the sums
            now = read_rate(largest_weight(model), RUN_REPS, synchronizer(device))
    except (RuntimeError, OSError, MemoryError):  # the run goes on with the cached rate
        return record
    # the best take is the best read seen on this host: the cached one, or a run's that beat it (a cache taken
    # under more load than now would otherwise print a "best" below the current reading)
    with _BEST_LOCK:
        best = _BEST[key] = max(_BEST.get(key, record["bandwidth"]), now)
    return {**record, "bandwidth": now, "bandwidth_best": best}
