"""The GGUF block kernels (engine/runtime/blocks.py, native.c): every weight rebuilt from its block equals gguf-py's
de-quantized weight, every product equals the fp32 kernel's on that matrix bit for bit (a wrong scale is caught),
malformed blocks are refused by name, and the embedded model on its blocks decodes exactly as on fp32."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from gguf import GGMLQuantizationType, quants

from engine.runtime import blocks, native

pytestmark = pytest.mark.skipif(native.library() is None, reason="native.c is not built here")
KINDS = ("Q8_0", "Q4_1", "Q5_0", "Q4_K", "Q6_K")
# where each format's block holds its scales (fp16 byte offsets): the first is the one a negative control flips
SCALES_AT = {"Q8_0": [0], "Q4_1": [0, 2], "Q5_0": [0], "Q4_K": [0, 2], "Q6_K": [208]}


def random_blocks(kind: str, out: int, inner: int, seed: int = 0) -> np.ndarray:
    """(out, bytes) rows of random blocks of `kind`, their fp16 scales random normals (some subnormal)."""
    rng = np.random.default_rng(seed)
    _, block, size = blocks.FORMATS[kind]
    raw = rng.integers(0, 256, size=(out, inner // block, size), dtype=np.uint8)
    scale = (rng.standard_normal((out, inner // block, 2)) * 0.02).astype(np.float16)
    scale[0, 0, 0] = np.float16(3e-6)  # a subnormal fp16
    for i, pos in enumerate(SCALES_AT[kind]):
        raw[..., pos : pos + 2] = scale[..., i : i + 1].view(np.uint8)
    return raw.reshape(out, -1)


def reference(kind: str, raw: np.ndarray) -> np.ndarray:
    """gguf-py's own de-quantization of the rows."""
    return quants.dequantize(raw, getattr(GGMLQuantizationType, kind)).reshape(raw.shape[0], -1)


@pytest.mark.parametrize("kind", KINDS)
def test_each_weight_equals_gguf_pys_dequantized_weight(kind):
    """The weights the kernels build (native.c's walk, stored by specviz_dequant) and blocks.dequantize are
    gguf-py's, bit for bit, padding rows zero."""
    raw = random_blocks(kind, 45, 512)
    ref = reference(kind, raw)
    weight = blocks.BlockWeight(kind, raw)
    built = blocks.dequant_panels(weight, 0, weight.panels).numpy()
    assert np.array_equal(built[:45].view(np.uint32), ref.view(np.uint32))
    assert not built[45:].any()
    assert np.array_equal(blocks.dequantize(kind, raw).view(np.uint32), ref.view(np.uint32))


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("threads", [1, 2])
def test_block_products_equal_the_fp32_kernels_bit_for_bit(kind, threads):
    """At 1..17 rows, the block kernel's y equals the fp32 panels' y on the de-quantized matrix exactly (the
    same products, summed in the same order): the lossless claim of the blocks, as a property of the code."""
    raw = random_blocks(kind, 70, 512, seed=1)
    weight = blocks.BlockWeight(kind, raw)
    packed = native.pack(torch.from_numpy(reference(kind, raw).copy()))
    g = torch.Generator().manual_seed(2)
    old = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        for rows in range(1, 18):
            x = torch.randn(rows, 512, generator=g)
            assert torch.equal(weight._native(x), native.gemv(x, packed, 70)), f"{kind}: {rows} rows differ"
    finally:
        torch.set_num_threads(old)


@pytest.mark.parametrize("kind", KINDS)
def test_a_wrong_scale_is_caught(kind):
    """Negative control: one block's scale one fp16 step off changes the products (the test above can fail)."""
    raw = random_blocks(kind, 33, 512, seed=3)
    good = torch.from_numpy(reference(kind, raw).copy())
    pos = SCALES_AT[kind][0]
    bad = raw.reshape(33, -1, blocks.FORMATS[kind][2]).copy()
    bad[5, 0, pos] ^= 1  # the last mantissa bit of output 5's first scale
    weight = blocks.BlockWeight(kind, bad.reshape(33, -1))
    x = torch.randn(1, 512, generator=torch.Generator().manual_seed(4))
    got, want = weight._native(x), native.gemv(x, native.pack(good), 33)
    assert not torch.equal(got[0, 5], want[0, 5]) and torch.equal(got[0, :5], want[0, :5])


def test_a_verify_row_equals_its_ar_step():
    """Rows are independent: row r of a many-row call is bitwise the one-row call on that row."""
    raw = random_blocks("Q4_1", 96, 576, seed=5)
    weight = blocks.BlockWeight("Q4_1", raw)
    x = torch.randn(17, 576, generator=torch.Generator().manual_seed(6))
    block = weight._native(x)
    for r in range(17):
        assert torch.equal(block[r], weight._native(x[r : r + 1])[0])


