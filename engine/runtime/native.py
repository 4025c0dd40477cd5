"""specviz's own few-row matmul kernel and fused layer steps (engine/runtime/native.c), compiled on the host.

At 1-8 rows, the steps that decoding is made of, MKL's and oneDNN's fp32 kernels read the weights of a
135M-parameter model at half the rate this machine can stream them (benchmarks/results/gemv-layouts.md);
llama.cpp's vector-dot kernels reach ~78% of it. native.c streams the weights once, in panels of two vectors'
width, against up to 6-8 input rows a pass, the weights prefetched 8 KiB ahead (up to 17 rows keep near the memory
floor: benchmarks/results/native-prefetch.md); around it, a decoder layer's small steps are fused, and a forward's
layers run in one call (layers()).

The C file is compiled once per host with the system C compiler into the specviz cache, at the first model load
(~0.3 s, never in a visitor's run): the host's best level first (`-march=native`; `-mcpu=native` on Arm), then
level by level down to plain C (x86-64-v3: AVX2/FMA, v2, the baseline), each build keyed by everything that
changes it (the source, the compiler and its version, the CPU's name and its whole flags line, the level) and
each failure remembered under its key. `SPECVIZ_NATIVE_ARCH` (a `-march` value, e.g. `x86-64-v3`) builds that
level alone: an AVX-512 host runs an AVX2 host's kernel. `status()` names the level built. It is loaded with
ctypes, which releases the GIL during the call, and runs on the OpenMP runtime torch has already loaded (the same
libgomp: one thread pool). Where there is no compiler, no OpenMP, another OpenMP runtime, or SPECVIZ_NATIVE=0,
`library()` is None, `status()` says why, and the lean forward keeps to MKL and oneDNN. Which kernel runs at which
row count is measured (kernels.py).

Every entry point checks its tensors' dtypes, shapes, contiguity and sizes before the call: a mismatch is a
ValueError naming the argument, never a read or write past a buffer.
"""

from __future__ import annotations

import ctypes
import hashlib
import operator
import os
import platform
import shutil
import subprocess
import threading
import time
import weakref
from pathlib import Path

import torch

from . import kernels

SOURCE = Path(__file__).with_name("native.c")
# the native kernel is a candidate up to this many rows, every verification of γ <= 16 (the kernel plan times it
# against oneDNN: with its weights prefetched it kept up to 17 rows on the AMD EPYC, AVX-512;
# benchmarks/results/native-prefetch.md); the same kernel at every n keeps t(n) from falling as n grows
NATIVE_ROWS = 17
# the levels tried, best first, per machine (the first that builds and loads): the host's own, then lower ones
LEVELS = {
    "x86_64": (("-march=native",), ("-march=x86-64-v3",), ("-march=x86-64-v2",), ("-march=x86-64",)),
    "aarch64": (("-mcpu=native",), ("-march=armv8-a",), ()),
}
COMMON = ("-O3", "-fopenmp", "-shared", "-fPIC")
UNUSED_DAYS = 30  # a cached build no process has loaded for this long is deleted (never one in use)
NEEDS = {"avx512": {"avx512f"}, "avx2": {"avx2", "fma"}}  # the CPU flags a level's build runs on (x86)
OPENMP_RUNTIMES = ("libgomp", "libiomp", "libomp")

_lock = threading.Lock()
_state: dict = {}  # "lib": CDLL | None, "status": str (built once per process)


def library():
    """The compiled kernel (ctypes CDLL with `specviz_gemv`), or None when it cannot be used here."""
    with _lock:
        if "lib" not in _state:
            (_state["lib"], _state["status"]), _state["build"] = _load(), None
            if _state["lib"] is not None:
                _state["build"] = Path(_state["lib"]._name).stem
        return _state["lib"]


def build_id() -> str | None:
    """Which build of native.c runs here (its cache file's digest: source, compiler, CPU), None when none does;
    a kernel plan timed with one build is not the plan of another."""
    library()
    return _state["build"]


def status() -> str:
    """How the kernel was built here ("gcc -O3 -march=native ..."), or why it is not used."""
    library()
    return _state["status"]


def level() -> str | None:
    """The build's vector level ("avx512", "avx2", "sse", "neon", "generic"), None when none runs."""
    lib = library()
    return lib.specviz_level().decode() if lib is not None else None


def panel() -> int:
    """Outputs per panel of the build (native.c's PW: two vectors' width), the packed weights' layout."""
    return library().specviz_panel_width()


