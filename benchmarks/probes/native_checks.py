"""What native.py's argument checks cost a decode step: the embedded target's 1-token step (300 cached tokens) with
the checks as they are and with them replaced by no-ops, interleaved in one process, 8 passes of 20 steps each.

    .venv/bin/python benchmarks/probes/native_checks.py [--threads 2]

Prints the two medians and their ratio, with the kernel's build and the host.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch  # noqa: E402

from benchmarks.common import host_line  # noqa: E402
from engine import Engine, load_model  # noqa: E402
from engine.runtime import native  # noqa: E402
from engine.runtime.cache import KVCache  # noqa: E402
from engine.runtime.threads import torch_threads  # noqa: E402

CHECKS = ("_f32", "_want", "_check_cache", "_check_queries", "_packed", "_vector", "_bias")


def unchecked() -> dict:
    """No-op stand-ins for the checks (_f32 hands its tensor back, _check_cache the keys' shape)."""
    out = {name: (lambda *a, **k: None) for name in CHECKS}
    out["_f32"] = lambda where, name, t, *a, **k: t
    out["_check_cache"] = lambda where, keys, values: tuple(keys.shape)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    target = load_model("embedded")
    forward = Engine(target, "ngram").forward
    ids = torch.randint(0, 40000, (1, 301), generator=torch.Generator().manual_seed(0))
    real, fake = {name: getattr(native, name) for name in CHECKS}, unchecked()
    ms = {"checked": [], "unchecked": []}
    with torch_threads(args.threads), torch.inference_mode():
        cache = KVCache.for_model(target.model, 400)
        forward(ids[:, :300], cache, logits_to_keep=1)
        try:
            for p in range(8):
                for mode in ("checked", "unchecked") if p % 2 == 0 else ("unchecked", "checked"):
                    for name in CHECKS:
                        setattr(native, name, real[name] if mode == "checked" else fake[name])
                    times = []
                    for _ in range(20):
                        t = time.perf_counter()
                        forward(ids[:, 300:301], cache, logits_to_keep=1)
                        times.append(time.perf_counter() - t)
                        cache.truncate(300)
                    ms[mode].append(statistics.median(times) * 1e3)
        finally:
            for name in CHECKS:
                setattr(native, name, real[name])
    c, u = statistics.median(ms["checked"]), statistics.median(ms["unchecked"])
    print(f"{host_line()}; {native.status()}; {args.threads} thread(s)")
    print(f"1-token step after 300 cached: checked {c:.2f} ms, unchecked {u:.2f} ms, ratio {c / u:.3f}")


if __name__ == "__main__":
    main()
