"""Spec -> drafter: the registry's builders (the grammar and the table are engine/specs.py).

`drafter_factory` parses a spec once (specs.parse_draft), imports the module its family names and asks
that module's `build(spec, target, ctx)` for a per-run constructor, a base.Factory that declares what its
drafters need (base.Needs): validation and any model loading happen now, once per (target, spec); each run then
calls the constructor for its own fresh drafter.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass

from ..runtime.models import LoadedModel
from ..specs import DraftSpec, parse_draft
from .base import Factory


@dataclass(frozen=True)
class BuildContext:
    """What a builder may need besides the spec and the target."""

    trust_remote_code: bool  # a model: draft may run its repository's code (never set from the app)
    factory: Callable  # drafter_factory itself: a drafter made of others (auto) builds them through it


def drafter_factory(spec: str | DraftSpec, target: LoadedModel, trust_remote_code: bool = False) -> Factory:
    """Validate `spec` now (loading any model once) and return its per-run drafter constructor (a Factory, with
    what its drafters need)."""
    spec = spec if isinstance(spec, DraftSpec) else parse_draft(spec)
    build = importlib.import_module(spec.family.builder).build
    return build(spec, target, BuildContext(trust_remote_code, drafter_factory))
