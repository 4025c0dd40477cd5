"""specviz app: a Gradio UI that streams a speculative decoding run round by round, replays it, and
saves / loads its trace. This file only wires components to handlers; the engine makes events,
specviz.app_views turns them into view outputs.

    python app.py   # serves on GRADIO_SERVER_NAME:GRADIO_SERVER_PORT (default 127.0.0.1:7860)
"""
from __future__ import annotations

try:  # ZeroGPU on Hugging Face Spaces; must be imported before torch
    import spaces
except ImportError:
    spaces = None

import functools
import gc
import os
import tempfile
import time
from pathlib import Path

import gradio as gr
import httpx

import specviz
from engine import Engine, GenerationConfig, load_model
from engine.models import EMBEDDED
from specviz import app_guard as guard
from specviz import app_views as av
from specviz.runs import RunSet

ROUND_END = ("round_timed", "finished")  # the views refresh once per round
CHARTS_EVERY_S = 1.0  # plotly figures are slower to build than the HTML views: refresh them less often
APP_CSS = Path(__file__).resolve().parent / "assets" / "app.css"
TRACE_DIR = Path(tempfile.gettempdir()) / "specviz-traces"  # trace files for the download button, pruned
# Limits of the shared server, each set by an environment variable (README: "Bad input and limits").
MAX_RUN_S = float(os.environ.get("SPECVIZ_MAX_RUN_S", "180"))  # a run (or a Play) is cut after this long
MAX_UPLOAD_MB = float(os.environ.get("SPECVIZ_MAX_UPLOAD_MB", "6"))  # uploads above this are refused unread
MAX_PROMPT_TOKENS = int(os.environ.get("SPECVIZ_MAX_PROMPT_TOKENS", "2048"))  # prompt tokens per run
STATE_TTL_S = float(os.environ.get("SPECVIZ_STATE_TTL_S", "1800"))  # a session's run is dropped after this idle time
MAX_SESSIONS = int(os.environ.get("SPECVIZ_MAX_SESSIONS", "32"))  # sessions kept in memory; the oldest go first
CONCURRENCY = int(os.environ.get("SPECVIZ_CONCURRENCY", "2"))  # runs, API calls, trace loads and Plays at once
TRACE_FILES = int(os.environ.get("SPECVIZ_TRACE_FILES", "64"))  # trace files kept in TRACE_DIR (and < 1 h old)
COMPUTE = dict(concurrency_id="compute", concurrency_limit=CONCURRENCY)  # one queue for every compute handler
# ZeroGPU: a GPU lease covers the app's own run limit, plus a minute for loading and the AR probe
gpu = spaces.GPU(duration=int(MAX_RUN_S) + 60) if spaces is not None else (lambda fn: fn)


def parse_controls(pair, drafter, param, gamma, adaptive, p_min, temperature, top_k, top_p, seed, max_new,
                   tree_budget=0, tree_branching=2):
    """(target, draft, GenerationConfig) from the controls; ValueError with the engine's message if invalid."""
    target, draft = av.model_specs(pair, drafter, param)
    return target, draft, GenerationConfig(**av.config_kwargs(gamma, adaptive, p_min, temperature, top_k, top_p,
                                                               seed, max_new, tree_budget, tree_branching),
                                           time_limit_s=MAX_RUN_S)


def prepare(target: str, draft: str, prompt: str, raw: bool) -> None:
    """Check the models and the prompt, load the target and build the drafter once (both cached):
    any refusal, a load failure included, is a ValueError with the message for the user."""
    av.check_allowed(target, draft)
    guard.check_prompt(prompt, MAX_PROMPT_TOKENS)
    try:
        engine = Engine(load_model(target), draft)
    except OSError as e:
        raise ValueError(str(e)) from None
    guard.check_prompt_tokens(len(engine.encode(prompt, raw)), MAX_PROMPT_TOKENS)


def refused(message: str, outputs: int) -> tuple:
    """A UI refusal: one warning toast, and every output left as it was (the last good run stays)."""
    gr.Warning(message)
    return (gr.skip(),) * outputs


