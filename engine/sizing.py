"""Will a model pair fit this machine? Parameter counts, device memory, and a refusal that says why.

Plain Python: it never imports torch. The GPU's memory is read only from a torch the process has already
imported (the app always has, to serve runs; a process that never imported torch runs nothing on a GPU).
The app calls it to hide presets that cannot fit and to refuse them through the API with a reason,
before anything is loaded.
"""

from __future__ import annotations

import os
import sys

from .specs import ModelLoadError, parse_draft

# parameters of the models the app offers (from their model cards); a model not listed is not pre-checked
PARAMS = {
    "embedded": 135e6,
    "HuggingFaceTB/SmolLM2-135M-Instruct": 135e6,
    "embedded-gemma": 268e6,
    "HuggingFaceTB/SmolLM2-360M-Instruct": 362e6,
    "HuggingFaceTB/SmolLM2-1.7B-Instruct": 1.71e9,
    "Qwen/Qwen2.5-0.5B-Instruct": 494e6,
    "Qwen/Qwen2.5-1.5B-Instruct": 1.54e9,
    "Qwen/Qwen2.5-7B-Instruct": 7.62e9,
}
OVERHEAD = 1.3  # KV caches, activations, the CPU's packed oneDNN copy of small models, allocator slack
USABLE = 0.8  # of the device's memory: the rest is the server, the OS and the other sessions' state


def device_memory(device: str | None = None) -> tuple[str, int]:
    """(device kind, bytes of memory): the first GPU's when CUDA is present (or asked for), else the RAM.
    SPECVIZ_DEVICE_MEMORY_GB overrides the detected size (a Space with a smaller quota than its host)."""
    override = os.environ.get("SPECVIZ_DEVICE_MEMORY_GB")
    kind = "cpu"
    torch = sys.modules.get("torch")
    if device != "cpu" and torch is not None and torch.cuda.is_available():
        kind = "cuda"
        total = torch.cuda.get_device_properties(0).total_memory
    if kind == "cpu":
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    return kind, int(float(override) * 2**30) if override else total


def pair_bytes(target: str, draft, kind: str) -> float | None:
    """Estimated bytes for the target and a `model:` draft in the default dtype (fp32 on CPU, bf16 on CUDA)."""
    per_param = 2 if kind == "cuda" else 4
    try:
        draft_model = parse_draft(draft).model if draft else None
    except ModelLoadError:
        return None  # a bad spec is refused where it is built, with its own message
    names = [target] + ([draft_model] if draft_model else [])
    if any(n not in PARAMS for n in names):
        return None
    return sum(PARAMS[n] for n in names) * per_param * OVERHEAD


def refusal(target: str, draft, device: str | None = None) -> str | None:
    """Why this pair cannot run here (a message naming the sizes), or None when it fits or is unknown."""
    kind, total = device_memory(device)
    need = pair_bytes(target, draft, kind)
    if need is None or need <= USABLE * total:
        return None
    dtype = "bf16" if kind == "cuda" else "fp32"
    draft_model = parse_draft(draft).model if draft else None
    # the draft may be the large one
    who = f"{target} with its draft {draft_model}" if draft_model else target
    return (
        f"{who} needs about {need / 2**30:.0f} GiB here ({dtype}), more than this "
        f"{'GPU' if kind == 'cuda' else 'machine'} offers ({USABLE * total / 2**30:.0f} of "
        f"{total / 2**30:.0f} GiB usable); choose a smaller pair"
    )
