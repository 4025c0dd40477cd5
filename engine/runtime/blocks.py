"""The model as it ships: a GGUF file's quantized blocks, read by native.c's block kernels without inflating them.

The embedded SmolLM2-135M-Instruct is 97 MB of blocks (Q4_1 layers, a Q8_0 embedding that is also its LM head);
de-quantized to fp32 it is 538 MB, and a decode step reads every byte of what it holds. Here the blocks stay
blocks: each weight matrix is regrouped by the kernel's panels (`pack`: the same bytes, the scales of a panel's
outputs before its quants, native.c's layout comment) and native.c rebuilds every weight in registers with
gguf-py's own arithmetic, so each product equals the fp32 path's on the de-quantized matrix, bit for bit
(tests/test_blocks.py: a negative control with a wrong scale fails).

`read_gguf` reads a GGUF (llama or gemma3) into `Blocks` (per tensor, the raw block rows, with transformers'
row order: its reverse permutation of the q and k rows applied to the rows of blocks, which moves no weight
within a row); `BlockWeight` is one projection on them, with lean.Weight's interface. The block kernel runs up to
BLOCK_ROWS rows (a prompt of 512 tokens); a longer prefill de-quantizes a slice of panels at a time into a scratch
buffer and runs torch's matmul on it.

This module knows GGUF's block formats and native.c's layout; it knows nothing about speculation.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from . import kernels, native

# GGUF type -> native.c's FMT_* and the block's (weights, bytes)
FORMATS = {
    "F32": (0, 1, 4),
    "Q8_0": (1, 32, 34),
    "Q4_1": (2, 32, 20),
    "Q5_0": (5, 32, 22),
    "Q4_K": (3, 256, 144),
    "Q6_K": (4, 256, 210),
}
BLOCK_FORMATS = tuple(f for f in FORMATS if f != "F32")
# bytes per panel-block of PW outputs, over PW (native.c fmt_block_bytes)
PANEL_BLOCK = {"Q8_0": 34, "Q4_1": 20, "Q5_0": 22, "Q4_K": 148, "Q6_K": 210}
SCRATCH_FLOATS = 1 << 22  # a long prefill de-quantizes at most this many weights at a time (16 MiB)
# up to this many rows a projection runs the block kernel (RMAX rows a pass while a panel's blocks stay in cache: a
# block GEMM), beyond it the de-quantized slices and torch's matmul: `python -m benchmarks forward prefill` measured
# the block kernel 0.27-1.00x the matmul's time at 17-512 rows on 2 threads and 0.34-1.03x on 1 (AMD EPYC, AVX-512);
# the AVX2 build against torch held to AVX2, 0.27-0.98x up to 256 rows and 1.00-1.07x at 512
# (benchmarks/results/prefill-blocks.md)
BLOCK_ROWS = 512


class BlockError(ValueError):
    """A block tensor that cannot be read: a wrong type, a short buffer, a shape the format cannot hold."""


# --- each format's fields, as gguf-py's de-quantizer reads them (gguf/quants.py) -------------------------------


def _half(raw: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(raw).view(np.float16)[..., 0]


def _q8_0(raw):  # (out, nb, 34): d fp16, 32 int8
    return {"d": _half(raw[..., :2]), "q": raw[..., 2:].view(np.int8)}


def _q4_1(raw):  # (out, nb, 20): d, m fp16, 16 bytes: weight i low nibble of byte i, i + 16 its high nibble
    qs = raw[..., 4:]
    return {"d": _half(raw[..., :2]), "m": _half(raw[..., 2:4]), "q": np.concatenate([qs & 15, qs >> 4], -1)}


# (out, nb, 22): d fp16, 4 bytes of fifth bits (bit i: weight i), 16 bytes of nibbles as Q4_1's
def _q5_0(raw):
    qs = raw[..., 6:]
    high = np.unpackbits(raw[..., 2:6], axis=-1, bitorder="little")  # (out, nb, 32): weight i's bit 4
    return {"d": _half(raw[..., :2]), "q": np.concatenate([qs & 15, qs >> 4], -1) | (high << 4)}  # q + 16


def _q4_k(raw):  # (out, nb, 144): d, dmin fp16, 12 bytes of 6-bit scales and mins, 128 bytes of nibbles
    s = raw[..., 4:16].reshape(*raw.shape[:-1], 3, 4)
    d, m, m_d = s[..., 0, :], s[..., 1, :], s[..., 2, :]
    sc = np.concatenate([d & 0x3F, (m_d & 0x0F) | ((d >> 2) & 0x30)], -1)
    mn = np.concatenate([m & 0x3F, (m_d >> 4) | ((m >> 2) & 0x30)], -1)
    qs = raw[..., 16:].reshape(*raw.shape[:-1], 4, 1, 32) >> np.array([0, 4], np.uint8).reshape(2, 1)
    q = (qs & 15).reshape(*raw.shape[:-1], 256)
    return {"d": _half(raw[..., :2]), "dmin": _half(raw[..., 2:4]), "sc": sc, "m": mn, "q": q}


def _q6_k(raw):  # (out, nb, 210): 128 bytes low nibbles, 64 bytes high 2 bits, 16 int8 scales, d fp16
    lead = raw.shape[:-1]
    ql = raw[..., :128].reshape(*lead, 2, 1, 64) >> np.array([0, 4], np.uint8).reshape(2, 1)
    qh = raw[..., 128:192].reshape(*lead, 2, 1, 32) >> np.array([0, 2, 4, 6], np.uint8).reshape(4, 1)
    q = (ql & 15).reshape(*lead, 256) | ((qh & 3).reshape(*lead, 256) << 4)  # 0..63, the weight's q + 32
    return {"d": _half(raw[..., 208:210]), "sc": raw[..., 192:208].view(np.int8), "q": q}


FIELDS = {"Q8_0": _q8_0, "Q4_1": _q4_1, "Q5_0": _q5_0, "Q4_K": _q4_k, "Q6_K": _q6_k}


def dequantize(kind: str, raw: np.ndarray) -> np.ndarray:
    """(out, bytes) rows of blocks -> (out, in) fp32, in gguf-py's order of operations (the reference the tests
    hold native.c's kernels to, next to gguf-py itself)."""
    shaped = _blocks(kind, raw)
    f = FIELDS[kind](shaped)
    out = raw.shape[0]
    if kind == "Q8_0":
        w = f["d"].astype(np.float32)[..., None] * f["q"].astype(np.float32)
    elif kind == "Q4_1":
        w = (
            f["d"].astype(np.float32)[..., None] * f["q"].astype(np.float32)
            + f["m"].astype(np.float32)[..., None]
        )
    elif kind == "Q5_0":
        w = f["d"].astype(np.float32)[..., None] * (f["q"].astype(np.int8) - 16).astype(np.float32)
    elif kind == "Q4_K":
        d = (f["d"].astype(np.float32)[..., None] * f["sc"].astype(np.float32))[..., None]
        dm = (f["dmin"].astype(np.float32)[..., None] * f["m"].astype(np.float32))[..., None]
        q = f["q"].reshape(*f["q"].shape[:-1], 8, 32).astype(np.float32)
        w = d * q - dm
    else:
        d = (f["d"].astype(np.float32)[..., None] * f["sc"].astype(np.float32))[..., None]
        q = (f["q"].astype(np.int8) - 32).reshape(*f["q"].shape[:-1], 16, 16).astype(np.float32)
        w = d * q
    return w.reshape(out, -1)


