"""Drafters: the contract (base.py: Drafter, Draft, Settled, and a family's Factory with its Needs), the registry's
builders (registry.py) and one file per family.

The spec grammar and the table of families live in engine/specs.py (plain, so the app reads it without
torch); each family there names its module here, whose `build(spec, target, ctx)` returns its Factory.
"""

from .base import Draft, Drafter, Factory, Needs, Settled, empty_draft
from .registry import BuildContext, drafter_factory

__all__ = [
    "Draft",
    "Drafter",
    "Factory",
    "Needs",
    "Settled",
    "empty_draft",
    "BuildContext",
    "drafter_factory",
]