def test_a_prompt_of_up_to_block_rows_runs_the_block_kernel_row_by_row_bitwise(monkeypatch):
    """Prefill up to BLOCK_ROWS rows runs the block kernel (measured faster than de-quantizing: benchmarks/forward/
    prefill_blocks.py): each of 40 rows is the one-row product bitwise; past BLOCK_ROWS the de-quantized matmul."""
    raw = random_blocks("Q4_1", 70, 256, seed=9)
    weight = blocks.BlockWeight("Q4_1", raw)
    x = torch.randn(40, 256, generator=torch.Generator().manual_seed(10))
    assert weight.kernel(40) == "native" and weight.kernel(blocks.BLOCK_ROWS + 1) == "dequant"
    got = weight(x)
    for r in range(40):
        assert torch.equal(got[r], weight._native(x[r : r + 1])[0]), r
    calls = []
    monkeypatch.setattr(blocks, "BLOCK_ROWS", 39)
    monkeypatch.setattr(blocks.BlockWeight, "_dequant", lambda self, x: calls.append(len(x)) or x)
    weight(x)
    assert calls == [40]


def test_prefills_dequantized_slices_give_the_matmul_of_the_weights():
    """The many-row path (slices de-quantized into a scratch buffer, torch's matmul) equals the matmul of the
    de-quantized matrix (the same library call on the same values), across slice boundaries."""
    raw = random_blocks("Q8_0", 300, 256, seed=7)
    weight = blocks.BlockWeight("Q8_0", raw)
    x = torch.randn(40, 256, generator=torch.Generator().manual_seed(8))
    old = blocks.SCRATCH_FLOATS
    blocks.SCRATCH_FLOATS = 3 * native.panel() * 256  # three panels a slice: several slices
    try:
        got = weight._dequant(x)
    finally:
        blocks.SCRATCH_FLOATS = old
    torch.testing.assert_close(got, x @ torch.from_numpy(reference("Q8_0", raw)).T, rtol=1e-5, atol=1e-5)
    assert got.shape == (40, 300)


@pytest.mark.parametrize(
    "make, named",
    [
        (lambda: blocks.BlockWeight("Q4_1", np.zeros((4, 19), np.uint8)), "not whole blocks of 20 bytes"),
        (
            lambda: blocks.BlockWeight("Q5_1", np.zeros((4, 24), np.uint8)),
            "no block kernel for GGUF type 'Q5_1'",
        ),
        (lambda: blocks.BlockWeight("Q8_0", np.zeros((4, 34), np.int16)), "must be (rows, bytes) uint8"),
        (lambda: blocks.pack("Q4_K", np.zeros(144, np.uint8)), "must be (rows, bytes) uint8"),
    ],
)
def test_malformed_blocks_are_refused_by_name(make, named):
    """A short buffer, an unknown type or a wrong array is a BlockError saying which, never a read past a buffer."""
    with pytest.raises(blocks.BlockError) as err:
        make()
    assert named in str(err.value)


def test_a_block_weight_of_another_layout_is_refused_before_the_call():
    """native.c is never handed blocks whose layout does not match the shape it is told (checked in Python)."""
    weight = blocks.BlockWeight("Q4_1", random_blocks("Q4_1", 32, 64))
    weight.w = weight.w[:, :-1].contiguous()
    with pytest.raises(ValueError, match="must be the block layout"):
        blocks.gemv(torch.zeros(1, 64), weight)


@pytest.mark.slow  # reads Gemma-3-270M's GGUF (assembled from its packages: ~250 MB)
def test_gemmas_block_types_equal_its_dequantized_weights():
    """Gemma-3-270M's own tensors of each block type it ships (Q4_K, Q6_K, Q5_0, Q8_0): the kernels' weights equal
    gguf-py's de-quantization, and their products equal the fp32 kernel's on it."""
    from gguf import GGUFReader

    from engine.runtime.models import gemma_gguf

    reader = GGUFReader(str(gemma_gguf()))
    seen = set()
    for t in reader.tensors:
        kind = t.tensor_type.name
        if kind == "F32" or kind in seen:
            continue
        seen.add(kind)
        raw = np.asarray(t.data)[:256]  # the first 256 rows of the matrix
        weight = blocks.BlockWeight(kind, raw)
        ref = reference(kind, raw)
        built = blocks.dequant_panels(weight, 0, weight.panels).numpy()[: raw.shape[0]]
        assert np.array_equal(built.view(np.uint32), ref.view(np.uint32)), t.name
        x = torch.randn(5, weight.in_features, generator=torch.Generator().manual_seed(9))
        assert torch.equal(weight._native(x), native.gemv(x, native.pack(torch.from_numpy(ref.copy())), 256))
    assert seen == {"Q4_K", "Q6_K", "Q5_0", "Q8_0"}


