"""docs/engines.md's complete examples run as pasted and write a trace the page loads."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BLOCK = re.compile(r"```python\n(.*?)```", re.S)


def examples() -> list[str]:
    return BLOCK.findall((ROOT / "docs" / "engines.md").read_text(encoding="utf-8"))


def test_the_page_has_an_example_for_transformers():
    assert any("engine.recorders.hf" in code for code in examples())


@pytest.mark.slow
@pytest.mark.parametrize("code", examples(), ids=lambda code: re.search(r"recorders\.(\w+)", code)[1])
def test_an_example_runs_as_pasted_and_writes_a_trace_the_page_loads(code, tmp_path):
    if "llama_cpp" in code and importlib.util.find_spec("llama_cpp") is None:
        pytest.skip("llama-cpp-python is not installed (make peer builds it)")
    from ui import app_views as av

    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-2000:]
    traces = sorted(tmp_path.glob("*.json"))
    assert traces, "the example wrote no trace"
    for trace in traces:
        events = av.load_trace(trace)
        assert events[0].engine, "a recorded trace names the engine that produced it"
        assert av.views(events).stream.count('class="tok') > 0