@gpu
def stream_events(target: str, draft: str, cfg: GenerationConfig, prompt: str, race: bool):
    """(lane, event) of the speculative run, interleaved round by round with the AR baseline's when racing."""
    engine = Engine(load_model(target), draft)
    if race:
        yield from engine.race(prompt, cfg)
    else:
        for event in engine.generate(prompt, cfg):
            yield "speculative", event


def time_limit_warning(lanes: dict) -> None:
    """A run the engine stopped at the time limit says so (what was generated stays)."""
    if any(evs and evs[-1].kind == "finished" and evs[-1].stop_reason == "time_limit" for evs in lanes.values()):
        gr.Warning(f"run stopped at the {MAX_RUN_S:.0f} s limit per request")


def failure(e: Exception) -> str:
    """A run that broke (CUDA out of memory, ...) becomes a message; the server keeps serving."""
    try:
        import torch

        if torch.cuda.is_available():
            torch.cuda.empty_cache()
    except ImportError:
        pass
    return f"the run failed: {type(e).__name__}: {str(e)[:300]}"


def trace_file(events) -> str | None:
    """Write the run's JSON trace under a fresh name for the download button (None when it cannot be written)."""
    if not events:
        return None
    try:
        return str(guard.write_trace_file(TRACE_DIR, events, TRACE_FILES, max_age_s=3600))
    except OSError as e:
        gr.Warning(f"the trace could not be saved for download: {e}")
        return None


def settled(state, cut_reason: str | None = "cancelled"):
    """Outputs once a run has ended (finished, cut or loaded): the compact state, slider, download, views.
    A run cut before its end (cut_reason: "time_limit", "cancelled") gets a Finished event saying so."""
    events = guard.unpack(state)
    if cut_reason is not None:
        events = guard.ended(events, cut_reason)
    packed = guard.pack(events)
    runs = guard.runs(packed)  # kept for the replay steps that follow
    rounds = guard.replay_rounds(runs)
    slider = gr.update(maximum=max(rounds, 1), value=rounds, interactive=rounds > 0)
    return (packed, slider, gr.update(value=trace_file(events), interactive=bool(events)), *av.views(runs))


RUN_OUTPUTS = 3 + len(av.VIEWS)  # state, slider, download and the views


SUMMARY = av.VIEWS.index("summary") + 3  # the summary's place among the run outputs


def status(message: str) -> tuple:
    """Outputs that change only the summary line: a one-line status where real work happens (a model load)."""
    out = [gr.skip()] * RUN_OUTPUTS
    out[SUMMARY] = f'<div class="specviz sv-summary sv-status" data-done="0">{av.esc(message)}</div>'
    return tuple(out)


def refused_run(message: str, state) -> tuple:
    """A refused run: one warning, the last run's views stay, its summary line back in place of any status."""
    out = list(refused(message, RUN_OUTPUTS))
    out[SUMMARY] = av.summary_html(guard.runs(state))
    return tuple(out)


def generate(pair, drafter, param, gamma, adaptive, p_min, temperature, top_k, top_p, seed, max_new, tree_budget,
             tree_branching, race, prompt, state=None):
    """Stream a run: yield the views once per round, then settle the replay slider and the trace."""
    try:
        target, draft, cfg = parse_controls(pair, drafter, param, gamma, adaptive, p_min, temperature, top_k, top_p,
                                            seed, max_new, tree_budget, tree_branching)
        if target != "embedded" or draft.startswith(("model:", "quant")):  # the embedded model is loaded at start-up
            yield status(f"loading {target} and its drafter (first use only) …")
        prepare(target, draft, prompt, cfg.raw)
    except ValueError as e:
        yield refused_run(str(e), state)
        return
    # the run's events, folded once as they arrive; the first charts come after CHARTS_EVERY_S (building five
    # figures before the first token would hold it back ~0.2 s), or with the finished run
    runs, charts_at = RunSet(), time.monotonic()
    try:
        for lane, event in stream_events(target, draft, cfg, prompt, race):
            runs.add(event, lane)
            if event.kind in ROUND_END:  # HTML views every round; the charts at most every CHARTS_EVERY_S
                charts = time.monotonic() - charts_at >= CHARTS_EVERY_S
                charts_at = time.monotonic() if charts else charts_at
                views = (gr.update() if v is None else v for v in av.views(runs, figures=charts))
                yield (runs, gr.update(), gr.update(), *views)
    except ValueError as e:  # empty prompt, context too long
        yield refused_run(str(e), state)
        return
    except RuntimeError as e:  # e.g. torch.cuda.OutOfMemoryError: keep what was generated
        gr.Warning(failure(e))
        yield settled(runs, "cancelled")
        return
    time_limit_warning(runs.segments)
    yield settled(runs, None)  # the engine ended every lane with its Finished


