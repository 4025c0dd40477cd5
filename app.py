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

import os
import tempfile
import time
from pathlib import Path

import gradio as gr

import specviz
from engine import Engine, GenerationConfig, load_model
from engine.models import EMBEDDED
from specviz import app_guard as guard
from specviz import app_views as av

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


def prepare(target: str, draft: str, prompt: str, raw: bool, progress=None) -> None:
    """Check the models and the prompt, load the target and build the drafter once (both cached):
    any refusal, a load failure included, is a ValueError with the message for the user."""
    av.check_allowed(target, draft)
    guard.check_prompt(prompt, MAX_PROMPT_TOKENS)
    if progress is not None:
        progress(0.1, desc=f"loading {target} (first use only)")
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
    rounds = guard.replay_rounds(events)
    slider = gr.update(maximum=max(rounds, 1), value=rounds, interactive=rounds > 0)
    return (guard.pack(events), slider, gr.update(value=trace_file(events), interactive=bool(events)),
            *av.views(events))


RUN_OUTPUTS = 13  # state, slider, download and the 10 views


def generate(pair, drafter, param, gamma, adaptive, p_min, temperature, top_k, top_p, seed, max_new, tree_budget,
             tree_branching, race, prompt, progress=gr.Progress()):
    """Stream a run: yield the views once per round, then settle the replay slider and the trace."""
    try:
        target, draft, cfg = parse_controls(pair, drafter, param, gamma, adaptive, p_min, temperature, top_k, top_p,
                                            seed, max_new, tree_budget, tree_branching)
        prepare(target, draft, prompt, cfg.raw, progress)
    except ValueError as e:
        yield refused(str(e), RUN_OUTPUTS)
        return
    lanes, events, charts_at = {"speculative": [], "ar": []}, [], 0.0
    try:
        for lane, event in stream_events(target, draft, cfg, prompt, race):
            lanes[lane].append(event)
            if event.kind in ROUND_END:  # HTML views every round; the charts at most every CHARTS_EVERY_S
                events = lanes["speculative"] + lanes["ar"]  # one run after the other: the trace's order
                charts = time.monotonic() - charts_at >= CHARTS_EVERY_S
                charts_at = time.monotonic() if charts else charts_at
                views = (gr.update() if v is None else v for v in av.views(events, figures=charts))
                yield (events, gr.update(), gr.update(), *views)
    except ValueError as e:  # empty prompt, context too long
        yield refused(str(e), RUN_OUTPUTS)
        return
    except RuntimeError as e:  # e.g. torch.cuda.OutOfMemoryError: keep what was generated
        gr.Warning(failure(e))
        yield settled(lanes["speculative"] + lanes["ar"], "cancelled")
        return
    time_limit_warning(lanes)
    yield settled(lanes["speculative"] + lanes["ar"], None)  # the engine ended every lane with its Finished


def api_generate(prompt: str, draft: str = "ngram", gamma: int = 4, max_new_tokens: int = 48,
                 temperature: float = 0.0, seed: int = 0, target: str = EMBEDDED) -> tuple[str, str]:
    """Stream (text so far, summary JSON) once per round; the last pair is the finished run, or the
    text committed before the time limit with stop_reason "time_limit".

    The return hint names what each yield carries: gr.api derives the endpoint's outputs from it.

    A generator, so a client that cancels or disconnects closes the run and frees its slot.
    """
    try:
        args = guard.api_arguments(prompt, draft, gamma, max_new_tokens, temperature, seed, target,
                                   av.MAX_NEW_TOKENS, MAX_PROMPT_TOKENS)
        cfg = GenerationConfig(**av.config_kwargs(args["gamma"], "fixed", 0.0, args["temperature"], 0, 1.0,
                                                  args["seed"], args["max_new_tokens"]), time_limit_s=MAX_RUN_S)
        prepare(target, draft, prompt, cfg.raw)
    except ValueError as e:
        raise gr.Error(str(e)) from None
    events = []
    try:
        for _, event in stream_events(target, draft, cfg, prompt, False):
            events.append(event)
            if event.kind == "round_timed":
                yield "".join(t for e in events if e.kind == "committed" for t in e.tokens), ""
    except ValueError as e:
        raise gr.Error(str(e)) from None
    except RuntimeError as e:
        raise gr.Error(failure(e)) from None
    yield av.api_result(events, cut_reason="time_limit")


def show_round(state, r):
    """The views at replay round r."""
    return av.views(guard.unpack(state), int(r))


def step(state, r, delta):
    events = guard.unpack(state)
    r = min(max(int(r) + delta, 0), guard.replay_rounds(events))
    return (r, *av.views(events, r))


