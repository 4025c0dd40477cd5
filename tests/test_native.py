"""specviz's native few-row kernel (engine/runtime/native.c via native.py): the same products as torch at every
row count, shape and thread count, at every vector level this host executes; a row's result independent of the
rows beside it; torch's one OpenMP runtime; every entry point refusing a wrong argument by name; the build's cache
keyed by the whole flags line; and a machine without a compiler keeps MKL and oneDNN (that test always runs)."""

from __future__ import annotations

import math
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from engine.runtime import kernels, lean, native
from engine.runtime.threads import torch_threads

ROOT = Path(__file__).resolve().parent.parent
built = pytest.mark.skipif(native.library() is None, reason=f"native kernel: {native.status()}")


@built
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("inner,out", [(576, 960), (37, 11), (64, 1), (1536, 577), (31, 64)])
def test_products_match_torch_at_every_row_count(inner, out, threads):
    """Rows 1-9 (the 8-row groups and a remainder), outputs that are and are not a multiple of the 32-output
    panel, with and without a bias: within fp32 rounding of torch's x @ W.T + b."""
    g = torch.Generator().manual_seed(inner * out)
    w, b = torch.randn(out, inner, generator=g), torch.randn(out, generator=g)
    with torch_threads(threads):
        for rows in range(1, 12):
            x = torch.randn(rows, inner, generator=g)
            for bias in (None, b):
                ref = x @ w.T + (0 if bias is None else bias)
                got = native.gemv(x, native.pack(w), out, bias)
                torch.testing.assert_close(got, ref, rtol=1e-4, atol=1e-4 * inner**0.5)


@built
def test_a_wrong_product_is_caught():
    """The negative control: the comparison above fails on a kernel whose result is off by one weight."""
    w, x = torch.randn(11, 37), torch.randn(3, 37)
    w2 = w.clone()
    w2[4, 7] += 1.0
    with pytest.raises(AssertionError):
        torch.testing.assert_close(
            native.gemv(x, native.pack(w2), 11), x @ w.T, rtol=1e-4, atol=1e-4 * 37**0.5
        )


@built
def test_a_rows_result_does_not_depend_on_the_rows_beside_it():
    """Every row runs the same instructions whatever the call's row count: bitwise equal alone or in a batch."""
    w, x = native.pack(torch.randn(960, 576)), torch.randn(11, 576)
    alone = torch.cat([native.gemv(x[r : r + 1], w, 960) for r in range(11)])
    for threads in (1, 2):
        with torch_threads(threads):
            assert torch.equal(native.gemv(x, w, 960), alone)


@built
def test_it_runs_on_torchs_openmp_runtime():
    """One OpenMP runtime in the process after both torch and the kernel ran in parallel (no second pool)."""
    with torch_threads(2):
        native.gemv(torch.randn(2, 576), native.pack(torch.randn(960, 576)), 960)
        torch.mm(torch.randn(256, 256), torch.randn(256, 256))
    assert len(native._openmp_runtimes()) <= 1


def test_no_compiler_or_switched_off_keeps_mkl_and_onednn(monkeypatch):
    """Without a C compiler (or with SPECVIZ_NATIVE=0) library() is None, status() says why, and a Weight offers
    only the other kernels; the forward still computes."""
    saved = dict(native._state)
    try:
        for env, value, said in (("CC", "/nonexistent/cc", "not built"), ("SPECVIZ_NATIVE", "0", "off")):
            native._state.clear()
            monkeypatch.setenv(env, value)
            assert native.library() is None and native.status().startswith(said)
            w = lean.Weight(torch.randn(8, 4), pack=True)
            assert "native" not in w.kernels(1) and w.w.shape == (4, 8)  # MKL's (in, out) layout
            x = torch.randn(2, 4)
            torch.testing.assert_close(w(x), x @ w.w)
            monkeypatch.delenv(env)
    finally:
        native._state.clear()
        native._state.update(saved)


