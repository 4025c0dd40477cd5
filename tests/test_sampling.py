"""The acceptance math on hand-built distributions: exact, fast, and able to catch a wrong rule."""

import pytest
import torch

from engine import sampling


def chi_square(counts: torch.Tensor, probs: torch.Tensor) -> float:
    expected = probs * counts.sum()
    keep = expected > 0
    return float(((counts[keep] - expected[keep]) ** 2 / expected[keep]).sum())


# chi-square critical values at significance 0.001: a correct sampler fails 1 time in 1000 (seeds fixed)
CHI2_999 = {3: 16.27, 5: 20.52, 15: 37.70}

# (γ+1, V): target at 3 positions
P = torch.tensor(
    [
        [0.50, 0.30, 0.15, 0.05, 0.00, 0.00],
        [0.10, 0.20, 0.30, 0.40, 0.00, 0.00],
        [0.25, 0.25, 0.25, 0.25, 0.00, 0.00],
    ]
)
# (γ, V): a draft that disagrees strongly
Q = torch.tensor([[0.05, 0.15, 0.30, 0.20, 0.30, 0.00], [0.40, 0.10, 0.10, 0.10, 0.10, 0.20]])


def speculate_two_tokens(n: int, accept=sampling.accept_sample, one_hot: bool = False) -> torch.Tensor:
    """Counts (V, V) of the first two emitted tokens over n seeded rounds of γ=2 speculation.

    The second emitted token is conditioned on position 1; with these position-independent rows
    the exact joint law is P[0] x P[1]. Round k reads the draws of positions 3k .. 3k + 2 (sampling.Draws).
    """
    gen = torch.Generator().manual_seed(1234)
    counts = torch.zeros(6, 6)
    for k in range(n):
        draws = sampling.Draws(1234).at(3 * k)
        draft = torch.stack([torch.multinomial(Q[i], 1, generator=gen)[0] for i in range(2)])
        if one_hot:
            draft = torch.tensor([2, 3])
        v = accept(draft, None if one_hot else Q, P, draws)
        emitted = draft[: v.n_accepted].tolist() + [v.next_id]
        if len(emitted) < 2:  # rejected first: the next round draws the second token from P[1], at draws(1)
            emitted.append(sampling.draw_token(P[1], draws(1)))
        counts[emitted[0], emitted[1]] += 1
    return counts


def test_rejection_sampling_matches_target_joint_distribution():
    """Leviathan/Chen: emitted tokens are distributed exactly as p (first two tokens, 16 cells, chi-square)."""
    counts = speculate_two_tokens(6000)
    joint = torch.outer(P[0], P[1])
    assert chi_square(counts.flatten(), joint.flatten()) < CHI2_999[15]


def test_one_hot_draft_is_lossless():
    """n-gram style drafts (q one-hot) accept with p(x) and resample from p minus x: still exactly p."""
    counts = speculate_two_tokens(6000, one_hot=True)
    assert chi_square(counts.flatten(), torch.outer(P[0], P[1]).flatten()) < CHI2_999[15]


def test_broken_rule_is_caught():
    """The same test rejects a sampler that accepts every draft (it would emit q, not p)."""

    def accept_all(draft, q, p, draws):
        return sampling.Verdict(len(draft), sampling.draw_token(p[-1], draws(2)), [1.0] * 2, [0.0] * 2, 0.0)

    counts = speculate_two_tokens(2000, accept=accept_all)
    assert chi_square(counts.flatten(), torch.outer(P[0], P[1]).flatten()) > CHI2_999[15] * 5


def test_residual_is_normalised_positive_part():
    """norm(max(0, p - q)), and p itself when the draft matched p exactly."""
    r = sampling.residual(P[0], Q[0], token=0)
    expect = torch.tensor([0.45, 0.15, 0.0, 0.0, 0.0, 0.0]) / 0.60
    assert torch.allclose(r, expect, atol=1e-6)
    assert torch.allclose(sampling.residual(P[0], P[0], token=0), P[0])
    onehot = sampling.residual(P[0], None, token=0)
    assert onehot[0] == 0 and torch.isclose(onehot.sum(), torch.tensor(1.0))


def test_greedy_accepts_prefix_matching_argmax():
    """Greedy keeps drafts while they equal argmax p, then emits argmax p (correction or bonus)."""
    v = sampling.accept_greedy(torch.tensor([0, 1]), P)
    assert (v.n_accepted, v.next_id) == (1, 3)
    v = sampling.accept_greedy(torch.tensor([0, 3]), P)
    assert (v.n_accepted, v.next_id) == (2, 0)  # bonus = argmax of the last row (first of ties)
    assert v.accept_prob == [1.0, 1.0]


@pytest.mark.parametrize("top_k,top_p,support", [(2, 1.0, 2), (0, 0.6, 2), (0, 0.5, 1), (3, 0.99, 3)])
def test_shaping_keeps_expected_support(top_k, top_p, support):
    """top-k / top-p keep exactly the tokens they should (the top one always survives)."""
    logits = torch.log(torch.tensor([0.5, 0.3, 0.15, 0.05]))
    probs = sampling.shape_probs(logits, 1.0, top_k, top_p)
    assert int((probs > 0).sum()) == support
    assert torch.isclose(probs.sum(), torch.tensor(1.0))
