"""The "Your engine" tab: another engine's run on this page, two ways. A trace recorded from it (`python -m engine
record …`, docs/engines.md) loads through the trace loader (ui.replay.load_trace, wired in app.py), so every view
renders it. A metrics file or pasted metrics text (vLLM, SGLang, llama.cpp's server, TensorRT-LLM:
engine/serving/) shows its metrics views (specviz/engine_metrics.py) and the cost model's prediction for the
visitor's γ and costs, typed or from a GPU preset. A dropped metrics file's text goes into the text box, which is
what Read and predict reads. At most MAX_METRICS_BYTES are read, every number is taken within a stated range, and
anything else is refused naming the field; the last good views stay."""

from __future__ import annotations

import re
from pathlib import Path

import gradio as gr

from engine import serving as em
from engine.config import MAX_GAMMA
from specviz import empty_fig
from specviz import engine_metrics as ev
from ui import app_guard as guard
from ui.outputs import refused

TYPED = "typed"  # the costs choice that takes c and v as typed
KINDS = [("detect the engine", "auto")] + [
    (f"{r.engine}: {r.source}", kind) for kind, r in em.READERS.items()
]
COSTS = [("typed: c and v below", TYPED)] + [(f"{name}: its roofline", name) for name in em.GPUS]
GAMMA_LABEL = "Your γ (drafts per round)"
C_LABEL = "c: a draft step ÷ a target step"
V_LABEL = "v: t(γ + 1) ÷ t(1)"
POINTS_LABEL = "v(n) points, replacing v (n:v, …)"
TARGET_LABEL = "Target parameters (billions)"
DRAFT_LABEL = "Draft parameters (billions)"
MODEL_LABEL = "Model, where the metrics hold several (its model_name)"
MAX_MODEL_TEXT = 200  # characters of the model box
# each typed number's range: what the cost model can mean (a verify forward costs at least one step)
RANGES = {C_LABEL: (0, 10), V_LABEL: (1, 100), TARGET_LABEL: (0.001, 2000), DRAFT_LABEL: (0.0001, 2000)}
MAX_POINTS = 32
MAX_POINTS_TEXT = 400  # characters of the points box
POINT_N = (2, em.MAX_POSITIONS + 1)  # the verify sizes a point may name
HINT = (
    "Your engine's run here, two ways. **A trace** recorded from transformers or llama.cpp "
    "(`python -m engine record …`, docs/engines.md) replays in every view above. **Its metrics**: vLLM's or "
    "llama-server's `/metrics` text, or one JSON response (vLLM `metrics.speculative_decoding`, SGLang `meta_info`, "
    "llama-server `timings`, TensorRT-LLM `perf_metrics`): τ and the acceptance rate as that engine defines them, "
    "and what the cost model predicts at your γ and costs. Two scrapes pasted one after the other read as the "
    "window between them; `python -m engine metrics URL --watch 10 --out FILE` writes one from your server. A "
    "dropped file's text lands in the box below."
)


def bounded(label: str, value) -> float:
    """A typed number within its RANGES entry; else a ValueError naming the field and its range."""
    low, high = RANGES[label]
    if value is None:
        raise ValueError(f"{label} must be set, from {low:g} to {high:g}")
    x = guard.number(label, value)
    if not low <= x <= high:
        raise ValueError(f"{label} must be from {low:g} to {high:g}, got {x:g}")
    return x


def points_of(text: str) -> dict:
    """The v(n) points box: "n:v" items separated by commas or spaces; {} when empty."""
    if len(text or "") > MAX_POINTS_TEXT:
        raise ValueError(f"{POINTS_LABEL} takes at most {MAX_POINTS_TEXT} characters")
    items = [item for item in re.split(r"[,\s]+", (text or "").strip()) if item]
    if len(items) > MAX_POINTS:
        raise ValueError(f"{POINTS_LABEL} takes at most {MAX_POINTS} points, got {len(items)}")
    points = {}
    for item in items:
        n, _, v = item.partition(":")
        try:
            n, v = int(n), float(v)
        except ValueError:
            n, v = None, None
        if (
            n is None
            or not POINT_N[0] <= n <= POINT_N[1]
            or not RANGES[V_LABEL][0] <= v <= RANGES[V_LABEL][1]
        ):
            raise ValueError(
                f"{POINTS_LABEL}: {guard.shown(item)} is not n:v (n a whole number from {POINT_N[0]} to "
                f"{POINT_N[1]}, v a number from {RANGES[V_LABEL][0]} to {RANGES[V_LABEL][1]})"
            )
        points[n] = v
    return points


def costs_of(choice: str, gamma: int, c, v, points: str, target_b, draft_b) -> em.Costs:
    """The costs the prediction uses: typed (c, and v at γ + 1 or the v(n) points) or a GPU preset's roofline."""
    if choice == TYPED:
        typed = points_of(points) or {gamma + 1: bounded(V_LABEL, v)}
        return em.Costs(c=bounded(C_LABEL, c), points=tuple(sorted(typed.items())))
    if choice not in em.GPUS:
        raise ValueError(f"Costs must be typed or one of {', '.join(em.GPUS)}, got {guard.shown(choice)}")
    target, draft = bounded(TARGET_LABEL, target_b) * 1e9, bounded(DRAFT_LABEL, draft_b) * 1e9
    return em.preset_costs(em.GPUS[choice], target, draft)


