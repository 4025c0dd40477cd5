"""Every hub preset's architecture, offline: tiny random-weight models built from the presets' configs.

The hub presets (SmolLM2 135M→360M/1.7B: Llama with tied embeddings; Qwen2.5 0.5B→1.5B/7B: Qwen2 with
q/k/v biases, tied up to 1.5B and untied at 7B) and the embedded Gemma-3-270M (sliding-window layers)
go through whichever forward the engine picks for them (the lean Llama forward or transformers' own)
with the pointer cache and the 4-D tree mask. Each is pinned here to transformers' own greedy
`generate` (a DynamicCache, its own masks), and its sampling to the target's exact law.
"""

import pytest
import torch

from engine import Engine, GenerationConfig
from engine.runtime import lean, sliding
from engine.runtime.models import load_model
from tests.test_engine import CHI2_7DF_999, chi_square

V = 49152  # the embedded tokenizer's vocabulary: every tiny model shares it

# name -> (config class, model class, keyword arguments that carry the preset's shape features)
ARCHS = {
    "llama-tied": ("LlamaConfig", "LlamaForCausalLM", dict(tie_word_embeddings=True, num_key_value_heads=1)),
    "llama-untied": (
        "LlamaConfig",
        "LlamaForCausalLM",
        dict(tie_word_embeddings=False, num_key_value_heads=2),
    ),
    "qwen2-biases": (
        "Qwen2Config",
        "Qwen2ForCausalLM",
        dict(tie_word_embeddings=True, num_key_value_heads=2, rope_theta=1e6),
    ),
    "qwen2-untied": (
        "Qwen2Config",
        "Qwen2ForCausalLM",
        dict(tie_word_embeddings=False, num_key_value_heads=1),
    ),
    "gemma3-window": (
        "Gemma3TextConfig",
        "Gemma3ForCausalLM",
        dict(
            tie_word_embeddings=True,
            num_key_value_heads=1,
            head_dim=16,
            query_pre_attn_scalar=16,
            sliding_window=8,
            layer_types=["sliding_attention", "sliding_attention", "full_attention"],
            num_hidden_layers=3,
        ),
    ),
}
PROMPTS = [
    "Once upon a time there was a little boat that sailed across the sea",
    "def fib(n):\n    if n < 2:\n        return n\n    return",
]


def build(path, arch: str, seed: int, like=None, sharpen: float = 1.0):
    """Save a tiny random model of `arch` (or a copy of `like` with its logits × sharpen) with the embedded tokenizer."""
    import transformers

    config_cls, model_cls, extra = ARCHS[arch]
    torch.manual_seed(seed)
    kwargs = dict(
        vocab_size=V,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        max_position_embeddings=1024,
        initializer_range=0.2,
        eos_token_id=2,
        bos_token_id=1,
        pad_token_id=0,
    )
    kwargs.update(extra)
    cls = getattr(transformers, model_cls)
    model = cls(getattr(transformers, config_cls)(**kwargs)) if like is None else cls.from_pretrained(like)
    with torch.no_grad():
        model.model.norm.weight.mul_(sharpen)
        if arch.startswith("qwen2"):  # random biases, so a forward that drops them cannot pass
            for layer in model.model.layers:
                for proj in (layer.self_attn.q_proj, layer.self_attn.k_proj, layer.self_attn.v_proj):
                    proj.bias.normal_(0, 0.5)
    model.save_pretrained(path)
    load_model("embedded").tokenizer.save_pretrained(path)
    return str(path)


@pytest.fixture(scope="module", params=list(ARCHS))
def arch(request, tmp_path_factory):
    base = tmp_path_factory.mktemp(request.param)
    target = build(base / "target", request.param, seed=1)
    sharp = build(base / "sharp", request.param, seed=2, like=target, sharpen=3.0)
    return request.param, target, sharp


def hf_greedy(loaded, ids: list[int], n: int) -> list[int]:
    with torch.inference_mode():
        out = loaded.model.generate(torch.tensor([ids]), max_new_tokens=n, do_sample=False, pad_token_id=0)
    return out[0, len(ids) :].tolist()


