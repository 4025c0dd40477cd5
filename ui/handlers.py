"""The app's handlers: what each button, slider and API call does. Each is a few lines: check the input,
call the engine, hand its events to specviz, yield the outputs (by name: RunOutputs). app.py wires them.
"""

from __future__ import annotations

try:  # ZeroGPU on Hugging Face Spaces; must be imported before torch
    import spaces
except ImportError:
    spaces = None

import ctypes
import ctypes.util
import dataclasses
import functools
import inspect
import os
import sys
import tempfile
import threading
import time
from collections import OrderedDict, namedtuple
from pathlib import Path

# the app's own Gradio cache (uploads, served downloads): ui/uploads.py may then prune all of it, oldest first
os.environ.setdefault("GRADIO_TEMP_DIR", str(Path(tempfile.gettempdir()) / "specviz-gradio"))

import gradio as gr  # noqa: E402  (after GRADIO_TEMP_DIR: Gradio reads it)
import gradio.utils as gradio_utils  # noqa: E402

import specviz
from engine import Engine, GenerationConfig, load_model
from engine.config import MAX_BATCH, MAX_GAMMA
from engine.decode.drift import drift_job
from engine.drafters.heads import heads_pending
from engine.drafters.suffix import MAX_HISTORY_TOKENS, History
from engine.events import write_trace
from engine.figures import plural
from engine.runtime.models import EMBEDDED
from engine.specs import check_beams, parse_draft
from specviz.drift import drift_progress_html, sampled_drift_html
from specviz.runs import RunSet
from ui import app_guard as guard
from ui import app_views as av
from ui.controls import TRACE_SETS, Controls
from ui.uploads import Limits, scope_identity

ROUND_END = ("round_timed", "finished")  # the views refresh once per round
CHARTS_EVERY_S = 1.0  # plotly figures are slower to build than the HTML views: refresh them less often
TRACE_DIR = Path(tempfile.gettempdir()) / "specviz-traces"  # trace files for the download button, pruned
RECORDING_DIR = Path(tempfile.gettempdir()) / "specviz-recording"  # the start-up recording's trace (one file)
GRADIO_CACHE = Path(gradio_utils.get_upload_folder())  # Gradio's own copies of uploads and served downloads


def upload_folder() -> str:
    """Where Gradio puts uploads (ui/uploads.py bounds it)."""
    return str(GRADIO_CACHE)


# Limits of the shared server, each set by an environment variable (README: "Bad input and limits").
MAX_RUN_S = float(os.environ.get("SPECVIZ_MAX_RUN_S", "180"))  # a run (or a Play) is cut after this long
UPLOAD_LIMITS = Limits()  # what uploads may put on disk (ui/uploads.py: SPECVIZ_MAX_UPLOAD_MB and the others)


def client_of(scope) -> str:
    """Who a request comes from: its socket address, or behind a proxy named in SPECVIZ_TRUSTED_PROXIES the hop
    that proxy appended (ui/uploads.py); the queue's per-address rule and the upload limits use the same."""
    return scope_identity(scope, UPLOAD_LIMITS.trusted)


MAX_PROMPT_TOKENS = int(os.environ.get("SPECVIZ_MAX_PROMPT_TOKENS", "2048"))  # prompt tokens per run
# a session's run is dropped after this idle time
STATE_TTL_S = float(os.environ.get("SPECVIZ_STATE_TTL_S", "1800"))
# sessions kept in memory; the oldest go first
MAX_SESSIONS = int(os.environ.get("SPECVIZ_MAX_SESSIONS", "32"))
# a session's earlier prompts and outputs kept for suffix speculation (and auto) to draft from: one per visitor,
# never shared, 8 bytes a token at rest (engine/drafters/suffix.py); 0 keeps none
HISTORY_TOKENS = int(os.environ.get("SPECVIZ_HISTORY_TOKENS", str(MAX_HISTORY_TOKENS)))
# runs, API calls, trace loads and Plays at once
CONCURRENCY = int(os.environ.get("SPECVIZ_CONCURRENCY", "2"))
# trace files kept in TRACE_DIR (and < 1 h old)
TRACE_FILES = int(os.environ.get("SPECVIZ_TRACE_FILES", "64"))
COMPUTE = dict(concurrency_id="compute", concurrency_limit=CONCURRENCY)  # one queue for every compute handler
# ZeroGPU: a GPU lease covers the app's own run limit, plus a minute for loading and the AR probe
gpu = spaces.GPU(duration=int(MAX_RUN_S) + 60) if spaces is not None else (lambda fn: fn)


