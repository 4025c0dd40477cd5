"""What every handler answers with, and what every run passes first: `prepare` (the public policy's checks, the
models loaded), a run's outputs by name (RunOutputs), status lines, refusals and failures, and a settled run's
outputs (its replay slider, its trace file for download)."""

from __future__ import annotations

import sys
import tempfile
from collections import namedtuple
from pathlib import Path

import gradio as gr

import ui.server  # noqa: F401  (first: it imports ZeroGPU's `spaces`, when present, before torch)
from engine import Engine, load_model
from engine.drafters.heads import heads_pending
from engine.runtime.models import EMBEDDED
from engine.specs import check_beams
from ui import app_guard as guard
from ui import app_views as av
from ui.server import GRADIO_CACHE, MAX_PROMPT_TOKENS, MAX_RUN_S, TRACE_FILES

ROUND_END = ("round_timed", "finished")  # the views refresh once per round
TRACE_DIR = Path(tempfile.gettempdir()) / "specviz-traces"  # trace files for the download button, pruned


def prepare(target: str, draft: str, prompt: str, raw: bool, num_beams: int = 1) -> tuple[str, str]:
    """Check the models (the public policy: allowlist, shipped heads only, sizing) and the prompt, load the target
    and build the drafter once (both cached). Returns the specs' normal forms, which the run then uses; any
    refusal, a load failure included, is a ValueError with the message for the user."""
    target, draft = av.check_allowed(target, draft)
    if num_beams > 1:
        check_beams(draft)  # before the drafter is built (a quant: copy costs a deep copy)
    guard.check_prompt(prompt, MAX_PROMPT_TOKENS)
    try:
        engine = Engine(load_model(target), draft)
    except OSError as e:
        raise ValueError(str(e)) from None
    guard.check_prompt_tokens(len(engine.encode(prompt, raw)), MAX_PROMPT_TOKENS, chars=len(prompt))
    return target, draft


def api_error(message: str) -> gr.Error:
    """An API refusal: the client gets the message; the log gets one line, not Gradio's traceback."""
    print(f"specviz: refused an API call: {message[:300]}", file=sys.stderr, flush=True)
    return gr.Error(message, print_exception=False)


def refused(message: str, outputs: int) -> tuple:
    """A UI refusal: one warning toast, and every output left as it was (the last good run stays)."""
    gr.Warning(message)
    return (gr.skip(),) * outputs


def time_limit_warning(lanes: dict) -> None:
    """A run the engine stopped at the time limit says so (what was generated stays)."""
    if any(
        evs and evs[-1].kind == "finished" and evs[-1].stop_reason == "time_limit" for evs in lanes.values()
    ):
        gr.Warning(f"run stopped at the {MAX_RUN_S:.0f} s limit per request")


def failure(e: Exception) -> str:
    """A run that broke (CUDA out of memory, ...) becomes a message; the server keeps serving."""
    try:
        import torch

        if torch.cuda.is_available():
            torch.cuda.empty_cache()
    except ImportError:
        pass
    return f"the run failed: {type(e).__name__}: {guard.public_error(e)[:300]}"


def trace_file(events) -> str | None:
    """Write the run's JSON trace under a fresh name for the download button (None when it cannot be written)."""
    if not events:
        return None
    try:
        return str(guard.write_trace_file(TRACE_DIR, events, TRACE_FILES, max_age_s=3600))
    except (OSError, ValueError) as e:
        gr.Warning(f"the trace could not be saved for download: {guard.public_error(e)}")
        return None
    finally:
        guard.prune_cache(GRADIO_CACHE, TRACE_FILES, max_age_s=3600)  # Gradio's copy of it, and older ones


def replay_slider(runs) -> dict:
    """The replay slider for a settled run: its whole range, at the last round."""
    rounds = guard.replay_rounds(runs)
    return gr.update(maximum=max(rounds, 1), value=rounds, interactive=rounds > 0)


def settled(state, cut_reason: str | None = "cancelled"):
    """Outputs once a run has ended (finished, cut or loaded): the compact state, slider, download, views.
    A run cut before its end (cut_reason: "time_limit", "cancelled") gets a Finished event saying so."""
    events = guard.unpack(state)
    if cut_reason is not None:
        events = guard.ended(events, cut_reason)
    packed = guard.pack(events)
    runs = guard.runs(packed)  # kept for the replay steps that follow
    slider = replay_slider(runs)
    return RunOutputs(
        packed, slider, gr.update(value=trace_file(events), interactive=bool(events)), *av.views(runs)
    )


# a run's outputs, by name: the session state, the replay slider, the download button and the views
RunOutputs = namedtuple("RunOutputs", ("state", "slider", "download", *av.VIEWS))
RUN_OUTPUTS = len(RunOutputs._fields)


def status_line(message: str) -> str:
    """A one-line status in the summary's place, where real work happens (a model load, a long prompt read)."""
    return f'<div class="specviz sv-summary sv-status" data-done="0">{av.esc(message)}</div>'


def status(message: str) -> RunOutputs:
    """Outputs that change only the summary line."""
    return RunOutputs(*[gr.skip()] * RUN_OUTPUTS)._replace(summary=status_line(message))


def heads_status(spec) -> str | None:
    """What the first run of a heads drafter (medusa, eagle, auto) waits for on the embedded target: reading the
    trained heads (seconds on a busy CPU); None once they are loaded."""
    path = heads_pending(spec, load_model(EMBEDDED))
    if path is None:
        return None
    try:
        size = f" ({path.stat().st_size / 1e6:.0f} MB)"
    except OSError:  # prepare() says what is missing
        size = ""
    return f"loading the trained draft heads{size}, first use only …"


def reading(event) -> str:
    """The status while the target reads a long prompt (a Prefilling event): the run can be stopped meanwhile."""
    return f"reading the prompt: {event.pos:,} of {event.total:,} positions …"


def refused_run(message: str, state) -> RunOutputs:
    """A refused run: one warning, the last run's views stay, its summary line back in place of any status."""
    return RunOutputs(*refused(message, RUN_OUTPUTS))._replace(summary=av.summary_html(guard.runs(state)))
