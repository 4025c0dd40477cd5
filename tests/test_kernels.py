"""The lean forward's kernels are measured on the host it runs on (engine/runtime/kernels.py), never assumed:
each projection uses, per row count and thread count, the kernel measured faster here; the cache is per host."""

from __future__ import annotations

import pytest
import torch

from engine.runtime import kernels, lean
from engine.runtime.cache import KVCache
from tests.tiny import tiny_llama as tiny


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    """An empty plan cache, on a machine whose measurements count as quiet (the busy case has its own test)."""
    monkeypatch.setattr(kernels, "CACHE_DIR", tmp_path)
    monkeypatch.setattr(kernels, "outside_cores", lambda fn: (fn(), 0.0))
    return tmp_path


def packed_or_skip(model) -> lean.LeanForward:
    forward = lean.LeanForward(model)
    if forward.head.packed is None:
        pytest.skip("no oneDNN packing in this torch build")
    return forward


def test_every_projection_uses_the_kernel_measured_faster_here(cache_dir):
    """The 1-row plan (AR's and drafting's kernel) and every other row count pick the smaller measured median,
    at both thread counts a run uses; every layer's Weight of a kind follows its kind's plan."""
    forward = packed_or_skip(tiny())
    plans = forward.measure_kernels()
    assert set(plans) == {1, torch.get_num_threads()}
    for threads, plan in plans.items():
        assert set(plan) == {"qkv", "o", "gate_up", "down", "lm_head"}
        for name, by_rows in plan.items():
            for rows, m in by_rows.items():
                timed = {k: s for k, s in m.items() if k != "kernel"}
                assert set(timed) == set(forward.weights()[name][0].kernels(rows)), (threads, name, rows)
                assert m["kernel"] == min(timed, key=timed.get), (threads, name, rows)
            for weight in forward.weights()[name]:
                with torch.inference_mode():
                    torch.set_num_threads(threads)
                    assert weight.kernel(1) == by_rows[1]["kernel"]
                    assert weight.kernel(5) == by_rows[6]["kernel"]  # 5 rows use the 6-row plan


def test_every_kernel_computes_the_same_logits(cache_dir):
    """The plan changes the speed, not the numbers: all-MKL, all-oneDNN and all-native forwards agree."""
    model = tiny()
    forward = packed_or_skip(model)
    x = torch.tensor([[1, 2, 3, 4, 5]])
    out = {}
    choices = ("mkl", "onednn", "native") if forward.head.native else ("mkl", "onednn")
    for choice in choices:
        for weights in forward.weights().values():
            for w in weights:
                w.use_plan(
                    torch.get_num_threads(), {r: {choice: 0.0, "kernel": choice} for r in kernels.ROWS}
                )
        with torch.inference_mode():
            out[choice] = (
                forward(x[:, :1], KVCache.for_model(model, 8)),
                forward(x, KVCache.for_model(model, 8)),
            )
    for choice in choices[1:]:
        for a, b in zip(out["mkl"], out[choice]):
            torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)


def test_a_host_measures_once_then_reads_its_cache(cache_dir, monkeypatch):
    """The plan is cached per host key (CPU, flags, torch, threads): a second load measures nothing."""
    forward = packed_or_skip(tiny())
    files = list(cache_dir.glob("kernels-*.json"))
    assert files and all(f.stat().st_size > 0 for f in files)

    def no_measuring(*args):
        raise AssertionError("measured again although this host's plan is cached")

    monkeypatch.setattr(kernels, "measure_shape", no_measuring)
    forward.measure_kernels()
    key = kernels.host_key(1)
    assert key["threads"] == 1 and key["cpu"] and key["torch"] == torch.__version__


def test_a_thread_count_without_a_plan_falls_back_to_the_fixed_rule():
    """At a thread count nothing was measured for: the native kernel for 1-3 rows where it is built, else fp32
    1-row calls on MKL; more rows on oneDNN."""
    w = lean.Weight(torch.randn(8, 4), pack=False)
    w.packed = object()  # only the decision is asked
    assert [w.kernel(r) for r in (1, 2, 3, 4)] == (
        ["native"] * 3 if w.native else ["mkl", "onednn", "onednn"]
    ) + ["onednn"]
    w.native = False
    assert [w.kernel(r) for r in (1, 2, 4)] == ["mkl", "onednn", "onednn"]


def test_a_shape_timed_under_load_is_timed_again_and_keeps_each_kernels_best(cache_dir, monkeypatch):
    """A shape measured while other processes were busy is measured again at the next load, per row count each
    kernel's fastest median over the takes is kept and the faster of the two chosen; a quiet take ends it."""
    w = lean.Weight(torch.randn(4, 8), pack=False)
    w.native = False  # it offers MKL only: what it offers is never new to the plan
    shapes = {"qkv": [w]}
    takes = iter([({1: {"mkl": 2.0, "onednn": 3.0}}, 1.2), ({1: {"mkl": 4.0, "onednn": 1.0}}, 0.1)])

    def timed(fn):
        out, cores = next(takes)
        return {r: {**v, "kernel": min(v, key=v.get)} for r, v in out.items()}, cores

    monkeypatch.setattr(kernels, "outside_cores", timed)
    first = kernels.plan_for(shapes, 1)
    assert first["qkv"][1]["kernel"] == "mkl"
    second = kernels.plan_for(shapes, 1)  # the first take was busy: measured again
    assert second["qkv"][1] == {"mkl": 2.0, "onednn": 1.0, "kernel": "onednn"}
    assert kernels.plan_for(shapes, 1) == second  # the second was quiet: no third (the iterator is empty)


def test_a_plan_is_of_one_native_build(cache_dir, monkeypatch):
    """The plan timed a build of native.c: a new build (another source, compiler or CPU) is timed anew, the same
    build is read from the cache (the control)."""
    w = lean.Weight(torch.randn(4, 8), pack=False)
    w.packed, w.native = object(), "native-aaaa"
    calls = []

    def timed(fn):
        calls.append(w.native)
        return {r: {**{k: 1.0 for k in w.kernels(r)}, "kernel": "onednn"} for r in kernels.ROWS}, 0.0

    monkeypatch.setattr(kernels, "outside_cores", timed)
    for build in ("native-aaaa", "native-aaaa", "native-bbbb", "native-bbbb"):
        w.native = build
        kernels.plan_for({"o": [w]}, 1)
    assert calls == ["native-aaaa", "native-bbbb"]