LARGE_BLOCK = 4 * 2**20  # bytes from which glibc maps a block on its own and returns it to the OS when freed


@functools.lru_cache(maxsize=1)
def _libc():
    """glibc, loaded once, or None (another C library: its own policy applies)."""
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name) if name else None
    except OSError:
        return None
    return libc if libc is not None and hasattr(libc, "mallopt") and hasattr(libc, "malloc_trim") else None


def return_large_blocks() -> None:
    """At start-up: every allocation of LARGE_BLOCK or more gets its own mapping, returned to the OS when freed.
    glibc's default raises that threshold to the largest block freed so far (up to 32 MiB), after which a B = 8 beam
    search's cache rows (~16 MiB a layer) came from the heap and stayed there: +1.3 GB after one search."""
    libc = _libc()
    if libc is not None:
        libc.mallopt(-3, LARGE_BLOCK)  # M_MMAP_THRESHOLD; setting it also fixes it (no dynamic raise)


def release_memory() -> None:
    """After a large job (a beam search, a batch): the heap's free pages back to the OS (malloc_trim)."""
    libc = _libc()
    if libc is not None:
        libc.malloc_trim(0)


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


def session_history() -> History | None:
    """A new visitor's history (the page's gr.State calls it once per session); None when SPECVIZ_HISTORY_TOKENS
    is 0. Checked at start-up: a value out of range stops the server with its name and range."""
    if not 0 <= HISTORY_TOKENS <= MAX_HISTORY_TOKENS:
        raise ValueError(
            f"SPECVIZ_HISTORY_TOKENS must be between 0 and {MAX_HISTORY_TOKENS}, got {HISTORY_TOKENS}"
        )
    return History(max_tokens=HISTORY_TOKENS) if HISTORY_TOKENS else None


def forget_history(history) -> History | None:
    """Forget my history: the session's history emptied (a fresh one), said in a toast with what was dropped."""
    if not isinstance(history, History) or not history.runs:
        gr.Info("Your session has no earlier runs to forget.")
    else:
        n = len(history.runs)
        gr.Info(
            f"Forgot {plural(n, 'earlier run')} ({plural(history.tokens, 'token')}): the next run drafts from its "
            "own text only."
        )
    return session_history()


@gpu
def stream_events(target: str, draft: str, cfg: GenerationConfig, prompt: str, race: bool, history=None):
    """(lane, event) of the speculative run, interleaved round by round with the AR baseline's when racing; a
    drafter that reads the session's history (suffix, auto) drafts from it, and the run joins it. (On ZeroGPU the
    worker gets a copy: the history then does not grow.)"""
    engine = Engine(load_model(target), draft)
    if race:
        yield from engine.race(prompt, cfg, history=history)
    else:
        for event in engine.generate(prompt, cfg, history=history):
            yield "speculative", event


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


DRIFT_SAMPLES = int(os.environ.get("SPECVIZ_DRIFT_SAMPLES", "100"))  # seeded 2-token runs per rule (1..2000)
DRIFT_EVERY_S = 1.0  # the meter's progress line is redrawn at most this often
# (target, draft, prompt, settings) -> the exact rule's draws, seed order
EXACT_DRAWS: OrderedDict = OrderedDict()
EXACT_DRAWS_KEPT = 16  # the newest settings' draws are kept (each at most 2,000 pairs of ids)
EXACT_LOCK = threading.Lock()


