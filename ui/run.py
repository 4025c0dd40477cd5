"""Generate: the run streamed round by round (stream_events, generate), its first step answered at once (the
visitor's place in line, or the start-up recording without one), and the buttons between runs. app.py wires them;
each is a few lines: check the input, call the engine, hand its events to specviz, yield the outputs by name."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
import threading
import time
from pathlib import Path

import gradio as gr

import ui.server  # noqa: F401  (first: it imports ZeroGPU's `spaces`, when present, before torch)
from engine import Engine, GenerationConfig, load_model
from engine.drafters.suffix import History
from engine.events import write_trace
from engine.figures import plural
from engine.specs import parse_draft
from specviz.runs import RunSet
from ui import app_guard as guard
from ui import app_views as av
from ui.controls import Controls
from ui.outputs import (
    ROUND_END,
    RUN_OUTPUTS,
    RunOutputs,
    failure,
    heads_status,
    prepare,
    reading,
    refused_run,
    replay_slider,
    settled,
    status,
    status_line,
    time_limit_warning,
)
from ui.server import CONCURRENCY, MAX_RUN_S, gpu

CHARTS_EVERY_S = 1.0  # plotly figures are slower to build than the HTML views: refresh them less often
# the start-up recording's trace: one file in a folder of this process's own (two servers on one host, as the tests
# run them, each serve their own recording), removed at exit
RECORDING_DIR = Path(tempfile.gettempdir()) / f"specviz-recording-{os.getpid()}"
atexit.register(shutil.rmtree, RECORDING_DIR, ignore_errors=True)


@gpu
def stream_events(target: str, draft: str, cfg: GenerationConfig, prompt: str, race: bool, history=None):
    """(lane, event) of the speculative run, interleaved round by round with the AR baseline's when racing; a
    drafter that reads the session's history (suffix, auto) drafts from it, and the run joins it. (On ZeroGPU the
    worker gets a copy: the history then does not grow.)"""
    engine = Engine(load_model(target), draft)
    if race:
        yield from engine.race(prompt, cfg, history=history)
    else:  # watched like a race's lane: its summary says how much CPU other work took while it computed
        yield from engine.watched(prompt, cfg, history=history)


def generate(controls: Controls, state=None, history: History | None = None):
    """Stream a run: yield the views once per round, then settle the replay slider and the trace. `history`: the
    session's earlier runs (session_history)."""
    try:
        target, draft, cfg = controls.settings(MAX_RUN_S)
        spec = parse_draft(draft)
        # the embedded model is loaded at start-up
        if target != "embedded" or spec.model or spec.name == "quant":
            yield status(f"loading {target} and its drafter (first use only) …")
        elif (heads := heads_status(spec)) is not None:
            yield status(heads)
        target, draft = prepare(target, draft, controls.prompt, cfg.raw)
    except ValueError as e:
        yield refused_run(str(e), state)
        return
    # the run's events, folded once as they arrive; the first charts come after CHARTS_EVERY_S (building five
    # figures before the first token would hold it back ~0.2 s), or with the finished run
    runs, charts_at, shown = RunSet(), time.monotonic(), False
    try:
        for lane, event in stream_events(target, draft, cfg, controls.prompt, controls.race, history):
            if event.kind == "prefilling":  # progress, not part of the run's record; a Stop lands here too
                yield RunOutputs(*[gr.skip()] * RUN_OUTPUTS) if shown else status(reading(event))
                continue
            runs.add(event, lane)
            if event.kind in ROUND_END:  # HTML views every round; the charts at most every CHARTS_EVERY_S
                charts = time.monotonic() - charts_at >= CHARTS_EVERY_S
                charts_at = time.monotonic() if charts else charts_at
                views, shown = av.views(runs, figures=charts), True
                yield RunOutputs(
                    runs, gr.update(), gr.update(), *(gr.update() if v is None else v for v in views)
                )
    except ValueError as e:  # empty prompt, context too long
        yield refused_run(str(e), state)
        return
    except RuntimeError as e:  # e.g. torch.cuda.OutOfMemoryError: keep what was generated
        gr.Warning(failure(e))
        yield settled(runs, "cancelled")
        return
    time_limit_warning(runs.segments)
    yield settled(runs, None)  # the engine ended every lane with its Finished