@built
def test_the_build_is_cached_per_host(tmp_path, monkeypatch):
    """A second build with the same source, compiler and CPU compiles nothing: the cached library is reused."""

    monkeypatch.setattr(kernels, "CACHE_DIR", tmp_path)
    compiler = native.shutil.which("cc") or native.shutil.which("gcc")
    path, how = native._build(compiler)
    calls = []
    real = native.subprocess.run
    monkeypatch.setattr(native.subprocess, "run", lambda args, **kw: calls.append(args) or real(args, **kw))
    assert native._build(compiler) == (path, how)
    assert not any(str(native.SOURCE) in a for a in calls)  # only `cc --version`: nothing compiled
    assert "-O3" in how and path.parent == tmp_path


@built
@pytest.mark.parametrize("hidden", [64, 40])  # head_dim 16 (the vector path) and 10 (the scalar one)
def test_the_fused_layer_steps_match_the_torch_path_and_transformers(hidden):
    """native.c's fused norm/RoPE/attention/SiLU layer (as two whole-layer calls, and as one call per step beside
    MKL's products) against the lean forward's torch ops and against transformers itself: AR steps, a causal
    block of 5 and a token tree (its mask and positions), 1 and 2 threads; the keys and values the whole-layer
    path writes into the cache (native.c's own write) equal the torch path's, and the cache's length moves alike."""
    from engine.runtime.cache import KVCache
    from tests.tiny import tiny_llama

    model = tiny_llama(hidden=hidden, max_position_embeddings=128)
    forward = lean.LeanForward(model)
    assert forward.fused
    ids = torch.randint(0, 512, (1, 40), generator=torch.Generator().manual_seed(hidden))
    tree = torch.ones(1, 1, 4, 34, dtype=torch.bool)  # root at 30; 31 and 32 both children of it; 33 under 32
    tree[0, 0, 0, 31:] = False
    tree[0, 0, 1, 32:] = False
    tree[0, 0, 2, 31] = tree[0, 0, 2, 33] = tree[0, 0, 3, 31] = False
    calls = [
        dict(input_ids=ids[:, 30:31]),
        dict(input_ids=ids[:, 30:35]),
        dict(input_ids=ids[:, 30:34], attention_mask=tree, position_ids=torch.tensor([[30, 31, 31, 32]])),
    ]
    for threads, kernel in ((1, "native"), (2, "native"), (1, "mkl"), (2, "mkl")):
        for weights in forward.weights().values():  # native: a layer is two calls; mkl: one call per step
            for w in weights:
                w.use_plan(threads, {r: {kernel: 0.0, "kernel": kernel} for r in kernels.ROWS})
        with torch_threads(threads), torch.inference_mode():
            for call in calls:
                out, kv = {}, {}
                for fused in (True, False):
                    forward.fused = fused
                    cache = KVCache.for_model(model, 64)
                    forward(ids[:, :30], cache)
                    out[fused] = forward(past_key_values=cache, **call)
                    kv[fused] = [
                        (la.length, la.keys[:, :, : la.length], la.values[:, :, : la.length])
                        for la in cache.layers
                    ]
                torch.testing.assert_close(out[True], out[False], rtol=1e-4, atol=1e-4)
                for (n_f, k_f, v_f), (n_t, k_t, v_t) in zip(kv[True], kv[False]):
                    assert n_f == n_t == 30 + call["input_ids"].shape[1]
                    torch.testing.assert_close(k_f, k_t, rtol=1e-5, atol=1e-5)
                    torch.testing.assert_close(v_f, v_t, rtol=1e-5, atol=1e-5)
                if "attention_mask" not in call:
                    ref = model(ids[:, : 30 + call["input_ids"].shape[1]]).logits[
                        :, -call["input_ids"].shape[1] :
                    ]
                    torch.testing.assert_close(out[True], ref, rtol=1e-4, atol=1e-4)
    forward.fused = True