def play(state, r, speed):
    """Step the slider to the end, waiting each round's measured wall time ÷ speed. Bounded work: at most
    the rounds present in the run, and no longer than MAX_RUN_S."""
    events = guard.unpack(state)
    total = guard.replay_rounds(events)
    delays = av.round_delays(events, speed)
    start, deadline = (0 if int(r) >= total else int(r)), time.monotonic() + MAX_RUN_S
    for k in range(start + 1, total + 1):
        if time.monotonic() > deadline:
            gr.Warning(f"replay stopped at the {MAX_RUN_S:g} s limit per request (SPECVIZ_MAX_RUN_S)")
            return
        time.sleep(delays.get(k, 0.1))
        yield (k, *av.views(events, k))


def load_trace(path):
    """Replay a saved trace without any model. A bad file is one warning; the last good run stays."""
    if not path:
        return refused("no file uploaded", RUN_OUTPUTS + 1)
    try:
        return (*settled(av.load_trace(path), cut_reason=None), None)  # None empties the drop zone
    except (ValueError, OSError, RecursionError) as e:
        return (*refused(f"cannot load trace: {e}", RUN_OUTPUTS), None)
    finally:
        Path(path).unlink(missing_ok=True)  # read or refused: the upload is not kept on disk


def pair_changed(pair):
    """Hub pairs default to their preset draft model; the embedded pair to n-gram lookup."""
    return gr.update(value="ngram" if pair == av.EMBEDDED_PAIR else av.PRESET_DRAFT)


def pair_note_changed(pair):
    """The chosen pair's note (what to expect from it), hidden when it has none."""
    note = av.pair_note(pair)
    return gr.update(value=note, visible=bool(note))


