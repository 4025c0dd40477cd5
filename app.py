"""specviz app: a Gradio UI that streams a speculative decoding run round by round, replays it, and
saves / loads its trace. This file lays the page out and wires components to handlers by name:
ui/run.py, ui/replay.py, ui/session.py, ui/tab_runs.py and ui/endpoints.py hold what each control does,
ui/tour.py the guided first minute, ui/warmup.py the start-up warm-up; the engine makes events, specviz turns them
into view outputs.

    python app.py   # serves on GRADIO_SERVER_NAME:GRADIO_SERVER_PORT (default 127.0.0.1:7860)
"""

from __future__ import annotations

import gc
import os
from pathlib import Path

import gradio as gr
from starlette.middleware import Middleware

import specviz
import ui.server as server  # first: it imports ZeroGPU's `spaces` (when present) before torch
from ui import app_views as av
from ui import batch_tab as ub
from ui import endpoints, outputs, replay, run, session, tab_runs
from ui import engine_tab as et
from ui import fair_queue as fq
from ui import specbench as sb
from ui import tour as t
from ui.app_guard import PARAM_LABEL
from ui.controls import FIELDS, TRACE_SETS
from ui.uploads import UploadBound
from ui.warmup import record_example, warm_queue, warm_up

APP_CSS = Path(__file__).resolve().parent / "assets" / "app.css"
OUTPUT_ONLY_JS = "(on) => { const s = document.querySelector('#stream'); if (s) s.classList.toggle('sv-output-only', on); }"
COMPACT_JS = (
    "(on) => { const s = document.querySelector('#stream'); if (s) s.classList.toggle('sv-compact', on); }"
)
# a slider's least width: its range input (Gradio's min-width 112 px) and both end labels inside its box, so two
# never share a row of the 280-px settings column (top-p's track spilled out of the Sampling box)
SLIDER_WIDTH = 200


def beam_section(pair, drafter, param, gamma, max_new, prompt, summary) -> None:
    """The beam-search tab: width, race, a button and the beam view; it reuses the main controls."""
    with gr.Row():
        num_beams = gr.Slider(
            2,
            8,
            value=3,
            step=1,
            label="Beams B",
            elem_id="num-beams",
            scale=2,
            info="with the Drafter and γ beside Generate; beam search drafts with ngram or self",
        )
        beam_race = gr.Checkbox(
            True, label="Race plain beam search of the same width", elem_id="beam-race", scale=2
        )
        beam_btn = gr.Button("Beam search", variant="primary", elem_id="beam-run", scale=1)
    gr.Markdown(
        "Exact beam search (transformers' definition, length penalty 1, early stopping off). Each beam's "
        "drafter (ngram or self) proposes γ tokens; one target forward verifies every beam's draft and "
        "the search replays while the beams it keeps stay on drafted paths. Same beams, same scores."
    )
    view = gr.HTML(specviz.render_beams([]), elem_id="beams")
    beam_btn.click(
        tab_runs.beam_generate,
        [pair, drafter, param, gamma, max_new, num_beams, beam_race, prompt],
        [view, summary],
        show_progress="minimal",
        api_name="beam",
        api_visibility="private",
        **server.COMPUTE,
    )