@built
def test_a_wrong_mask_is_caught():
    """The negative control for the tree case: the fused attention told to see every key differs from the tree."""
    from engine.runtime.cache import KVCache
    from tests.tiny import tiny_llama

    model = tiny_llama()
    forward = lean.LeanForward(model)
    ids = torch.randint(0, 512, (1, 34), generator=torch.Generator().manual_seed(1))
    tree = torch.ones(1, 1, 4, 34, dtype=torch.bool)
    tree[0, 0, 1, 32:] = tree[0, 0, 0, 31:] = tree[0, 0, 2, 31] = False
    out = []
    with torch.inference_mode():
        for mask in (tree, torch.ones_like(tree)):
            cache = KVCache.for_model(model, 64)
            forward(ids[:, :30], cache)
            out.append(
                forward(
                    ids[:, 30:34], cache, attention_mask=mask, position_ids=torch.tensor([[30, 31, 31, 32]])
                )
            )
    assert not torch.allclose(out[0], out[1], atol=1e-4)


def test_a_build_never_deletes_another_checkouts_and_prunes_only_the_long_unused(tmp_path, monkeypatch):
    """Two checkouts share the cache: building here leaves another source's fresh build in place (it was deleted,
    and the two checkouts rebuilt and re-measured in turn); a build no process loaded for 30 days goes."""

    monkeypatch.setattr(kernels, "CACHE_DIR", tmp_path)
    other, stale = tmp_path / "native-0123456789abcdef.so", tmp_path / "native-fedcba9876543210.so"
    other.write_bytes(b"another checkout's")
    stale.write_bytes(b"old")
    month = time.time() - 31 * 86400
    os.utime(stale, (month, month))
    path, _ = native._build(native.shutil.which("cc") or native.shutil.which("gcc"))
    assert other.exists() and not stale.exists() and path.exists()


def test_two_hosts_flag_lines_give_two_cache_keys():
    """Two CPUs of one name whose flags differ (Milan, Genoa: -march=native reads all of them) never share a build;
    nor do two levels on one host."""
    key = dict(
        source=b"src", compiler="cc", version="12", cpu="AMD EPYC", machine="x86_64", level=("-march=native",)
    )
    milan = native.build_key(flags="flags: fpu avx2 fma", **key)
    genoa = native.build_key(flags="flags: fpu avx2 fma avx512f", **key)
    assert milan != genoa
    assert native.build_key(flags="flags: fpu avx2 fma", **{**key, "level": ("-march=x86-64-v3",)}) != milan
    assert native.build_key(flags="flags: fpu avx2 fma", **key) == milan


def test_a_level_that_fails_to_build_is_remembered_and_the_next_is_tried(tmp_path, monkeypatch):
    """The best level does not build: the next one down is built, and the failure is kept under its key, so the
    next process start does not try it again."""

    monkeypatch.setattr(kernels, "CACHE_DIR", tmp_path)
    monkeypatch.setattr(native, "candidates", lambda machine=None: (("-march=no-such-level",), ()))
    compiler = native.shutil.which("cc") or native.shutil.which("gcc")
    path, how = native._build(compiler)
    assert "no-such-level" not in how and len(list(tmp_path.glob("*.failed"))) == 1
    calls = []
    real = native.subprocess.run
    monkeypatch.setattr(native.subprocess, "run", lambda args, **kw: calls.append(args) or real(args, **kw))
    assert native._build(compiler) == (path, how)
    assert not any("-march=no-such-level" in a for a in calls)


def test_native_arch_chooses_the_level():
    """SPECVIZ_NATIVE_ARCH builds that -march alone (an AVX-512 host builds an AVX2 host's kernel)."""
    assert native.candidates("x86_64", arch="x86-64-v3") == (("-march=x86-64-v3",),)
    assert native.candidates("x86_64", arch="")[0] == ("-march=native",)
    assert native.candidates("riscv64", arch="") == ((),)  # plain C