def api_generate(prompt: str, draft: str = "ngram", gamma: int = 4, max_new_tokens: int = 48,
                 temperature: float = 0.0, seed: int = 0, target: str = EMBEDDED,
                 num_beams: int = 1) -> tuple[str, str]:
    """Stream (text so far, summary JSON) once per round; the last pair is the finished run, or the
    text committed before the time limit with stop_reason "time_limit".

    num_beams 2..8 runs speculative beam search (greedy; draft ngram[:N] or self): the text so far is the
    best-scoring running beam, the summary adds every finished hypothesis with its score.

    The return hint names what each yield carries: gr.api derives the endpoint's outputs from it.

    A generator, so a client that cancels or disconnects closes the run and frees its slot.
    """
    try:
        args = guard.api_arguments(prompt, draft, gamma, max_new_tokens, temperature, seed, target,
                                   av.MAX_NEW_TOKENS, MAX_PROMPT_TOKENS, num_beams)
        cfg = GenerationConfig(**av.config_kwargs(args["gamma"], "fixed", 0.0, args["temperature"], 0, 1.0,
                                                  args["seed"], args["max_new_tokens"]), time_limit_s=MAX_RUN_S,
                               num_beams=args["num_beams"])
        prepare(target, draft, prompt, cfg.raw)
    except ValueError as e:
        raise gr.Error(str(e)) from None
    events = []
    try:
        for _, event in stream_events(target, draft, cfg, prompt, False):
            events.append(event)
            if event.kind == "round_timed":
                yield (specviz.running_best_text(events) if cfg.num_beams > 1
                       else "".join(t for e in events if e.kind == "committed" for t in e.tokens)), ""
    except ValueError as e:
        raise gr.Error(str(e)) from None
    except RuntimeError as e:
        raise gr.Error(failure(e)) from None
    yield av.api_result(events, cut_reason="time_limit")


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
        picked = int(str(choice).split(":")[0])
    except ValueError:
        return gr.skip()
    events = guard.runs(state)
    cut = av.events_upto(events, None if r is None or int(r) >= guard.replay_rounds(events) else int(r))
    return av.render_verify(cut, picked)


def play(state, r, speed):
    """Step the slider to the end, waiting each round's measured wall time ÷ speed. Bounded work: at most
    the rounds present in the run, and no longer than MAX_RUN_S."""
    events = guard.runs(state)
    total = guard.replay_rounds(events)
    delays = av.round_delays(events, speed)
    start, deadline = (0 if int(r) >= total else int(r)), time.monotonic() + MAX_RUN_S
    for k in range(start + 1, total + 1):
        if time.monotonic() > deadline:
            gr.Warning(f"replay stopped at the {MAX_RUN_S:g} s limit per request (SPECVIZ_MAX_RUN_S)")
            return
        time.sleep(delays.get(k, 0.1))
        yield (k, *av.views(events, k))


CONTROL_NAMES = ("pair", "drafter", "param", "gamma", "adaptive", "temperature", "top_k", "top_p", "seed", "max_new",
                 "tree_budget", "tree_branching")  # the controls a loaded trace sets (av.controls_of)


