"""transformers' side of the benchmark: one timed generate() (our drafter specs as its kwargs: engine/recorders/hf.py).

transformers' generate() runs on the very model the engine loaded: the engine's lean forward owns its
own fused weights and never changes the module, so no copy is needed.
"""

from __future__ import annotations

import time

import torch

from engine.recorders.hf import fixed_assistant, plain_kwargs
from engine.runtime.models import LoadedModel

from .timing import BenchConfig, Sample


def time_hf(target: LoadedModel, ids: list, max_new_tokens: int, config: BenchConfig) -> Sample:
    """transformers' generate() on the same loaded model the engine uses (it never changes the module's
    weights), greedy, our EOS ids; timed around the call."""
    model, device = target.model, target.device
    x = torch.tensor([ids], device=device)
    models = [model] + (
        [config.hf_kwargs["assistant_model"]] if "assistant_model" in config.hf_kwargs else []
    )
    with fixed_assistant(models, config.hf_kwargs), torch.inference_mode():
        t0 = time.perf_counter()
        out = model.generate(
            x, attention_mask=torch.ones_like(x), **plain_kwargs(target, max_new_tokens), **config.hf_kwargs
        )
        if device.type == "cuda":
            torch.cuda.synchronize()
        wall = time.perf_counter() - t0
    return Sample(out[0, len(ids) :].tolist(), wall)
