"""Drafters: the interface (base.py), the registry's builders (registry.py) and one file per family.

The spec grammar and the table of families live in engine/specs.py (plain, so the app reads it without
torch); each family there names its module here, whose `build(spec, target, ctx)` makes the drafter.
"""

from .base import Draft, Drafter, empty_draft
from .registry import BuildContext, DrafterFactory, drafter_factory

__all__ = ["Draft", "Drafter", "empty_draft", "BuildContext", "DrafterFactory", "drafter_factory"]