def batch_section(pair, drafter, param, gamma, max_new) -> None:
    """The Batch tab: B prompts decoded together (one verify forward per round for every row), raced against the AR
    batch of the same prompts, each row a lane; and the throughput against B: the committed benchmark's, named by
    the machine it was measured on, and this host's own on demand."""
    with gr.Row():
        prompts = gr.Textbox(
            tab_runs.BATCH_EXAMPLE,
            lines=4,
            max_lines=16,
            label=f"Prompts, one per line (B = the number of lines, 1 to {tab_runs.MAX_BATCH})",
            elem_id="batch-prompts",
            scale=4,
        )
        with gr.Column(scale=1, min_width=160):
            batch_race = gr.Checkbox(True, label="Race the AR batch", elem_id="batch-race")
            batch_btn = gr.Button("Run the batch", variant="primary", elem_id="batch-run")
    gr.Markdown(
        "Each row drafts with the drafter and γ beside Generate (under **auto**: n-gram drafts, one γ for the "
        "whole batch chosen each round by goodput, 0 included); one target forward verifies every row; each "
        "row accepts its own number of tokens."
    )
    summary = gr.HTML("", elem_id="batch-summary")
    lanes = gr.HTML(specviz.render_batch_lanes([]), elem_id="batch-lanes")
    chart = gr.Plot(ub.figure(), elem_id="batch-throughput", show_label=False)
    with gr.Row():
        measure_btn = gr.Button("Measure on this host", elem_id="batch-measure", scale=0, min_width=200)
    note = gr.HTML(ub.note(), elem_id="batch-note")
    measure_btn.click(
        ub.measure,
        [pair, drafter, param, gamma, max_new, prompts],
        [chart, note],
        show_progress="minimal",
        api_name="batch_host",
        api_visibility="private",
        **server.COMPUTE,
    )
    batch_btn.click(
        tab_runs.batch_generate,
        [pair, drafter, param, gamma, max_new, prompts, batch_race],
        [lanes, summary],
        show_progress="minimal",
        api_name="batch",
        api_visibility="private",
        **server.COMPUTE,
    )


def specbench_section(prompt, race) -> None:
    """The Spec-Bench tab: the committed leaderboard, and a question picker that fills the prompt to race it."""
    gr.HTML(sb.leaderboard_html(), elem_id="leaderboard")
    with gr.Row():
        question = gr.Dropdown(
            list(sb.questions()),
            value=None,
            label="Race a Spec-Bench question",
            scale=4,
            elem_id="sb-question",
            filterable=True,
        )
        use = gr.Button("Use as the prompt", elem_id="sb-use", scale=1, min_width=140)
    note = gr.HTML("", elem_id="sb-note")
    use.click(sb.use_question, [question], [prompt, race, note], api_visibility="private")


class Page(gr.Blocks):
    """gr.Blocks that checks every endpoint's inputs from any client, raw HTTP included, private endpoints too: as
    many as it takes, each of its kind, finite numbers (a missing or NaN argument got `error: null` before); and
    whose /generate takes every argument after the prompt as optional (gradio_client fills the defaults itself)."""

    def validate_inputs(self, block_fn, inputs):
        if block_fn.api_name == "generate":
            endpoints.fill_api_defaults(inputs)
        endpoints.check_endpoint_inputs(block_fn, inputs)
        super().validate_inputs(block_fn, inputs)