def load_trace(path):
    """Replay a saved trace without any model, the controls set to what it ran with. A bad file is one
    warning; the last good run and the controls stay."""
    keep = (gr.skip(),) * len(CONTROL_NAMES)
    if not path:
        return (*refused("no file uploaded", RUN_OUTPUTS + 1), *keep)
    try:
        events = av.load_trace(path)
        values = av.controls_of(events)
        controls = tuple(gr.update(value=values[name]) if name in values else gr.skip() for name in CONTROL_NAMES)
        return (*settled(events, cut_reason=None), None, *controls)  # None empties the drop zone
    except (ValueError, OSError, RecursionError) as e:
        return (*refused(f"cannot load trace: {e}", RUN_OUTPUTS), None, *keep)
    finally:
        Path(path).unlink(missing_ok=True)  # read or refused: the upload is not kept on disk


def pair_changed(pair):
    """Hub pairs default to their preset draft model; the embedded pair to n-gram lookup."""
    return gr.update(value="ngram" if pair == av.EMBEDDED_PAIR else av.PRESET_DRAFT)


TOUR_TRACE = Path(__file__).resolve().parent / "assets" / "tour-trace.json"  # a recorded n-gram run (make_tour.py)
TOUR_ROUND = 2  # the round the captions walk through: 4 drafted, the 4th rejected
TOUR = [  # (round shown, caption, seconds on screen): the guided first minute
    (1, "Round 1: nothing in the prompt matches the text so far yet, so the target makes one plain step (grey).", 3.5),
    (2, "① The drafter (n-gram lookup: no model) finds the text so far in the prompt and proposes the γ = 4 tokens "
        "that followed it there.", 4.5),
    (2, "② The target checks all 4 drafts in ONE forward pass. The verify view below shows, per drafted token, the "
        "draft's q and the target's p: greedy decoding accepts a draft when it is the target's top choice.", 5.5),
    (2, "③ The first draft that fails (struck through, ✗) is rejected; anything drafted after it would be "
        "discarded unseen.", 4.5),
    (2, "④ The target's cache already holds the rejected position: moving its length pointer back drops it in O(1), "
        "no copying.", 4.5),
    (2, "⑤ The target's own token (orange ↺, corrected) is committed in its place: 4 tokens for one target forward. "
        "When all drafts pass, the same forward adds a bonus token (+).", 5.5),
    (None, "The remaining rounds: most accept every draft and commit 5 tokens per target forward. That is the "
           "speedup: verifying 5 tokens costs about as much as generating 1.", 0.7),
]


@functools.lru_cache(maxsize=1)
def tour_runs():
    """The tour's recorded run, packed and folded once."""
    return guard.pack(av.load_trace(TOUR_TRACE))


def tour_caption(text: str, step: int | None, done: bool = False) -> str:
    counter = f'<span class="sv-tour-step">{step}/{len(TOUR)}</span>' if step else ""
    return (f'<div class="specviz sv-tour" data-done="{int(done)}" data-step="{step or 0}" role="status" '
            f'aria-live="polite">{counter}<span class="sv-tour-text">{av.esc(text)}</span></div>')


TOUR_END = "Now try your own prompt: pick an example or type one and press Generate. Click any token to verify its round."


def tour(request: gr.Request = None):
    """The guided first minute: the recorded run plays round by round with captions, no click and no model.
    ?tour=0 in the page address turns it off."""
    if request is not None and request.query_params.get("tour") == "0":
        yield (gr.skip(),) * (RUN_OUTPUTS + 1)
        return
    packed = tour_runs()
    runs = guard.runs(packed)
    total = guard.replay_rounds(runs)
    for step, (r, text, wait) in enumerate(TOUR, 1):
        rounds = [r] if r is not None else range(TOUR_ROUND + 1, total + 1)
        for k in rounds:
            yield (packed, gr.update(maximum=total, value=k, interactive=True), gr.skip(), *av.views(runs, k),
                   tour_caption(text, step))
            time.sleep(wait)
    yield (*tour_end(), )


def tour_end():
    """The tour skipped or over: the whole recorded run on screen and the hand-over caption."""
    packed = tour_runs()
    runs = guard.runs(packed)
    total = guard.replay_rounds(runs)
    return (packed, gr.update(maximum=total, value=total, interactive=True), gr.skip(), *av.views(runs),
            tour_caption(TOUR_END, None, done=True))


def running_buttons():
    """While a run streams: Generate disabled, Stop live and red."""
    return gr.update(interactive=False, value="Generating …"), gr.update(interactive=True, variant="stop")