def generate_from(*values):
    """Gradio's entry for the run button: the components' values in Controls order, then the session's run and
    its history."""
    *controls, state, history = values
    yield from generate(Controls.of(controls), state, history if isinstance(history, History) else None)


def running_buttons(line: str = ""):
    """While a run streams: Generate disabled, Stop live and red; and, when the server is busy, the visitor's place
    in line in the summary's place (`line`: ui/fair_queue.py line_status), until their run's first frame."""
    waiting = status_line(
        f"Waiting for a free slot: {line} ({plural(CONCURRENCY, 'run')} at once on this server) …"
    )
    return (
        gr.update(interactive=False, value="Generating …"),
        gr.update(interactive=True, variant="stop"),
        waiting if line else gr.skip(),
    )


# the default example's run, recorded at start-up on this host (ui/warmup.py record_example): its Controls and the
# outputs the page shows for it; a Generate with exactly those controls shows it without a queue place, and a second
# Generate of the same (the recording on screen) runs it live
RECORDED: dict = {}


def start_run(line: str, *values):
    """Generate's first step, answered at once (no queue place): the recording when the controls are the default
    example's and it is not already on screen (then `served` is True and the live run is skipped), else the busy
    buttons and the visitor's place in line. Outputs: the buttons, served, then RunOutputs."""
    *controls, state = values
    rec = RECORDED.get("outputs")
    try:
        same = rec is not None and Controls.of(controls) == RECORDED["controls"]
    except TypeError:  # not the page's own values: the run's own check answers them
        same = False
    if same and not (isinstance(state, bytes) and state == rec.state):
        return (*idle_buttons(), True, *served_recording())
    run, stop, summary = running_buttons(line)
    return (run, stop, False, *RunOutputs(*[gr.skip()] * RUN_OUTPUTS)._replace(summary=summary))


# a room pressing Generate at once: one writes the recording's trace, the others wait for it
_RECORDING_LOCK = threading.Lock()


def served_recording() -> RunOutputs:
    """The recording's outputs for one visitor: fresh updates each time (Gradio changes an update dict as it sends
    it), its trace file written again if it is gone (RECORDING_DIR is not pruned, but a temp folder may be): whole
    before any visitor is given it (written beside it, then renamed), once however many ask at the same moment."""
    rec = RECORDED["outputs"]
    with _RECORDING_LOCK:
        path = RECORDED.get("trace")
        if path is None or not Path(path).exists():
            RECORDING_DIR.mkdir(parents=True, exist_ok=True)
            path = str(RECORDING_DIR / "specviz-trace-recorded.json")
            part = f"{path}.part"
            write_trace(part, guard.unpack(rec.state))
            os.replace(part, path)
            RECORDED["trace"] = path
    return rec._replace(
        slider=replay_slider(guard.runs(rec.state)), download=gr.update(value=path, interactive=True)
    )


def live_or_served(served: bool):
    """Generate's second step: ends the chain (an invisible error: the run's .success does not fire) when the
    recording was served."""
    if served:
        raise gr.Error("the start-up recording was shown", visible=False, print_exception=False)


def recorded_note(cpu: str, when: str) -> str:
    """The line above a served recording's summary: what it is, and how to run it live."""
    return (
        f'<div class="specviz sv-recorded" data-recorded="1">Recorded at start-up on this host ({av.esc(cpu)}, '
        f"{av.esc(when)}), so a room of visitors does not queue for the same run: press Generate again to run it "
        f"live.</div>"
    )


def idle_buttons():
    """Between runs: Generate live, Stop greyed out."""
    return gr.update(interactive=True, value="Generate"), gr.update(interactive=False, variant="secondary")
