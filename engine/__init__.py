"""specviz engine: speculative decoding as a stream of typed events (no UI code here).

    from engine import Engine, GenerationConfig
    eng = Engine.load(target="embedded", draft="self")
    for event in eng.generate("Write a haiku", GenerationConfig(gamma=4)):
        print(event.kind, event.round)
    result = eng.run("Write a haiku", GenerationConfig(gamma=4), compare_ar=True)

Names are imported lazily (PEP 562), so `engine.events` and `engine.metrics` stay torch-free for
renderers and traces.
"""
import importlib

_EXPORTS = {
    "Engine": "engine.engine", "RunResult": "engine.engine", "GenerationConfig": "engine.config",
    "ModelLoadError": "engine.models", "load_model": "engine.models", "read_trace": "engine.events",
    "write_trace": "engine.events", "summarize": "engine.metrics",
}
__all__ = list(_EXPORTS)


def __getattr__(name):
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'engine' has no attribute {name!r}")
