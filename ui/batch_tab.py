"""The Batch tab's measured curve: the committed batched-throughput benchmark (benchmarks/results/batch-cpu.json, written by
`python -m benchmarks batch`), read once; the live batch itself runs through ui/handlers.batch_generate."""

from __future__ import annotations

import functools
import json
from pathlib import Path

import specviz
from specviz.markup import esc

RESULTS = Path(__file__).resolve().parent.parent / "benchmarks" / "results" / "batch-cpu.json"


@functools.lru_cache(maxsize=1)
def results() -> dict | None:
    try:
        return json.loads(RESULTS.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def figure():
    return specviz.throughput_figure(results())


def note() -> str:
    r = results()
    if r is None:
        return (
            '<p class="batch-roof">No batch benchmark is committed yet: run python -m benchmarks batch.</p>'
        )
    return (
        f'<p class="batch-source">Measured by <code>{esc(r["command"])}</code> on '
        f"{esc(r['cpu'])} ({r['threads']} threads, {r['max_new_tokens']} new tokens per row, medians "
        f"of {r['repeats']} interleaved repeats; benchmarks/results/batch-cpu.md).</p>"
        + specviz.roofline_note(r)
    )
