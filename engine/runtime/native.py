"""specviz's own few-row matmul kernel and fused layer steps (engine/runtime/native.c), compiled on the host.

At 1-8 rows, the steps that decoding is made of, MKL's and oneDNN's fp32 kernels read the weights of a
135M-parameter model at half the rate this machine can stream them (benchmarks/results/gemv-layouts.md);
llama.cpp's vector-dot kernels reach ~78% of it. native.c streams the weights once, in panels of 32 outputs,
against up to 8 input rows; around it, a decoder layer's small steps are fused into two calls.

The C file is compiled once per host with the system C compiler (`-O3 -march=native -fopenmp`), into the
specviz cache (keyed by the source, the compiler, the CPU and its flags), at the first model load: ~0.3 s,
never in a visitor's run. It is loaded with ctypes, which releases the GIL during the call, and runs on the
OpenMP runtime torch has already loaded (the same libgomp: one thread pool). Where there is no compiler,
no OpenMP, another OpenMP runtime, or SPECVIZ_NATIVE=0, `library()` is None, `status()` says why, and the
lean forward keeps to MKL and oneDNN. Which kernel runs at which row count is measured (kernels.py).
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
import threading
from pathlib import Path

import torch

from . import kernels

SOURCE = Path(__file__).with_name("native.c")
FLAG_SETS = (("-march=native",), ("-mcpu=native",), ())  # the first the compiler accepts
COMMON = ("-O3", "-fopenmp", "-shared", "-fPIC")
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


PANEL = 32  # outputs per panel (native.c's PW)


def pack(w: torch.Tensor) -> torch.Tensor:
    """The native kernel's layout of an (out, in) weight: (panels, in, PANEL), panel p holding rows
    p·PANEL .. p·PANEL + PANEL - 1 transposed, the last panel zero-padded; a new tensor (w is only read)."""
    out, inner = w.shape
    panels = -(-out // PANEL)
    padded = torch.zeros(panels * PANEL, inner, dtype=w.dtype)
    padded[:out] = w
    return padded.view(panels, PANEL, inner).transpose(1, 2).contiguous()


def gemv(x: torch.Tensor, w: torch.Tensor, out: int, bias: torch.Tensor | None = None) -> torch.Tensor:
    """x (rows, in) @ W.T (+ bias) -> (rows, out); w = pack(W), fp32 on the CPU."""
    x = x.contiguous()
    rows, inner = x.shape
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
    y = torch.empty_like(x)
    library().specviz_rmsnorm(x.data_ptr(), w.data_ptr(), y.data_ptr(), x.shape[0], x.shape[1], eps)
    return y


def rope_(x: torch.Tensor, heads: int, head_dim: int, cos: torch.Tensor, sin: torch.Tensor) -> None:
    """Rotate the first `heads` heads of each row of x (rows, >= heads * head_dim; rows contiguous) in place;
    cos, sin (rows, head_dim) contiguous."""
    library().specviz_rope(
        x.data_ptr(), x.shape[0], x.stride(0), heads, head_dim, cos.data_ptr(), sin.data_ptr()
    )


def silu_mul(gu: torch.Tensor) -> torch.Tensor:
    """silu(gate) * up of a contiguous (rows, 2 I) gate|up -> (rows, I)."""
    rows, inter = gu.shape[0], gu.shape[1] // 2
    y = torch.empty(rows, inter, dtype=gu.dtype)
    library().specviz_silu_mul(gu.data_ptr(), y.data_ptr(), rows, inter, torch.get_num_threads())
    return y


def attention(q, keys, values, mask, start: int, heads: int) -> torch.Tensor:
    """Softmax attention of T queries over the cache's live keys/values (grouped-query), for one sequence.

    q (T, >= heads * D) rows contiguous (the fused qkv output, heads first); keys, values the live (1, KV, L, D)
    views of the cache's buffers; mask None (causal: query t sees slots <= start + t) or a contiguous uint8
    (T, L), nonzero = may attend. -> (T, heads * D), the o projection's input."""
    _, kv_heads, length, hd = keys.shape
    t, threads = q.shape[0], torch.get_num_threads()
    out = torch.empty(t, heads * hd, dtype=q.dtype)
    scratch = torch.empty(threads * length, dtype=torch.float32)
    library().specviz_attention(
        q.data_ptr(), q.stride(0), keys.data_ptr(), values.data_ptr(), keys.stride(1),
        None if mask is None else mask.data_ptr(), start, out.data_ptr(), scratch.data_ptr(),
        t, length, heads, kv_heads, hd, ctypes.c_float(hd**-0.5), threads,
    )  # fmt: skip
    return out