def build_demo() -> gr.Blocks:
    with gr.Blocks(title="specviz: speculative decoding debugger", delete_cache=(3600, 3600)) as demo:
        events = gr.State([], time_to_live=STATE_TTL_S)  # the session's run: packed bytes once settled
        gr.Markdown("# specviz\nWatch speculative decoding round by round: the draft proposes γ tokens, "
                    "the target verifies them in one forward, and you see what was accepted, rejected and why.",
                    elem_classes="sv-header")
        with gr.Row(equal_height=False):
            with gr.Column(scale=1, min_width=300, elem_classes="sv-controls"):
                pair = gr.Dropdown(av.pair_choices(), value=av.EMBEDDED_PAIR, label="Model pair (draft → target)")
                pair_note = gr.Markdown("", visible=False, elem_id="pair-note")
                with gr.Row():
                    drafter = gr.Dropdown(list(av.DRAFTERS), value="ngram", label="Drafter", scale=2)
                    param = gr.Number(0, precision=0, minimum=0, label="n / L (0 = default)", scale=1,
                                      info="ngram n, layerskip layers")
                gamma = gr.Slider(1, 16, value=4, step=1, label="γ (draft tokens per round)")
                with gr.Row():
                    adaptive = gr.Dropdown(list(av.ADAPTIVE), value="fixed", label="Adaptive γ")
                    p_min = gr.Slider(0, 0.95, value=0.4, step=0.05, label="p_min (confidence)", interactive=False)
                max_new = gr.Slider(1, av.MAX_NEW_TOKENS, value=48, step=1, label="Max new tokens", elem_id="max-new")
                race = gr.Checkbox(False, label="Race against autoregressive (both lanes run interleaved, side by side)")
                with gr.Accordion("Sampling", open=False):
                    temperature = gr.Slider(0, 2, value=0, step=0.05, label="Temperature (0 = greedy)")
                    with gr.Row():
                        top_k = gr.Number(0, precision=0, minimum=0, label="top-k (0 = off)")
                        top_p = gr.Slider(0.05, 1, value=1, step=0.05, label="top-p")
                    seed = gr.Number(0, precision=0, label="Seed",
                                     info="a seeded run repeats exactly, except with auto: its choices follow "
                                          "measured time")
                with gr.Accordion("Tree speculation", open=False, elem_id="tree-controls"):
                    with gr.Row():
                        tree_budget = gr.Slider(0, 64, value=0, step=1, label="Node budget (0 = chain)",
                                                elem_id="tree-budget", info="draft nodes per round; depth = γ")
                        tree_branching = gr.Slider(1, 8, value=2, step=1, label="Branching",
                                                   elem_id="tree-branching", info="children tried per node")
                with gr.Accordion("Trace", open=True):
                    download = gr.DownloadButton("Download trace (JSON)", interactive=False, size="sm",
                                                  elem_id="download")
                    upload = gr.File(label="Load a trace to replay (no model needed)", file_types=[".json"],
                                     type="filepath", height=110, elem_id="trace-upload")
            with gr.Column(scale=3, min_width=480):
                prompt = gr.Textbox(label="Prompt", lines=4, elem_id="prompt",
                                    placeholder="Ask something, or paste text to copy, edit or extract from")
                with gr.Row():
                    run_btn = gr.Button("Generate", variant="primary", elem_id="generate")
                    stop_btn = gr.Button("Stop", variant="stop", elem_id="stop")
                gr.Examples([[p, d] for _, p, d in av.EXAMPLES], [prompt, drafter],
                            example_labels=[label for label, _, _ in av.EXAMPLES], label="Examples")
                summary = gr.HTML(av.summary_html([]), elem_id="summary")
                gr.HTML(specviz.render_legend())
                stream = gr.HTML(specviz.render_stream([]), elem_id="stream")
                with gr.Row(elem_classes="sv-replay", equal_height=True):
                    prev_btn = gr.Button("◀ Prev", size="sm", min_width=70, scale=0, elem_id="prev")
                    play_btn = gr.Button("▶ Play", size="sm", min_width=70, scale=0, elem_id="play")
                    pause_btn = gr.Button("Pause", size="sm", min_width=60, scale=0, elem_id="pause")
                    next_btn = gr.Button("Next ▶", size="sm", min_width=70, scale=0, elem_id="next")
                    slider = gr.Slider(0, 1, value=0, step=1, label="Replay round", interactive=False,
                                       elem_id="round", scale=4)
                    speed = gr.Dropdown([0.25, 0.5, 1.0, 2.0, 4.0], value=1.0, label="Speed ×", scale=1,
                                        min_width=90)
                with gr.Tabs():
                    with gr.Tab("Speculation tree", elem_id="tab-tree"):
                        tree = gr.HTML(specviz.render_tree([]), elem_id="tree")
                    with gr.Tab("Charts", elem_id="tab-charts"):
                        with gr.Row():
                            fig_len, fig_pos = gr.Plot(label="accepted length"), gr.Plot(label="by position")
                        with gr.Row():
                            fig_run, fig_tput = gr.Plot(label="running α"), gr.Plot(label="throughput")
                        fig_speedup = gr.Plot(label="predicted speedup")
                    with gr.Tab("Race", elem_id="tab-race"):
                        race_html = gr.HTML(specviz.render_race([]), elem_id="race")
                    with gr.Tab("Explain", elem_id="tab-explain"):
                        explain = gr.HTML(specviz.render_explain([]), elem_id="explain")

        view_outs = [stream, tree, race_html, explain, summary, fig_len, fig_pos, fig_run, fig_tput, fig_speedup]
        controls = [pair, drafter, param, gamma, adaptive, p_min, temperature, top_k, top_p, seed, max_new, tree_budget,
                    tree_branching, race, prompt]
        run_event = run_btn.click(generate, controls, [events, slider, download, *view_outs],
                                  show_progress="minimal", api_name="run", api_visibility="private", **COMPUTE)
        # Stop cancels the run first, then settles what it generated: settling in the same click would race
        # the run's last frames, which then overwrite the "stop: cancelled" views.
        stop_btn.click(lambda: None, None, None, cancels=[run_event], queue=False, api_visibility="private").then(
            settled, [events], [events, slider, download, *view_outs], api_name="stop", api_visibility="private")
        slider.input(show_round, [events, slider], view_outs, trigger_mode="always_last", show_progress="hidden",
                     api_visibility="private")
        prev_btn.click(lambda ev, r: step(ev, r, -1), [events, slider], [slider, *view_outs],
                       show_progress="hidden", api_visibility="private")
        next_btn.click(lambda ev, r: step(ev, r, +1), [events, slider], [slider, *view_outs],
                       show_progress="hidden", api_name="next", api_visibility="private")
        play_event = play_btn.click(play, [events, slider, speed], [slider, *view_outs], show_progress="hidden",
                                    api_name="play", api_visibility="private", **COMPUTE)
        pause_btn.click(None, cancels=[play_event], api_visibility="private")
        upload.upload(load_trace, [upload], [events, slider, download, *view_outs, upload],
                      api_name="load_trace", api_visibility="private", **COMPUTE)
        pair.change(pair_changed, [pair], [drafter], api_visibility="private")
        pair.change(pair_note_changed, [pair], [pair_note], api_visibility="private")
        adaptive.change(lambda a: gr.update(interactive=a.startswith("confidence")), [adaptive], [p_min],
                        api_visibility="private")
        gr.api(api_generate, api_name="generate", **COMPUTE)
    return demo


def main() -> None:
    load_model(EMBEDDED)  # preload: the first Generate starts at once
    av.views([])  # and warm up plotly's validators
    demo = build_demo()
    demo.queue(default_concurrency_limit=CONCURRENCY, max_size=32)
    demo.launch(server_name=os.environ.get("GRADIO_SERVER_NAME", "127.0.0.1"),
                server_port=int(os.environ.get("GRADIO_SERVER_PORT", "7860")),
                max_file_size=int(MAX_UPLOAD_MB * 2**20), state_session_capacity=MAX_SESSIONS,
                css_paths=[specviz.CSS_PATH, APP_CSS], js=f"() => {{\n{specviz.JS_PATH.read_text()}\n}}")


if __name__ == "__main__":
    main()
