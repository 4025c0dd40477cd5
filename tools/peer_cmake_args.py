"""CMAKE_ARGS for building llama-cpp-python on this host (make peer): the vector extensions /proc/cpuinfo lists,
each switched on by name, with GGML_NATIVE off and llama.cpp's AMX kernels off. On this project's Intel Xeon
(AMX) the native build's Q4_1 path crashed in llama_decode (a segmentation fault on the first prompt), the same
build without AMX ran it; an AVX2-only AMD host gets no AVX-512. Prints one line."""

from __future__ import annotations

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


def main() -> None:
    try:
        line = next(x for x in Path("/proc/cpuinfo").read_text().splitlines() if x.startswith("flags"))
        have = set(line.split(":", 1)[1].split())
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
