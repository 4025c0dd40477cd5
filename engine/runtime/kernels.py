"""Which matmul kernel each projection of the lean forward uses, measured on the host it runs on.

For every weight shape and dtype, at the row counts the engine uses (1 token for AR and drafting, 2..17 for
verification, more for trees and prefill), the kernels a Weight offers (MKL's matmul, the oneDNN-packed
linear, specviz's native few-row kernel up to native.NATIVE_ROWS rows; on GGUF blocks, the block kernel and a
de-quantized slice through the matmul) are timed side by side (interleaved,
median of REPEATS) at the thread counts a run computes with (the race's one thread and torch's default), and
the fastest is the plan. Nothing is assumed from another CPU: the best kernel
moves with the shape, the thread count and the host (an AMD EPYC ran the 1-row LM head faster on oneDNN with
2 threads and on MKL with 1; this project's Intel Xeon ran it faster on MKL with both, and its 2-17-row
o projection too, which the rule this replaced sent to oneDNN: benchmarks/results/kernel-plan.md).

The plan is cached under ~/.cache/specviz, keyed by the CPU model, its vector flags, the torch build and
the thread count and the build of the native kernel (or none), so a host measures once per build.
`python -m engine kernels` prints it.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import statistics
import time
from pathlib import Path

import torch

from ..config import CACHE_DIR
from .loadwatch import measure_again, outside_cores, take
from .threads import torch_threads

# the row counts measured; a call uses the plan of the smallest one >= its rows. The native kernel takes its rows
# 6 (AVX2) or 8 (AVX-512) at a time, its cost rising at each multiple: measured at the multiples, a bucket's plan
# is not the plan of its worst row count (with 5 and 9, an AVX2 build's 6-row call took the 9-row plan: oneDNN)
ROWS = (1, 2, 3, 4, 6, 8, 12, 16, 17, 33)
REPEATS = 7  # timed calls per kernel and row count (interleaved), the median kept
TAKES = "takes"  # the cached plan's key for each shape's takes (when, under what load)
UNTRUSTED = {
    "measured": None,
    "outside_cores": None,
    "quiet": False,
}  # a take from before loads were recorded
FLAGS = ("avx2", "fma", "avx512f", "avx512_bf16", "avx512_vnni", "amx_tile", "amx_bf16", "neon", "sve")


def cpu_name() -> str:
    """The CPU model as /proc/cpuinfo names it (the platform's processor string elsewhere)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith(("model name", "hardware")):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def cpu_flags() -> list[str]:
    """The vector-instruction flags that change which kernel wins (of FLAGS, the ones this CPU has)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return []
    line = next((x for x in text.splitlines() if x.lower().startswith(("flags", "features"))), "")
    have = set(line.split(":", 1)[-1].split())
    return [f for f in FLAGS if f in have]


# settings that hold torch's, oneDNN's or MKL's kernels below what the CPU runs (an AVX2 host's, on a host with
# AVX-512: benchmarks/common.py AVX2_HOST); a plan timed under them is not this host's own plan
ISA_SETTINGS = ("ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA", "MKL_ENABLE_INSTRUCTIONS")


def held() -> dict[str, str]:
    """The ISA_SETTINGS this process runs under (empty: every library at the CPU's own level)."""
    return {k: os.environ[k] for k in ISA_SETTINGS if os.environ.get(k)}


def host_key(threads: int) -> dict:
    """What a plan is valid for: this CPU, its flags, this torch build (and the vector level its kernels were held
    to, where a setting holds them), this many threads."""
    key = {"cpu": cpu_name(), "flags": cpu_flags(), "torch": torch.__version__, "threads": threads}
    return {**key, "held": held()} if held() else key  # unheld: the key every earlier plan was cached under


def bucket(rows: int) -> int:
    """The measured row count whose plan a call with `rows` rows uses."""
    return next((r for r in ROWS if r >= rows), ROWS[-1])


class Planned:
    """A projection that runs, per row count, the kernel measured fastest on this host (lean.Weight on fp32
    matrices, blocks.BlockWeight on GGUF blocks): it offers `kernels(rows)` ({name: fn}, each fn a method
    `_<name>`), `fallback(rows)` (the kernel used before a plan is measured) and holds `plan`."""

    plan: dict  # threads -> the kernel per row count 0..ROWS[-1] (measured here)

    def kernels(self, rows: int = 1) -> dict:
        raise NotImplementedError

    def fallback(self, rows: int) -> str:
        raise NotImplementedError

    def use_plan(self, threads: int, by_rows: dict[int, dict]) -> None:
        """Take the measured kernel per row count at `threads` threads (plan_for's entry for this shape)."""
        plan = []
        for rows in range(ROWS[-1] + 1):
            timed = by_rows[bucket(max(rows, 1))]
            offered = [k for k in self.kernels(rows) if k in timed] or list(self.kernels(rows))
            # the fastest this projection offers at `rows`
            plan.append(min(offered, key=lambda k: timed.get(k, float("inf"))))
        self.plan[threads] = plan

    def kernel(self, rows: int) -> str:
        """The kernel a call with `rows` rows runs: the plan measured on this host at this thread count, else the
        fallback."""
        plan = self.plan.get(torch.get_num_threads())
        return plan[min(rows, len(plan) - 1)] if plan is not None else self.fallback(rows)

    def __call__(self, x: torch.Tensor) -> torch.Tensor:  # x (rows, in) -> (rows, out)
        return getattr(self, f"_{self.kernel(x.shape[0])}")(x)  # the plan only names kernels on offer


def _time(fn, x) -> float:
    t = time.perf_counter()
    fn(x)
    return time.perf_counter() - t


def measure_shape(group: list, threads: int) -> dict[int, dict]:
    """Per row count: each kernel's median (seconds) of one pass of y = x @ W.T over every weight of the group
    (all layers' projections of one kind, so the weights stream from memory as in a forward, not from a cache
    a loop over one matrix keeps hot), and the fastest kernel. group: the Weights (lean.py) of one shape."""
    out = {}
    with torch_threads(threads), torch.inference_mode():
        for rows in ROWS:
            fns = [w.kernels(rows) for w in group]
            names = list(fns[0])
            passes = {k: (lambda x, k=k, fns=fns: [f[k](x) for f in fns]) for k in names}
            dtype = (
                torch.float32 if getattr(group[0], "kind", None) else group[0].w.dtype
            )  # blocks take fp32 rows
            x = torch.randn(rows, group[0].in_features, dtype=dtype)
            for fn in passes.values():
                fn(x)  # warm
            times = {k: [] for k in names}
            for i in range(REPEATS):
                for k in names if i % 2 == 0 else names[::-1]:
                    times[k].append(_time(passes[k], x))
            med = {k: statistics.median(v) for k, v in times.items()}
            out[rows] = {**med, "kernel": min(med, key=med.get)}
    return out


def _cache_file(prefix: str, key: dict) -> Path:
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]
    return CACHE_DIR / f"{prefix}-{digest}.json"


def read_cached(prefix: str, key: dict):
    """What this host stored under `prefix` for `key` (a host_key and more), or None."""
    try:
        data = json.loads(_cache_file(prefix, key).read_text())
        return data["value"] if data.get("host") == key else None
    except (OSError, ValueError, KeyError, AttributeError):
        return None


def write_cached(prefix: str, key: dict, value) -> None:
    """Store a measurement for this host, atomically (another process never reads half a file)."""
    path = _cache_file(prefix, key)
    try:
        CACHE_DIR.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps({"host": key, "value": value}, indent=1))
        tmp.replace(path)
    except OSError:
        pass  # a read-only home: measured again next time