def file_text(path) -> str:
    """A dropped metrics file's text: at most MAX_METRICS_BYTES (refused unread past it), UTF-8."""
    if not path:
        raise ValueError("no file uploaded")
    size = Path(path).stat().st_size
    if size > em.MAX_METRICS_BYTES:
        raise ValueError(
            f"metrics file is {size / 2**10:,.0f} KiB; the limit is {em.MAX_METRICS_BYTES / 2**10:,.0f} KiB"
        )
    try:
        return Path(path).read_bytes().decode("utf-8")
    except UnicodeDecodeError:
        raise ValueError("metrics file is not UTF-8 text") from None


def show_metrics(text, kind, gamma, costs, c, v, points, target_b, draft_b, model=""):
    """The metrics views (specviz.engine_metrics.VIEWS, in order) of the text in the box (the model named, where it
    holds several: the first, the others listed), or one warning naming what is wrong (the views shown stay)."""
    try:
        if not (text or "").strip():
            raise ValueError("nothing to read: drop a metrics file or paste its text")
        if len(model or "") > MAX_MODEL_TEXT:
            raise ValueError(f"{MODEL_LABEL} takes at most {MAX_MODEL_TEXT} characters")
        run = em.read_metrics(text, kind, (model or "").strip() or None)
        gamma = guard.check_gamma(gamma, MAX_GAMMA)
        views = ev.render(run, gamma, costs_of(costs, gamma, c, v, points, target_b, draft_b))
    except (ValueError, OSError) as e:
        return refused(f"cannot read metrics: {guard.public_error(e)}", len(ev.VIEWS))
    return tuple(views[name] for name in ev.VIEWS)


def show_upload(path, kind, gamma, costs, c, v, points, target_b, draft_b, model=""):
    """A dropped file: its text goes into the box (what Read and predict reads again, with other settings), the
    drop zone empties for the next file, and its views are drawn."""
    try:
        text = file_text(path)
    except (ValueError, OSError) as e:
        return (None, gr.skip(), *refused(f"cannot read metrics: {guard.public_error(e)}", len(ev.VIEWS)))
    return (None, text, *show_metrics(text, kind, gamma, costs, c, v, points, target_b, draft_b, model))


def trace_drop():
    """The drop zone for a recorded trace (app.py wires it to the trace loader)."""
    return gr.File(
        label="A trace recorded from your engine (python -m engine record …)",
        file_types=[".json"],
        type="filepath",
        height=110,
        elem_id="engine-trace-upload",
    )


def engine_section():
    """The tab's components, its metrics events wired; returns the trace drop zone for app.py to wire."""
    gr.Markdown(HINT, elem_classes="sv-engine-hint")
    trace = trace_drop()
    with gr.Row():
        drop = gr.File(
            label="Its metrics: a file (/metrics text, or a JSON response)",
            file_types=[".prom", ".txt", ".json"],
            type="filepath",
            height=110,
            elem_id="metrics-upload",
            scale=1,
        )
        pasted = gr.Textbox(
            label="…or paste the metrics text", lines=5, max_lines=12, elem_id="metrics-paste", scale=2
        )
    with gr.Row():
        kind = gr.Dropdown(KINDS, value="auto", label="Read as", elem_id="metrics-kind", min_width=200)
        gamma = gr.Slider(
            1, MAX_GAMMA, value=4, step=1, label=GAMMA_LABEL, elem_id="metrics-gamma", min_width=200
        )
        costs = gr.Dropdown(COSTS, value=TYPED, label="Costs", elem_id="metrics-costs", min_width=200)
        model = gr.Textbox("", label=MODEL_LABEL, elem_id="metrics-model", min_width=200)
    with gr.Row():
        c = gr.Number(0.05, label=C_LABEL, elem_id="metrics-c", min_width=120)
        v = gr.Number(1.1, label=V_LABEL, elem_id="metrics-v", min_width=120)
        points = gr.Textbox("", label=POINTS_LABEL, elem_id="metrics-points", min_width=160)
        target_b = gr.Number(8, label=TARGET_LABEL, elem_id="metrics-target-b", min_width=120)
        draft_b = gr.Number(1, label=DRAFT_LABEL, elem_id="metrics-draft-b", min_width=120)
    read = gr.Button("Read and predict", variant="primary", elem_id="metrics-read")
    summary = gr.HTML("", elem_id="metrics-summary")
    with gr.Row():
        positions = gr.Plot(
            empty_fig("Acceptance by draft position", "load metrics"), elem_id="metrics-positions"
        )
        hist = gr.Plot(
            empty_fig("Verify steps by drafts accepted", "load metrics"), elem_id="metrics-histogram"
        )
    with gr.Row():
        by_gamma = gr.Plot(
            empty_fig("What if: speedup against γ", "load metrics"), elem_id="metrics-whatif-gamma"
        )
        by_alpha = gr.Plot(
            empty_fig("What if: speedup against α", "load metrics"), elem_id="metrics-whatif-alpha"
        )
    settings = [kind, gamma, costs, c, v, points, target_b, draft_b, model]
    outputs = [summary, positions, hist, by_gamma, by_alpha]  # specviz.engine_metrics.VIEWS order
    light = dict(api_visibility="private", show_progress="minimal")  # pure Python, bounded: the default queue
    read.click(show_metrics, [pasted, *settings], outputs, api_name="read_metrics", **light)
    drop.upload(show_upload, [drop, *settings], [drop, pasted, *outputs], api_name="upload_metrics", **light)
    return trace
