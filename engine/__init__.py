"""specviz engine: speculative decoding as a stream of typed events (no UI code here).

    from engine import Engine, GenerationConfig
    eng = Engine.load(target="embedded", draft="self")
    for event in eng.generate("Write a haiku", GenerationConfig(gamma=4)):
        print(event.kind, event.round)
    result = eng.run("Write a haiku", GenerationConfig(gamma=4), compare_ar=True)

Names are imported lazily (PEP 562), so the plain modules at this level (config, events, validate,
metrics, costmodel, sizing, specs) stay torch-free for renderers and traces. The rooms below:
runtime/ (models, the KV cache, the lean forward), sampling/ (the acceptance rules), heads/ (trained
draft heads), drafters/ (one file per family), decode/ (the engine, the race, beam search).
"""

import importlib

_EXPORTS = {
    "Engine": "engine.decode.engine",
    "RunResult": "engine.decode.engine",
    "GenerationConfig": "engine.config",
    "ModelLoadError": "engine.specs",
    "load_model": "engine.runtime.models",
    "read_trace": "engine.events",
    "write_trace": "engine.events",
    "summarize": "engine.metrics",
}
__all__ = list(_EXPORTS)


def __getattr__(name):
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'engine' has no attribute {name!r}")
