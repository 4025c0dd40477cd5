"""specviz: pure renderers for speculative decoding events (events -> HTML strings, plotly figures).

Imports only engine.events and engine.metrics (plain Python); never torch or gradio. The HTML uses
class names and data attributes only: load assets/specviz.css and assets/specviz.js in the page
(`CSS_PATH`, `JS_PATH`, or `head_html()`).
"""

from __future__ import annotations

from pathlib import Path

from .batch_view import batch_summary_html, roofline_note, throughput_figure
from .batch_view import lanes_html as render_batch_lanes
from .beams import render_beams, running_best_text
from .charts import (
    accepted_length_fig,
    empty_fig,
    position_acceptance_fig,
    running_acceptance_fig,
    speedup_model_fig,
    throughput_fig,
)
from .explain import render_explain
from .leaderboard import render_leaderboard
from .race import render_race, verdict
from .replay import events_upto, replay_frame, rounds_of, time_at_round
from .runs import RoundView, RunView, measured_speedup, spec_summary, split_runs, view_run, view_runs
from .tokens import render_legend, render_stream
from .tree import Node, render_tree, round_nodes
from .verify import render_verify

ASSETS_DIR = Path(__file__).resolve().parent.parent / "assets"
CSS_PATH = ASSETS_DIR / "specviz.css"
JS_PATH = ASSETS_DIR / "specviz.js"


def head_html() -> str:
    """<style> + <script> with the assets inlined, for `demo.launch(head=...)` or a gr.HTML `head`."""
    return (
        f"<style>{CSS_PATH.read_text(encoding='utf-8')}</style>\n"
        f"<script>{JS_PATH.read_text(encoding='utf-8')}</script>"
    )


__all__ = [
    "render_stream",
    "render_legend",
    "render_batch_lanes",
    "batch_summary_html",
    "throughput_figure",
    "roofline_note",
    "render_beams",
    "running_best_text",
    "render_tree",
    "render_verify",
    "render_race",
    "render_explain",
    "render_leaderboard",
    "verdict",
    "accepted_length_fig",
    "position_acceptance_fig",
    "running_acceptance_fig",
    "throughput_fig",
    "speedup_model_fig",
    "empty_fig",
    "rounds_of",
    "events_upto",
    "time_at_round",
    "replay_frame",
    "split_runs",
    "view_run",
    "view_runs",
    "spec_summary",
    "measured_speedup",
    "RunView",
    "RoundView",
    "Node",
    "round_nodes",
    "ASSETS_DIR",
    "CSS_PATH",
    "JS_PATH",
    "head_html",
]