def executable_levels() -> list[str]:
    """The -march levels this host can run (its flags): native, and below it x86-64-v3/v2/baseline on x86."""
    flags = set(native.flags_line().split(":", 1)[-1].split())
    if native.platform.machine() != "x86_64":
        return [""]
    out = [""]
    if {"avx2", "fma", "bmi2"} <= flags:
        out.append("x86-64-v3")
    if {"sse4_2", "popcnt"} <= flags:
        out.append("x86-64-v2")
    return out + ["x86-64"]


@pytest.mark.slow  # one process per level (a compile and a torch import each)
@pytest.mark.parametrize("arch", executable_levels())
def test_each_level_matches_torch_and_its_verify_rows_equal_ar_steps(arch):
    """At every level this host executes (its own, AVX2/FMA, SSE4.2, the baseline), in its own process: products
    match torch at 1-17 rows, the fused layer matches transformers, and a verify block's logits equal the AR
    steps' bit for bit, so greedy speculation equals AR (tests/native_level_check.py)."""
    env = dict(os.environ, SPECVIZ_NATIVE_ARCH=arch, OMP_NUM_THREADS="2")
    done = subprocess.run(
        [sys.executable, "-m", "tests.native_level_check"], cwd=ROOT, env=env, capture_output=True, text=True,
        timeout=600,
    )  # fmt: skip
    assert done.returncode == 0 and done.stdout.strip().endswith("ok"), done.stdout + done.stderr[-2000:]
    want = {"x86-64-v3": "avx2", "x86-64-v2": "sse", "x86-64": "sse"}.get(arch)
    assert want is None or done.stdout.startswith(f"level {want}:"), done.stdout


@built
@pytest.mark.parametrize(
    "call,named",
    [
        (lambda: native.gemv(torch.randn(2, 64), native.pack(torch.randn(10, 32)), 10), "w must be the packed"),
        (lambda: native.gemv(torch.randn(2, 32), native.pack(torch.randn(10, 32)), 40), "w must be the packed"),
        (lambda: native.gemv(torch.randn(2, 32, dtype=torch.float64), native.pack(torch.randn(10, 32)), 10), "x must be"),
        (lambda: native.gemv(torch.randn(2, 32), native.pack(torch.randn(10, 32)), 10, torch.randn(9)), "bias must"),
        (lambda: native.gemv(torch.randn(2, 32), native.pack(torch.randn(10, 32)).transpose(0, 2), 10), "w must"),
        (lambda: native.rms_norm(torch.randn(3, 16), torch.randn(15), 1e-6), "w must have 16"),
        (lambda: native.rms_norm(torch.randn(16, 3).t(), torch.randn(16), 1e-6), "x must be contiguous"),
        (lambda: native.rope_(torch.randn(2, 16), 4, 8, torch.randn(2, 8), torch.randn(2, 8)), "fewer than 4 heads"),
        (lambda: native.rope_(torch.randn(2, 32), 4, 8, torch.randn(3, 8), torch.randn(2, 8)), "cos must be"),
        (lambda: native.silu_mul(torch.randn(2, 7)), "an even width"),
        (lambda: native.attention(torch.randn(2, 16), *kv(2, 5, 4), None, 4, 4), "causal slots 4..5"),
        (lambda: native.attention(torch.randn(2, 8), *kv(2, 5, 4), None, 0, 4), "fewer than 4 heads"),
        (lambda: native.attention(torch.randn(2, 16), *kv(2, 5, 4), torch.ones(2, 4, dtype=torch.uint8), 0, 4), "mask must be (2, 5)"),
        (lambda: native.attention(torch.randn(2, 16), *kv(2, 5, 4), torch.ones(2, 5), 0, 4), "mask must be torch.uint8"),
        (lambda: native.attention(torch.randn(2, 16), *kv(3, 5, 4), None, 0, 4), "not a multiple of 3"),
        (lambda: native.attention(torch.randn(2, 16), kv(2, 5, 4)[0], kv(2, 6, 4)[1], None, 0, 4), "differ"),
    ],
)  # fmt: skip
def test_a_wrong_argument_is_refused_by_name_before_the_call(call, named):
    """Each entry point checks shapes, dtypes, contiguity and sizes before a pointer crosses into C: a mismatch is
    a ValueError naming the argument (it was a silent read or write past a buffer)."""
    with pytest.raises(ValueError, match=named.replace("(", r"\(").replace(")", r"\)").replace(".", r"\.")):
        call()