def pack(w: torch.Tensor, width: int | None = None) -> torch.Tensor:
    """The native kernel's layout of an (out, in) weight: (panels, in, P), P = width or this build's panel(),
    panel p holding rows p·P .. p·P + P - 1 transposed, the last panel zero-padded; a new tensor (w is only read)."""
    out, inner = w.shape
    width = width or panel()
    panels = -(-out // width)
    padded = torch.zeros(panels * width, inner, dtype=w.dtype)
    padded[:out] = w
    return padded.view(panels, width, inner).transpose(1, 2).contiguous()


# --- the checks every entry point makes before a pointer crosses into C ----------------------------------


def _f32(where: str, name: str, t, dims: int, contiguous: bool = True, dtype=torch.float32) -> torch.Tensor:
    """t is a CPU tensor of `dtype` with `dims` dimensions (contiguous, or rows contiguous when `contiguous` is
    "rows"); else a ValueError naming the argument. (The common case first, in one expression: the forward calls
    this a few times per layer per step.)"""
    if (
        isinstance(t, torch.Tensor)
        and t.dtype is dtype
        and t.is_cpu
        and t.dim() == dims
        and (t.is_contiguous() if contiguous is True else contiguous != "rows" or t.stride(-1) == 1)
    ):
        return t
    if not isinstance(t, torch.Tensor):
        raise ValueError(f"native.{where}: {name} must be a tensor, got {type(t).__name__}")
    if t.dtype != dtype or t.device.type != "cpu":
        raise ValueError(f"native.{where}: {name} must be {dtype} on the CPU, got {t.dtype} on {t.device}")
    if t.dim() != dims:
        raise ValueError(f"native.{where}: {name} must have {dims} dimensions, got shape {tuple(t.shape)}")
    if contiguous is True and not t.is_contiguous():
        raise ValueError(f"native.{where}: {name} must be contiguous, got strides {t.stride()}")
    if contiguous == "rows" and t.dim() and t.stride(-1) != 1:
        raise ValueError(f"native.{where}: {name}'s rows must be contiguous, got strides {t.stride()}")
    return t


def _want(where: str, ok: bool, what) -> None:
    """A size condition of an entry point's arguments; a ValueError saying what() when it does not hold (the
    message is only built then: these run on every layer of every step)."""
    if not ok:
        raise ValueError(f"native.{where}: {what()}")


CHECKED = "_specviz_native_checked"  # a weight's attribute: the (inner, out) it passed (it lives as long as the tensor)


def _packed(where: str, name: str, w, inner: int, out: int) -> None:
    """w is pack() of an (out, inner) weight: (ceil(out / P), inner, P) contiguous fp32. A weight is checked once
    for its (inner, out): the forward calls these on every layer of every step, and weights do not change."""
    if getattr(w, CHECKED, None) == (inner, out):
        return
    _f32(where, name, w, 3)
    width = panel()
    want = (-(-out // width), inner, width)
    _want(
        where,
        w.shape == want,
        lambda: f"{name} must be the packed (panels, in, {width}) layout {want}, got {tuple(w.shape)}",
    )
    setattr(w, CHECKED, (inner, out))


def _weight(where: str, name: str, weight, inner: int, out: int) -> int:
    """A projection the kernels read, fp32 panels (lean.Weight: pack()) or GGUF blocks regrouped by panel
    (blocks.BlockWeight: its fmt, (panels, panel bytes) uint8); its native.c format (FMT_*)."""
    fmt = getattr(weight, "fmt", 0)
    if not fmt:
        _packed(where, name, weight.w, inner, out)
        return 0
    w = weight.w
    if getattr(w, CHECKED, None) == (inner, out, fmt):
        return fmt
    _f32(where, name, w, 2, dtype=torch.uint8)
    width = panel()
    block, per = BLOCK_SHAPES[fmt]
    want = (-(-out // width), inner // block * per * width)
    _want(
        where,
        inner % block == 0 and tuple(w.shape) == want,
        lambda: f"{name} must be the block layout {want} for {out} x {inner}, got {tuple(w.shape)}",
    )
    setattr(w, CHECKED, (inner, out, fmt))
    return fmt


# native.c's block formats (FMT_*): inputs a block spans, bytes per block per panel output
BLOCK_SHAPES = {1: (32, 34), 2: (32, 20), 3: (256, 148), 4: (256, 210), 5: (32, 22)}


check_weight = _weight  # the projection check, for blocks.py's entry point


def check_rows(where: str, x, inner: int) -> torch.Tensor:
    """x: (rows, inner) fp32 on the CPU; a contiguous copy if it is not."""
    _f32(where, "x", x, 2, contiguous=False)
    _want(where, x.shape[1] == inner, lambda: f"x rows hold {x.shape[1]} values, the weight reads {inner}")
    return x.contiguous()


def _vector(where: str, name: str, v, n: int) -> None:
    """v is an (n,) fp32 vector (a norm's weight, a bias): checked once per n, as weights are."""
    if getattr(v, CHECKED, None) == (n,):
        return
    _f32(where, name, v, 1)
    _want(where, v.shape[0] == n, lambda: f"{name} must have {n} entries, got {v.shape[0]}")
    setattr(v, CHECKED, (n,))


def _bias(where: str, bias, out: int) -> None:
    if bias is not None:
        _vector(where, "bias", bias, out)


def gemv(x: torch.Tensor, w: torch.Tensor, out: int, bias: torch.Tensor | None = None) -> torch.Tensor:
    """x (rows, in) @ W.T (+ bias) -> (rows, out); w = pack(W), fp32 on the CPU."""
    _f32("gemv", "x", x, 2, contiguous=False)
    x = x.contiguous()
    rows, inner = x.shape
    _want(
        "gemv", isinstance(out, int) and out > 0, lambda: f"out must be a positive whole number, got {out!r}"
    )
    _packed("gemv", "w", w, inner, out)
    _bias("gemv", bias, out)
    y = torch.empty(rows, out, dtype=w.dtype)
    library().specviz_gemv(
        w.data_ptr(),
        x.data_ptr(),
        None if bias is None else bias.data_ptr(),
        y.data_ptr(),
        inner,
        out,
        rows,
        torch.get_num_threads(),
    )
    return y


def rms_norm(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    """transformers' LlamaRMSNorm in fp32 over the last dim of a contiguous (rows, dim) x."""
    _f32("rms_norm", "x", x, 2)
    _vector("rms_norm", "w", w, x.shape[1])
    y = torch.empty_like(x)
    library().specviz_rmsnorm(x.data_ptr(), w.data_ptr(), y.data_ptr(), x.shape[0], x.shape[1], eps)
    return y


def row_stats(x: torch.Tensor, k: int) -> tuple[list, list, list, list]:
    """Per row of a contiguous fp32 (rows, n) x: (argmax, log-sum-exp, the k largest values' indices, those values),
    in one C pass over each row (specviz_row_stats); the top k largest first, a tie to the lower index."""
    _f32("row_stats", "x", x, 2)
    rows, n = x.shape
    _want("row_stats", 1 <= k <= n, lambda: f"k must be between 1 and {n}, got {k}")
    best = torch.empty(rows, dtype=torch.long)
    lse = torch.empty(rows, dtype=torch.float64)
    ids = torch.empty(rows, k, dtype=torch.long)
    vals = torch.empty(rows, k, dtype=torch.float32)
    library().specviz_row_stats(
        x.data_ptr(),
        rows,
        n,
        k,
        best.data_ptr(),
        lse.data_ptr(),
        ids.data_ptr(),
        vals.data_ptr(),
        torch.get_num_threads(),
    )
    return best.tolist(), lse.tolist(), ids.tolist(), vals.tolist()


def rope_(x: torch.Tensor, heads: int, head_dim: int, cos: torch.Tensor, sin: torch.Tensor) -> None:
    """Rotate the first `heads` heads of each row of x (rows, >= heads * head_dim; rows contiguous) in place;
    cos, sin (rows, head_dim) contiguous."""
    _f32("rope_", "x", x, 2, contiguous="rows")
    for name, t in (("cos", cos), ("sin", sin)):
        _f32("rope_", name, t, 2)
        _want(
            "rope_",
            t.shape == (x.shape[0], head_dim),
            lambda name=name, t=t: f"{name} must be ({x.shape[0]}, {head_dim}), got {tuple(t.shape)}",
        )
    _want(
        "rope_",
        heads * head_dim <= x.shape[1],
        lambda: f"x rows hold {x.shape[1]} values, fewer than {heads} heads of {head_dim}",
    )
    _want("rope_", head_dim % 2 == 0, lambda: f"head_dim must be even, got {head_dim}")
    library().specviz_rope(
        x.data_ptr(), x.shape[0], x.stride(0), heads, head_dim, cos.data_ptr(), sin.data_ptr()
    )


def silu_mul(gu: torch.Tensor) -> torch.Tensor:
    """silu(gate) * up of a contiguous (rows, 2 I) gate|up -> (rows, I)."""
    _f32("silu_mul", "gu", gu, 2)
    _want(
        "silu_mul", gu.shape[1] % 2 == 0, lambda: f"gu must hold gate|up (an even width), got {gu.shape[1]}"
    )
    rows, inter = gu.shape[0], gu.shape[1] // 2
    y = torch.empty(rows, inter, dtype=gu.dtype)
    library().specviz_silu_mul(gu.data_ptr(), y.data_ptr(), rows, inter, torch.get_num_threads())
    return y


def attention(q, keys, values, mask, start: int, heads: int) -> torch.Tensor:
    """Softmax attention of T queries over the cache's live keys/values (grouped-query), for one sequence.

    q (T, >= heads * D) rows contiguous (the fused qkv output, heads first); keys, values the live (1, KV, L, D)
    views of the cache's buffers; mask None (causal: query t sees slots <= start + t) or a contiguous uint8
    (T, L), nonzero = may attend. -> (T, heads * D), the o projection's input."""
    _, kv_heads, length, hd = _check_cache("attention", keys, values)
    _check_queries("attention", q, heads, kv_heads, hd, mask, start, length)
    t, threads = q.shape[0], torch.get_num_threads()
    out = torch.empty(t, heads * hd, dtype=q.dtype)
    scratch = torch.empty(threads * (length + panel()), dtype=torch.float32)  # scores, the last vector padded
    library().specviz_attention(
        q.data_ptr(), q.stride(0), keys.data_ptr(), values.data_ptr(), keys.stride(1),
        None if mask is None else mask.data_ptr(), start, out.data_ptr(), scratch.data_ptr(),
        t, length, heads, kv_heads, hd, ctypes.c_float(hd**-0.5), threads,
    )  # fmt: skip
    return out


def layer_qkv(x, w_in, eps: float, w_qkv, rotated: int, head_dim: int, cos, sin) -> torch.Tensor:
    """A layer's first half in one call: RMSNorm, the qkv product (w_qkv a Weight in the native layout, with its
    bias if it has one), RoPE on the first `rotated` heads. x (T, H); cos, sin (T, D) -> qkv (T, width), the
    last 2 KV heads of each row its key then value heads (a pointer cache's layers take layers() instead, which
    writes them into the cache itself)."""
    _f32("layer_qkv", "x", x, 2)
    t, hidden = x.shape
    _vector("layer_qkv", "w_in", w_in, hidden)
    f_qkv = _weight("layer_qkv", "w_qkv", w_qkv, hidden, w_qkv.out_features)
    _bias("layer_qkv", w_qkv.bias, w_qkv.out_features)
    for name, c in (("cos", cos), ("sin", sin)):
        _f32("layer_qkv", name, c, 2)
        _want(
            "layer_qkv",
            c.shape == (t, head_dim),
            lambda name=name, c=c: f"{name} must be ({t}, {head_dim}), got {tuple(c.shape)}",
        )
    _want(
        "layer_qkv",
        0 < rotated and rotated * head_dim <= w_qkv.out_features and head_dim % 2 == 0,
        lambda: f"{rotated} rotated heads of {head_dim} do not fit a row of {w_qkv.out_features}",
    )
    qkv, h = torch.empty(t, w_qkv.out_features, dtype=x.dtype), torch.empty_like(x)  # h: the normed x
    library().specviz_layer_qkv(
        x.data_ptr(), h.data_ptr(), qkv.data_ptr(), t, hidden, w_qkv.out_features, w_in.data_ptr(), eps,
        w_qkv.w.data_ptr(), f_qkv, None if w_qkv.bias is None else w_qkv.bias.data_ptr(), rotated, head_dim,
        cos.data_ptr(), sin.data_ptr(), torch.get_num_threads(),
    )  # fmt: skip
    return qkv


def layer_rest(
    x, qkv, keys, values, mask, start: int, heads: int, w_o, w_post, eps: float, w_gu, w_down, length=None
) -> None:
    """The rest of a layer in one call, x (T, H) updated in place: attention of qkv's queries over the cache's
    live keys/values (1, KV, L, D) (mask as in attention()), the o product added to x, RMSNorm, gate/up, the
    SiLU gate, the down product added to x. w_o, w_gu, w_down: Weights in the native layout. length: L when
    keys and values are the cache's whole (1, KV, max_len, D) buffers (their first L slots live)."""
    _f32("layer_rest", "x", x, 2)
    t, hidden = x.shape
    _, kv_heads, live, hd = _check_cache("layer_rest", keys, values)
    length = live if length is None else length
    _want(
        "layer_rest",
        isinstance(length, int) and 0 < length <= live,
        lambda: f"length must be 1..{live}, got {length!r}",
    )
    _check_queries("layer_rest", qkv, heads, kv_heads, hd, mask, start, length)
    _want("layer_rest", qkv.shape[0] == t, lambda: f"qkv has {qkv.shape[0]} rows, x {t}")
    inter, threads = w_down.in_features, torch.get_num_threads()
    fmt = (ctypes.c_int * 3)(
        _weight("layer_rest", "w_o", w_o, heads * hd, hidden),
        _weight("layer_rest", "w_gu", w_gu, hidden, 2 * inter),
        _weight("layer_rest", "w_down", w_down, inter, hidden),
    )
    _vector("layer_rest", "w_post", w_post, hidden)
    _want(
        "layer_rest",
        w_o.bias is None and w_gu.bias is None and w_down.bias is None,
        lambda: "w_o, w_gu, w_down must have no bias",
    )
    ws = torch.empty(
        t * (heads * hd + hidden + 3 * inter) + threads * (length + panel()), dtype=torch.float32
    )
    library().specviz_layer_rest(
        x.data_ptr(), qkv.data_ptr(), qkv.stride(0), keys.data_ptr(), values.data_ptr(), keys.stride(1), length,
        None if mask is None else mask.data_ptr(), start, t, hidden, heads, kv_heads, hd, inter,
        w_o.w.data_ptr(), w_post.data_ptr(), eps, w_gu.w.data_ptr(), w_down.w.data_ptr(), fmt, ws.data_ptr(),
        ctypes.c_float(hd**-0.5), threads,
    )  # fmt: skip


CHECKED_CACHES = 4  # caches a Stack remembers as checked (native.layers)


class Stack:
    """A forward's decoder layers as specviz_layers reads them: per layer the pointers of w_in, w_qkv, its bias,
    w_o, w_post, w_gu, w_down (each tensor checked once in its life, as every entry point's weights are), and the
    shapes they share. layers: (w_in, w_qkv, w_o, w_post, w_gu, w_down) tuples, the projections Weights in the
    native layout; the stack holds every tensor whose pointer it took, so the pointers live as long as it does, and
    `current(layers)` says whether those are still the tensors the layers hold (a Weight's matrix or bias replaced
    since: build a new stack)."""

    def __init__(self, layers: list, heads: int, head_dim: int, eps: float):
        where = "layers"
        first = layers[0]
        self.hidden, self.width, self.inter = (
            first[2].out_features,
            first[1].out_features,
            first[5].in_features,
        )
        self.heads, self.head_dim, self.eps, self.layers = heads, head_dim, eps, layers
        _want(where, head_dim % 2 == 0, lambda: f"head_dim must be even, got {head_dim}")
        pointers, formats = [], []
        for i, (w_in, w_qkv, w_o, w_post, w_gu, w_down) in enumerate(layers):
            hidden, inter = self.hidden, self.inter
            _vector(where, f"layer {i} w_in", w_in, hidden)
            _vector(where, f"layer {i} w_post", w_post, hidden)
            formats += [
                _weight(where, f"layer {i} w_qkv", w_qkv, hidden, self.width),
                _weight(where, f"layer {i} w_o", w_o, heads * head_dim, hidden),
                _weight(where, f"layer {i} w_gu", w_gu, hidden, 2 * inter),
                _weight(where, f"layer {i} w_down", w_down, inter, hidden),
            ]
            _bias(where, w_qkv.bias, self.width)
            _want(
                where,
                w_o.bias is None and w_gu.bias is None and w_down.bias is None,
                lambda i=i: f"layer {i}: w_o, w_gu, w_down must have no bias",
            )
            bias = None if w_qkv.bias is None else w_qkv.bias.data_ptr()
            pointers += [w_in.data_ptr(), w_qkv.w.data_ptr(), bias, w_o.w.data_ptr(), w_post.data_ptr()]
            pointers += [w_gu.w.data_ptr(), w_down.w.data_ptr()]
        self.pointers = (ctypes.c_void_p * len(pointers))(*pointers)
        self.formats = (ctypes.c_int * len(formats))(*formats)
        self.held = _tensors(layers)
        # the caches checked last (native.layers), by their first buffer's id: weak references to their tensors (a
        # run's cache is not kept alive past it) and what the checks found (shape, pointers); a few, so that a race's
        # two lanes, one cache each and their steps alternating, both keep theirs
        self.caches: dict[int, tuple] = {}

    def current(self, layers: list) -> bool:
        """The layers still hold the very tensors this stack points at (identity, not equality)."""
        now = _tensors(layers)
        return len(now) == len(self.held) and all(map(operator.is_, now, self.held))

    def checked_caches(self, caches: list) -> tuple | None:
        """(shape, key pointers, value pointers) of caches that are the very tensors checked before (a cache's
        buffers are allocated once and kept: each decode step passes the same ones), else None."""
        held = self.caches.get(id(caches[0][0]))
        if held is None:
            return None
        flat = [t for kv in caches for t in kv]
        same = len(flat) == len(held[0]) and all(ref() is t for ref, t in zip(held[0], flat))
        return held[1] if same else None

    def checked(self, caches: list, found: tuple) -> None:
        """Remember that these caches passed the checks (what checked_caches answers), the last CHECKED_CACHES."""
        if len(self.caches) >= CHECKED_CACHES:
            self.caches.pop(next(iter(self.caches)))
        self.caches[id(caches[0][0])] = ([weakref.ref(t) for kv in caches for t in kv], found)


def _tensors(layers: list) -> list:
    """Every tensor of the layers a Stack takes a pointer of, in order."""
    out = []
    for w_in, w_qkv, w_o, w_post, w_gu, w_down in layers:
        out += [w_in, w_qkv.w, w_qkv.bias, w_o.w, w_post, w_gu.w, w_down.w, w_o.bias, w_gu.bias, w_down.bias]
    return out


def layers(x, stack: Stack, caches: list, start: int, cos, sin, mask=None) -> None:
    """Every decoder layer of one sequence in one native call, x (T, H) updated in place: per layer, layer_qkv
    (its T keys and values written into the cache at slots start..start+T-1) then layer_rest over the cache's
    start + T keys. caches: per layer the (1, KV, max_len, D) key and value buffers (contiguous fp32, as
    PointerLayer allocates them; the caller claimed the slots); cos, sin (T, D); mask None (causal) or a
    contiguous uint8 (T, start + T)."""
    where, hd, heads = "layers", stack.head_dim, stack.heads
    _f32(where, "x", x, 2)
    t, hidden = x.shape
    _want(where, hidden == stack.hidden, lambda: f"x rows hold {hidden} values, the layers {stack.hidden}")
    _want(
        where,
        len(caches) == len(stack.layers),
        lambda: f"{len(caches)} caches for {len(stack.layers)} layers",
    )
    for name, c in (("cos", cos), ("sin", sin)):
        _f32(where, name, c, 2)
        _want(
            where,
            c.shape == (t, hd),
            lambda name=name, c=c: f"{name} must be ({t}, {hd}), got {tuple(c.shape)}",
        )
    known = stack.checked_caches(caches)
    shape = known[0] if known else _check_cache(where, *caches[0])
    _, kv_heads, max_len, cache_hd = shape
    _want(where, cache_hd == hd, lambda: f"the cache's head_dim is {cache_hd}, not {hd}")
    _want(
        where,
        isinstance(start, int) and 0 <= start and start + t <= max_len,
        lambda: f"slots {start}..{start + t - 1} are outside the cache's {max_len}",
    )
    _want(
        where,
        heads % kv_heads == 0 and (heads + 2 * kv_heads) * hd <= stack.width,
        lambda: f"a row of {stack.width} holds no {heads} query and {kv_heads} key and value heads of {hd}",
    )
    rest = caches[1:] if not known else ()  # caches checked before are known good
    for keys, values in rest:  # each checked as the first, and of its shape and strides
        _want(
            where,
            keys.shape == shape and values.shape == shape and keys.stride() == caches[0][0].stride(),
            lambda keys=keys: f"every cache must be {tuple(shape)} as the first, got {tuple(keys.shape)}",
        )
        _check_cache(where, keys, values)
    if mask is not None:
        _f32(where, "mask", mask, 2, dtype=torch.uint8)
        _want(
            where,
            tuple(mask.shape) == (t, start + t),
            lambda: f"mask must be ({t}, {start + t}), got {tuple(mask.shape)}",
        )
    threads, n = torch.get_num_threads(), len(caches)
    ws = torch.empty(
        t * (stack.width + heads * hd + 2 * hidden + 3 * stack.inter) + threads * (start + t + panel()),
        dtype=torch.float32,
    )
    if known:
        kc, vc = known[1], known[2]
    else:
        kc = (ctypes.c_void_p * n)(*[k.data_ptr() for k, _ in caches])
        vc = (ctypes.c_void_p * n)(*[v.data_ptr() for _, v in caches])
        stack.checked(caches, (shape, kc, vc))
    library().specviz_layers(
        x.data_ptr(), n, stack.pointers, stack.formats, kc, vc, caches[0][0].stride(1), start, t, hidden, stack.width, heads,
        kv_heads, hd, stack.inter, stack.eps, cos.data_ptr(), sin.data_ptr(), None if mask is None else mask.data_ptr(),
        ws.data_ptr(), ctypes.c_float(hd**-0.5), threads,
    )  # fmt: skip


def _check_cache(where: str, keys, values) -> tuple:
    """keys and values: a cache's (1, KV, L, D) fp32 views of one sequence, each head's slots contiguous; their
    shape."""
    for name, t in (("keys", keys), ("values", values)):
        _f32(where, name, t, 4, contiguous=False)
        _want(
            where, t.shape[0] == 1, lambda name=name, t=t: f"{name} must hold one sequence, got {t.shape[0]}"
        )
        _want(
            where,
            t.stride(3) == 1 and t.stride(2) == t.shape[3],
            lambda name=name, t=t: f"{name}' slots must be contiguous, got strides {t.stride()}",
        )
    _want(
        where,
        keys.shape == values.shape and keys.stride() == values.stride(),
        lambda: f"keys {tuple(keys.shape)} and values {tuple(values.shape)} differ",
    )
    return tuple(keys.shape)


def _check_queries(where: str, q, heads: int, kv_heads: int, hd: int, mask, start: int, length: int) -> None:
    """q (T, >= heads * hd) rows contiguous; heads a multiple of the KV heads; the mask (T, length) uint8, or a
    causal call whose T new slots start..start+T-1 lie among the length keys."""
    _f32(where, "q", q, 2, contiguous="rows")
    t = q.shape[0]
    _want(
        where,
        heads * hd <= q.shape[1],
        lambda: f"q rows hold {q.shape[1]} values, fewer than {heads} heads of {hd}",
    )
    _want(
        where,
        heads > 0 and heads % kv_heads == 0,
        lambda: f"{heads} heads are not a multiple of {kv_heads} KV heads",
    )
    if mask is None:
        _want(
            where,
            0 <= start and start + t <= length,
            lambda: f"causal slots {start}..{start + t - 1} are outside the {length} keys",
        )
    else:
        _f32(where, "mask", mask, 2, dtype=torch.uint8)
        _want(
            where,
            tuple(mask.shape) == (t, length),
            lambda: f"mask must be ({t}, {length}), got {tuple(mask.shape)}",
        )


def _load():
    if os.environ.get("SPECVIZ_NATIVE", "1") == "0":
        return None, "off (SPECVIZ_NATIVE=0)"
    compiler = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        return None, "no C compiler on this machine"
    try:
        path, how = _build(compiler)
        before = _openmp_runtimes()
        lib = ctypes.CDLL(str(path))
    except (OSError, subprocess.SubprocessError) as err:
        return None, f"not built: {str(err).strip().splitlines()[-1] if str(err).strip() else err!r}"
    runtimes = _openmp_runtimes()
    if len(runtimes) > 1 or (before and runtimes != before):
        return (
            None,
            f"not used: a second OpenMP runtime would run beside torch's ({', '.join(sorted(runtimes))})",
        )
    ptr, long, f32 = ctypes.c_void_p, ctypes.c_long, ctypes.c_float
    signatures = {
        "specviz_gemv": [ptr] * 4 + [long] * 3 + [ctypes.c_int],
        "specviz_gemv_q": [ptr, ctypes.c_int, ptr, ptr, ptr] + [long] * 3 + [ctypes.c_int],
        "specviz_dequant": [ptr, ctypes.c_int, long, long, long, ptr, ctypes.c_int],
        "specviz_rmsnorm": [ptr] * 3 + [long] * 2 + [f32],
        "specviz_rope": [ptr, long, long, long, long, ptr, ptr],
        "specviz_silu_mul": [ptr, ptr, long, long, ctypes.c_int],
        "specviz_layer_qkv": [ptr] * 3
        + [long] * 3
        + [ptr, f32, ptr, ctypes.c_int, ptr, long, long, ptr, ptr, ctypes.c_int],
        "specviz_layer_rest": [ptr, ptr, long, ptr, ptr, long, long, ptr]
        + [long] * 7
        + [ptr, ptr, f32, ptr, ptr, ptr, ptr, f32, ctypes.c_int],
        "specviz_layers": [ptr, long, ptr, ptr, ptr, ptr]
        + [long] * 9
        + [f32, ptr, ptr, ptr, ptr, f32, ctypes.c_int],
        "specviz_row_stats": [ptr, long, long, long, ptr, ptr, ptr, ptr, ctypes.c_int],
        "specviz_attention": [ptr, long, ptr, ptr, long, ptr, long, ptr, ptr]
        + [long] * 5
        + [f32, ctypes.c_int],
    }
    for name, argtypes in signatures.items():
        fn = getattr(lib, name)
        fn.restype, fn.argtypes = None, argtypes
    lib.specviz_panel_width.restype, lib.specviz_panel_width.argtypes = ctypes.c_int, []
    lib.specviz_level.restype, lib.specviz_level.argtypes = ctypes.c_char_p, []
    level = lib.specviz_level().decode()
    lacks = sorted(NEEDS.get(level, set()) - set(flags_line().split(":", 1)[-1].split()))
    if lacks and platform.machine() == "x86_64":  # SPECVIZ_NATIVE_ARCH above this CPU: it would die on a call
        return None, f"not used: built for {level}, which this CPU cannot run (it lacks {', '.join(lacks)})"
    return lib, f"{how} ({level}, panels of {lib.specviz_panel_width()})"


def candidates(machine: str | None = None, arch: str | None = None) -> tuple:
    """The compiler flags tried, best level first: SPECVIZ_NATIVE_ARCH's -march alone when it is set, else the
    machine's levels (LEVELS), plain C where it has none."""
    arch = os.environ.get("SPECVIZ_NATIVE_ARCH") if arch is None else arch
    if arch:
        return ((f"-march={arch}",),)
    return LEVELS.get(machine or platform.machine(), ((),))


def flags_line() -> str:
    """The CPU's whole flags line (/proc/cpuinfo's "flags" or "Features"): everything -march=native reads."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return platform.processor()
    return next((x for x in text.splitlines() if x.lower().startswith(("flags", "features"))), "")


def build_key(
    source: bytes, compiler: str, version: str, cpu: str, flags: str, machine: str, level: tuple
) -> str:
    """The cache name of one build: a digest of everything that changes the library."""
    parts = [source.hex(), compiler, version, cpu, flags, machine, *level]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


def _build(compiler: str) -> tuple[Path, str]:
    """Compile native.c for this host into the cache at the best level that builds (a cached build, or a failure
    remembered under its key, is not compiled again)."""
    version = subprocess.run([compiler, "--version"], capture_output=True, text=True, timeout=30).stdout
    source, machine, name = SOURCE.read_bytes(), platform.machine(), Path(compiler).name
    kernels.CACHE_DIR.mkdir(parents=True, exist_ok=True)
    _prune_unused()
    errors = []
    for flags in candidates(machine):
        digest = build_key(source, compiler, version, kernels.cpu_name(), flags_line(), machine, flags)
        path = kernels.CACHE_DIR / f"native-{digest}.so"
        how = " ".join([name, *COMMON[:2], *flags])
        failed = path.with_suffix(".failed")
        if failed.exists():  # this level does not build here: remembered
            errors.append(failed.read_text(errors="replace"))
            continue
        if path.exists():
            try:
                os.utime(path)  # in use: not pruned
            except OSError:  # a cache folder this process may read but not write
                pass
            return path, how
        tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        try:
            done = subprocess.run(
                [compiler, *COMMON, *flags, str(SOURCE), "-o", str(tmp)],
                capture_output=True,
                text=True,
                timeout=120,
            )
        except subprocess.TimeoutExpired:
            tmp.unlink(missing_ok=True)
            raise
        if done.returncode == 0:
            tmp.replace(path)
            return path, how
        tmp.unlink(missing_ok=True)
        message = f"{how}: {done.stderr.strip()[-2000:]}"
        if (
            "error:" in done.stderr
        ):  # the compiler refused this level (a lack of memory or disk is not remembered)
            failed.write_text(message)
        errors.append(message)
    raise OSError(errors[-1] if errors else "the compiler failed")


def _prune_unused() -> None:
    """Delete cached builds (of any checkout, any source) that no process has loaded for UNUSED_DAYS."""
    cutoff = time.time() - UNUSED_DAYS * 86400
    for old in kernels.CACHE_DIR.glob("native-*"):
        try:
            if old.suffix in (".so", ".failed") and old.stat().st_mtime < cutoff:
                old.unlink(missing_ok=True)
        except OSError:
            continue


def _openmp_runtimes() -> set[str]:
    """The files of the OpenMP runtimes mapped into this process (Linux's /proc; elsewhere empty)."""
    try:
        maps = Path("/proc/self/maps").read_text()
    except OSError:
        return set()
    paths = {line.split()[-1] for line in maps.splitlines() if "/" in line}
    return {p for p in paths if Path(p).name.startswith(OPENMP_RUNTIMES)}