def build_demo() -> gr.Blocks:
    # the page opens on the tour's recorded run (no server call draws it); the browser plays the tour over it
    first = t.initial_outputs()
    shown = first["views"]
    with Page(title="specviz: speculative decoding debugger", delete_cache=(3600, 3600)) as demo:
        # the session's run: a RunSet while streaming, packed bytes once settled; first the tour's recorded run
        events = gr.State(first["state"], time_to_live=server.STATE_TTL_S)
        # the session's earlier prompts and outputs, which suffix speculation drafts from (never shared): each
        # session gets its own deep copy of an empty one, with no load call to the server; its bound
        # SPECVIZ_HISTORY_TOKENS is checked here, at start-up
        history = gr.State(session.session_history(), time_to_live=server.STATE_TTL_S)
        gr.Markdown(
            "# specviz\nWatch speculative decoding round by round: the draft proposes γ tokens, "
            "the target verifies them in one forward, and you see what was accepted, rejected and why.",
            elem_classes="sv-header",
        )
        # made here, placed in the settings column: the main column (first in reading order) reads them, the
        # examples set the race, the beam tab takes the pair and the token budget
        pair = gr.Dropdown(
            av.pair_choices(), value=av.EMBEDDED_PAIR, label="Model pair (draft → target)", render=False
        )
        max_new = gr.Slider(
            1, av.MAX_NEW_TOKENS, value=48, step=1, label="Max new tokens", elem_id="max-new", render=False
        )
        race = gr.Checkbox(
            False,
            label="Race against autoregressive (both lanes run interleaved, side by side)",
            render=False,
            elem_id="race-on",
        )
        with gr.Row(equal_height=False, elem_classes="sv-layout"):
            with gr.Column(scale=3, min_width=300, elem_classes="sv-main"):
                prompt = gr.Textbox(
                    first["prompt"],
                    label="Prompt",
                    lines=4,
                    elem_id="prompt",
                    placeholder="Ask something, or paste text to copy, edit or extract from",
                )
                with gr.Row(elem_classes="sv-buttons"):
                    run_btn = gr.Button("Generate", variant="primary", elem_id="generate", min_width=120)
                    stop_btn = gr.Button(
                        "Stop", variant="secondary", elem_id="stop", interactive=False, min_width=80
                    )
                # the two most used: beside Generate, before the tabs
                with gr.Row(elem_classes="sv-run-controls"):
                    drafter = gr.Dropdown(
                        av.drafter_choices(), value="ngram", label="Drafter", scale=2, min_width=120
                    )
                    param = gr.Number(  # no minimum: the run refuses -3 by name (Gradio's own check did not)
                        0,
                        precision=0,
                        label=PARAM_LABEL,
                        scale=1,
                        min_width=100,
                        info="ngram n, layerskip layers, lookahead window, recycle top-k",
                    )
                    gamma = gr.Slider(
                        1,
                        16,
                        value=4,
                        step=1,
                        label="γ (draft tokens per round)",
                        elem_id="gamma",
                        scale=2,
                        min_width=160,
                    )
                examples = gr.Examples(
                    [[p, d, True] for _, p, d, _ in av.EXAMPLES],
                    [prompt, drafter, race],  # race AR
                    example_labels=[label for label, _, _, _ in av.EXAMPLES],
                    label="Examples",
                    elem_id="examples",
                )
                gr.HTML(av.examples_html(), elem_id="expect")
                summary = gr.HTML(shown["summary"], elem_id="summary")
                with gr.Row(elem_classes="sv-tour-row", equal_height=True):
                    gr.HTML(t.tour_host(), elem_id="tour")  # assets/specviz.js plays the tour
                    gr.Button(  # Skip and Replay: assets/specviz.js, no server call
                        "Skip the tour", size="sm", scale=0, min_width=110, elem_id="tour-skip"
                    )
                    gr.Button("▶ Replay the tour", size="sm", scale=0, min_width=130, elem_id="tour-replay")
                gr.HTML(specviz.render_legend())
                with gr.Row(elem_classes="sv-stream-options"):
                    output_only = gr.Checkbox(
                        False, label="Show output only (hide drafts)", elem_id="output-only", container=False
                    )
                    compact = gr.Checkbox(
                        False,
                        label="Compact: one rejected draft per round (+N)",
                        elem_id="compact",
                        container=False,
                    )
                    forget = gr.Button(  # the ⟲ marks: drafts taken from this session's earlier runs
                        "⟲ Forget my history", size="sm", scale=0, min_width=150, elem_id="forget-history"
                    )
                stream = gr.HTML(shown["stream"], elem_id="stream")
                with gr.Row(elem_classes="sv-replay", equal_height=True):
                    prev_btn = gr.Button("◀ Prev", size="sm", min_width=70, scale=0, elem_id="prev")
                    play_btn = gr.Button("▶ Play", size="sm", min_width=70, scale=0, elem_id="play")
                    gr.Button("Pause", size="sm", min_width=60, scale=0, elem_id="pause")  # the browser's
                    next_btn = gr.Button("Next ▶", size="sm", min_width=70, scale=0, elem_id="next")
                    slider = gr.Slider(
                        0,
                        max(first["rounds"], 1),
                        value=first["rounds"],
                        step=1,
                        label="Replay round",
                        interactive=True,
                        elem_id="round",
                        scale=4,
                        min_width=160,
                    )
                    gr.Dropdown(  # read by Play in the browser (assets/specviz.js): no server event
                        [0.25, 0.5, 1.0, 2.0, 4.0],
                        value=1.0,
                        label="Speed ×",
                        scale=1,
                        min_width=90,
                        elem_id="speed",
                        interactive=True,
                    )
                selected = gr.Textbox(visible="hidden", elem_id="sv-select", container=False)
                # every tab in sight on a phone, none behind a "…" menu
                with gr.Tabs(overflow_behavior="wrap"):
                    with gr.Tab("Verify", elem_id="tab-verify"):
                        verify = gr.HTML(shown["verify"], elem_id="verify")
                    with gr.Tab("Tree", elem_id="tab-tree"):
                        tree = gr.HTML(shown["tree"], elem_id="tree")
                    with gr.Tab("Charts", elem_id="tab-charts"):
                        with gr.Row():
                            fig_len = gr.Plot(shown["fig_len"], label="accepted length", min_width=300)
                            fig_pos = gr.Plot(shown["fig_pos"], label="by position", min_width=300)
                        with gr.Row():
                            fig_run = gr.Plot(shown["fig_run"], label="running α", min_width=300)
                            fig_tput = gr.Plot(shown["fig_tput"], label="throughput", min_width=300)
                        fig_speedup = gr.Plot(shown["fig_speedup"], label="predicted speedup")
                    with gr.Tab("Race", elem_id="tab-race"):
                        race_html = gr.HTML(shown["race"], elem_id="race")
                    with gr.Tab("Explain", elem_id="tab-explain"):
                        explain = gr.HTML(shown["explain"], elem_id="explain")
                        with gr.Row(equal_height=True):
                            drift_btn = gr.Button(
                                f"Measure the sampled drift at Temperature > 0 ({tab_runs.DRIFT_SAMPLES} seeded 2-token "
                                "runs per rule)",
                                size="sm",
                                scale=0,
                                min_width=200,
                                elem_id="drift-measure",
                            )
                            drift_out = gr.HTML("", elem_id="drift-out")
                    with gr.Tab("Spec-Bench", elem_id="tab-specbench"):
                        specbench_section(prompt, race)
                    with gr.Tab("Beam search", elem_id="tab-beams"):
                        beam_section(pair, drafter, param, gamma, max_new, prompt, summary)
                    with gr.Tab("Batch", elem_id="tab-batch"):
                        batch_section(pair, drafter, param, gamma, max_new)
                    with gr.Tab("Your engine", elem_id="tab-engine"):
                        engine_trace = et.engine_section()  # its metrics views wire themselves

            with gr.Column(scale=1, min_width=280, elem_classes="sv-controls"):
                pair.render()
                pair_note = gr.Markdown("", visible=False, elem_id="pair-note")
                with gr.Row():
                    adaptive = gr.Dropdown(
                        list(av.ADAPTIVE), value="fixed", label="Adaptive γ", min_width=120
                    )
                    p_min = gr.Slider(
                        0,
                        0.95,
                        value=0.4,
                        step=0.05,
                        label="p_min (confidence)",
                        interactive=False,
                        min_width=SLIDER_WIDTH,
                    )
                max_new.render()
                race.render()
                with gr.Accordion("Sampling", open=False):
                    temperature = gr.Slider(
                        0, 2, value=0, step=0.05, label="Temperature (0 = greedy)", elem_id="temperature"
                    )
                    with gr.Row():
                        top_k = gr.Number(0, precision=0, label="top-k (0 = off)", min_width=100)
                        top_p = gr.Slider(
                            0.05,
                            1,
                            value=1,
                            step=0.05,
                            label="top-p",
                            elem_id="top-p",
                            min_width=SLIDER_WIDTH,
                        )
                    accept = gr.Dropdown(
                        list(av.ACCEPT_CHOICES),
                        value="exact",
                        allow_custom_value=True,
                        label="Acceptance rule",
                        elem_id="accept",
                        info="exact keeps the target's output; typical:ε,δ is Medusa-2's LOSSY "
                        "shortcut, marked in every view with its drift",
                    )
                    seed = gr.Number(
                        0,
                        precision=0,
                        label="Seed",
                        info="a seeded run repeats exactly, at any load, except with auto when it "
                        "picks a trained head (its choices follow measured time)",
                    )
                with gr.Accordion("Tree speculation", open=False, elem_id="tree-controls"):
                    with gr.Row():
                        tree_budget = gr.Slider(
                            0,
                            64,
                            value=0,
                            step=1,
                            label="Node budget (0 = chain)",
                            elem_id="tree-budget",
                            info="draft nodes per round; depth at most γ",
                            min_width=SLIDER_WIDTH,
                        )
                        tree_branching = gr.Slider(
                            1,
                            8,
                            value=2,
                            step=1,
                            label="Branching",
                            elem_id="tree-branching",
                            info="children tried per node",
                            min_width=SLIDER_WIDTH,
                        )
                with gr.Accordion("Trace", open=True):
                    download = gr.DownloadButton(
                        "Download trace (JSON)", interactive=False, size="sm", elem_id="download"
                    )
                    upload = gr.File(
                        label="Load a trace to replay (no model needed)",
                        file_types=[".json"],
                        type="filepath",
                        height=110,
                        elem_id="trace-upload",
                    )
        views = {
            "stream": stream,
            "tree": tree,
            "race": race_html,
            "explain": explain,
            "summary": summary,
            "verify": verify,
            "fig_len": fig_len,
            "fig_pos": fig_pos,
            "fig_run": fig_run,
            "fig_tput": fig_tput,
            "fig_speedup": fig_speedup,
        }
        ui = {
            "pair": pair,
            "drafter": drafter,
            "param": param,
            "gamma": gamma,
            "adaptive": adaptive,
            "p_min": p_min,
            "temperature": temperature,
            "top_k": top_k,
            "top_p": top_p,
            "seed": seed,
            "max_new": max_new,
            "tree_budget": tree_budget,
            "tree_branching": tree_branching,
            "race": race,
            "prompt": prompt,
            "accept": accept,
        }
        wire(
            demo,
            ui,
            [views[name] for name in av.VIEWS],
            events,
            slider,
            download,
            upload,
            dict(
                run=run_btn,
                stop=stop_btn,
                prev=prev_btn,
                next=next_btn,
                play=play_btn,
                selected=selected,
                output_only=output_only,
                compact=compact,
                pair_note=pair_note,
                examples=examples.dataset,
                prompt=prompt,
                drift=drift_btn,
                drift_out=drift_out,
                history=history,
                forget=forget,
                engine_trace=engine_trace,
            ),
        )
    return demo


