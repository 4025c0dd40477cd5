"""Gemma-3-270M on its GGUF's blocks (engine/runtime/gemma.py): the same tokens as on its de-quantized fp32
weights and as stock transformers, speculation on the blocks equal to their AR, the sliding window kept past 512
positions for chains and trees (a forward without it is the negative control), and the skeleton never inflated."""

from __future__ import annotations

import pytest
import torch

from engine import Engine, GenerationConfig
from engine.runtime import lean, models, native
from engine.runtime.cache import KVCache
from engine.runtime.gemma import GemmaForward
from engine.runtime.models import EMBEDDED_GEMMA, load_model

pytestmark = [
    pytest.mark.slow,  # Gemma-3-270M twice: on its blocks and de-quantized (1 GB)
    pytest.mark.skipif(native.library() is None, reason="native.c is not built here"),
]
PROMPTS = [
    "The water cycle describes how water moves between the oceans, the air and the land.",
    "Monday, Tuesday, Wednesday,",
    "def add(a, b):\n    return",
]


@pytest.fixture(scope="module")
def pair():
    """(Gemma on its blocks, Gemma de-quantized to fp32 in transformers): the blocks' model a fresh load of its
    own (another test may have materialized the shared one), the fp32 one the shared load."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SPECVIZ_WEIGHTS", "gguf")
        blocks = models._load(EMBEDDED_GEMMA, torch.device("cpu"), torch.float32, False)
        mp.setenv("SPECVIZ_WEIGHTS", "fp32")
        fp32 = load_model(EMBEDDED_GEMMA)
    assert isinstance(lean.forward_fn(blocks.model), GemmaForward)
    assert not isinstance(lean.forward_fn(fp32.model), lean.LeanForward)
    return blocks, fp32


def ar(model, prompt: str, new: int = 24) -> list[int]:
    cfg = GenerationConfig(max_new_tokens=new, raw=True)
    return list(Engine(model, "ngram", measure_step=False).generate(prompt, cfg, mode="ar"))[-1].token_ids


def test_gemma_on_its_blocks_decodes_as_on_fp32_and_in_transformers(pair):
    """Greedy AR on the blocks = AR on the de-quantized weights = transformers' generate() on them, token for
    token; n-gram and layer-skip speculation on the blocks = that AR; the blocks' runs made no fp32 weights."""
    blocks, fp32 = pair
    for prompt in PROMPTS:
        ours = ar(blocks, prompt)
        assert ours == ar(fp32, prompt), prompt
        ids = Engine(fp32, "ngram", measure_step=False).encode(prompt, raw=True)
        with torch.inference_mode():
            stock = fp32.model.generate(torch.tensor([ids]), max_new_tokens=24, do_sample=False)
        assert stock[0, len(ids) :].tolist()[: len(ours)] == ours, prompt
        cfg = GenerationConfig(gamma=4, max_new_tokens=24, raw=True)
        for draft in ("ngram", "layerskip:9"):  # a layer-skip draft runs the target's first layers as Gemma's
            spec = list(Engine(blocks, draft, measure_step=False).generate(prompt, cfg))[-1].token_ids
            assert spec == ours, (draft, prompt)
    assert any(p.is_meta for p in blocks.model.parameters()), "the blocks' runs made fp32 weights"


def long_ids(model) -> list[int]:
    text = " ".join(f"Item {i}: the {i}th line of a long numbered list." for i in range(60))
    ids = Engine(model, "ngram", measure_step=False).encode(text, raw=True)
    assert len(ids) > model.model.config.sliding_window + 16
    return ids