def _blocks(kind: str, raw: np.ndarray) -> np.ndarray:
    """(out, bytes) uint8 -> (out, nb, block bytes); a BlockError naming what is wrong."""
    if kind not in FIELDS:
        raise BlockError(f"no block kernel for GGUF type {kind!r} (have {', '.join(BLOCK_FORMATS)})")
    _, _, size = FORMATS[kind]
    if not isinstance(raw, np.ndarray) or raw.dtype != np.uint8 or raw.ndim != 2:
        raise BlockError(f"{kind} blocks must be (rows, bytes) uint8, got {getattr(raw, 'shape', type(raw))}")
    if raw.shape[1] == 0 or raw.shape[1] % size:
        raise BlockError(f"{kind} rows of {raw.shape[1]} bytes are not whole blocks of {size} bytes")
    return raw.reshape(raw.shape[0], -1, size)


# --- native.c's layout ---------------------------------------------------------------------------------------


PACK_BYTES = (
    16 << 20
)  # pack() regroups this many bytes of rows at a time (its numpy temporaries are a few times it)


def pack(kind: str, raw: np.ndarray, width: int | None = None) -> torch.Tensor:
    """(out, bytes) rows of `kind` blocks -> native.c's panel layout (uint8, (panels, panel bytes)): per panel of
    `width` outputs (the build's PW) and per block, the outputs' scales then per input their quants; the rows
    past `out` in the last panel are zero (their weights are 0). Regrouped PACK_BYTES of rows at a time into the
    result (panels are independent), so a 180 MB embedding is not copied several times over at once."""
    width = width or native.panel()
    _blocks(kind, raw)  # the whole buffer's checks first
    step = max(1, PACK_BYTES // max(1, raw.shape[1]) // width) * width  # rows a slice: whole panels
    if raw.shape[0] <= step:
        return _pack(kind, raw, width)
    out = torch.empty(-(-raw.shape[0] // width), raw.shape[1] // FORMATS[kind][2] * PANEL_BLOCK[kind] * width,
                      dtype=torch.uint8)  # fmt: skip
    for r0 in range(0, raw.shape[0], step):
        out[r0 // width : -(-min(r0 + step, raw.shape[0]) // width)] = _pack(kind, raw[r0 : r0 + step], width)
    return out


def _pack(kind: str, raw: np.ndarray, width: int) -> torch.Tensor:
    """pack() of one slice of rows."""
    vw = width // 2
    shaped = _blocks(kind, raw)
    f = FIELDS[kind](shaped)
    out, nb = raw.shape[0], raw.shape[1] // FORMATS[kind][2]
    panels = -(-out // width)

    def by_panel(a: np.ndarray) -> np.ndarray:
        """(out, nb, *rest) -> (panels, nb, *rest, width): the panel's outputs last (one load)."""
        padded = np.zeros((panels * width, *a.shape[1:]), a.dtype)
        padded[:out] = a
        a = padded.reshape(panels, width, *a.shape[1:])
        return np.moveaxis(a, 1, -1)

    def nibbles(q: np.ndarray) -> np.ndarray:
        """(panels, nb, n, width) of 0..15 -> (panels, nb, n, vw) bytes: output j low, j + vw high."""
        return (q[..., :vw] | (q[..., vw:] << 4)).astype(np.uint8)

    def as_bytes(a: np.ndarray) -> np.ndarray:
        return np.ascontiguousarray(a).view(np.uint8).reshape(panels, nb, -1)

    parts = [as_bytes(by_panel(f["d"]))]
    if kind == "Q8_0":
        parts.append(as_bytes(by_panel(f["q"])))
    elif kind == "Q4_1":
        parts += [as_bytes(by_panel(f["m"])), as_bytes(nibbles(by_panel(f["q"])))]
    elif kind == "Q5_0":  # per input the low nibbles as Q4_1's, then per 4 inputs a byte of fifth bits a lane
        q = by_panel(f["q"])  # (panels, nb, 32, width), 0..31
        hi = (q >> 4).astype(np.uint8)
        h = (hi[..., :vw] | (hi[..., vw:] << 1)).reshape(panels, nb, 8, 4, vw)  # 2 bits per input
        groups = h[..., 0, :] | (h[..., 1, :] << 2) | (h[..., 2, :] << 4) | (h[..., 3, :] << 6)
        parts += [as_bytes(nibbles(q & 15)), as_bytes(groups)]
    elif kind == "Q4_K":
        parts += [as_bytes(by_panel(f["dmin"])), as_bytes(by_panel(f["sc"])), as_bytes(by_panel(f["m"]))]
        parts.append(as_bytes(nibbles(by_panel(f["q"]))))
    else:  # Q6_K: per 16 inputs, 16 rows of low nibbles then 8 rows of high 2-bit pairs
        parts.append(as_bytes(by_panel(f["sc"])))
        q = by_panel(f["q"]).reshape(panels, nb, 16, 16, width)  # (.., sub-block, input, outputs)
        low = nibbles(q & 15)  # (.., 16, 16, vw)
        hi = (q >> 4).astype(np.uint8)
        h = hi[..., :vw] | (hi[..., vw:] << 2)  # (.., 16, 16, vw): 4 bits per input
        pairs = h[..., 0::2, :] | (h[..., 1::2, :] << 4)  # (.., 16, 8, vw)
        parts.append(as_bytes(np.concatenate([low, pairs], axis=3)))
    packed = np.concatenate(parts, axis=-1)
    assert packed.shape[-1] == PANEL_BLOCK[kind] * width, (kind, packed.shape)
    return torch.from_numpy(np.ascontiguousarray(packed.reshape(panels, -1)))


def gemv(x: torch.Tensor, weight: "BlockWeight") -> torch.Tensor:
    """x (rows, in) @ W.T (+ bias) -> (rows, out) on the blocks (native.c specviz_gemv_q)."""
    x = native.check_rows("gemv_q", x, weight.in_features)
    native.check_weight("gemv_q", "w", weight, weight.in_features, weight.out_features)
    y = torch.empty(x.shape[0], weight.out_features, dtype=torch.float32)
    native.library().specviz_gemv_q(
        weight.w.data_ptr(), weight.fmt, x.data_ptr(), None if weight.bias is None else weight.bias.data_ptr(),
        y.data_ptr(), weight.in_features, weight.out_features, x.shape[0], torch.get_num_threads(),
    )  # fmt: skip
    return y


def dequant_panels(weight: "BlockWeight", p0: int, p1: int, dst: torch.Tensor | None = None) -> torch.Tensor:
    """Panels p0..p1-1 of the weight de-quantized, ((p1 - p0) PW, in) fp32 (padding rows 0): the same values
    the kernels build."""
    width, inner = native.panel(), weight.in_features
    if not 0 <= p0 <= p1 <= weight.panels:
        raise BlockError(f"panels {p0}..{p1} are outside the weight's {weight.panels}")
    n = (p1 - p0) * width * inner
    dst = torch.empty(n, dtype=torch.float32) if dst is None or dst.numel() < n else dst
    native.library().specviz_dequant(
        weight.w.data_ptr(), weight.fmt, inner, p0, p1, dst.data_ptr(), torch.get_num_threads()
    )
    return dst[:n].view((p1 - p0) * width, inner)


class BlockWeight(kernels.Planned):
    """One projection y = x @ W.T on a GGUF tensor's blocks (rows concatenated for fused projections), with
    lean.Weight's interface: "native" runs native.c's block kernel (up to BLOCK_ROWS rows: decode, drafting,
    verification, a prompt of up to 512 tokens), "dequant" de-quantizes SCRATCH_FLOATS weights at a time into a
    scratch buffer and multiplies it with torch's matmul (a longer prefill)."""

    def __init__(self, kind: str, raw: np.ndarray, bias: torch.Tensor | None = None):
        self.w = pack(kind, raw)  # (panels, panel bytes) uint8; a BlockError for what is not blocks of kind
        self.kind = kind
        self.fmt, block, size = FORMATS[kind]
        self.out_features = raw.shape[0]
        self.in_features = raw.shape[1] // size * block
        self.bias = bias
        self.panels = self.w.shape[0]
        self.native = native.build_id()
        self.nbytes = self.w.numel()  # what a pass over it reads
        self.plan: dict[int, list[str]] = {}

    def kernels(self, rows: int = 1) -> dict:
        """One kernel per row count, nothing to measure: the block kernel up to BLOCK_ROWS rows, so every
        verification (a chain, or a tree of up to 511 nodes) runs the AR step's instructions (its rows are bitwise
        AR steps: lossless by construction, not by a plan's timing), the de-quantized matmul beyond (a long
        prefill)."""
        if rows <= BLOCK_ROWS:
            return {"native": self._native}
        return {"dequant": self._dequant}

    def fallback(self, rows: int) -> str:
        return "native" if rows <= BLOCK_ROWS else "dequant"

    def _native(self, x: torch.Tensor) -> torch.Tensor:
        return gemv(x, self)

    def _dequant(self, x: torch.Tensor) -> torch.Tensor:
        width = native.panel()
        step = max(1, SCRATCH_FLOATS // (width * self.in_features))  # panels per slice
        y = torch.empty(x.shape[0], self.panels * width, dtype=torch.float32)
        scratch = torch.empty(min(step, self.panels) * width * self.in_features, dtype=torch.float32)
        for p0 in range(0, self.panels, step):
            p1 = min(p0 + step, self.panels)
            w = dequant_panels(self, p0, p1, scratch)  # (rows of the slice, in)
            torch.mm(x, w.t(), out=y[:, p0 * width : p1 * width])
        y = y[:, : self.out_features]
        return y + self.bias if self.bias is not None else y.contiguous()

    def rows(self, ids: torch.Tensor) -> torch.Tensor:
        """The matrix's rows `ids` (an embedding lookup on a tied embedding's blocks), fp32 (len(ids), in)."""
        width = native.panel()
        flat = ids.reshape(-1).tolist()
        out = torch.empty(len(flat), self.in_features, dtype=torch.float32)
        cache: dict[int, torch.Tensor] = {}
        for i, t in enumerate(flat):
            p = t // width
            if p not in cache:
                cache[p] = dequant_panels(self, p, p + 1)  # a fresh buffer of its own
            out[i] = cache[p][t % width]
        return out.view(*ids.shape, self.in_features)


# --- reading a GGUF file ----------------------------------------------------------------------------------


@dataclass
class Blocks:
    """A GGUF's tensors: name -> (GGUF type, (rows, bytes) uint8 rows, or fp32 for F32),
    rows in transformers' order (q and k reverse-permuted as transformers de-quantizes them)."""

    path: Path
    tensors: dict
    bytes: int  # the file's tensor bytes

    def kind(self, name: str) -> str:
        return self.tensors[name][0]

    def raw(self, name: str) -> np.ndarray:
        return self.tensors[name][1]

    def weight(self, *names: str) -> BlockWeight:
        """One BlockWeight of these tensors' rows stacked (q, k, v -> qkv), all of one block type."""
        kinds = {self.kind(n) for n in names}
        if len(kinds) != 1:
            raise BlockError(f"{', '.join(names)} mix block types {sorted(kinds)}")
        parts = [self.raw(n) for n in names]  # one tensor is packed from the mapping as it is (no whole copy)
        return BlockWeight(kinds.pop(), parts[0] if len(parts) == 1 else np.concatenate(parts))

    def vector(self, name: str) -> torch.Tensor:
        kind, data = self.tensors[name]
        if kind != "F32":
            raise BlockError(f"{name} is {kind}, a norm must be F32")
        return torch.from_numpy(np.array(data, dtype=np.float32).reshape(-1))


def _reverse_permute(rows: np.ndarray, heads: int) -> np.ndarray:
    """transformers' LlamaTensorProcessor._reverse_permute_weights on rows of blocks (a row order only)."""
    dim = rows.shape[0] // heads // 2
    return rows.reshape(heads, dim, 2, *rows.shape[1:]).swapaxes(2, 1).reshape(rows.shape)


# GGUF metadata value types (gguf-py's GGUFValueType) -> their fixed size in bytes; 8 a string, 9 an array
_VALUE_BYTES = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}


class _Header:
    """A GGUF header read in order: fixed-size fields, strings, and values skipped by type."""

    def __init__(self, f, name: str):
        self.f, self.name, self.buf, self.pos = f, name, f.read(1 << 20), 0

    def need(self, n: int) -> None:
        while self.pos + n > len(self.buf):
            more = self.f.read(max(n, 1 << 20))
            if not more:
                raise BlockError(f"{self.name}: the GGUF header ends early")
            self.buf += more

    def take(self, fmt: str):
        size = struct.calcsize(fmt)
        self.need(size)
        out = struct.unpack_from(fmt, self.buf, self.pos)
        self.pos += size
        return out if len(out) > 1 else out[0]

    def string(self) -> str:
        n = self.take("<Q")
        self.need(n)
        self.pos += n
        return bytes(self.buf[self.pos - n : self.pos]).decode("utf-8", "replace")

    def skip(self, kind: int) -> None:
        if kind == 8:
            self.string()
        elif kind == 9:
            inner, count = self.take("<IQ")
            if inner in _VALUE_BYTES:
                self.need(count * _VALUE_BYTES[inner])
                self.pos += count * _VALUE_BYTES[inner]
            else:
                for _ in range(count):
                    self.skip(inner)
        elif kind in _VALUE_BYTES:
            self.need(_VALUE_BYTES[kind])
            self.pos += _VALUE_BYTES[kind]
        else:
            raise BlockError(f"{self.name}: unknown GGUF value type {kind}")


def tensor_table(path: Path) -> tuple[str, list[tuple[str, str, tuple[int, ...], int]]]:
    """A GGUF's architecture and its tensors (name, type, dims as ggml orders them, byte offset in the file),
    read from the header alone: gguf-py's reader parses every metadata value into arrays first (3.4 s for
    SmolLM2's 49k-token vocabulary, 13.7 s for Gemma-3's 262k here); this skips what it does not need."""
    from gguf.constants import GGUF_DEFAULT_ALIGNMENT, GGMLQuantizationType

    with open(path, "rb") as f:
        h = _Header(f, Path(path).name)
        magic, version, n_tensors, n_kv = h.take("<4sIQQ")
        if magic != b"GGUF" or not 2 <= version <= 3:
            raise BlockError(f"{h.name} is not a little-endian GGUF file of version 2 or 3 (got {version})")
        arch, align = "llama", GGUF_DEFAULT_ALIGNMENT
        for _ in range(n_kv):
            key, kind = h.string(), h.take("<I")
            if key == "general.architecture" and kind == 8:
                arch = h.string()
            elif key == "general.alignment" and kind == 4:
                align = h.take("<I")
                if align == 0 or align & (align - 1):
                    raise BlockError(f"{h.name}: alignment {align} is not a power of two")
            else:
                h.skip(kind)
        infos = []
        for _ in range(n_tensors):
            name, dims = h.string(), h.take("<I")
            dims_read = h.take(f"<{dims}Q") if dims > 1 else ((h.take("<Q"),) if dims else ())
            shape = tuple(int(d) for d in dims_read)
            kind, offset = h.take("<IQ")
            infos.append((name, kind, shape, offset))
        data_start = -(-h.pos // align) * align
    table = []
    for name, kind, shape, offset in infos:
        try:
            kind_name = GGMLQuantizationType(kind).name
        except ValueError:
            kind_name = f"type {kind}"
        table.append((name, kind_name, shape, data_start + offset))
    return arch, table


def read_gguf(path: Path, heads: int, kv_heads: int) -> Blocks:
    """The tensors of a GGUF, memory-mapped, rows in transformers' order (a llama file's q and k reverse-permuted,
    as transformers de-quantizes them; a gemma3 file's as stored). Only F32 and the block types above are
    accepted; anything else is a BlockError naming the tensor."""
    arch, table = tensor_table(Path(path))
    # transformers reverse-permutes q and k for llama only (its LlamaTensorProcessor)
    permute = arch == "llama"
    mapped = np.memmap(path, dtype=np.uint8, mode="r")
    tensors, total = {}, 0
    for name, kind, shape, offset in table:
        if kind not in FORMATS:
            raise BlockError(f"{name} is {kind}: no block kernel (have {', '.join(FORMATS)})")
        _, block, size = FORMATS[kind]
        inner, rows = (shape[0] if shape else 1), int(np.prod(shape[1:], dtype=np.int64))
        if inner % block:
            raise BlockError(f"{name}: rows of {inner} weights are not whole {kind} blocks of {block}")
        nbytes = rows * (inner // block) * size
        if offset + nbytes > mapped.shape[0]:
            raise BlockError(f"{name}: its {nbytes} bytes at {offset} run past the end of {Path(path).name}")
        data = mapped[offset : offset + nbytes]
        total += nbytes
        if kind == "F32":
            data = data.view(np.float32)
        else:
            data = data.reshape(rows, -1)
            if permute and ".attn_q." in name:
                data = _reverse_permute(data, heads)
            elif permute and ".attn_k." in name:
                data = _reverse_permute(data, kv_heads)
        tensors[name] = (kind, data)
    return Blocks(Path(path), tensors, total)


def layer_names(i: int) -> dict[str, tuple[str, ...]]:
    """A llama layer's GGUF tensor names by the lean forward's projection (lean.LeanForward.SLOTS)."""
    b = f"blk.{i}."
    return {
        "norm_in": (b + "attn_norm.weight",),
        "qkv": (b + "attn_q.weight", b + "attn_k.weight", b + "attn_v.weight"),
        "o": (b + "attn_output.weight",),
        "norm_post": (b + "ffn_norm.weight",),
        "gate_up": (b + "ffn_gate.weight", b + "ffn_up.weight"),
        "down": (b + "ffn_down.weight",),
    }
