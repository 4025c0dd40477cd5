"""What a lean forward's Python, ctypes and torch glue costs around its native calls: the embedded target's forward
of 1 and 4 new tokens after 300 cached ones, as it is and with every native.c entry point swapped for a C function
that does nothing (the same argument types, so ctypes still converts every argument), interleaved in one process.

    .venv/bin/python benchmarks/probes/native_glue.py [--threads 1] [--reps 15]

Prints, per row count, the median forward and the median with the no-op calls: what is left is the glue (and any
product the kernel plan gives to oneDNN or MKL at that row count, which is not swapped).
"""

from __future__ import annotations

import argparse
import ctypes
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch  # noqa: E402

from benchmarks.common import host_line  # noqa: E402
from engine import Engine, load_model  # noqa: E402
from engine.runtime import native  # noqa: E402
from engine.runtime.cache import KVCache  # noqa: E402

KEEP = ("specviz_panel_width", "specviz_level")  # what native.py reads of the build, not work


class NoOps:
    """The loaded library with every specviz_* work function replaced by `noop` under its own argument types."""

    def __init__(self, real, noop_path: str):
        self.real, self.path, self.fns = real, noop_path, {}

    def __getattr__(self, name):
        fn = getattr(self.real, name)
        if not name.startswith("specviz_") or name in KEEP:
            return fn
        if name not in self.fns:
            stub = ctypes.CDLL(self.path).noop
            stub.argtypes, stub.restype = fn.argtypes, None
            self.fns[name] = stub
        return self.fns[name]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--reps", type=int, default=15)
    args = ap.parse_args()
    real = native.library()
    if real is None:
        raise SystemExit(f"no native kernel here: {native.status()}")
    torch.set_num_threads(args.threads)
    folder = Path(tempfile.mkdtemp())
    (folder / "noop.c").write_text("void noop(void) {}\n")
    subprocess.run(
        ["cc", "-O2", "-shared", "-fPIC", str(folder / "noop.c"), "-o", str(folder / "noop.so")], check=True
    )
    stubbed = NoOps(real, str(folder / "noop.so"))
    target = load_model("embedded")
    forward = Engine(target, "ngram").forward
    ids = torch.randint(0, 40000, (1, 320), generator=torch.Generator().manual_seed(0))
    print(f"{host_line()}; {native.status()}")
    with torch.inference_mode():
        cache = KVCache.for_model(target.model, 330)
        forward(ids[:, :300], cache, logits_to_keep=1)
        for n in (1, 4):
            times = {"as it is": [], "no-op native calls": []}
            for rep in range(args.reps):
                for name in times if rep % 2 == 0 else list(times)[::-1]:
                    native._state["lib"] = real if name == "as it is" else stubbed
                    t = time.perf_counter()
                    forward(ids[:, 300 : 300 + n], cache, logits_to_keep=n)
                    times[name].append(time.perf_counter() - t)
                    cache.truncate(300)
            native._state["lib"] = real
            cells = ", ".join(f"{k} {statistics.median(v) * 1e3:.2f} ms" for k, v in times.items())
            print(f"{n} new token(s): {cells} (the LM head on {forward.head.kernel(n)})")


if __name__ == "__main__":
    main()
