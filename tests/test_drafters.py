"""Drafting strategies and adaptive speculation: lossless for every drafter, decisions in the trace."""

import random

import pytest
import torch

from engine import Engine, GenerationConfig, ModelLoadError, load_model
from engine.drafters.base import Factory
from engine.drafters.ngram import NgramIndex, longest_match
from tests.test_engine import CHI2_7DF_999, chi_square, first_token_counts, target_first_token_probs

DRAFTS = ["ngram", "ngram:1", "layerskip:1", "quant:int8", "quant:bf16", "auto"]
PROMPTS = [
    "one two three four one two three",
    "def add(a, b):\n    return a + b\n\ndef add(",
    "Tell me a story",
]


def test_ngram_finds_latest_match_and_all_branches():
    """Prompt lookup proposes what followed the latest match of the longest suffix; others become branches."""
    ids = [1, 2, 3, 9, 1, 2, 3, 7, 8, 1, 2, 3]
    assert longest_match(ids, 3, 2) == (3, [[7, 8], [9, 1]])
    assert longest_match(ids, 3, 5)[1][0] == [7, 8, 1, 2, 3]
    assert longest_match([5, 6, 7], 3, 4) == (0, [])  # no earlier occurrence of any suffix
    assert longest_match([4, 1, 5, 1], 2, 3) == (1, [[5, 1]])  # falls back to n = 1


@pytest.mark.parametrize("max_n", [1, 3])
def test_ngram_index_is_incremental_and_matches_the_full_scan(max_n):
    """The n-gram index gives the full scan's answer every round while indexing each token once (no O(L^2) rescan)."""
    rng = random.Random(max_n)
    ids, index = [rng.randrange(4)], NgramIndex(max_n)
    for _ in range(300):
        ids += [rng.randrange(4) for _ in range(rng.randrange(1, 4))]  # a round commits 1-3 tokens
        gamma = rng.randrange(1, 6)
        assert index.match(ids, gamma) == longest_match(ids, max_n, gamma)
        assert index.match(ids, gamma, 1) == longest_match(ids, max_n, gamma, 1)  # a chain's: the latest only
        # each position was indexed once per n-gram length ending there: nothing was rescanned
        assert sum(map(len, index.starts.values())) == sum(min(max_n, end + 1) for end in range(len(ids)))
    assert index.match([9, 8, 9], 2) == longest_match([9, 8, 9], max_n, 2)  # another sequence: rebuilt


def test_the_masked_source_grows_with_the_run_and_starts_again_on_another_sequence():
    """Masked gives, every round, the run's ids with the template's positions as -1 - j, appending only what was
    committed since (the same list each round, so the index extends it); another list, a shorter one, or a list
    whose last read token changed starts a new list. The index on that list answers as the full scan does."""
    from engine.drafters.ngram import Masked

    rng = random.Random(5)
    mask = [rng.random() < 0.3 for _ in range(20)]
    source, index, ids = Masked(mask), NgramIndex(3), [rng.randrange(4) for _ in range(20)]
    first = source(ids)
    for _ in range(60):
        ids += [rng.randrange(4) for _ in range(rng.randrange(1, 4))]
        src = source(ids)
        assert src is first  # one list, grown
        assert src == [-1 - j if j < len(mask) and mask[j] else t for j, t in enumerate(ids)]
        assert index.match(src, 3) == longest_match(src, 3, 3)
        assert index.match(src, 3, 1) == longest_match(src, 3, 3, 1)
    ids[-1] = 9  # the last read token changed in place: not a continuation
    assert source(ids) is not first and source(ids)[-1] == 9
    assert index.match(source(ids), 3) == longest_match(source(ids), 3, 3)
    other = list(ids)
    assert source(other) is not source(ids) and source(ids[:10]) == source(other)[:10]