def idle_buttons():
    """Between runs: Generate live, Stop greyed out."""
    return gr.update(interactive=True, value="Generate"), gr.update(interactive=False, variant="secondary")


OUTPUT_ONLY_JS = "(on) => { const s = document.querySelector('#stream'); if (s) s.classList.toggle('sv-output-only', on); }"


def beam_generate(pair, drafter, param, gamma, max_new, num_beams, race, prompt):
    """Stream the beam view once per round (see specviz/beams.py); a bad setting is one warning."""
    try:
        target, draft = av.model_specs(pair, drafter, param)
        cfg = GenerationConfig(gamma=int(gamma), max_new_tokens=int(max_new), num_beams=int(num_beams),
                               time_limit_s=MAX_RUN_S)
        prepare(target, draft, prompt, cfg.raw)
        lanes = {"speculative": [], "ar": []}
        for lane, event in stream_events(target, draft, cfg, prompt, bool(race)):  # cfg.num_beams routes it
            lanes[lane].append(event)
            if event.kind in ROUND_END:
                yield specviz.render_beams(lanes["speculative"], lanes["ar"])
    except (ValueError, RuntimeError) as e:
        gr.Warning(failure(e) if isinstance(e, RuntimeError) else str(e))
        yield gr.skip()
        return
    yield specviz.render_beams(lanes["speculative"], lanes["ar"])


def beam_section(pair, drafter, param, gamma, max_new, prompt) -> None:
    """The beam-search tab: width, race, a button and the beam view; it reuses the main controls."""
    with gr.Row():
        num_beams = gr.Slider(2, 8, value=3, step=1, label="Beams B", elem_id="num-beams", scale=2)
        beam_race = gr.Checkbox(True, label="Race plain beam search of the same width", elem_id="beam-race", scale=2)
        beam_btn = gr.Button("Beam search", variant="primary", elem_id="beam-run", scale=1)
    gr.Markdown("Exact beam search (transformers' definition, length penalty 1, early stopping off). Each beam's "
                "drafter (ngram or self) proposes γ tokens; one target forward verifies every beam's draft and "
                "the search replays while the beams it keeps stay on drafted paths. Same beams, same scores.")
    view = gr.HTML(specviz.render_beams([]), elem_id="beams")
    beam_btn.click(beam_generate, [pair, drafter, param, gamma, max_new, num_beams, beam_race, prompt], [view],
                   show_progress="minimal", api_name="beam", api_visibility="private", **COMPUTE)


def pair_note_changed(pair):
    """The chosen pair's note (what to expect from it), hidden when it has none."""
    note = av.pair_note(pair)
    return gr.update(value=note, visible=bool(note))


