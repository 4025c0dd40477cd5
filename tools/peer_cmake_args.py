"""CMAKE_ARGS for building llama-cpp-python on this host (make peer): the vector extensions /proc/cpuinfo lists,
each switched on by name, with GGML_NATIVE off and llama.cpp's AMX kernels off. On this project's Intel Xeon
(AMX) the native build's Q4_1 path crashed in llama_decode (a segmentation fault on the first prompt), the same
build without AMX ran it; an AVX2-only AMD host gets no AVX-512. `--level x86-64-v3` builds what an AVX2-only host gets (x86-64-v3's
extensions: AVX, AVX2, FMA, F16C, BMI2; no AVX-512) on any host that runs them (`make peer-avx2`, beside native.c's
x86-64-v3 build). Prints one line."""

from __future__ import annotations

import argparse
from pathlib import Path

FLAGS = {
    "avx": "GGML_AVX",
    "avx2": "GGML_AVX2",
    "fma": "GGML_FMA",
    "f16c": "GGML_F16C",
    "avx512f": "GGML_AVX512",
    "avx512_vbmi": "GGML_AVX512_VBMI",
    "avx512_vnni": "GGML_AVX512_VNNI",
    "avx512_bf16": "GGML_AVX512_BF16",
    "avx_vnni": "GGML_AVX_VNNI",
    "bmi2": "GGML_BMI2",
}
X86_64_V3 = {"avx", "avx2", "fma", "f16c", "bmi2"}  # of FLAGS, the ones -march=x86-64-v3 implies


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--level", choices=("native", "x86-64-v3"), default="native")
    level = ap.parse_args(argv).level
    try:
        line = next(x for x in Path("/proc/cpuinfo").read_text().splitlines() if x.startswith("flags"))
        have = set(line.split(":", 1)[1].split())
        if level == "x86-64-v3":
            if not X86_64_V3 <= have:
                raise SystemExit(
                    f"this CPU lacks {', '.join(sorted(X86_64_V3 - have))}: it cannot run x86-64-v3"
                )
            have &= X86_64_V3
    except (OSError, StopIteration):
        print("-DGGML_NATIVE=ON")  # not Linux x86: let llama.cpp detect the CPU
        return
    args = [
        "-DGGML_NATIVE=OFF",
        "-DGGML_AMX_TILE=OFF",
        "-DGGML_AMX_INT8=OFF",
        "-DGGML_AMX_BF16=OFF",
        "-DLLAMA_BUILD_EXAMPLES=OFF",
        "-DLLAMA_BUILD_TESTS=OFF",
    ]
    args += [f"-D{opt}={'ON' if flag in have else 'OFF'}" for flag, opt in FLAGS.items()]
    print(" ".join(args))


if __name__ == "__main__":
    main()