@pytest.mark.slow  # the embedded model twice (blocks and fp32) and transformers' generate
def test_the_embedded_model_on_its_blocks_decodes_as_on_fp32_and_in_transformers(monkeypatch):
    """Lossless, shown on the real model: greedy AR on the GGUF's blocks equals AR on the de-quantized fp32
    weights and stock transformers' greedy generate() on them, token for token; speculation on the blocks
    (ngram, the self draft) equals that AR."""
    from engine import Engine, GenerationConfig
    from engine.runtime.models import load_model, prompt_ids
    from tests.test_embedded import PROMPTS

    monkeypatch.setenv("SPECVIZ_WEIGHTS", "gguf")
    on_blocks = load_model("embedded")
    monkeypatch.setenv("SPECVIZ_WEIGHTS", "fp32")
    on_fp32 = load_model("embedded")
    assert getattr(on_blocks.model, "specviz_gguf", None) and not hasattr(on_fp32.model, "specviz_gguf")
    cfg = GenerationConfig(max_new_tokens=32)
    for prompt in PROMPTS:
        ar = [list(Engine(t, "ngram", measure_step=False).generate(prompt, cfg, mode="ar"))[-1].token_ids
              for t in (on_blocks, on_fp32)]  # fmt: skip
        assert ar[0] == ar[1], prompt
        ids = prompt_ids(on_fp32.tokenizer, prompt)
        with torch.no_grad():
            stock = on_fp32.model.generate(torch.tensor([ids]), max_new_tokens=32, do_sample=False)
        assert stock[0, len(ids) :].tolist()[: len(ar[0])] == ar[0], prompt
        for draft in ("ngram", "self"):
            spec = list(
                Engine(on_blocks, draft, measure_step=False).generate(
                    prompt, GenerationConfig(gamma=4, max_new_tokens=32)
                )
            )
            assert spec[-1].token_ids == ar[0], (draft, prompt)
    assert any(p.is_meta for p in on_blocks.model.parameters()), "the blocks' run made fp32 weights"


@pytest.mark.parametrize("kind", KINDS)
def test_packing_in_slices_gives_the_one_pass_layout(kind, monkeypatch):
    """pack() regroups a large matrix a slice of whole panels at a time: the same bytes as one pass (a last slice
    of a partial panel included); a slice boundary one row off would move rows between panels."""
    raw = random_blocks(kind, 300, 512, seed=7)
    whole = blocks._pack(kind, raw, 32)
    monkeypatch.setattr(blocks, "PACK_BYTES", raw.shape[1] * 70)  # 64 rows (two panels) a slice
    assert torch.equal(blocks.pack(kind, raw, 32), whole)


def write_gguf(path, arch: str = "llama") -> None:
    """A small GGUF written by gguf-py: metadata of every kind the header reader skips (strings, a string array,
    numbers, a nested array) and a tensor of each block type, an F32 vector and a 3-d tensor."""
    from gguf import GGUFWriter

    w = GGUFWriter(str(path), arch)
    w.add_string("tokenizer.ggml.model", "gpt2")
    w.add_array("tokenizer.ggml.tokens", [f"tok{i}" for i in range(300)])
    w.add_array("tokenizer.ggml.scores", [float(i) for i in range(300)])
    w.add_array("some.nested", [[1, 2], [3]])
    w.add_uint32(f"{arch}.block_count", 1)
    w.add_float32("some.eps", 1e-6)
    w.add_bool("some.flag", True)
    for i, kind in enumerate(KINDS):
        raw = random_blocks(kind, 8, 256, seed=i)
        w.add_tensor(f"blk.0.{kind.lower()}.weight", raw, raw_dtype=getattr(GGMLQuantizationType, kind))
    w.add_tensor("blk.0.attn_norm.weight", np.arange(64, dtype=np.float32))
    w.add_tensor("cube.weight", np.arange(2 * 3 * 32, dtype=np.float32).reshape(2, 3, 32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def test_the_header_reader_finds_gguf_pys_tensors(tmp_path):
    """read_gguf reads the tensor table from the header (skipping every metadata value by its type): the same
    names, types and bytes as gguf-py's own reader; a file cut short or not a GGUF is a BlockError, not a crash."""
    from gguf import GGUFReader

    path = tmp_path / "small.gguf"
    write_gguf(path, arch="gemma3")
    arch, _ = blocks.tensor_table(path)
    assert arch == "gemma3"
    ours = blocks.read_gguf(path, 1, 1)
    theirs = GGUFReader(str(path)).tensors
    assert len(ours.tensors) == len(theirs) == len(KINDS) + 2
    for t in theirs:
        kind, data = ours.tensors[t.name]
        assert kind == t.tensor_type.name, t.name
        assert np.asarray(data).tobytes() == np.asarray(t.data).tobytes(), t.name
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(path.read_bytes()[:200])
    with pytest.raises(blocks.BlockError, match="ends early"):
        blocks.read_gguf(cut, 1, 1)
    junk = tmp_path / "junk.gguf"
    junk.write_bytes(b"NOPE" + bytes(60))
    with pytest.raises(blocks.BlockError, match="not a little-endian GGUF"):
        blocks.read_gguf(junk, 1, 1)
