"""What other modules build from a loaded model (its lean forward, a layer-skip view, its
trained heads), kept exactly as long as the model lives.

A `PerModel` table is a `weakref.WeakKeyDictionary` keyed by the module itself, with a lock (transformers'
`AssistantVocabTranslatorCache` is the pattern). Never `id(model)`: an id is reused once its object is
collected, and a table keyed by ids would then serve the dropped module's weights to a new module that
happens to get its id, without any error. A value must not hold its model strongly (the entry would then
never go): a layer-skip view keeps a weak reference to its target.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable

_TABLES: list["PerModel"] = []  # every table, so that unloading a model drops its entries everywhere at once


class PerModel:
    """model -> {key -> value}, built once per (model, key) and released with the model."""

    def __init__(self):
        self._table: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self._lock = threading.Lock()  # guards the table (held only to look up or store)
        self._build = threading.Lock()  # serialises building, so two runs never build the same thing twice
        _TABLES.append(self)

    def _find(self, model, key):
        with self._lock:
            return self._table.get(model, {}).get(key, _MISSING)

    def get(self, model, key, build: Callable):
        """The value for (model, key), made by build() the first time."""
        value = self._find(model, key)
        if value is not _MISSING:
            return value
        with self._build:
            value = self._find(model, key)
            if value is _MISSING:
                value = build()
                with self._lock:
                    self._table.setdefault(model, {})[key] = value
        return value

    def has(self, model, key) -> bool:
        """Is the value for (model, key) built already (get() would return at once)?"""
        return self._find(model, key) is not _MISSING

    def drop(self, model) -> None:
        """Forget everything built from `model` now (it is being unloaded)."""
        with self._lock:
            self._table.pop(model, None)

    def __len__(self) -> int:
        with self._lock:
            return sum(len(v) for v in self._table.values())


_MISSING = object()


def drop_everywhere(model) -> None:
    """Drop `model`'s entries from every table (models.py calls it when it unloads a model)."""
    for table in _TABLES:
        table.drop(model)