def wire(demo, ui: dict, view_outs: list, events, slider, download, upload, c: dict) -> None:
    """Every event of the page: components addressed by name (ui: one per Controls field; c: the buttons)."""
    controls = [ui[name] for name in FIELDS]  # the Controls order, the one there is
    run_outs = [events, slider, download, *view_outs]  # outputs.RunOutputs, by the same names
    hidden, compute = dict(show_progress="hidden", api_visibility="private"), server.COMPUTE
    served = gr.State(False)  # whether Generate's first step showed the start-up recording
    run_event = (
        c["run"]
        .click(
            lambda *values: run.start_run(fq.place_of(demo), *values),  # its place in line, said at once
            controls + [events],
            [c["run"], c["stop"], served, *run_outs],
            queue=False,
            **hidden,
        )
        .then(run.live_or_served, served, None, queue=False, **hidden)
        .success(
            run.generate_from,
            controls + [events, c["history"]],
            run_outs,
            api_name="run",
            **hidden,
            **compute,
        )
    )
    run_event.then(run.idle_buttons, None, [c["run"], c["stop"]], queue=False, **hidden)
    # Stop cancels the run first, then settles what it generated: settling in the same click would race
    # the run's last frames, which then overwrite the "stopped" views.
    c["stop"].click(
        lambda: None, None, None, cancels=[run_event], queue=False, api_visibility="private"
    ).then(outputs.settled, [events], run_outs, api_name="stop", **hidden).then(
        run.idle_buttons, None, [c["run"], c["stop"]], queue=False, **hidden
    )
    # a new empty history for the session: suffix and auto draft from the next run's own text only
    c["forget"].click(session.forget_history, [c["history"]], [c["history"]], **hidden)
    slider.input(replay.show_round, [events, slider], view_outs, trigger_mode="always_last", **hidden)
    c["prev"].click(replay.step_back, [events, slider], [slider, *view_outs], **hidden)
    c["next"].click(replay.step_on, [events, slider], [slider, *view_outs], api_name="next", **hidden)
    # ▶ Play and Pause: assets/specviz.js steps Next ▶ at each round's measured pace, in the browser
    c["selected"].change(
        replay.select_round,
        [events, c["selected"], slider],
        [ui_view(view_outs, "verify")],
        trigger_mode="always_last",
        **hidden,
    )
    # the tour plays in the browser (assets/specviz.js): any server update of a view it covers ends it first
    upload.upload(
        replay.load_trace,
        [upload],
        [*run_outs, upload, *[ui[name] for name in TRACE_SETS]],
        api_name="load_trace",
        api_visibility="private",
        **compute,
    )
    # another engine's recorded trace (the Your engine tab): the same loader, so every view renders it
    c["engine_trace"].upload(
        replay.load_trace,
        [c["engine_trace"]],
        [*run_outs, c["engine_trace"], *[ui[name] for name in TRACE_SETS]],
        api_name="load_engine_trace",
        api_visibility="private",
        **compute,
    )
    ui["pair"].change(session.pair_changed, [ui["pair"]], [ui["drafter"]], api_visibility="private")
    ui["drafter"].change(session.drafter_changed, [ui["drafter"]], [ui["gamma"]], api_visibility="private")
    ui["pair"].change(session.pair_note_changed, [ui["pair"]], [c["pair_note"]], api_visibility="private")
    ui["adaptive"].change(session.adaptive_changed, [ui["adaptive"]], [ui["p_min"]], api_visibility="private")
    c["output_only"].change(None, [c["output_only"]], None, js=OUTPUT_ONLY_JS, api_visibility="private")
    c["compact"].change(None, [c["compact"]], None, js=COMPACT_JS, api_visibility="private")
    c["drift"].click(tab_runs.measure_drift, controls, [c["drift_out"]], **hidden, **compute)
    # a number typed into a slider's box outside its range: Gradio's page clamps it as the box loses focus (γ 0 ran
    # as γ 1, silently), after sending `release` with the typed value; the input check refuses that by name
    for block in list(demo.blocks.values()):
        if isinstance(block, gr.Slider) and block.elem_id not in endpoints.RANGE_SET_BY_RUN:
            block.release(lambda value: None, block, None, **hidden)
    gr.api(endpoints.api_generate, api_name="generate", **compute)


