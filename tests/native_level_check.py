"""One native.c level in its own process (SPECVIZ_NATIVE_ARCH chooses it; tests/test_native.py runs one process per
level this host executes): prints the level built, then checks that its products match torch's at 1-17 rows, that
its GGUF block kernels' products are bitwise its fp32 kernel's, its fused layer matches transformers, and that a verify block's logits equal the AR steps' bit for bit (so greedy
speculation equals AR). Exit status 0 when all hold.

    SPECVIZ_NATIVE_ARCH=x86-64-v3 .venv/bin/python -m tests.native_level_check
"""

from __future__ import annotations

import sys

import torch

from engine.runtime import blocks, kernels, lean, native
from engine.runtime.cache import KVCache
from engine.runtime.threads import torch_threads
from tests.tiny import tiny_llama


def products() -> None:
    g = torch.Generator().manual_seed(0)
    for inner, out in ((576, 960), (37, 11), (64, 1), (31, 64)):
        w, b = torch.randn(out, inner, generator=g), torch.randn(out, generator=g)
        packed = native.pack(w)
        for rows in range(1, 18):
            x = torch.randn(rows, inner, generator=g)
            got = native.gemv(x, packed, out, b)
            torch.testing.assert_close(got, x @ w.T + b, rtol=1e-4, atol=1e-4 * inner**0.5)


def block_products() -> None:
    """The GGUF block kernels at this level: every format's products bitwise the fp32 panels' on gguf-py's
    de-quantized matrix, at 1..17 rows (tests/test_blocks.py holds the formats' details)."""
    from tests.test_blocks import KINDS, random_blocks, reference

    g = torch.Generator().manual_seed(3)
    for kind in KINDS:
        raw = random_blocks(kind, 45, 512)
        weight = blocks.BlockWeight(kind, raw)
        packed = native.pack(torch.from_numpy(reference(kind, raw).copy()))
        for rows in range(1, 18):
            x = torch.randn(rows, 512, generator=g)
            assert torch.equal(blocks.gemv(x, weight), native.gemv(x, packed, 45)), f"{kind} at {rows} rows"


def layers_and_identity() -> None:
    model = tiny_llama(hidden=64, max_position_embeddings=128)
    forward = lean.LeanForward(model)
    assert forward.fused, "the fused layer is not used"
    for weights in forward.weights().values():
        for w in weights:
            w.use_plan(
                torch.get_num_threads(), {r: {"native": 0.0, "kernel": "native"} for r in kernels.ROWS}
            )
    ids = torch.randint(0, 512, (1, 30), generator=torch.Generator().manual_seed(1))
    with torch.inference_mode():
        ref = model(ids).logits
        cache = KVCache.for_model(model, 64)
        got = forward(ids, cache)
        torch.testing.assert_close(got, ref, rtol=1e-4, atol=1e-4)
        # AR: 20 greedy steps, one token per forward
        cache = KVCache.for_model(model, 64)
        last = forward(ids[:, :20], cache)[:, -1:]
        steps, tokens = [], []
        for _ in range(10):
            token = last.argmax(-1)
            tokens.append(token)
            last = forward(token, cache)
            steps.append(last[0, -1])
        # verify: the same 10 tokens in two blocks of 5 rows (a γ = 4 verify, the fused path's size) after the
        # prefix: each row's logits are the AR step's, bit for bit
        cache = KVCache.for_model(model, 64)
        forward(ids[:, :20], cache)
        block = torch.cat([forward(torch.cat(tokens[k : k + 5], dim=1), cache)[0] for k in (0, 5)])
        for k, step in enumerate(steps):
            assert torch.equal(block[k], step), f"row {k} of a verify block differs from its AR step"


def main() -> int:
    print(f"level {native.level()}: {native.status()}", flush=True)
    if native.library() is None:
        return 2
    for threads in (1, 2):
        with torch_threads(threads):
            products()
            block_products()
            layers_and_identity()
    print("ok", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