@pytest.mark.parametrize("tree", [0, 8])
def test_greedy_matches_transformers_generate(arch, tree):
    """Chains and trees, a same-architecture draft: token-identical to transformers' own greedy generate."""
    name, target, sharp = arch
    engine = Engine(load_model(target), f"model:{sharp}", measure_step=False)
    for prompt in PROMPTS:
        ids = engine.encode(prompt, raw=True)
        assert len(ids) > 8  # longer than Gemma's tiny window: local layers must forget early keys
        cfg = GenerationConfig(gamma=3, max_new_tokens=24, tree_budget=tree, tree_branching=2)
        ours = list(engine.generate(None, cfg, prompt_ids=ids))[-1].token_ids
        assert ours == hf_greedy(engine.target, ids, 24)[: len(ours)] and len(ours) > 0, name


def test_tree_mask_without_window_breaks_gemma(arch, monkeypatch):
    """Negative control: a tree mask used as-is on sliding layers (no window) departs from transformers."""
    name, target, sharp = arch
    if name != "gemma3-window":
        pytest.skip("only the sliding-window architecture has a window to lose")
    monkeypatch.setattr(lean, "layer_masks", lambda model, mask, *a: mask)
    engine = Engine(load_model(target), f"model:{sharp}", measure_step=False)
    differ = 0
    for prompt in PROMPTS:
        ids = engine.encode(prompt, raw=True)
        cfg = GenerationConfig(gamma=3, max_new_tokens=24, tree_budget=8, tree_branching=2)
        ours = list(engine.generate(None, cfg, prompt_ids=ids))[-1].token_ids
        differ += ours != hf_greedy(engine.target, ids, 24)[: len(ours)]
    assert differ > 0


@pytest.mark.slow  # statistical / real-model: make test runs it, the inner loop does not
def test_sampling_follows_the_target_law(arch):
    """400 seeded runs, a sharpened draft verified by a multi-token forward: the first token follows p (top-8)."""
    name, target, sharp = arch
    engine = Engine(load_model(target), f"model:{sharp}", measure_step=False)
    ids = engine.encode(PROMPTS[0], raw=True)
    with torch.inference_mode():
        p = torch.softmax(engine.target.model(torch.tensor([ids])).logits[0, -1].float(), -1)
    kth = torch.topk(p, 8).values[-1]
    p = torch.where(p >= kth, p, 0.0)
    p = p / p.sum()
    counts = torch.zeros(V)
    for seed in range(400):
        cfg = GenerationConfig(gamma=2, max_new_tokens=2, temperature=1.0, top_k=8, seed=seed)
        counts[list(engine.generate(None, cfg, prompt_ids=ids))[-1].token_ids[0]] += 1
    assert chi_square(counts, p) < CHI2_7DF_999, name


def test_forward_choice_per_architecture(arch):
    """Llama and Qwen2 (biases) take the lean forward; Gemma-3 takes transformers' module and has a window."""
    name, target, _ = arch
    model = load_model(target).model
    assert isinstance(lean.forward_fn(model), lean.LeanForward) == (not name.startswith("gemma3"))
    assert (sliding.sliding_window(model) == 8) == (name == "gemma3-window")


@pytest.mark.parametrize("pack", [True, False])
def test_lean_forward_pins_to_transformers_logits(arch, pack, monkeypatch):
    """The lean forward's logits (a prefill, a verify of 5, one step; oneDNN-packed and plain matmuls) equal
    transformers' own module's; negative control: the same forward with the q/k/v biases dropped departs."""
    from engine.runtime.cache import KVCache

    name, target, _ = arch
    if name.startswith("gemma3"):
        pytest.skip("Gemma-3 runs transformers' module")
    monkeypatch.setattr(lean, "_pack_default", lambda model: pack)
    model = load_model(target).model
    fast = lean.LeanForward(model)
    ids = torch.randint(3, V, (1, 24), generator=torch.Generator().manual_seed(0))

    def logits(forward):
        cache, out = KVCache.for_model(model, 40), []
        with torch.inference_mode():
            for chunk in (ids[:, :16], ids[:, 16:21], ids[:, 21:22]):
                out.append(
                    forward(chunk, cache)
                    if forward is not model
                    else model(chunk, past_key_values=cache).logits
                )
        return out

    for ref, got in zip(logits(model), logits(fast)):
        assert torch.allclose(got, ref, atol=1e-3, rtol=1e-4), name
        assert torch.equal(got.argmax(-1), ref.argmax(-1)), name
    if name.startswith("qwen2"):
        for layer in fast.layers:
            layer[1].bias = None  # the fused q/k/v projection without its biases
        assert not all(torch.allclose(a, b, atol=1e-3) for a, b in zip(logits(model), logits(fast)))