@pytest.mark.parametrize("spec", DRAFTS)
@pytest.mark.parametrize("adaptive", ["fixed", "heuristic"])
def test_every_drafter_is_lossless_greedy_on_tiny(tiny_dirs, spec, adaptive):
    """Greedy output equals AR for each drafter and adaptive mode (tiny random target)."""
    engine = Engine(load_model(tiny_dirs["target"]), spec, measure_step=False)
    for prompt in PROMPTS:
        cfg = GenerationConfig(gamma=4, max_new_tokens=30, adaptive=adaptive)
        spec_ids = list(engine.generate(prompt, cfg))[-1].token_ids
        assert spec_ids == list(engine.generate(prompt, cfg, mode="ar"))[-1].token_ids


def test_confidence_threshold_stops_drafting_early(tiny_dirs):
    """p_min cuts a draft after the first token the draft model is unsure of (kept, as llama.cpp does: its
    forward is paid for and its q is known); output stays identical to AR."""
    engine = Engine(load_model(tiny_dirs["target"]), f"model:{tiny_dirs['sharp']}", measure_step=False)
    free = list(engine.generate("Tell me a story", GenerationConfig(gamma=8, max_new_tokens=30)))
    qs = sorted(q for e in free if e.kind == "drafted" for q in e.q)  # greedy: each q is the draft's top prob
    cfg = GenerationConfig(gamma=8, max_new_tokens=30, p_min=qs[len(qs) // 2])
    events = list(engine.generate("Tell me a story", cfg))
    drafted = [e for e in events if e.kind == "drafted"]
    # only the last may be unsure
    assert drafted and all(min(e.q[:-1], default=1.0) >= cfg.p_min for e in drafted)
    assert any(e.q[-1] < cfg.p_min and len(e.token_ids) < cfg.gamma for e in drafted)  # ... and is kept
    assert sum(len(e.token_ids) for e in drafted) < sum(len(e.token_ids) for e in free if e.kind == "drafted")
    assert events[-1].token_ids == list(engine.generate("Tell me a story", cfg, mode="ar"))[-1].token_ids


@pytest.mark.slow  # statistical / real-model: make test runs it, the inner loop does not
@pytest.mark.parametrize("spec", ["ngram", "layerskip:1"])
def test_sampling_fidelity_per_drafter(tiny_dirs, spec):
    """The one-hot n-gram path and the layer-skip draft keep the target's exact first-token law."""
    engine = Engine(load_model(tiny_dirs["target"]), spec, measure_step=False)
    ids = engine.encode("a b a b a b a", True)
    p = target_first_token_probs(engine, ids)
    counts = first_token_counts(engine, ids, 1000)
    assert chi_square(counts, p) < CHI2_7DF_999
    drafted = [
        e
        for e in engine.generate(
            None, GenerationConfig(gamma=1, max_new_tokens=2, temperature=1.0, top_k=8), prompt_ids=ids
        )
        if e.kind == "drafted"
    ]
    assert drafted, "the prompt must give the drafter something to propose"


def test_auto_records_every_decision_with_its_inputs(tiny_dirs):
    """Each auto round emits a decision naming drafter, γ, reason and the candidates' α, c, v, rate."""
    engine = Engine(load_model(tiny_dirs["target"]), "auto", measure_step=False)
    events = list(engine.generate("x y z x y z x y z x y", GenerationConfig(gamma=4, max_new_tokens=40)))
    decisions = [e for e in events if e.kind == "decided"]
    rounds = {e.round for e in events if e.kind == "round_timed" and e.gamma + 1}
    assert decisions and {d.round for d in decisions} <= rounds
    assert decisions[0].gamma == 0 and "plain target step" in decisions[0].reason
    assert any(d.candidates for d in decisions)
    for d in decisions:
        for c in d.candidates:
            # a chain is priced by α per position, a tree (token recycling) by what its trees committed per round
            per = "tokens_per_round" if "nodes" in c else "alpha"
            assert {"drafter", "variant", "gamma", per, "c", "v", "predicted_tokens_per_s"} <= set(c)
        drafted = [e for e in events if e.kind == "drafted" and e.round == d.round]
        assert len(drafted) == (1 if d.gamma else 0)
        # a tree's drafted event is its chain view, at most γ = its depth
        if drafted and d.drafter != "recycle":
            assert len(drafted[0].token_ids) == d.gamma and drafted[0].drafter == d.drafter


@pytest.mark.parametrize(
    "spec,message",
    [
        ("ngram:0", "1 <= N <= 8"),
        ("ngram:x", "not a whole number"),
        ("layerskip:99", "layerskip needs 1 <= L < 2"),
        ("quant:int3", "quant kind must be"),
    ],
)
def test_bad_drafter_specs_are_refused(tiny_dirs, spec, message):
    """Drafter parameters out of range give a clear error at load time."""
    with pytest.raises(ModelLoadError, match=message):
        Engine(load_model(tiny_dirs["target"]), spec)


def test_layer_skip_shares_target_weights(tiny_dirs):
    """The layer-skip draft is a view: no weight is copied."""
    from engine.drafters.model import layer_skip_model

    target = load_model(tiny_dirs["target"]).model
    view = layer_skip_model(target, 1)
    assert len(target.model.layers) == 2 and view.config.num_hidden_layers == 1
    assert view.lm_head.weight.data_ptr() == target.lm_head.weight.data_ptr()
    assert (
        view.model.layers[0].self_attn.q_proj.weight.data_ptr()
        == target.model.layers[0].self_attn.q_proj.weight.data_ptr()
    )


@pytest.mark.parametrize("spec, shared", [("self", True), ("layerskip:1", True), ("quant:bf16", False)])
def test_drafts_of_the_target_itself_run_on_its_cache(tiny_dirs, spec, shared):
    """`self` and layer-skip draft on the target's KV cache (one token fed per draft step, never a
    catch-up of committed tokens) and hand it back untouched; a separate model keeps its own cache."""
    engine = Engine(load_model(tiny_dirs["target"]), spec, measure_step=False)
    made, fed = [], []

    def make(cfg, gen, max_len, cache):
        drafter = factory(cfg, gen, max_len, cache)
        forward = drafter.forward
        drafter.forward = lambda x, c, **kw: fed.append(x.shape[-1]) or forward(x, c, **kw)
        made.append((drafter, cache))
        return drafter

    factory = engine.make_drafter
    engine.make_drafter = Factory(make, factory.needs)
    cfg = GenerationConfig(gamma=3, max_new_tokens=30)
    prompt = "one two three four one two three"
    assert (
        list(engine.generate(prompt, cfg))[-1].token_ids
        == list(engine.generate(prompt, cfg, "ar"))[-1].token_ids
    )
    drafter, cache = made[0]
    assert (drafter.cache is cache) == shared
    if shared:
        assert set(fed) == {1}
    else:
        # a separate cache catches up on committed tokens (the prompt, all-accepted rounds)
        assert max(fed) > 1


def test_lean_forward_matches_transformers_owns_its_weights_and_layer_skip_shares_it(embedded):
    """The fused Llama forward (prefill, a verify, one step) gives the transformers module's logits and argmax,
    on weights it owns: the shared module is never changed, and transformers' forward on it stays the reference;
    layer-skip reuses the lean forward's layers."""
    from engine.drafters.model import layer_skip_model
    from engine.runtime.cache import KVCache
    from engine.runtime.lean import LeanForward, forward_fn

    model = embedded.model
    before = {name: (p.data_ptr(), p.is_contiguous()) for name, p in model.named_parameters()}
    fast = forward_fn(model)
    assert isinstance(fast, LeanForward)
    assert {name: (p.data_ptr(), p.is_contiguous()) for name, p in model.named_parameters()} == before
    att = model.model.layers[0].self_attn
    fused = fast.layers[0][1].w.untyped_storage().data_ptr()
    assert fused not in {w.untyped_storage().data_ptr() for w in (att.q_proj.weight, att.k_proj.weight)}
    ids = torch.randint(0, 40000, (1, 24))
    caches = [KVCache.for_model(model, 40) for _ in range(2)]
    with torch.inference_mode():
        for chunk in (ids[:, :16], ids[:, 16:21], ids[:, 21:22]):  # prefill, a verify of 5, one step
            ref = model(chunk, past_key_values=caches[0]).logits
            lean = fast(chunk, caches[1])
            assert torch.allclose(lean, ref, atol=1e-3, rtol=1e-4)
            assert torch.equal(lean.argmax(-1), ref.argmax(-1))
        assert caches[1].length == 22
    skip = forward_fn(layer_skip_model(model, 8))
    assert len(skip.layers) == 8 and all(a is b for a, b in zip(skip.layers, fast.layers))


def test_auto_extrapolates_verify_cost_from_multi_token_points():
    """t(1) -> t(2) is a kernel jump on a CPU, so unseen t(n) follows the n >= 2 points, not a line through t(1)."""
    from engine.costmodel import PRIOR_SLOPE
    from engine.drafters.auto import AutoDrafter

    auto = AutoDrafter(None, torch.device("cpu"))
    assert auto.verify_s(3) is None  # nothing measured yet
    auto.verify = {1: 1.0}
    assert auto.verify_s(5) == pytest.approx(1 + 4 * PRIOR_SLOPE)
    auto.verify = {1: 1.0, 2: 1.36}
    assert auto.verify_s(5) == pytest.approx(1.36 + 3 * PRIOR_SLOPE)
    auto.verify = {1: 1.0, 2: 1.36, 3: 1.40}
    # slope 0.04 per token; a line through t(1) would give ~1.8
    assert auto.verify_s(5) == pytest.approx(1.48)
    assert auto.verify_s(3) == 1.40  # measured points are used as they are


def test_ngram_never_drafts_from_the_chat_template(embedded):
    """The n-gram index holds the user's text and the output only: the first round of a chat prompt no longer
    proposes "<|im_start|>assistant" (a draft the target always rejects), and no draft ever holds a special token;
    a raw prompt (no template) keeps every position as a source."""
    from engine import Engine, GenerationConfig
    from engine.drafters.ngram import template_mask

    engine = Engine(embedded, "ngram")
    prompt = "Copy this text exactly:\n\nThe cat sat on the mat. The dog sat on the log."
    ids = engine.encode(prompt)
    tok = embedded.tokenizer
    mask = template_mask(ids, set(tok.all_special_ids), tok.decode)
    kept = tok.decode([t for t, m in zip(ids, mask) if not m])
    assert kept == prompt  # exactly the user's text survives: no role names, no system message, no specials
    assert template_mask(ids[:5], set(), tok.decode) == [False] * 5  # a raw prompt: nothing masked
    events = list(engine.generate(prompt, GenerationConfig(gamma=4, max_new_tokens=24)))
    drafted = [e for e in events if e.kind == "drafted"]
    assert drafted and all(not set(e.token_ids) & set(tok.all_special_ids) for e in drafted)
    assert all("assistant" not in "".join(e.tokens) for e in drafted)
    first = [e for e in events if e.round == 1]
    assert not any(e.kind == "drafted" and e.token_ids for e in first)  # nothing to match yet: a plain step
    assert sum(len(e.token_ids) for e in drafted) > 4  # the passage itself is still drafted from


def test_the_ngram_index_follows_any_sequence_it_is_given():
    """Beam search asks one n-gram drafter for every beam: a call that is not a continuation of the last (another
    beam of the same length ending in the same token) rebuilds the index, so it answers as the full scan does."""
    from engine.drafters.ngram import NgramIndex, longest_match

    prompt = [6, 7, 8, 1, 2, 3]
    index = NgramIndex(3)
    for ids in (prompt + [9, 5, 0, 5], prompt + [1, 1, 9, 5], prompt + [9, 5, 0, 5, 6]):
        assert index.match(ids, 4) == longest_match(ids, 3, 4)