def kv(heads: int, length: int, hd: int) -> tuple:
    """A cache's live keys and values for one sequence: (1, heads, length, hd)."""
    return torch.randn(1, heads, length, hd), torch.randn(1, heads, length, hd)


@built
def test_the_layers_call_refuses_what_does_not_fit_by_name(monkeypatch):
    """native.layers (every layer in one call, writing the keys into the cache): slots past the cache, a cache
    per layer missing, caches of two shapes, a mask of the wrong shape, cos of the wrong width: each a ValueError
    naming it, before the call; the last slots that fit are written; caches checked once are checked again when
    they are not the very tensors checked, and two lanes' caches alternating are each checked once."""
    from tests.tiny import tiny_llama

    forward = lean.LeanForward(tiny_llama(hidden=64, max_position_embeddings=128))
    if not forward.fused:
        pytest.skip("the tiny model did not take the native layout")
    heads, kv_heads, hd = forward.heads, forward.kv_heads, forward.head_dim
    stack = native.Stack(forward.layers, heads, hd, forward.eps)
    n = len(forward.layers)
    caches = [(torch.zeros(1, kv_heads, 10, hd), torch.zeros(1, kv_heads, 10, hd)) for _ in range(n)]
    x, cs = torch.randn(3, 64), torch.randn(3, hd)
    odd = caches[:-1] + [(torch.zeros(1, kv_heads, 12, hd), torch.zeros(1, kv_heads, 12, hd))]
    for call, named in (
        (lambda: native.layers(x, stack, caches, 8, cs, cs), "slots 8..10 are outside the cache's 10"),
        (lambda: native.layers(x, stack, caches[:-1], 0, cs, cs), f"{n - 1} caches for {n} layers"),
        (lambda: native.layers(x, stack, odd, 0, cs, cs), "every cache must be"),
        (
            lambda: native.layers(x, stack, caches, 0, cs, cs, torch.ones(3, 4, dtype=torch.uint8)),
            "mask must be",
        ),
        (lambda: native.layers(x, stack, caches, 0, cs[:, :4].contiguous(), cs), "cos must be"),
    ):
        with pytest.raises(ValueError, match=named):
            call()
    native.layers(x, stack, caches, 7, cs, cs)  # the last slots that fit
    assert all(k[:, :, 7:].abs().sum() > 0 and k[:, :, :7].abs().sum() == 0 for k, _ in caches)
    # the caches it checked are known by identity (a decode step passes the same ones): the bounds still hold, and
    # other caches, or the same list with one buffer replaced, are checked anew
    with pytest.raises(ValueError, match="slots 8..10 are outside the cache's 10"):
        native.layers(x, stack, caches, 8, cs, cs)
    with pytest.raises(ValueError, match="every cache must be"):
        native.layers(x, stack, odd, 0, cs, cs)
    caches[-1] = odd[-1]
    with pytest.raises(ValueError, match="every cache must be"):
        native.layers(x, stack, caches, 0, cs, cs)
    # two sets of caches whose steps alternate (a race's lanes) are each checked once
    lanes = [
        [(torch.zeros(1, kv_heads, 10, hd), torch.zeros(1, kv_heads, 10, hd)) for _ in range(n)] for _ in "ab"
    ]
    checks = []
    monkeypatch.setattr(
        native, "_check_cache", lambda *a, real=native._check_cache: checks.append(1) or real(*a)
    )
    for _ in range(3):
        for lane in lanes:
            native.layers(x, stack, lane, 0, cs, cs)
    assert len(checks) == 2 * n  # each lane's n caches, once


