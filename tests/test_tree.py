"""Tree speculation: mask and positions, cache compaction, lossless greedy and sampling."""

import pytest
import torch

from engine import Engine, GenerationConfig, load_model
from engine.runtime.cache import KVCache
from engine.sampling import tree
from tests.test_engine import CHI2_7DF_999, chi_square, target_first_token_probs

# root -> a(0) -> c(2); root -> b(1); a -> d(3)
PARENTS = [-1, -1, 0, 0]


def test_tree_mask_and_positions_for_hand_built_tree():
    """Each node sees the prefix, the root and its own ancestors; position = prefix + depth."""
    mask, pos = tree.tree_inputs(PARENTS, prefix=3, device="cpu")
    assert mask.shape == (1, 1, 5, 8) and pos.tolist() == [[3, 4, 4, 5, 5]]
    m = mask[0, 0, :, 3:].int().tolist()  # columns: root, a, b, c, d
    assert m == [[1, 0, 0, 0, 0], [1, 1, 0, 0, 0], [1, 0, 1, 0, 0], [1, 1, 0, 1, 0], [1, 1, 0, 0, 1]]
    assert mask[0, 0, :, :3].all()


def test_greedy_walk_takes_longest_argmax_path():
    """Greedy follows the child equal to argmax p; a sibling can be the accepted one."""
    p = torch.full((5, 10), 0.01)
    for row, best in enumerate([1, 7, 0, 0, 3]):  # argmax at root, a, b, c, d
        p[row, best] = 0.9
    tv = tree.accept_tree_greedy([5, 1, 7, 6], PARENTS, p)  # a=5, b=1, c=7, d=6
    assert tv.path == [1] and tv.next_id == 0 and not tv.corrected  # b accepted, b is a leaf: bonus
    tv = tree.accept_tree_greedy([1, 2, 7, 3], PARENTS, p)
    assert tv.path == [0, 2] and tv.next_id == 0  # a then c (argmax after a is 7), then bonus


def test_compaction_keeps_exactly_the_accepted_path(tiny_dirs):
    """After compaction the cache equals one computed from scratch over prefix + accepted path."""
    model = load_model(tiny_dirs["target"]).model
    prefix = [11, 12, 13, 14]
    tokens = [21, 22, 23, 24]  # a, b, c, d with PARENTS
    cache = KVCache.for_model(model, 32)
    with torch.inference_mode():
        model(torch.tensor([prefix[:-1]]), past_key_values=cache)
        mask, pos = tree.tree_inputs(PARENTS, 3, "cpu")
        model(
            torch.tensor([[prefix[-1]] + tokens]),
            past_key_values=cache,
            attention_mask=mask,
            position_ids=pos,
        )
        cache.compact(3, [0, 3])  # keep a, d
        fresh = KVCache.for_model(model, 32)
        model(torch.tensor([prefix + [21, 24]]), past_key_values=fresh)
    assert cache.length == fresh.length == 6
    for mine, ref in zip(cache.layers, fresh.layers):
        assert torch.allclose(mine.keys[:, :, :6], ref.keys[:, :, :6], atol=1e-5)
        assert torch.allclose(mine.values[:, :, :6], ref.values[:, :, :6], atol=1e-5)


@pytest.mark.parametrize("spec", ["self", "other", "ngram", "auto"])
@pytest.mark.parametrize("budget,branching", [(6, 2), (12, 3)])
def test_tree_greedy_matches_ar(tiny_dirs, spec, budget, branching):
    """Greedy tree speculation is token-identical to AR, for model and n-gram trees."""
    draft = f"model:{tiny_dirs['other']}" if spec == "other" else spec
    engine = Engine(load_model(tiny_dirs["target"]), draft, measure_step=False)
    for prompt in ["a b c a b d a b c a b", "Tell me a story"]:
        cfg = GenerationConfig(gamma=4, max_new_tokens=30, tree_budget=budget, tree_branching=branching)
        events = list(engine.generate(prompt, cfg))
        assert events[-1].token_ids == list(engine.generate(prompt, cfg, mode="ar"))[-1].token_ids
        if spec not in ("ngram", "auto"):
            trees = [e for e in events if e.kind == "draft_tree"]
            assert trees and all(len(t.token_ids) <= budget for t in trees)
            assert all(t.status[i] == "accepted" for t in trees for i in t.path)


@pytest.mark.slow  # statistical / real-model: make test runs it, the inner loop does not
def test_tree_sampling_is_lossless(tiny_dirs):
    """Siblings tried in turn with p renormalised: the first token still follows the target's top-8 law."""
    engine = Engine(load_model(tiny_dirs["target"]), f"model:{tiny_dirs['sharp']}", measure_step=False)
    ids = engine.encode("Once upon a time", False)
    counts = torch.zeros(engine.target.vocab_size)
    for seed in range(1000):
        cfg = GenerationConfig(
            gamma=1, max_new_tokens=2, temperature=1.0, top_k=8, seed=seed, tree_budget=4, tree_branching=4
        )
        counts[list(engine.generate(None, cfg, prompt_ids=ids))[-1].token_ids[0]] += 1
    assert chi_square(counts, target_first_token_probs(engine, ids)) < CHI2_7DF_999


def test_ngram_tree_merges_shared_prefixes():
    """All matching continuations become one trie: shared prefixes are one node."""
    tokens, parents = tree.trie([[1, 2, 3], [1, 2, 4], [5]])
    assert tokens == [1, 2, 3, 4, 5] and parents == [-1, 0, 1, 1, -1]


def test_one_step_type_for_chain_tree_and_plain_rounds(tiny_dirs):
    """step() judges a chain, a tree and no draft alike: a Step whose cache keeps exactly pos + accepted,
    whose commit starts with the accepted drafts, and whose tree (when there is one) has the chain view's path."""
    from engine.decode.step import Step, step
    from engine.drafters.base import Draft

    target = load_model(tiny_dirs["target"])
    engine = Engine(target, "self", measure_step=False)
    ids = engine.encode("one two three four", True)
    ar = list(engine.generate(None, GenerationConfig(max_new_tokens=3), mode="ar", prompt_ids=ids))[
        -1
    ].token_ids
    cfg, t = GenerationConfig(), torch.tensor
    # a branch at depth 1
    drafts = {
        "plain": None,
        "chain": Draft(t([ar[0], ar[1] + 1, ar[2]]), None, "test"),  # the second token is wrong
        "tree": Draft(t([ar[0], ar[0] + 1, ar[1]]), None, "test", parents=[-1, -1, 0]),
    }
    for kind, draft in drafts.items():
        cache = KVCache.for_model(target.model, len(ids) + 8)
        engine.forward(t([ids[:-1]]), cache)
        s = step(
            engine.forward,
            ids,
            draft,
            cache,
            cfg,
            None,
            eos=target.eos_ids,
            remaining=8,
            device=target.device,
        )
        assert isinstance(s, Step) and cache.length == s.cache_kept == len(ids) + s.n_accepted
        assert s.new == ar[: len(s.new)] and s.new[: s.n_accepted] == s.judged[: s.n_accepted]
        assert len(s.p_rows) == s.n_accepted + 1 if kind == "tree" else len(s.p_rows) == len(s.judged) + 1
        assert (s.tree is not None) == (kind == "tree")
    assert s.tree.path == [0, 2] and s.judged == [ar[0], ar[1]] and s.n_accepted == 2 and s.new == ar[:3]
