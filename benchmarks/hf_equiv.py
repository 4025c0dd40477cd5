"""transformers' side of the benchmark: our drafter specs as generate() kwargs, and one timed generate().

transformers' generate() runs on the very model the engine loaded: the engine's lean forward owns its
own fused weights and never changes the module, so no copy is needed.
"""

from __future__ import annotations

import contextlib
import time

import torch

from engine.runtime.models import LoadedModel, load_model
from engine.specs import ModelLoadError, parse_draft

from .timing import BenchConfig, Sample


def hf_equivalent(spec: str, gamma: int, target: LoadedModel) -> tuple[dict, dict] | None:
    """generate() kwargs (and a JSON-safe copy) matching our drafter spec at γ; None when none exists. The spec
    is read by the engine's one parser (engine/specs.py), defaults included (`ngram` is ngram:3; transformers'
    own default is 2)."""
    try:
        parsed = parse_draft(spec)
    except ModelLoadError:
        return None
    # a fixed γ: no schedule, no confidence cut-off
    fixed = {
        "num_assistant_tokens": gamma,
        "num_assistant_tokens_schedule": "constant",
        "assistant_confidence_threshold": 0.0,
    }
    if parsed.name in ("self", "model"):
        draft = (
            target
            if parsed.name == "self"
            else load_model(parsed.model, str(target.device), str(target.dtype).replace("torch.", ""))
        )
        return {"assistant_model": draft.model, **fixed}, {"assistant_model": draft.name, **fixed}
    if parsed.name == "ngram":
        kw = {"prompt_lookup_num_tokens": gamma, "max_matching_ngram_size": parsed["N"]}
        return kw, dict(kw)
    if parsed.name == "layerskip":
        layers = parsed["L"] or max(1, target.model.config.get_text_config().num_hidden_layers // 4)
        # drafters/model.py's default L: a quarter of the layers
        kw = {"assistant_early_exit": layers, **fixed}
        return kw, dict(kw)
    return None


@contextlib.contextmanager
def _fixed_assistant(models: list, kwargs: dict):
    """transformers 5.23 reads γ, its schedule and the confidence threshold from the *assistant's*
    generation_config, ignoring the generate() kwargs: set them there for one call, then restore."""
    keys = [
        k
        for k in ("num_assistant_tokens", "num_assistant_tokens_schedule", "assistant_confidence_threshold")
        if k in kwargs
    ]
    saved = [(m.generation_config, k, getattr(m.generation_config, k, None)) for m in models for k in keys]
    try:
        for gc, k, _ in saved:
            setattr(gc, k, kwargs[k])
        yield
    finally:
        for gc, k, old in saved:
            setattr(gc, k, old)


def time_hf(target: LoadedModel, ids: list, max_new_tokens: int, config: BenchConfig) -> Sample:
    """transformers' generate() on the same loaded model the engine uses (it never changes the module's
    weights), greedy, our EOS ids; timed around the call."""
    model, device = target.model, target.device
    eos = sorted(target.eos_ids)
    pad = target.tokenizer.pad_token_id if target.tokenizer.pad_token_id is not None else eos[0]
    x = torch.tensor([ids], device=device)
    models = [model] + (
        [config.hf_kwargs["assistant_model"]] if "assistant_model" in config.hf_kwargs else []
    )
    with _fixed_assistant(models, config.hf_kwargs), torch.inference_mode():
        t0 = time.perf_counter()
        out = model.generate(
            x,
            attention_mask=torch.ones_like(x),
            max_new_tokens=max_new_tokens,
            do_sample=False,
            num_beams=1,
            repetition_penalty=1.0,
            eos_token_id=eos,
            pad_token_id=pad,
            **config.hf_kwargs,
        )
        if device.type == "cuda":
            torch.cuda.synchronize()
        wall = time.perf_counter() - t0
    return Sample(out[0, len(ids) :].tolist(), wall)