def test_the_window_holds_past_512_positions_for_a_chain_and_a_tree(pair):
    """After a prompt longer than the 512-token window: a 3-token chain and a 4-node tree (two siblings) give the
    fp32 transformers forward's logits (its own sliding masks; the tree through sliding.layer_masks) within float
    rounding, the same argmax, on native.c's norms and RoPE and on torch's ops; the same forward with the window
    switched off does not (the negative control)."""
    blocks, fp32 = pair
    ids = long_ids(blocks)
    forward, reference = lean.forward_fn(blocks.model), lean.forward_fn(fp32.model)
    n = len(ids)
    prefix, new = torch.tensor([ids[:-3]]), torch.tensor([ids[-3:]])
    tree = torch.tensor([ids[-4:-1] + [ids[-2]]])  # nodes: a, b, c (child of b) and b' (sibling of b)
    parents = [-1, 0, 1, 0]
    pos = torch.tensor([[n - 4, n - 3, n - 2, n - 3]])
    mask = torch.ones(1, 1, 4, n - 4 + 4, dtype=torch.bool)
    mask[..., n - 4 :] = False
    for i in range(4):
        j = i
        while j >= 0:
            mask[0, 0, i, n - 4 + j] = True
            j = parents[j]
    tree_prefix = torch.tensor([ids[:-4]])

    def logits(fn, chain: bool) -> torch.Tensor:
        cache = KVCache.for_model(blocks.model, n + 8)
        with torch.inference_mode():
            before = prefix if chain else tree_prefix
            # the block kernel's rows at a time (no de-quantized slices)
            for s in range(0, before.shape[1], 512):
                fn(before[:, s : s + 512], cache, logits_to_keep=1)
            if chain:
                return fn(new, cache)[0]
            return fn(tree, cache, attention_mask=mask, position_ids=pos)[0]

    for chain in (True, False):
        want, got = logits(reference, chain), logits(forward, chain)
        gap = (got - want).abs().max().item()
        assert gap < 2e-3 * want.abs().max().item(), (chain, gap)
        assert torch.equal(got.argmax(-1), want.argmax(-1)), chain
        blind = GemmaForward.__new__(GemmaForward)
        blind.__dict__.update(forward.__dict__)
        blind.window = None  # every layer sees every key
        off = (logits(blind, chain) - want).abs().max().item()
        assert off > 20 * gap, (chain, off, gap)
    torch_ops = GemmaForward.__new__(GemmaForward)
    torch_ops.__dict__.update(forward.__dict__)
    torch_ops.native = False  # the layer in torch ops (a batch, another device): the same logits
    want = logits(reference, True)
    assert (logits(torch_ops, True) - want).abs().max().item() < 2e-3 * want.abs().max().item()


def test_gemmas_blocks_are_what_a_step_reads(pair):
    """The forward holds the file's blocks (its step reads 247 MB, not the 1,072 MB of fp32 weights), and the
    roofline's costs say so."""
    from engine.runtime.roofline import costs_of

    blocks, _ = pair
    costs = costs_of(lean.forward_fn(blocks.model))
    assert costs["weights"] == "gguf"
    assert costs["weight_bytes"] < costs["weight_bytes_fp32"] / 4


@pytest.mark.parametrize("rows", [1, 2])
def test_the_window_is_read_per_row_on_slots(rows):
    """sliding.window_near: each row's queries by their own positions (a batch's rows are at different lengths),
    keys by slot; a tree node (position below its slot) still sees the keys a chain at that position would."""
    from engine.runtime.sliding import window_near

    pos = torch.tensor([[600, 601], [10, 11]])[:rows]
    near = window_near(pos, 602, 512)
    assert near.shape == (rows, 1, 2, 602)
    assert near[0, 0, 0, 89].item() and not near[0, 0, 0, 88].item()  # 600 − 88 = 512: outside
    assert near[0, 0, 1, 90].item() and not near[0, 0, 1, 89].item()
    if rows == 2:
        assert near[1].all()  # the short row sees everything its causal mask lets it
    tree = window_near(torch.tensor([[600, 601, 601]]), 603, 512)  # node 2 is node 1's sibling at slot 602
    assert torch.equal(tree[0, 0, 2, :602], tree[0, 0, 1, :602])