def build_demo() -> gr.Blocks:
    with gr.Blocks(title="specviz: speculative decoding debugger", delete_cache=(3600, 3600)) as demo:
        events = gr.State([], time_to_live=STATE_TTL_S)  # the session's run: a RunSet while streaming, packed bytes once settled
        gr.Markdown("# specviz\nWatch speculative decoding round by round: the draft proposes γ tokens, "
                    "the target verifies them in one forward, and you see what was accepted, rejected and why.",
                    elem_classes="sv-header")
        with gr.Row(equal_height=False, elem_classes="sv-layout"):
            with gr.Column(scale=1, min_width=280, elem_classes="sv-controls"):
                pair = gr.Dropdown(av.pair_choices(), value=av.EMBEDDED_PAIR, label="Model pair (draft → target)")
                pair_note = gr.Markdown("", visible=False, elem_id="pair-note")
                with gr.Row():
                    drafter = gr.Dropdown(list(av.DRAFTERS), value="ngram", label="Drafter", scale=2, min_width=120)
                    param = gr.Number(0, precision=0, minimum=0, label="n / L (0 = default)", scale=1, min_width=100,
                                      info="ngram n, layerskip layers")
                gamma = gr.Slider(1, 16, value=4, step=1, label="γ (draft tokens per round)", elem_id="gamma")
                with gr.Row():
                    adaptive = gr.Dropdown(list(av.ADAPTIVE), value="fixed", label="Adaptive γ", min_width=120)
                    p_min = gr.Slider(0, 0.95, value=0.4, step=0.05, label="p_min (confidence)", interactive=False,
                                      min_width=120)
                max_new = gr.Slider(1, av.MAX_NEW_TOKENS, value=48, step=1, label="Max new tokens", elem_id="max-new")
                race = gr.Checkbox(False, label="Race against autoregressive (both lanes run interleaved, side by side)")
                with gr.Accordion("Sampling", open=False):
                    temperature = gr.Slider(0, 2, value=0, step=0.05, label="Temperature (0 = greedy)")
                    with gr.Row():
                        top_k = gr.Number(0, precision=0, minimum=0, label="top-k (0 = off)", min_width=100)
                        top_p = gr.Slider(0.05, 1, value=1, step=0.05, label="top-p", min_width=120)
                    seed = gr.Number(0, precision=0, label="Seed",
                                     info="a seeded run repeats exactly, except with auto: its choices follow "
                                          "measured time")
                with gr.Accordion("Tree speculation", open=False, elem_id="tree-controls"):
                    with gr.Row():
                        tree_budget = gr.Slider(0, 64, value=0, step=1, label="Node budget (0 = chain)",
                                                elem_id="tree-budget", info="draft nodes per round; depth = γ",
                                                min_width=120)
                        tree_branching = gr.Slider(1, 8, value=2, step=1, label="Branching",
                                                   elem_id="tree-branching", info="children tried per node",
                                                   min_width=120)
                with gr.Accordion("Trace", open=True):
                    download = gr.DownloadButton("Download trace (JSON)", interactive=False, size="sm",
                                                  elem_id="download")
                    upload = gr.File(label="Load a trace to replay (no model needed)", file_types=[".json"],
                                     type="filepath", height=110, elem_id="trace-upload")
            with gr.Column(scale=3, min_width=300, elem_classes="sv-main"):
                prompt = gr.Textbox(label="Prompt", lines=4, elem_id="prompt",
                                    placeholder="Ask something, or paste text to copy, edit or extract from")
                with gr.Row(elem_classes="sv-buttons"):
                    run_btn = gr.Button("Generate", variant="primary", elem_id="generate", min_width=120)
                    stop_btn = gr.Button("Stop", variant="secondary", elem_id="stop", interactive=False, min_width=80)
                gr.Examples([[p, d] for _, p, d, _ in av.EXAMPLES], [prompt, drafter],
                            example_labels=[label for label, _, _, _ in av.EXAMPLES],
                            label="Examples", elem_id="examples")
                gr.HTML(av.examples_html(), elem_id="expect")
                summary = gr.HTML(av.summary_html([]), elem_id="summary")
                with gr.Row(elem_classes="sv-tour-row", equal_height=True):
                    tour_html = gr.HTML(tour_caption("", None, done=True), elem_id="tour")
                    skip_btn = gr.Button("Skip the tour", size="sm", scale=0, min_width=110, elem_id="tour-skip")
                    replay_tour_btn = gr.Button("▶ Replay the tour", size="sm", scale=0, min_width=130,
                                                elem_id="tour-replay")
                gr.HTML(specviz.render_legend())
                output_only = gr.Checkbox(False, label="Show output only (hide drafts)", elem_id="output-only",
                                          container=False)
                stream = gr.HTML(specviz.render_stream([]), elem_id="stream")
                with gr.Row(elem_classes="sv-replay", equal_height=True):
                    prev_btn = gr.Button("◀ Prev", size="sm", min_width=70, scale=0, elem_id="prev")
                    play_btn = gr.Button("▶ Play", size="sm", min_width=70, scale=0, elem_id="play")
                    pause_btn = gr.Button("Pause", size="sm", min_width=60, scale=0, elem_id="pause")
                    next_btn = gr.Button("Next ▶", size="sm", min_width=70, scale=0, elem_id="next")
                    slider = gr.Slider(0, 1, value=0, step=1, label="Replay round", interactive=False,
                                       elem_id="round", scale=4, min_width=160)
                    speed = gr.Dropdown([0.25, 0.5, 1.0, 2.0, 4.0], value=1.0, label="Speed ×", scale=1,
                                        min_width=90)
                selected = gr.Textbox(visible="hidden", elem_id="sv-select", container=False)
                with gr.Tabs():
                    with gr.Tab("Verify", elem_id="tab-verify"):
                        verify = gr.HTML(specviz.render_verify([]), elem_id="verify")
                    with gr.Tab("Tree", elem_id="tab-tree"):
                        tree = gr.HTML(specviz.render_tree([]), elem_id="tree")
                    with gr.Tab("Charts", elem_id="tab-charts"):
                        with gr.Row():
                            fig_len = gr.Plot(label="accepted length", min_width=300)
                            fig_pos = gr.Plot(label="by position", min_width=300)
                        with gr.Row():
                            fig_run = gr.Plot(label="running α", min_width=300)
                            fig_tput = gr.Plot(label="throughput", min_width=300)
                        fig_speedup = gr.Plot(label="predicted speedup")
                    with gr.Tab("Race", elem_id="tab-race"):
                        race_html = gr.HTML(specviz.render_race([]), elem_id="race")
                    with gr.Tab("Explain", elem_id="tab-explain"):
                        explain = gr.HTML(specviz.render_explain([]), elem_id="explain")
                    with gr.Tab("Beam search", elem_id="tab-beams"):
                        beam_section(pair, drafter, param, gamma, max_new, prompt)

        view_outs = [stream, tree, race_html, explain, summary, verify, fig_len, fig_pos, fig_run, fig_tput, fig_speedup]
        controls = [pair, drafter, param, gamma, adaptive, p_min, temperature, top_k, top_p, seed, max_new, tree_budget,
                    tree_branching, race, prompt]
        hidden = dict(show_progress="hidden", api_visibility="private")
        run_event = run_btn.click(running_buttons, None, [run_btn, stop_btn], queue=False, **hidden).then(
            generate, controls + [events], [events, slider, download, *view_outs], api_name="run", **hidden,
            **COMPUTE)
        run_event.then(idle_buttons, None, [run_btn, stop_btn], queue=False, **hidden)
        # Stop cancels the run first, then settles what it generated: settling in the same click would race
        # the run's last frames, which then overwrite the "stopped" views.
        stop_btn.click(lambda: None, None, None, cancels=[run_event], queue=False, api_visibility="private").then(
            settled, [events], [events, slider, download, *view_outs], api_name="stop", **hidden).then(
            idle_buttons, None, [run_btn, stop_btn], queue=False, **hidden)
        slider.input(show_round, [events, slider], view_outs, trigger_mode="always_last", **hidden)
        prev_btn.click(lambda ev, r: step(ev, r, -1), [events, slider], [slider, *view_outs], **hidden)
        next_btn.click(lambda ev, r: step(ev, r, +1), [events, slider], [slider, *view_outs], api_name="next",
                       **hidden)
        play_event = play_btn.click(play, [events, slider, speed], [slider, *view_outs], api_name="play", **hidden,
                                    **COMPUTE)
        pause_btn.click(None, cancels=[play_event], api_visibility="private")
        selected.change(select_round, [events, selected, slider], [verify], trigger_mode="always_last", **hidden)
        load_controls = [pair, drafter, param, gamma, adaptive, temperature, top_k, top_p, seed, max_new, tree_budget,
                         tree_branching]
        upload.upload(load_trace, [upload], [events, slider, download, *view_outs, upload, *load_controls],
                      api_name="load_trace", api_visibility="private", **COMPUTE)
        pair.change(pair_changed, [pair], [drafter], api_visibility="private")
        drafter.change(lambda d: gr.update(interactive=d != "auto",
                                           info="auto chooses γ each round" if d == "auto" else None),
                       [drafter], [gamma], api_visibility="private")
        pair.change(pair_note_changed, [pair], [pair_note], api_visibility="private")
        adaptive.change(lambda a: gr.update(interactive=a.startswith("confidence")), [adaptive], [p_min],
                        api_visibility="private")
        output_only.change(None, [output_only], None, js=OUTPUT_ONLY_JS, api_visibility="private")
        gr.api(api_generate, api_name="generate", **COMPUTE)
        tour_outs = [events, slider, download, *view_outs, tour_html]
        light = dict(concurrency_id="tour", concurrency_limit=16, **hidden)  # sleeps, no model: its own queue
        tour_event = demo.load(tour, None, tour_outs, **light)
        replay_event = replay_tour_btn.click(tour, None, tour_outs, **light)
        tours = [tour_event, replay_event]
        skip_btn.click(lambda: None, None, None, cancels=tours, queue=False, api_visibility="private").then(
            tour_end, None, tour_outs, **hidden)
        for button in (run_btn, prev_btn, next_btn, play_btn):  # the user takes over: the tour stops where it is
            button.click(lambda: tour_caption("", None, done=True), None, [tour_html], cancels=tours, queue=False,
                         **hidden)
        upload.upload(lambda: tour_caption("", None, done=True), None, [tour_html], cancels=tours, queue=False,
                      **hidden)
    return demo