def plan_for(shapes: dict[str, list], threads: int, refresh: bool = False) -> dict:
    """{shape name: {rows: {kernel: s, ..., "kernel": the fastest}}} for `threads`, from the cache when this host
    measured it before with the same build of the native kernel (refresh: measure again). shapes: name -> the Weights
    (lean.py) of one shape."""
    # a plan is of one build of the native kernel, or of none (Weight.native): another build is timed anew
    key = {**host_key(threads), "native": next((g[0].native for g in shapes.values() if g[0].native), None)}
    # and of the kernels a Weight offers at each row count (native.NATIVE_ROWS moves them)
    first = next((g[0] for g in shapes.values()), None)
    key["offered"] = {str(r): sorted(first.kernels(r)) for r in ROWS} if first else {}
    cached = {} if refresh else dict(read_cached("kernels", key) or {})
    takes = dict(
        cached.pop(TAKES, {})
    )  # sid -> [take]; a plan from before takes were kept: one untrusted take
    names = {name: f"{_shape_id(group[0])}x{len(group)}" for name, group in shapes.items()}
    again = [n for n, sid in names.items() if sid not in cached or _measure_again(takes.get(sid))]
    for name in again:
        sid, group = names[name], shapes[name]
        before = takes.get(sid) or ([UNTRUSTED] if sid in cached else [])
        timed, cores = outside_cores(lambda group=group: measure_shape(group, threads))
        cached[sid] = _best_of(cached.get(sid, {}), {str(r): v for r, v in timed.items()})
        takes[sid] = [*before, take(cores)]
    if again:
        write_cached("kernels", key, {**cached, TAKES: takes})
    return {name: {int(r): v for r, v in cached[sid].items()} for name, sid in names.items()}


def _measure_again(shape_takes: list | None) -> bool:
    """A shape measured only while other processes were busy is measured again (loadwatch.measure_again); a
    plan from before takes were kept counts as one busy take."""
    return measure_again(shape_takes or [{"quiet": False}])


def _best_of(old: dict, new: dict) -> dict:
    """Per row count, each kernel's fastest median over the takes (load only ever slows one), and the fastest."""
    out = {}
    for rows, v in new.items():
        med = {k: min(s, old.get(rows, {}).get(k, float("inf"))) for k, s in v.items() if k != "kernel"}
        out[rows] = {**med, "kernel": min(med, key=med.get)}
    return out


def _shape_id(weight) -> str:
    kind = getattr(weight, "kind", None) or str(weight.w.dtype).replace(
        "torch.", ""
    )  # a block type, or the dtype
    return f"{weight.in_features}x{weight.out_features}:{kind}"


def report(plans: dict) -> str:
    """The plan as a table: per thread count and projection, the kernel and each kernel's median per row count."""
    lines = [f"host: {cpu_name()} [{' '.join(cpu_flags())}], torch {torch.__version__}"]
    for threads, plan in plans.items():
        lines.append(
            f"\n{threads} thread(s): rows -> kernel (each kernel's ms for one pass over every layer's weight)"
        )
        for name, by_rows in plan.items():
            cells = [
                f"{r}: {v['kernel']} ("
                + "/".join(f"{k} {s * 1e3:.2f}" for k, s in v.items() if k != "kernel")
                + ")"
                for r, v in by_rows.items()
            ]
            lines.append(f"  {name:8s} " + "  ".join(cells))
    return "\n".join(lines)
