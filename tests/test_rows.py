"""A verify forward's rows as the greedy rule reads them (engine/sampling/rows.py, native.c specviz_row_stats): the
argmax, the log-sum-exp and the top k from one pass equal torch's, ties to the lower index; p from them equals the
softmax; a greedy run forms no softmax at all and commits what it did before (issue 64)."""

from __future__ import annotations

import math

import pytest
import torch

from engine import sampling
from engine.decode import step as step_mod
from engine.runtime import native
from engine.sampling.rows import LogitRows, ProbRows, torch_stats

needs_native = pytest.mark.skipif(native.library() is None, reason="native.c not built here")


def agree(a, b, tol=1e-5) -> bool:
    """Two row statistics are the same answer: argmax and top ids equal, log-sum-exp within tol."""
    return (
        a[0] == b[0]
        and a[2] == b[2]
        and all(abs(x - y) <= tol * max(1.0, abs(y)) for x, y in zip(a[1], b[1]))
    )


@needs_native
@pytest.mark.parametrize("rows,n,k", [(1, 49152, 20), (5, 49152, 5), (17, 1003, 1), (3, 7, 7)])
def test_native_row_stats_equal_torch(rows, n, k):
    torch.manual_seed(rows * n + k)
    x = torch.randn(rows, n) * 6
    assert agree(native.row_stats(x, k), torch_stats(x, k))


@needs_native
def test_native_row_stats_ties_and_masked_values():
    """Equal maxima: the first wins (torch's argmax); equal values in the top k: the lower index first; -inf
    (a masked token) never enters and adds nothing to the sum."""
    x = torch.full((2, 5000), -math.inf)
    x[0, [11, 3000, 4999]] = 2.5  # three equal maxima
    x[0, [40, 41]] = 1.0
    x[1] = torch.linspace(-3, 3, 5000)
    x[1, 4321] = x[1, 4999]  # a tie with the row's last, largest value
    best, lse, ids, vals = native.row_stats(x, 4)
    assert best == [11, 4321]
    assert ids[0] == [11, 3000, 4999, 40] and vals[0][:3] == [2.5] * 3
    assert ids[1][:2] == [4321, 4999]
    assert lse[0] == pytest.approx(math.log(3 * math.exp(2.5) + 2 * math.exp(1.0)), rel=1e-6)


@needs_native
def test_a_wrong_sum_is_caught():
    """The negative control: log-sum-exp from float16 logits (a coarser sum) is outside the tolerance the native
    one meets, so `agree` can fail."""
    torch.manual_seed(1)
    x = torch.randn(4, 49152) * 6
    coarse = torch_stats(x.half().float(), 5)
    assert not agree(coarse, torch_stats(x, 5))
    assert agree(native.row_stats(x, 5), torch_stats(x, 5))


def test_logit_rows_answer_as_the_softmax_does():
    torch.manual_seed(2)
    logits = torch.randn(5, 3000) * 5
    rows, probs = LogitRows(logits, k=8), ProbRows(logits.softmax(-1))
    assert rows.best() == probs.best()
    for r in range(5):
        for t in (0, 17, rows.best()[r]):
            assert rows.p(r, t) == pytest.approx(probs.p(r, t), rel=1e-5, abs=1e-9)
    for a, b in zip(rows.topk(8), probs.topk(8)):
        assert [i for i, _ in a] == [i for i, _ in b]
        assert [p for _, p in a] == pytest.approx([p for _, p in b], rel=1e-5)
    assert len(rows.topk(12)[0]) == 12  # past the statistics' k: torch's top-k
    sub = rows.take([4, 0])
    assert sub.best() == [rows.best()[4], rows.best()[0]] and sub.p(0, 3) == pytest.approx(rows.p(4, 3))


def test_greedy_verdicts_from_rows_equal_those_from_probabilities():
    torch.manual_seed(3)
    logits = torch.randn(5, 500) * 4
    best = logits.argmax(-1)
    for draft in (best[:4], torch.tensor([int(best[0]), int(best[1]), 7, 9]), torch.tensor([1, 2, 3, 4])):
        a = sampling.accept_greedy(draft, LogitRows(logits))
        b = sampling.accept_greedy(draft, logits.softmax(-1))
        assert (a.n_accepted, a.next_id, a.accept_prob) == (b.n_accepted, b.next_id, b.accept_prob)
        assert a.p_draft == pytest.approx(b.p_draft, rel=1e-5) and a.next_p == pytest.approx(
            b.next_p, rel=1e-5
        )


def test_a_greedy_run_forms_no_softmax(embedded, monkeypatch):
    """Greedy rounds (a chain, a tree, plain steps) judge from the row statistics: shape_probs, the (rows × V)
    softmax, is never called; the output equals our AR's. The control: a sampled run does call it."""
    from engine import Engine, GenerationConfig

    calls = []
    real = sampling.shape_probs

    def counted(*a, **kw):
        calls.append(1)
        return real(*a, **kw)

    monkeypatch.setattr(step_mod.sampling, "shape_probs", counted)
    prompt = "List the days of the week, then list them again in the same order."
    cfg = GenerationConfig(gamma=4, max_new_tokens=16)
    ar = Engine(embedded, "ngram").run(prompt, GenerationConfig(gamma=4, max_new_tokens=16)).token_ids
    for spec in ("ngram", "recycle"):  # a chain and a tree
        out = Engine(embedded, spec, measure_step=False).run(prompt, cfg)
        assert out.token_ids == ar, spec
    plain = [e for e in Engine(embedded, "self").generate(prompt, cfg, "ar")]
    assert plain[-1].token_ids == ar
    assert not calls
    Engine(embedded, "ngram", measure_step=False).run(
        prompt, GenerationConfig(gamma=4, max_new_tokens=4, temperature=0.8, seed=1)
    )
    assert calls