@built
def test_attention_weighs_keys_by_e_to_the_score_gap_within_float_rounding():
    """Two keys, scores 0 and d: the second value's weight over the first's is e^d (native.c's exp_lanes) within a
    few float ulps for d in [-86, 0], and exactly 0 below -87 (underflow, as a masked key)."""
    hd, scale = 16, 16**-0.5
    gaps = torch.cat([torch.linspace(-86.0, 0.0, 301), torch.tensor([-87.5, -100.0])])
    for d in gaps.tolist():
        q = torch.zeros(1, hd)
        q[0, 0] = 1.0
        keys, values = torch.zeros(1, 1, 2, hd), torch.zeros(1, 1, 2, hd)
        keys[0, 0, 1, 0] = d / scale
        values[0, 0, 0, 0] = values[0, 0, 1, 1] = 1.0
        out = native.attention(q, keys, values, None, 1, 1)[0].double()
        if d < -87:
            assert out[1] == 0 and out[0] == 1
            continue
        got, want = (out[1] / out[0]).item(), math.exp(float(torch.tensor(d / scale) * scale))
        assert abs(got - want) <= 4e-7 * want, (d, got, want)


@built
def test_a_query_with_every_key_masked_gets_zeros_not_nan():
    """A mask row with no key to attend to: that query's output is zeros (it divided by a zero sum: NaN)."""
    keys, values = kv(2, 5, 4)
    mask = torch.ones(2, 5, dtype=torch.uint8)
    mask[1] = 0
    out = native.attention(torch.randn(2, 16), keys, values, mask, 0, 4)
    assert torch.isfinite(out).all() and torch.equal(out[1], torch.zeros(16)) and out[0].abs().sum() > 0


@built
@pytest.mark.parametrize("hd", [64, 10, 272])  # the vector path, the scalar one, a head wider than MAX_HD
def test_attention_matches_torch_and_a_row_alone_equals_its_row_in_a_block(hd):
    """Grouped-query attention over 1..1001 keys (lengths that do and do not fill the last vector) within fp32
    rounding of torch's SDPA; a mask hiding exactly the later keys gives the causal call's bits; each query alone
    (an AR step over its own keys) gives its row of the block bitwise. Negative control: one key moved fails."""
    g = torch.Generator().manual_seed(hd)
    heads, kv_heads = 6, 2
    for length in (1, 5, 17, 300, 1001):
        t = min(4, length)
        keys, values = (torch.randn(1, kv_heads, length, hd, generator=g) * 2 for _ in range(2))
        q = torch.randn(t, heads * hd, generator=g) * 2
        start = length - t
        got = native.attention(q, keys, values, None, start, heads)
        causal = torch.arange(length)[None] <= (start + torch.arange(t))[:, None]  # (T, L)
        qh = q.view(t, heads, hd).transpose(0, 1)[None]  # (1, NH, T, D)
        ref = F.scaled_dot_product_attention(qh, keys, values, attn_mask=causal, enable_gqa=True)
        ref = ref[0].transpose(0, 1).reshape(t, heads * hd)
        torch.testing.assert_close(got, ref, rtol=1e-5, atol=1e-5)
        assert torch.equal(native.attention(q, keys, values, causal.to(torch.uint8), start, heads), got)
        for r in range(t):
            live = start + r + 1
            alone = native.attention(
                q[r : r + 1], keys[:, :, :live], values[:, :, :live], None, live - 1, heads
            )
            assert torch.equal(alone[0], got[r])
    moved = keys.clone()
    moved[0, 0, 3] += 1.0
    with pytest.raises(AssertionError):
        torch.testing.assert_close(
            native.attention(q, moved, values, None, start, heads), ref, rtol=1e-5, atol=1e-5
        )


