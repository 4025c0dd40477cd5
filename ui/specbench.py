"""The Spec-Bench tab: the committed CPU leaderboard (benchmarks/results/specbench-cpu.json, written by
`python -m benchmarks specbench`) and a picker that puts one of Spec-Bench's 480 questions in the prompt box,
with the race on, to race it live."""

from __future__ import annotations

import functools
import json
from pathlib import Path

import gradio as gr

from engine.specbench import load_questions
from specviz import render_leaderboard
from specviz.leaderboard import question_label
from ui.app_views import esc

BENCH = Path(__file__).resolve().parent.parent / "benchmarks" / "results"
RESULTS = BENCH / "specbench-cpu.json"  # the main run: every drafter of its time, transformers' rows
# each a run of its own (compare within one table only); specbench-host: the drafters on the GGUF's blocks with each
# round's host time (issue 64)
RUNS = (RESULTS, BENCH / "specbench-host.json", BENCH / "specbench-training-free.json")


@functools.lru_cache(maxsize=1)
def leaderboard_html() -> str:
    """One table per committed run, each with its own caption: ratios are measured within a run, never across."""
    out = []
    for path in RUNS:
        try:
            results = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            results = None
        if results is not None or path == RESULTS:
            out.append(render_leaderboard(results, source=f"benchmarks/results/{path.name}"))
    return "".join(out)


@functools.lru_cache(maxsize=1)
def questions() -> dict:
    """label -> question, in file order."""
    return {question_label(q): q for q in load_questions()}


def use_question(label):
    """The chosen question's first turn into the prompt box, the race on, and which category it is."""
    q = questions().get(label)
    if q is None:
        gr.Warning("choose a Spec-Bench question from the list first")
        return gr.skip(), gr.skip(), gr.skip()
    turns = (
        ""
        if len(q["turns"]) == 1
        else (
            f" It has {len(q['turns'])} turns; this puts in the first (the "
            "benchmark asks the second after the model's own first answer)."
        )
    )
    note = (
        f'<p class="sb-note" data-group="{esc(q["group"])}">Spec-Bench question #{esc(q["question_id"])}, '
        f"category <b>{esc(q['group'])}</b> ({esc(q['category'])}).{esc(turns)} Press Generate to race it.</p>"
    )
    return gr.update(value=q["turns"][0]), gr.update(value=True), note