def warm_up() -> None:
    """Load the embedded model and run a few tokens through every path the first Generate takes (the engine's
    lean forward, n-gram drafting, verification, the AR baseline, the renderers and plotly), so the first
    visitor's first token comes as fast as later ones."""
    engine = Engine(load_model(EMBEDDED), "ngram")
    cfg = GenerationConfig(gamma=4, max_new_tokens=6)
    runs = RunSet()
    for lane, event in engine.race("Repeat: the cat sat on the mat. The cat sat", cfg):
        runs.add(event, lane)
    av.views(runs)


WARM_RUN = [av.EMBEDDED_PAIR, "ngram", 0, 4, "fixed", 0.4, 0, 0, 1, 0, 8, 0, 2, False,
            "Repeat: the cat sat on the mat. The cat sat", None]  # generate()'s inputs: 8 tokens, n-gram, γ = 4


def warm_queue(demo: gr.Blocks) -> None:
    """One short Generate through the server's own queue once it serves, so that Gradio's event path, its worker
    threads and the streamed response are used first here, not on the first visitor's Generate. Best effort."""
    session = f"specviz-warm-up-{os.getpid()}"
    fn = next(d["id"] for d in demo.config["dependencies"] if d.get("api_name") == "run")
    body = {"data": WARM_RUN, "fn_index": fn, "session_hash": session, "event_data": None, "trigger_id": None}
    try:
        with httpx.Client(base_url=demo.local_api_url, timeout=120) as http:
            http.post("queue/join", json=body).raise_for_status()
            with http.stream("GET", "queue/data", params={"session_hash": session}) as stream:
                for line in stream.iter_lines():
                    if '"process_completed"' in line:
                        break
    except httpx.HTTPError as e:
        print(f"specviz: the warm-up run through the queue failed ({e}); the first run may start slower")
    demo.state_holder.delete_state(session)  # it takes no visitor's place among the SPECVIZ_MAX_SESSIONS kept


def main() -> None:
    warm = os.environ.get("SPECVIZ_WARM_UP", "1") != "0"  # 0: skip it (benchmarks/first_token.py compares both)
    if warm:
        warm_up()
    demo = build_demo()
    demo.queue(default_concurrency_limit=CONCURRENCY, max_size=32)
    demo.launch(server_name=os.environ.get("GRADIO_SERVER_NAME", "127.0.0.1"),
                server_port=int(os.environ.get("GRADIO_SERVER_PORT", "7860")),
                max_file_size=int(MAX_UPLOAD_MB * 2**20), state_session_capacity=MAX_SESSIONS,
                css_paths=[specviz.CSS_PATH, APP_CSS], js=f"() => {{\n{specviz.JS_PATH.read_text()}\n}}",
                prevent_thread_lock=True)
    if warm and spaces is None:  # on ZeroGPU a run at start-up would hold a GPU for nobody
        warm_queue(demo)
    if warm:  # start-up leaves ~0.5 M objects: one full collection now, and the survivors exempt from later
        gc.collect()  # ones (each ~0.3 s on this 2-core box), so no full collection lands in the first visitor's run
        gc.freeze()
    print(av.READY, flush=True)
    demo.block_thread()


if __name__ == "__main__":
    main()
