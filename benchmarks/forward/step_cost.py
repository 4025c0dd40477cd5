"""The lean forward (engine/runtime/lean.py) vs transformers' own forward of the same model, side by side.

    .venv/bin/python benchmarks/forward/step_cost.py [--shape embedded|qwen2.5-0.5b]

`embedded` is the embedded SmolLM2-135M (Llama); `qwen2.5-0.5b` a random-weight Qwen2 of Qwen2.5-0.5B's
shape (q/k/v biases, tied embeddings, 151,936-token vocabulary), built from its config offline.
Greedy-decodes 48 tokens after a 100-token prefill with each, interleaved 5 times, and prints the
median ms/token of each; then times one forward over n = 5 and 13 new tokens (a verify) at 200
cached tokens, median of 12 interleaved pairs. tests/test_drafters.py and tests/test_architectures.py pin
the two to the same logits.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from engine import load_model  # noqa: E402
from engine.runtime.cache import KVCache  # noqa: E402
from engine.runtime.kernels import cpu_name  # noqa: E402
from engine.runtime.lean import forward_fn  # noqa: E402


def decode(forward, model, ids: torch.Tensor, n: int = 48) -> float:
    """Milliseconds per token of n greedy steps."""
    cache = KVCache.for_model(model, ids.shape[1] + n + 1)
    forward(ids, cache, logits_to_keep=1)
    x = ids[:, -1:]
    t = time.perf_counter()
    for _ in range(n):
        x = forward(x, cache)[:, -1:].argmax(-1)
    return (time.perf_counter() - t) / n * 1e3


# Qwen2.5-0.5B-Instruct's config.json, the fields that set its shape and math
QWEN25_05B = dict(
    vocab_size=151936,
    hidden_size=896,
    intermediate_size=4864,
    num_hidden_layers=24,
    num_attention_heads=14,
    num_key_value_heads=2,
    max_position_embeddings=32768,
    rope_theta=1e6,
    rms_norm_eps=1e-6,
    tie_word_embeddings=True,
    use_sliding_window=False,
)


def model_of(shape: str) -> torch.nn.Module:
    if shape == "embedded":
        return load_model("embedded").model
    import transformers

    torch.manual_seed(0)
    model = transformers.Qwen2ForCausalLM(transformers.Qwen2Config(**QWEN25_05B)).eval()
    with torch.no_grad():
        for layer in model.model.layers:
            for proj in (layer.self_attn.q_proj, layer.self_attn.k_proj, layer.self_attn.v_proj):
                proj.bias.normal_(0, 0.02)
    return model


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shape", choices=("embedded", "qwen2.5-0.5b"), default="embedded")
    args = ap.parse_args(argv)
    model = model_of(args.shape)
    print(
        f"{args.shape}: {sum(p.numel() for p in model.parameters()) / 1e6:.0f}M parameters, fp32, "
        f"{torch.get_num_threads()} torch threads, {cpu_name()}"
    )
    paths = {
        "lean": forward_fn(model),
        "transformers": lambda x, cache, **kw: model(x, past_key_values=cache, **kw).logits,
    }
    ids = torch.randint(0, 40000, (1, 100))
    times = {name: [] for name in paths}
    with torch.inference_mode():
        for f in paths.values():
            decode(f, model, ids, 4)
        for _ in range(5):
            for name, f in paths.items():
                times[name].append(decode(f, model, ids))
    for name, ms in times.items():
        print(f"{name:13s} {statistics.median(ms):.1f} ms/token")
    print(f"ratio {statistics.median(times['transformers']) / statistics.median(times['lean']):.3f}")
    with torch.inference_mode():
        cache = KVCache.for_model(model, 220)
        paths["lean"](torch.randint(0, 40000, (1, 200)), cache, logits_to_keep=1)
        for n in (5, 13):
            x = torch.randint(0, 40000, (1, n))
            ms = {name: [] for name in paths}
            for _ in range(12):
                for name, f in paths.items():
                    t = time.perf_counter()
                    f(x, cache)
                    ms[name].append((time.perf_counter() - t) * 1e3)
                    cache.truncate(200)
            print(
                f"verify of {n}: lean {statistics.median(ms['lean']):.1f} ms, "
                f"transformers {statistics.median(ms['transformers']):.1f} ms"
            )


if __name__ == "__main__":
    main()