@gpu
def measure_drift(*controls):
    """The sampled drift meter for the current settings, as a bounded job (engine/decode/drift.py): the first two
    tokens' law under the chosen rule and under the exact rule, up to DRIFT_SAMPLES seeded runs each, against the
    target's exact law. A progress line while it runs; it ends at MAX_RUN_S with what it has (its n said), and a
    visitor who leaves stops it at the next run. The exact rule's draws are kept for the next measurement."""
    try:
        c = Controls.of(controls)
        target, draft, cfg = c.settings(MAX_RUN_S)
        if cfg.greedy:
            raise ValueError(
                "the sampled drift meter needs Temperature above 0 (Sampling: from 0.05 to 2); at 0 a run is "
                "greedy, and its drift is in the race"
            )
        if not 1 <= DRIFT_SAMPLES <= 2000:
            raise ValueError(f"SPECVIZ_DRIFT_SAMPLES must be between 1 and 2000, got {DRIFT_SAMPLES}")
        target, draft = prepare(target, draft, c.prompt, cfg.raw)
        engine = Engine(load_model(target), draft, measure_step=False)  # no step probe after each 2-token run
        key = (target, draft, c.prompt, repr(dataclasses.replace(cfg, accept="exact", time_limit_s=None)))
        job = drift_job(
            engine,
            c.prompt,
            cfg,
            DRIFT_SAMPLES,
            deadline=time.monotonic() + MAX_RUN_S,
            exact_draws=EXACT_DRAWS.get(key, []).copy(),
        )
        shown_at = 0.0
        for report in job:
            if report["final"]:
                break
            if time.monotonic() - shown_at >= DRIFT_EVERY_S:
                shown_at = time.monotonic()
                yield drift_progress_html(report, MAX_RUN_S)
    except ValueError as e:
        gr.Warning(str(e))
        yield gr.skip()
        return
    with EXACT_LOCK:  # two meters may end at once
        EXACT_DRAWS[key] = report["exact_draws"]
        EXACT_DRAWS.move_to_end(key)
        while len(EXACT_DRAWS) > EXACT_DRAWS_KEPT:
            EXACT_DRAWS.popitem(last=False)
    if report["stopped"] == "time_limit":
        gr.Warning(
            f"the drift meter stopped at the {MAX_RUN_S:g} s limit per request (SPECVIZ_MAX_RUN_S) after "
            f"{report['done']} of {report['of']} seeded runs per rule"
        )
    yield sampled_drift_html(report)


def generate_from(*values):
    """Gradio's entry for the run button: the components' values in Controls order, then the session's run and
    its history."""
    *controls, state, history = values
    yield from generate(Controls.of(controls), state, history if isinstance(history, History) else None)


def api_generate(
    prompt: str,
    draft: str = "ngram",
    gamma: int = 4,
    max_new_tokens: int = 48,
    temperature: float = 0.0,
    seed: int = 0,
    target: str = EMBEDDED,
    num_beams: int = 1,
) -> tuple[str, str]:
    """Stream (text so far, summary JSON) once per round; the last pair is the finished run, or the
    text committed before the time limit with stop_reason "time_limit".

    num_beams 2..8 runs speculative beam search (greedy; draft ngram[:N] or self): the text so far is the
    best-scoring running beam, the summary adds every finished hypothesis with its score.

    The return hint names what each yield carries: gr.api derives the endpoint's outputs from it.

    A generator, so a client that cancels or disconnects closes the run and frees its slot.
    """
    try:
        args = guard.api_arguments(
            prompt,
            draft,
            gamma,
            max_new_tokens,
            temperature,
            seed,
            target,
            av.MAX_NEW_TOKENS,
            MAX_PROMPT_TOKENS,
            num_beams,
        )
        cfg = GenerationConfig(
            **av.config_kwargs(
                args["gamma"], "fixed", 0.0, args["temperature"], 0, 1.0, args["seed"], args["max_new_tokens"]
            ),
            time_limit_s=MAX_RUN_S,
            num_beams=args["num_beams"],
        )
        target, draft = prepare(target, draft, prompt, cfg.raw, cfg.num_beams)
    except ValueError as e:
        raise api_error(str(e)) from None
    events, special = [], frozenset(getattr(load_model(target).tokenizer, "all_special_ids", None) or ())
    try:
        for _, event in stream_events(target, draft, cfg, prompt, False):
            if event.kind == "prefilling":  # nothing to show yet; a client that leaves stops the run here
                yield "", ""
                continue
            events.append(event)
            if event.kind == "round_timed":
                yield (
                    (
                        specviz.running_best_text(events)
                        if cfg.num_beams > 1
                        else text_so_far(events, special)
                    ),
                    "",
                )
    except ValueError as e:
        raise api_error(str(e)) from None
    except RuntimeError as e:
        raise api_error(failure(e)) from None
    yield av.api_result(events, cut_reason="time_limit")


