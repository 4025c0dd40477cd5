"""native.c on a machine this host is not: the aarch64 (NEON) build, cross-compiled with tests/native_cross.c and run
under QEMU's user-mode emulation, its GGUF block kernels' products bitwise its fp32 kernel's on gguf-py's
de-quantized weights, every format at 1..17 rows; a wrong scale differs (the negative control). tests/test_native.py
checks the same build's fp32 products against a plain reference. Skipped where the cross compiler or QEMU is missing
(`make test` installs both: Debian's gcc-aarch64-linux-gnu, qemu-user-static)."""

from __future__ import annotations

import struct
import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch

from engine.runtime import blocks, native
from tests.test_blocks import KINDS, SCALES_AT, random_blocks, reference
from tests.test_native import CROSS, QEMU

ROOT = Path(__file__).resolve().parent.parent
CC = native.shutil.which(CROSS)
pytestmark = pytest.mark.skipif(
    not (CC and QEMU), reason="no aarch64 cross compiler or QEMU user-mode emulator"
)


@pytest.fixture(scope="module")
def neon(tmp_path_factory) -> list:
    """The emulated command of native.c's default aarch64 build (-march=armv8-a: NEON, as native.LEVELS's)."""
    exe = tmp_path_factory.mktemp("cross") / "native_cross"
    subprocess.run(
        [CC, "-O3", "-march=armv8-a", "-static", str(ROOT / "tests" / "native_cross.c"), "-o", str(exe), "-lm"],
        check=True, capture_output=True, text=True,
    )  # fmt: skip
    return [QEMU, str(exe)]


def case(kind: str, raw: np.ndarray, ref: np.ndarray, rows: int, width: int, g: torch.Generator) -> bytes:
    """One case for tests/native_cross.c: the blocks of `raw` and the fp32 panels of `ref`, at `width` outputs a
    panel, and `rows` random inputs."""
    out, inner = ref.shape
    q = blocks.pack(kind, raw, width).numpy().tobytes()
    w = native.pack(torch.from_numpy(ref.astype(np.float32).copy()), width).numpy().tobytes()
    x = torch.randn(rows, inner, generator=g).numpy().tobytes()
    head = struct.pack("<4i", blocks.FORMATS[kind][0], inner, out, rows)
    return head + struct.pack("<q", len(q)) + q + struct.pack("<q", len(w) // 4) + w + x


def test_the_neon_builds_block_products_are_its_fp32_products_bitwise(neon):
    level, width = subprocess.run([*neon, "width"], check=True, capture_output=True, text=True).stdout.split()
    assert level == "neon" and int(width) == 8, (level, width)
    g = torch.Generator().manual_seed(5)
    cases, names = [], []
    for kind in KINDS:
        raw = random_blocks(kind, 45, 512)
        ref = reference(kind, raw)
        wrong = raw.copy()  # the negative control: row 0's first block with another scale
        at = SCALES_AT[kind][0]
        wrong[0, at : at + 2] = np.array([np.float16(0.5)]).view(np.uint8)
        for rows in range(1, 18):
            cases.append(case(kind, raw, ref, rows, int(width), g))
            names.append((kind, rows, "same"))
        cases.append(case(kind, raw, reference(kind, wrong), 3, int(width), g))
        names.append((kind, 3, "wrong scale"))
    got = subprocess.run(neon, input=b"".join(cases), check=True, capture_output=True, timeout=600)
    lines = got.stdout.decode().splitlines()
    assert len(lines) == len(names), got.stderr.decode()
    for (kind, rows, want), line in zip(names, lines):
        if want == "same":
            assert line == "same", (kind, rows, line)
        else:
            assert line.startswith("differs at 0"), (kind, line)  # row 0's output 0 reads the changed block