def layer_qkv(
    x, w_in, eps: float, w_qkv, rotated: int, head_dim: int, cos, sin, cache=None, slot: int = 0
) -> torch.Tensor:
    """A layer's first half in one call: RMSNorm, the qkv product (w_qkv a Weight in the native layout, with its
    bias if it has one), RoPE on the first `rotated` heads. x (T, H); cos, sin (T, D) -> qkv (T, width), the
    last 2 KV heads of each row its key then value heads. cache: None, or the (1, KV, max_len, D) key and value
    buffers the T keys and values are written into at slots slot..slot+T-1 (the caller checked the room; contiguous
    fp32 of one sequence, as PointerLayer allocates them for the fused path's fp32, one-sequence input: not
    checked here, on every layer of every step)."""
    t, hidden = x.shape
    qkv, h = torch.empty(t, w_qkv.out_features, dtype=x.dtype), torch.empty_like(x)  # h: the normed x
    kc, vc = cache if cache is not None else (None, None)
    library().specviz_layer_qkv(
        x.data_ptr(), h.data_ptr(), qkv.data_ptr(), t, hidden, w_qkv.out_features, w_in.data_ptr(), eps,
        w_qkv.w.data_ptr(), None if w_qkv.bias is None else w_qkv.bias.data_ptr(), rotated, head_dim,
        cos.data_ptr(), sin.data_ptr(), None if kc is None else kc.data_ptr(), None if vc is None else vc.data_ptr(),
        0 if kc is None else kc.stride(1), slot, 0 if kc is None else kc.shape[1], torch.get_num_threads(),
    )  # fmt: skip
    return qkv


def layer_rest(
    x, qkv, keys, values, mask, start: int, heads: int, w_o, w_post, eps: float, w_gu, w_down, length=None
) -> None:
    """The rest of a layer in one call, x (T, H) updated in place: attention of qkv's queries over the cache's
    live keys/values (1, KV, L, D) (mask as in attention()), the o product added to x, RMSNorm, gate/up, the
    SiLU gate, the down product added to x. w_o, w_gu, w_down: Weights in the native layout. length: L when
    keys and values are the cache's whole (1, KV, max_len, D) buffers (their first L slots live)."""
    t, hidden = x.shape
    _, kv_heads, live, hd = keys.shape
    length = live if length is None else length
    inter, threads = w_down.in_features, torch.get_num_threads()
    ws = torch.empty(t * (heads * hd + hidden + 3 * inter) + threads * length, dtype=torch.float32)
    library().specviz_layer_rest(
        x.data_ptr(), qkv.data_ptr(), qkv.stride(0), keys.data_ptr(), values.data_ptr(), keys.stride(1), length,
        None if mask is None else mask.data_ptr(), start, t, hidden, heads, kv_heads, hd, inter,
        w_o.w.data_ptr(), w_post.data_ptr(), eps, w_gu.w.data_ptr(), w_down.w.data_ptr(), ws.data_ptr(),
        ctypes.c_float(hd**-0.5), threads,
    )  # fmt: skip


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
        "specviz_rmsnorm": [ptr] * 3 + [long] * 2 + [f32],
        "specviz_rope": [ptr, long, long, long, long, ptr, ptr],
        "specviz_silu_mul": [ptr, ptr, long, long, ctypes.c_int],
        "specviz_layer_qkv": [ptr] * 3
        + [long] * 3
        + [ptr, f32, ptr, ptr, long, long, ptr, ptr, ptr, ptr, long, long, long, ctypes.c_int],
        "specviz_layer_rest": [ptr, ptr, long, ptr, ptr, long, long, ptr]
        + [long] * 7
        + [ptr, ptr, f32, ptr, ptr, ptr, f32, ctypes.c_int],
        "specviz_attention": [ptr, long, ptr, ptr, long, ptr, long, ptr, ptr]
        + [long] * 5
        + [f32, ctypes.c_int],
    }
    for name, argtypes in signatures.items():
        fn = getattr(lib, name)
        fn.restype, fn.argtypes = None, argtypes
    return lib, how


def _build(compiler: str) -> tuple[Path, str]:
    """Compile native.c for this host into the cache (once: the file is keyed by everything that changes it)."""
    version = subprocess.run([compiler, "--version"], capture_output=True, text=True, timeout=30).stdout
    source = SOURCE.read_bytes()
    key = [source.hex(), compiler, version, kernels.cpu_name(), *kernels.cpu_flags(), os.uname().machine]
    digest = hashlib.sha256("\n".join(key).encode()).hexdigest()[:16]
    path = kernels.CACHE_DIR / f"native-{digest}.so"
    name = Path(compiler).name
    errors = []
    for flags in FLAG_SETS:
        how = " ".join([name, *COMMON[:2], *flags])
        marker = path.with_suffix(".flags")
        if path.exists() and marker.exists() and marker.read_text() == how:
            return path, how
        kernels.CACHE_DIR.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        done = subprocess.run(
            [compiler, *COMMON, *flags, str(SOURCE), "-o", str(tmp)],
            capture_output=True,
            text=True,
            timeout=120,
        )
        if done.returncode == 0:
            tmp.replace(path)
            marker.write_text(how)
            _remove_stale(path)
            return path, how
        errors.append(done.stderr)
        tmp.unlink(missing_ok=True)
    raise OSError(errors[-1] or "the compiler failed")


def _remove_stale(keep: Path) -> None:
    """Builds of earlier sources or compilers (a process that loaded one keeps its mapping)."""
    for old in keep.parent.glob("native-*"):
        if old.stem != keep.stem and old.suffix in (".so", ".flags"):
            old.unlink(missing_ok=True)


def _openmp_runtimes() -> set[str]:
    """The files of the OpenMP runtimes mapped into this process (Linux's /proc; elsewhere empty)."""
    try:
        maps = Path("/proc/self/maps").read_text()
    except OSError:
        return set()
    paths = {line.split()[-1] for line in maps.splitlines() if "/" in line}
    return {p for p in paths if Path(p).name.startswith(OPENMP_RUNTIMES)}