def fill_api_defaults(inputs: list) -> None:
    """/generate's arguments as a raw client sent them, completed in place with api_generate's defaults (every
    argument after the prompt is optional); no prompt at all is refused by name."""
    if not inputs:
        raise api_error(
            "prompt is required: /generate takes (prompt, draft, gamma, max_new_tokens, temperature, "
            "seed, target, num_beams), every argument after the prompt optional"
        )
    params = list(inspect.signature(api_generate).parameters.values())
    inputs.extend(p.default for p in params[len(inputs) :])


# others (State, Api): "any"
INPUT_KIND = (
    (gr.Slider, "number"),
    (gr.Number, "number"),
    (gr.Checkbox, "bool"),
    (gr.Textbox, "text"),
    (gr.Dropdown, "choice"),
    (gr.File, "file"),
    (gr.Dataset, "index"),
)
# characters of any text input (the batch's prompts)
MAX_TEXT = MAX_BATCH * MAX_PROMPT_TOKENS * guard.CHARS_PER_TOKEN


def input_label(block) -> str:
    """How a refusal names an input: its label, else its element id, else its kind."""
    return getattr(block, "label", None) or getattr(block, "elem_id", None) or type(block).__name__.lower()


RANGE_SET_BY_RUN = ("round",)  # sliders whose maximum each run sets (the replay round: the handler clamps it)


def input_spec(block) -> dict:
    """What the page itself may send for `block` (app_guard.check_input's spec): a number's range, a dropdown's
    choices, a gallery's size, whether None is one of its values."""
    if isinstance(block, (gr.Slider, gr.Number)):
        high = None if block.elem_id in RANGE_SET_BY_RUN else block.maximum
        return {"low": block.minimum, "high": high, "null": isinstance(block, gr.Number)}
    if isinstance(block, gr.Dropdown):
        choices = [c[1] if isinstance(c, (tuple, list)) else c for c in block.choices or []]
        return {"choices": choices, "custom": bool(block.allow_custom_value), "null": block.value is None}
    if isinstance(block, gr.Dataset):
        return {"count": len(block.samples or [])}
    if isinstance(block, gr.Textbox):
        return {"null": block.value is None}
    return {}


def check_endpoint_inputs(block_fn, inputs: list) -> None:
    """Every endpoint's inputs as a client sent them, checked by kind before Gradio reads them (app_guard.check_inputs):
    a missing, extra, null, non-finite, out-of-range, not-a-choice, invalid-text or wrong-type argument is refused
    with its setting's name and at most a short prefix of the value, never `error: null`."""
    wanted = [
        (
            next((kind for cls, kind in INPUT_KIND if isinstance(block, cls)), "any"),
            input_label(block),
            input_spec(block),
        )
        for block in block_fn.inputs
    ]
    try:
        guard.check_inputs(block_fn.api_name or block_fn.name, wanted, inputs, MAX_TEXT)
    except ValueError as e:
        raise api_error(str(e)) from None


def text_so_far(events, special: frozenset) -> str:
    """The committed text as the final reply will read it: special tokens (<|im_end|>) are left out, as the
    engine's decode(skip_special_tokens=True) leaves them out of the finished text."""
    return "".join(
        t for e in events if e.kind == "committed" for i, t in zip(e.token_ids, e.tokens) if i not in special
    )


def show_round(state, r):
    """The views at replay round r."""
    return av.views(guard.runs(state), int(r))


def step(state, r, delta):
    events = guard.runs(state)
    r = min(max(int(r) + delta, 0), guard.replay_rounds(events))
    return (r, *av.views(events, r))


