"""Sized for the hardware: presets that cannot fit are hidden and refused; unused models are unloaded (LRU)."""

from __future__ import annotations

import pytest

from engine import sizing
from engine.runtime import models
from ui import app_views as av


@pytest.mark.parametrize(
    "gib,hidden",
    [
        (16, {"Qwen2.5 0.5B → 7B"}),
        (64, set()),
        (4, {"Qwen2.5 0.5B → 7B", "Qwen2.5 0.5B → 1.5B", "SmolLM2 135M → 1.7B"}),
    ],
)
def test_presets_that_cannot_fit_are_hidden_and_refused(monkeypatch, gib, hidden):
    """A CPU box of N GiB hides the pairs whose fp32 weights exceed it, and refuses them saying why."""
    monkeypatch.setenv("SPECVIZ_DEVICE_MEMORY_GB", str(gib))
    shown = av.pair_choices()
    gone = {label.split(" (")[0] for label in av.PAIRS if label not in shown}
    assert gone == hidden
    assert av.EMBEDDED_PAIR in shown and av.GEMMA_PAIR in shown
    for label in av.PAIRS:
        if label.split(" (")[0] in hidden:
            with pytest.raises(
                ValueError,
                match=r"with its draft .* needs about \d+ GiB here \(fp32\), more than this "
                r"machine offers",
            ):
                av.model_specs(label, av.PRESET_DRAFT, 0)


def test_seven_b_on_a_cpu_space_needs_about_thirty_gib(monkeypatch):
    """The issue's example: a 7B target in fp32 with its 0.5B draft is ~37 GiB estimated, refused on 16 GiB."""
    monkeypatch.setenv("SPECVIZ_DEVICE_MEMORY_GB", "16")
    message = sizing.refusal("Qwen/Qwen2.5-7B-Instruct", "model:Qwen/Qwen2.5-0.5B-Instruct", device="cpu")
    assert message and (
        "Qwen/Qwen2.5-7B-Instruct with its draft Qwen/Qwen2.5-0.5B-Instruct needs about 39 GiB" in message
    )
    # unknown sizes are not guessed
    assert sizing.refusal("some/unknown-model", "ngram", device="cpu") is None


def test_a_draft_too_large_is_named_as_the_draft(monkeypatch):
    """A small target with a 7B draft: the refusal names the draft (it said "embedded needs about 38 GiB")."""
    monkeypatch.setenv("SPECVIZ_DEVICE_MEMORY_GB", "16")
    message = sizing.refusal("embedded", "model:Qwen/Qwen2.5-7B-Instruct", device="cpu")
    assert message and message.startswith("embedded with its draft Qwen/Qwen2.5-7B-Instruct needs about")


@pytest.fixture
def fake_models(monkeypatch):
    """load_model with a fake loader: no model is read from disk; returns the list of unloaded models."""

    class Fake:
        def __init__(self, spec):
            self.name, self.model = spec, object()

    unloaded = []
    monkeypatch.setattr(models, "_LOADED", {})
    monkeypatch.setattr(models, "_USED", {})
    monkeypatch.setattr(models, "_ON_UNLOAD", [lambda m: unloaded.append(m)])
    monkeypatch.setattr(models, "_load", lambda spec, dev, dt, trc: Fake(spec))
    return unloaded


def loaded_specs():
    return sorted(k[0] for k in models._LOADED)


def test_least_recently_used_model_is_unloaded_beyond_the_cap(fake_models, monkeypatch):
    """With room for 2 models, loading a third unloads the one used longest ago (not the one just used)."""
    monkeypatch.setattr(models, "MAX_MODELS", 2)
    a = models.load_model("a/model")
    models.load_model("b/model")
    models.load_model("a/model")  # a is now the most recently used
    models.load_model("c/model")
    assert loaded_specs() == ["a/model", "c/model"]
    assert len(fake_models) == 1 and fake_models[0] is not a.model  # b's model went to the unload callbacks


def test_idle_models_are_unloaded(fake_models, monkeypatch):
    """A model unused for longer than SPECVIZ_MODEL_IDLE_S is unloaded at the next load, the others stay."""
    monkeypatch.setattr(models, "MAX_IDLE_S", 100.0)
    models.load_model("old/model")
    models.load_model("new/model")
    models._USED[next(k for k in models._LOADED if k[0] == "old/model")] -= 500
    assert models.unload_unused() == ["old/model"]
    assert loaded_specs() == ["new/model"]
