"""native.c's gemv at each vector level and prefetch distance, side by side in one process: one pass over every
matrix a SmolLM2-135M forward reads (30 layers' qkv, o, gate/up, down and the 576 → 49152 LM head, fp32, random
values: 538 MB) at 1..8 rows, each pass's time over the memory floor of its moment.

    python -m benchmarks forward prefetch [--levels native,x86-64-v3] [--distances 0,4096,8192,16384]
                                          [--rows 1,2,4,6,8] [--threads 1,2] [--reps 7]

Each (level, distance) is compiled from native.c with `-march=LEVEL -DSPECVIZ_PREFETCH=DISTANCE` into a temporary
folder and loaded beside the others (one process, one OpenMP runtime: torch's). Per thread count and row count,
REPS rounds: a read-only stream over as many bytes as the weights (best of 3: the floor of that moment), then one
pass of every build, their order reversed every other round; the median pass ÷ the median floor. Every build's
outputs must equal the first build's of the same level bitwise (a prefetch changes no arithmetic).
"""

from __future__ import annotations

import argparse
import ctypes
import platform
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import torch

from benchmarks.common import host_line, md_table
from benchmarks.forward.layouts import LAYERS, SHAPES
from engine.runtime import native

LM_HEAD = (576, 49152)  # (in, out)


def build(folder: Path, level: str, distance: int) -> ctypes.CDLL:
    """native.c at -march=level with the given prefetch distance, loaded."""
    compiler = shutil.which("cc") or shutil.which("gcc")
    arch = native.LEVELS.get(platform.machine(), ((),))[0] if level == "native" else (f"-march={level}",)
    so = folder / f"native-{level}-{distance}.so"
    cmd = [
        compiler,
        *native.COMMON,
        *arch,
        f"-DSPECVIZ_PREFETCH={distance}",
        str(native.SOURCE),
        "-o",
        str(so),
    ]
    subprocess.run(cmd, check=True, capture_output=True, text=True)
    lib = ctypes.CDLL(str(so))
    lib.specviz_gemv.restype = None
    lib.specviz_gemv.argtypes = [ctypes.c_void_p] * 4 + [ctypes.c_long] * 3 + [ctypes.c_int]
    lib.specviz_level.restype = ctypes.c_char_p
    return lib


def one_pass(lib, weights, shapes, xs, rows: int, threads: int) -> tuple[float, list]:
    ys = [torch.empty(rows, out) for _, out in shapes]
    t = time.perf_counter()
    for (inner, out), w, y in zip(shapes, weights, ys):
        lib.specviz_gemv(w.data_ptr(), xs[inner].data_ptr(), None, y.data_ptr(), inner, out, rows, threads)
    return time.perf_counter() - t, ys


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--levels", default="native,x86-64-v3", help="-march values ('native': the host's own)")
    ap.add_argument("--distances", default="0,4096,8192,16384", help="prefetch distances in bytes (0: none)")
    ap.add_argument("--rows", default="1,2,4,6,8")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--reps", type=int, default=7)
    args = ap.parse_args(argv)
    ints = lambda s: [int(v) for v in s.split(",")]  # noqa: E731
    torch.manual_seed(0)
    shapes = [shape for _ in range(LAYERS) for shape in SHAPES.values()] + [LM_HEAD]
    raw = [torch.randn(out, inner) * 0.05 for inner, out in shapes]
    nbytes = sum(w.numel() * 4 for w in raw)
    blob = torch.rand(nbytes // 4)
    with tempfile.TemporaryDirectory() as tmp:
        builds = {
            (lv, d): build(Path(tmp), lv, d) for lv in args.levels.split(",") for d in ints(args.distances)
        }
        packed = {}
        for lib in builds.values():
            width = lib.specviz_panel_width()
            packed.setdefault(width, [native.pack(w, width) for w in raw])
        names = {key: f"{lib.specviz_level().decode()} ({key[0]}), {key[1]} B" for key, lib in builds.items()}
        for threads in ints(args.threads):
            torch.set_num_threads(threads)
            rows_out, same = [], True
            for rows in ints(args.rows):
                xs = {inner: torch.randn(rows, inner) for inner in {s[0] for s in shapes}}
                floors, times, first = [], {k: [] for k in builds}, {}
                for rep in range(args.reps):
                    floors.append(min(_timed(blob.sum) for _ in range(3)))
                    for key in builds if rep % 2 == 0 else list(builds)[::-1]:
                        lib = builds[key]
                        took, ys = one_pass(lib, packed[lib.specviz_panel_width()], shapes, xs, rows, threads)
                        times[key].append(took)
                        ref = first.setdefault(key[0], ys)
                        same &= all(torch.equal(a, b) for a, b in zip(ref, ys))
                floor = statistics.median(floors)
                rows_out.append(
                    [rows, f"{floor * 1e3:.1f} ({nbytes / floor / 1e9:.0f} GB/s)"]
                    + [f"{statistics.median(times[k]) / floor:.2f}" for k in builds]
                )
            print(f"\n{host_line()}; {nbytes / 1e6:.0f} MB of weights, {args.reps} rounds")
            print("pass time ÷ the floor, per build (level, prefetch distance):\n")
            print(md_table(["rows", "floor ms"] + [names[k] for k in builds], rows_out))
            print(f"\nOutputs bitwise equal across distances at each level: {same}")
            if not same:
                return 1
    return 0


def _timed(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


if __name__ == "__main__":
    raise SystemExit(main())