def select_round(state, choice, r):
    """The verify view of the round the user picked (a click in the stream or tree, or the view's own arrows),
    as it stood at the replay round r."""
    try:
        picked = int(str(choice).split(":")[0])  # "12: …", a round's label: not a drafter name
    except ValueError:
        return gr.skip()
    events = guard.runs(state)
    cut = av.events_upto(events, None if r is None or int(r) >= guard.replay_rounds(events) else int(r))
    return av.render_verify(cut, picked)


def load_trace(path):
    """Replay a saved trace without any model, the controls (TRACE_SETS, in that order) set to what it ran
    with. A bad file is one warning; the last good run and the controls stay. A generator: it yields a status
    between reading the trace and drawing its views, so a visitor who leaves stops it there."""
    keep = (gr.skip(),) * len(TRACE_SETS)
    if not path:
        yield (*refused("no file uploaded", RUN_OUTPUTS + 1), *keep)
        return
    try:
        events = av.load_trace(path)  # read and validated (bounded: MAX_TRACE_BYTES)
        yield (*status(f"drawing the trace's {len(events):,} events …"), gr.skip(), *keep)
        values = av.controls_of(events)
        controls = tuple(
            gr.update(value=values[name]) if name in values else gr.skip() for name in TRACE_SETS
        )
        yield (*settled(events, cut_reason=None), None, *controls)  # None empties the drop zone
    except (ValueError, OSError, RecursionError) as e:
        yield (*refused(f"cannot load trace: {guard.public_error(e)}", RUN_OUTPUTS), None, *keep)
    finally:  # the file is Gradio's copy (or another session's): never deleted here; our served copies are bounded
        guard.prune_cache(GRADIO_CACHE, TRACE_FILES, max_age_s=3600)


def loaded(path) -> tuple:
    """load_trace's last outputs (what the page shows once it has ended)."""
    *_, last = load_trace(path)
    return last


def pair_changed(pair):
    """Hub pairs default to their preset draft model; the embedded pair to n-gram lookup."""
    return gr.update(value="ngram" if pair == av.EMBEDDED_PAIR else av.PRESET_DRAFT)


def pair_note_changed(pair):
    """The chosen pair's note (what to expect from it), hidden when it has none."""
    note = av.pair_note(pair)
    return gr.update(value=note, visible=bool(note))


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


def served_recording() -> RunOutputs:
    """The recording's outputs for one visitor: fresh updates each time (Gradio changes an update dict as it sends
    it), its trace file written again if it is gone (RECORDING_DIR is not pruned, but a temp folder may be)."""
    rec, path = RECORDED["outputs"], RECORDED.get("trace")
    if path is None or not Path(path).exists():
        RECORDING_DIR.mkdir(parents=True, exist_ok=True)
        path = str(RECORDING_DIR / "specviz-trace-recorded.json")
        write_trace(path, guard.unpack(rec.state))
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


def beam_generate(pair, drafter, param, gamma, max_new, num_beams, race, prompt):
    """Stream the beam view once per round (see specviz/beams.py); a bad setting is one warning."""
    try:
        target, draft = av.model_specs(pair, drafter, param)
        guard.beam_drafter(draft)  # the page's words: where the Drafter control is
        cfg = GenerationConfig(
            gamma=guard.check_gamma(gamma, MAX_GAMMA),
            max_new_tokens=int(max_new),
            num_beams=int(num_beams),
            time_limit_s=MAX_RUN_S,
        )
        target, draft = prepare(target, draft, prompt, cfg.raw, cfg.num_beams)
        lanes = {"speculative": [], "ar": []}
        note = beam_note(int(num_beams))
        for lane, event in stream_events(target, draft, cfg, prompt, bool(race)):  # cfg.num_beams routes it
            if event.kind == "prefilling":
                yield gr.skip(), status_line(reading(event))
                continue
            lanes[lane].append(event)
            if event.kind in ROUND_END:
                yield specviz.render_beams(lanes["speculative"], lanes["ar"]), note
    except (ValueError, RuntimeError) as e:
        gr.Warning(failure(e) if isinstance(e, RuntimeError) else str(e))
        yield gr.skip(), gr.skip()
        return
    time_limit_warning(lanes)
    yield specviz.render_beams(lanes["speculative"], lanes["ar"]), note
    release_memory()


