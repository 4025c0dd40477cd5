"""Per-model caches are weak (engine/runtime/permodel.py): what is built from a model goes with it, and a new
module never gets a dropped one's weights (an id-keyed table could serve them once the id is reused)."""

from __future__ import annotations

import gc
import weakref

import torch

from engine.runtime.cache import KVCache
from engine.runtime.lean import LeanForward, forward_fn
from engine.runtime.permodel import PerModel
from tests.tiny import tiny_llama


class Thing:
    """A stand-in model: any object with identity hashing."""


def tiny(seed: int):
    return tiny_llama(seed, vocab=64, hidden=32, initializer_range=0.2)


def test_a_value_is_built_once_and_released_with_its_model():
    """get() builds once per (model, key); once the model is collected its values are too."""
    table, calls = PerModel(), []
    model = Thing()
    value = table.get(model, "k", lambda: calls.append(1) or Thing())
    assert table.get(model, "k", lambda: calls.append(1) or Thing()) is value and calls == [1]
    ref = weakref.ref(value)
    del model, value
    gc.collect()
    assert ref() is None and len(table) == 0


def test_the_release_check_sees_a_strong_table():
    """Negative control: a plain dict keyed by id(model), the old pattern, keeps the value alive."""
    strong, model = {}, Thing()
    strong[id(model)] = Thing()
    ref = weakref.ref(strong[id(model)])
    del model
    gc.collect()
    assert ref() is not None


def test_a_dropped_models_lean_forward_is_released_and_never_served_again():
    """forward_fn's LeanForward (the fused weight copies) goes with its module; a new module gets its own forward,
    computing its own weights' logits."""
    a = tiny(1)
    fast = forward_fn(a)
    assert isinstance(fast, LeanForward) and forward_fn(a) is fast
    ref = weakref.ref(fast)
    del a, fast
    gc.collect()
    assert ref() is None
    b = tiny(2)
    fast_b = forward_fn(b)
    x = torch.tensor([[1, 2, 3]])
    with torch.inference_mode():
        want = b(x).logits
        got = fast_b(x, KVCache.for_model(b, 8))
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)


def test_a_layer_skip_view_shares_the_lean_forward_and_never_keeps_its_target_alive():
    """The view reuses its target's fused weights, and holds its target only weakly: once both are dropped the
    target, the view and their table entries are released (a strong back-reference would pin them forever)."""
    from engine.drafters.model import layer_skip_model

    a = tiny(3)
    view = layer_skip_model(a, 1)
    assert layer_skip_model(a, 1) is view and forward_fn(view).layers[0] is forward_fn(a).layers[0]
    refs = weakref.ref(a), weakref.ref(view)
    del a, view
    gc.collect()
    assert all(r() is None for r in refs)
