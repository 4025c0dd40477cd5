"""specviz engine: speculative decoding as a stream of typed events (no UI code here).

    from engine import Engine, GenerationConfig
    eng = Engine.load(target="embedded", draft="self")
    for event in eng.generate("Write a haiku", GenerationConfig(gamma=4)):
        print(event.kind, event.round)
    result = eng.run("Write a haiku", GenerationConfig(gamma=4), compare_ar=True)
"""
from .config import GenerationConfig
from .engine import Engine, RunResult
from .events import read_trace, write_trace
from .metrics import summarize
from .models import ModelLoadError, load_model

__all__ = ["Engine", "GenerationConfig", "RunResult", "ModelLoadError", "load_model", "read_trace",
           "write_trace", "summarize"]