def check_binary(compiler: str, flags: list, out: Path) -> None:
    """Compile tests/native_check.c (native.c's products against a plain reference) with `compiler`."""
    done = subprocess.run(
        [compiler, "-O3", "-fopenmp", *flags, str(ROOT / "tests" / "native_check.c"), "-o", str(out), "-lm"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]


@pytest.mark.skipif(native.shutil.which("gcc") is None, reason="no gcc")
def test_the_plain_c_path_computes_the_products():
    """native.c with no vector width assumed (what a target with none of AVX-512, AVX2, SSE, NEON builds; forced
    with -DSPECVIZ_PLAIN_C): its products match the reference."""
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        binary = Path(tmp) / "check"
        check_binary("gcc", ["-DSPECVIZ_PLAIN_C"], binary)
        done = subprocess.run([str(binary)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.startswith("generic "), done.stdout + done.stderr


CROSS = "aarch64-linux-gnu-gcc"
# QEMU's user-mode emulator for aarch64 (Debian's qemu-user or qemu-user-static: `make cross` installs the latter)
QEMU = native.shutil.which("qemu-aarch64") or native.shutil.which("qemu-aarch64-static")


@pytest.mark.slow  # a cross compile and an emulator
@pytest.mark.skipif(native.shutil.which(CROSS) is None, reason=f"no {CROSS} (Debian: gcc-aarch64-linux-gnu)")
def test_the_aarch64_path_cross_compiles_and_computes_under_an_emulator(tmp_path):
    """The NEON path: native.c builds for aarch64 (armv8-a) as the library native.py loads there, and its
    products match the reference run under qemu-aarch64 (skipped without the emulator: Debian's qemu-user)."""
    lib = subprocess.run(
        [CROSS, "-O3", "-fopenmp", "-shared", "-fPIC", "-march=armv8-a", str(native.SOURCE), "-o", str(tmp_path / "n.so")],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert lib.returncode == 0, lib.stderr[-2000:]
    check_binary(CROSS, ["-march=armv8-a"], tmp_path / "check")
    if QEMU is None:
        pytest.skip("built for aarch64; no qemu-aarch64 to run it (Debian: qemu-user)")
    done = subprocess.run(
        [QEMU, "-L", "/usr/aarch64-linux-gnu", str(tmp_path / "check")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0 and done.stdout.startswith("neon "), done.stdout + done.stderr


@pytest.mark.skipif(native.platform.machine() != "x86_64", reason="an x86 level")
def test_a_level_above_this_cpu_is_not_loaded(monkeypatch):
    """SPECVIZ_NATIVE_ARCH asking for a level this CPU lacks (AVX-512 on an AVX2 host) builds, but is not loaded:
    status() says which flags are missing (it would die with an illegal instruction on its first call)."""
    saved = dict(native._state)
    try:
        native._state.clear()
        monkeypatch.setenv("SPECVIZ_NATIVE_ARCH", "skylake-avx512")
        monkeypatch.setattr(native, "flags_line", lambda: "flags\\t: fpu sse2 avx2 fma")
        assert native.library() is None
        assert "cannot run" in native.status() and "avx512f" in native.status()
    finally:
        native._state.clear()
        native._state.update(saved)


@built
def test_the_layer_stack_is_kept_until_a_tensor_is_replaced():
    """The whole-stack call's pointer table (native.Stack) is built once and kept while the layers hold the same
    tensors; a Weight's matrix replaced (a copy: the same values at another address) makes a new one, never a stale
    pointer: the logits stay the same."""
    from engine.runtime.cache import KVCache
    from tests.tiny import tiny_llama

    model = tiny_llama(hidden=64, max_position_embeddings=64)
    forward = lean.LeanForward(model)
    ids = torch.randint(0, 512, (1, 6), generator=torch.Generator().manual_seed(0))

    def logits():
        cache = KVCache.for_model(model, 16)
        with torch.inference_mode():
            return forward(ids, cache)

    first = logits()
    stack = forward.__dict__.get("_stack")
    if stack is None:
        pytest.skip("this build runs the layers one call at a time")
    assert torch.equal(logits(), first) and forward._stack is stack
    w = forward.layers[0][1]
    w.w = w.w.clone()  # the same weights at a new address: the old one may be freed
    assert torch.equal(logits(), first) and forward._stack is not stack
    assert forward._stack.current(forward.layers) and not stack.current(forward.layers)
