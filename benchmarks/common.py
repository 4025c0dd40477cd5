"""What every benchmark prints the same way: the host it ran on, medians, Markdown tables. Plain Python beside
torch's version; the CPU and its vector flags come from engine/runtime/kernels.py (the one reader of
/proc/cpuinfo), so a result names the machine the kernel plan was measured on."""

from __future__ import annotations

import math
import os
import platform
import statistics

import torch

from engine.runtime.kernels import cpu_flags, cpu_name, held

# an AVX2-only host (x86-64-v3) on a host with more: native.c built at that level, and torch's own kernels, oneDNN
# and MKL held to AVX2, as they would run there (the kernel plan, prefill, the floor's stream all at that level;
# the Makefile's peer-avx2 sets the same)
AVX2_HOST = {
    "SPECVIZ_NATIVE_ARCH": "x86-64-v3",
    "ATEN_CPU_CAPABILITY": "avx2",
    "ONEDNN_MAX_CPU_ISA": "AVX2",
    "MKL_ENABLE_INSTRUCTIONS": "AVX2",
}


def host() -> dict:
    """The machine a result was measured on: CPU and its vector flags, threads, CPUs, the 1-minute load average
    at the call (other processes' work: a figure taken under load says so), software versions."""
    import transformers

    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    return {
        "cpu": cpu_name(),
        "flags": cpu_flags(),
        "threads": torch.get_num_threads(),
        "cpu_count": os.cpu_count(),
        "load_1min": None if load is None else round(load, 2),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "held": held(),
    }


def host_line(h: dict | None = None) -> str:
    """One line naming the host: "AMD EPYC (avx2, fma, avx512f), 2 threads of 2 CPUs, load 0.96, torch 2.13.0"."""
    h = h or host()
    flags = f" ({', '.join(h['flags'])})" if h.get("flags") else ""
    load = f", load {h['load_1min']:.2f}" if h.get("load_1min") is not None else ""
    threads = f"{h['threads']} thread{'s' if h['threads'] != 1 else ''}"
    held = f", held: {' '.join(f'{k}={v}' for k, v in h['held'].items())}" if h.get("held") else ""
    return f"{h['cpu']}{flags}, {threads} of {h['cpu_count']} CPUs{load}, torch {h['torch']}{held}"


def median(values) -> float:
    """The median of the finite values; NaN when there are none (a table prints "—" for it)."""
    finite = [float(v) for v in values if v is not None and math.isfinite(float(v))]
    return statistics.median(finite) if finite else math.nan


def md_table(header: list, rows: list) -> str:
    """A Markdown table; a "|" inside a cell is escaped, None prints "—"."""

    def cell(c) -> str:
        return "—" if c is None else str(c).replace("|", "\\|")

    lines = ["| " + " | ".join(map(cell, header)) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(map(cell, row)) + " |" for row in rows]
    return "\n".join(lines)


def embedded_on(weights: str):
    """The embedded target on these weights, "gguf" (the GGUF's blocks) or "fp32" (de-quantized): SPECVIZ_WEIGHTS is
    read at each load, so both can live in one process; the variable is left as it was."""
    from engine.runtime.models import load_model

    saved = os.environ.get("SPECVIZ_WEIGHTS")
    os.environ["SPECVIZ_WEIGHTS"] = weights
    try:
        return load_model("embedded")
    finally:
        if saved is None:
            os.environ.pop("SPECVIZ_WEIGHTS", None)
        else:
            os.environ["SPECVIZ_WEIGHTS"] = saved