BATCH_EXAMPLE = (
    "Copy this sentence exactly: the quick brown fox jumps over the lazy dog.\n"
    "List the numbers from 1 to 20, separated by commas.\n"
    "Write a haiku about the sea.\n"
    "Explain in two sentences why the sky is blue."
)


def batch_prompts(text) -> list[str]:
    """The Batch tab's prompts, one per non-empty line; refused (naming the setting and its range) when there are
    none or more than MAX_BATCH, or when one is too long for the server."""
    from_lines = [line.strip() for line in str(text or "").splitlines() if line.strip()]
    if not 1 <= len(from_lines) <= MAX_BATCH:
        raise ValueError(
            f"Batch prompts: write 1 to {MAX_BATCH} prompts, one per line (B = the number of lines); "
            f"got {len(from_lines)}"
        )
    for line in from_lines:
        guard.check_prompt(line, MAX_PROMPT_TOKENS)
    return from_lines


@gpu
def stream_batch(target: str, draft: str, cfg: GenerationConfig, prompts: list, race: bool):
    """(lane, event) of the batched speculative run and, when racing, the AR batch of the same prompts, interleaved
    round by round (engine/decode/race.py's rule: the lane behind in its share of the work goes next)."""
    engine = Engine(load_model(target), draft)
    ids = [engine.encode(p, cfg.raw) for p in prompts]
    for row, prompt in zip(ids, prompts):
        guard.check_prompt_tokens(len(row), MAX_PROMPT_TOKENS, chars=len(prompt))
    if race:
        yield from engine.race_batch(ids, cfg)
    else:
        for event in engine.generate_batch(None, cfg, prompt_ids=ids):
            yield "speculative", event


def batch_generate(pair, drafter, param, gamma, max_new, prompts_text, race):
    """Stream the Batch tab's lanes and its summary once per round; a bad setting is one warning."""
    try:
        prompts = batch_prompts(prompts_text)
        target, draft = av.model_specs(pair, drafter, param)
        cfg = GenerationConfig(
            gamma=guard.check_gamma(gamma, MAX_GAMMA), max_new_tokens=int(max_new), time_limit_s=MAX_RUN_S
        )
        target, draft = prepare(target, draft, prompts[0], cfg.raw)
        lanes = {"speculative": [], "ar": []}
        for lane, event in stream_batch(target, draft, cfg, prompts, bool(race)):
            if event.kind == "prefilling":
                yield gr.skip(), status_line(f"{lane} batch: {reading(event)}")
                continue
            lanes[lane].append(event)
            if event.kind in ("batch_round", "batch_finished"):
                yield specviz.render_batch_lanes(lanes["speculative"]), specviz.batch_summary_html(lanes)
    except (ValueError, RuntimeError) as e:
        gr.Warning(failure(e) if isinstance(e, RuntimeError) else str(e))
        yield gr.skip(), gr.skip()
        return
    time_limit_warning({k: [e for e in v if e.kind == "finished"] for k, v in lanes.items()})
    release_memory()


def beam_note(num_beams: int) -> str:
    """The summary line while the Beam search tab shows a beam run: what the stream below it still holds."""
    return (
        f'<div class="specviz sv-summary" data-beam="1">Beam search, B = {num_beams}: its beams, scores and race '
        "are in the Beam search tab · the stream, tree and charts below still show the last single-sequence "
        "run</div>"
    )


def step_back(state, r):
    """◀ Prev: one round back."""
    return step(state, r, -1)


def step_on(state, r):
    """Next ▶: one round on."""
    return step(state, r, +1)


def drafter_changed(drafter: str):
    """γ is auto's own choice under auto: the slider greys out and says so."""
    # "" clears it
    return gr.update(
        interactive=drafter != "auto", info="auto chooses γ each round" if drafter == "auto" else ""
    )


def adaptive_changed(adaptive: str):
    """p_min matters only under the confidence rule."""
    return gr.update(interactive=adaptive.startswith("confidence"))