def ui_view(view_outs: list, name: str):
    """The view component named `name` (app_views.VIEWS order)."""
    return view_outs[av.VIEWS.index(name)]


def main() -> None:
    # 0: skip it (benchmarks/first_token.py compares both)
    warm = os.environ.get("SPECVIZ_WARM_UP", "1") != "0"
    server.return_large_blocks()  # freed large blocks go back to the OS (a beam search's cache rows stayed before)
    if warm:
        warm_up()
        record_example()  # the default example, shown without a queue place (run.RECORDED)
    demo = build_demo()
    limits = fq.QueueLimits()
    # direct routes closed (api_open): every call goes through the queue, whose joins FairQueue admits; Gradio's own
    # bound stays as a backstop above the fair queue's
    demo.queue(default_concurrency_limit=server.CONCURRENCY, max_size=4 * limits.waiting, api_open=False)
    demo.launch(
        server_name=os.environ.get("GRADIO_SERVER_NAME", "127.0.0.1"),
        server_port=int(os.environ.get("GRADIO_SERVER_PORT", "7860")),
        max_file_size=server.UPLOAD_LIMITS.file_bytes,
        state_session_capacity=server.MAX_SESSIONS,
        css_paths=[specviz.CSS_PATH, APP_CSS],
        js=f"() => {{\n{specviz.JS_PATH.read_text()}\n}}",
        prevent_thread_lock=True,
        app_kwargs={
            "middleware": [
                Middleware(UploadBound, folder=server.upload_folder, limits=server.UPLOAD_LIMITS),
                Middleware(fq.FairQueue, blocks=demo, limits=limits, identity=server.client_of),
            ]
        },
    )
    if warm and server.spaces is None:  # on ZeroGPU a run at start-up would hold a GPU for nobody
        warm_queue(demo)
    if warm:  # start-up leaves ~0.5 M objects: one full collection now, and the survivors exempt from later
        gc.collect()  # ones (each ~0.3 s on this 2-core box), so no full collection lands in the first visitor's run
        gc.freeze()
    print(av.READY, flush=True)
    demo.block_thread()


if __name__ == "__main__":
    main()
