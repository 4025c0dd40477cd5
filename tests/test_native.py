"""specviz's native few-row kernel (engine/runtime/native.c via native.py): the same products as torch at every
row count, shape and thread count; a row's result independent of the rows beside it; torch's one OpenMP
runtime; and a machine without a compiler keeps MKL and oneDNN."""

from __future__ import annotations

import pytest
import torch

from engine.runtime import lean, native
from engine.runtime.threads import torch_threads

pytestmark = pytest.mark.skipif(native.library() is None, reason=f"native kernel: {native.status()}")


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


def test_a_wrong_product_is_caught():
    """The negative control: the comparison above fails on a kernel whose result is off by one weight."""
    w, x = torch.randn(11, 37), torch.randn(3, 37)
    w2 = w.clone()
    w2[4, 7] += 1.0
    with pytest.raises(AssertionError):
        torch.testing.assert_close(
            native.gemv(x, native.pack(w2), 11), x @ w.T, rtol=1e-4, atol=1e-4 * 37**0.5
        )


def test_a_rows_result_does_not_depend_on_the_rows_beside_it():
    """Every row runs the same instructions whatever the call's row count: bitwise equal alone or in a batch."""
    w, x = native.pack(torch.randn(960, 576)), torch.randn(11, 576)
    alone = torch.cat([native.gemv(x[r : r + 1], w, 960) for r in range(11)])
    for threads in (1, 2):
        with torch_threads(threads):
            assert torch.equal(native.gemv(x, w, 960), alone)


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
            monkeypatch.setattr(native, "FLAG_SETS", ((),))
            assert native.library() is None and native.status().startswith(said)
            w = lean.Weight(torch.randn(8, 4), pack=True)
            assert "native" not in w.kernels(1) and w.w.shape == (4, 8)  # MKL's (in, out) layout
            x = torch.randn(2, 4)
            torch.testing.assert_close(w(x), x @ w.w)
            monkeypatch.delenv(env)
    finally:
        native._state.clear()
        native._state.update(saved)


def test_the_build_is_cached_per_host(tmp_path, monkeypatch):
    """A second build with the same source, compiler and CPU compiles nothing: the cached library is reused."""
    from engine.runtime import kernels

    monkeypatch.setattr(kernels, "CACHE_DIR", tmp_path)
    compiler = native.shutil.which("cc") or native.shutil.which("gcc")
    path, how = native._build(compiler)
    stamp = path.stat().st_mtime_ns
    assert native._build(compiler) == (path, how) and path.stat().st_mtime_ns == stamp
    assert "-O3" in how and path.parent == tmp_path


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
                w.use_plan(threads, {r: {kernel: 0.0, "kernel": kernel} for r in (1, 2, 3, 5, 9, 17, 33)})
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


def test_a_new_build_removes_the_stale_ones(tmp_path, monkeypatch):
    """The cache keeps one build: a library of an earlier source is deleted when the current one is built."""
    from engine.runtime import kernels

    monkeypatch.setattr(kernels, "CACHE_DIR", tmp_path)
    (tmp_path / "native-0123456789abcdef.so").write_bytes(b"old")
    (tmp_path / "native-0123456789abcdef.flags").write_text("cc -O3")
    (tmp_path / "kernels-0123.json").write_text("{}")
    path, _ = native._build(native.shutil.which("cc") or native.shutil.which("gcc"))
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [path.name, path.with_suffix(".flags").name, "kernels-0123.json"]
    )
