"""Shared fixtures: the real embedded model (loaded once) and tiny random-weight Llama models."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")  # tests never reach the hub


# Tests that load the real embedded model, start the app or a browser are `slow`: `pytest -m "not slow"` is the
# sub-minute inner loop (renderers, the cost model, the registry, layers, tiny random models); `make test` runs all.
SLOW_FIXTURES = {"embedded", "app_url", "browser"}
# their own servers, the real models (through helpers, not fixtures) or training; and the other architectures
# against transformers' generate (~10 s: the inner loop keeps Llama's identity tests in test_engine)
SLOW_MODULES = {
    "test_architectures",
    "test_app_api",
    "test_embedded",
    "test_gemma",
    "test_crossvocab",
    "test_heads",
    "test_auto_confidence",
    "test_sizing",
    "test_native_cross",  # a cross compile and an emulator (~12 s)
}


# the longest modules (a minute or more of one worker each), run first: `make test` hands pytest-xdist's two workers
# one module at a time in collection order, so a long module collected last keeps one worker busy while the other
# idles
LONG_MODULES = [
    "test_tour_browser",
    "test_app_api",
    "test_app_page_browser",
    "test_record_hf",
    "test_batch",
    "test_training_free",
    "test_beam",
]


def pytest_collection_modifyitems(items):
    for item in items:
        module = item.module.__name__.rpartition(".")[2]
        if SLOW_FIXTURES & set(getattr(item, "fixturenames", ())) or module in SLOW_MODULES:
            item.add_marker(pytest.mark.slow)
    rank = {m: i for i, m in enumerate(LONG_MODULES)}
    items.sort(key=lambda item: rank.get(item.module.__name__.rpartition(".")[2], len(rank)))  # stable


def make_tiny_model(
    path: Path,
    seed: int,
    tokenizer=None,
    vocab_size: int = 49152,
    layers: int = 2,
    init_range: float = 0.02,
    like: Path | None = None,
    sharpen: float = 1.0,
) -> Path:
    """Save a tiny random-weight Llama (+ tokenizer) at `path`; usable as a model spec (a local directory).

    With `like`, copy that model and multiply its logits by `sharpen` (through the final norm):
    a draft with the same ranking as its target but a strongly different distribution.
    """
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from engine.runtime.models import load_model

    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=2048,
        initializer_range=init_range,
        tie_word_embeddings=True,
        eos_token_id=2,
        bos_token_id=1,
    )
    model = LlamaForCausalLM(config) if like is None else LlamaForCausalLM.from_pretrained(like)
    with torch.no_grad():
        model.model.norm.weight.mul_(sharpen)
    model.save_pretrained(path)
    (tokenizer or load_model("embedded").tokenizer).save_pretrained(path)
    return path


@pytest.fixture(scope="session")
def tiny_dirs(tmp_path_factory):
    """Tiny models sharing the embedded tokenizer: a target, a sharpened copy of it, an unrelated draft."""
    base = tmp_path_factory.mktemp("tiny")
    target = make_tiny_model(base / "target", seed=1, init_range=0.2)
    sharp = make_tiny_model(base / "sharp", seed=2, like=target, sharpen=3.0)
    other = make_tiny_model(base / "other", seed=3, init_range=0.2)
    return {"target": str(target), "sharp": str(sharp), "other": str(other)}


@pytest.fixture(scope="session")
def embedded():
    """The real embedded SmolLM2-135M-Instruct target, loaded once for the session."""
    from engine.runtime.models import load_model

    return load_model("embedded")


@pytest.fixture(scope="session")
def app_url():
    """One `python app.py` server shared by the browser test modules (started on first use, stopped at the end)."""
    from tests.app_server import serve_app

    with serve_app() as url:
        yield url


@pytest.fixture(scope="module")
def browser():
    """Debian's Chromium driven by Playwright, one per browser test module (skips when either is missing)."""
    from tests.app_server import CHROMIUM, CHROMIUM_ARGS, playwright_or_skip

    with playwright_or_skip().sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield b
        b.close()
