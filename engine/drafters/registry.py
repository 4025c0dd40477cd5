"""Spec -> drafter: the registry's builders (the grammar and the table are engine/specs.py).

`drafter_factory` parses a spec once (specs.parse_draft), imports the module its family names and asks
that module's `build(spec, target, ctx)` for a per-run constructor: validation and any model loading
happen now, once per (target, spec); each run then calls the constructor for its own fresh drafter.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..config import GenerationConfig
from ..runtime.cache import KVCache
from ..runtime.models import LoadedModel
from ..specs import DraftSpec, parse_draft
from .base import Drafter

if TYPE_CHECKING:
    import torch

# (cfg, generator, max_len, the target's KV cache) -> a drafter for one run. A factory whose drafter's forward can
# write more than γ or tree_budget rows besides the root (a static tree template, lookahead's window) says how many
# in an attribute `rows` (decode/loop.cache_slots sizes the cache with it).
DrafterFactory = Callable[[GenerationConfig, "torch.Generator | None", int, KVCache], Drafter]


@dataclass(frozen=True)
class BuildContext:
    """What a builder may need besides the spec and the target."""

    trust_remote_code: bool  # a model: draft may run its repository's code (never set from the app)
    factory: Callable  # drafter_factory itself: a drafter made of others (auto) builds them through it


def drafter_factory(
    spec: str | DraftSpec, target: LoadedModel, trust_remote_code: bool = False
) -> DrafterFactory:
    """Validate `spec` now (loading any model once) and return a per-run drafter constructor."""
    spec = spec if isinstance(spec, DraftSpec) else parse_draft(spec)
    build = importlib.import_module(spec.family.builder).build
    return build(spec, target, BuildContext(trust_remote_code, drafter_factory))
