"""specviz app: a Gradio UI that streams a speculative decoding run round by round, replays it, and
saves / loads its trace. This file assembles the page from its sections (ui/page.py) and wires components to
handlers by name: ui/run.py, ui/replay.py, ui/session.py, ui/tab_runs.py and ui/endpoints.py hold what each control
does, ui/tour.py the guided first minute, ui/warmup.py the start-up warm-up; the engine makes events, specviz turns
them into view outputs.

    python app.py   # serves on GRADIO_SERVER_NAME:GRADIO_SERVER_PORT (default 127.0.0.1:7860)
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

import gradio as gr
from starlette.middleware import Middleware

import specviz
import ui.server as server  # first: it imports ZeroGPU's `spaces` (when present) before torch
from ui import app_views as av
from ui import endpoints, outputs, page, replay, run, session, tab_runs
from ui import fair_queue as fq
from ui import tour as t
from ui.controls import FIELDS, TRACE_SETS
from ui.uploads import UploadBound
from ui.warmup import record_example, warm_queue, warm_up

APP_CSS = Path(__file__).resolve().parent / "assets" / "app.css"
OUTPUT_ONLY_JS = "(on) => { const s = document.querySelector('#stream'); if (s) s.classList.toggle('sv-output-only', on); }"
COMPACT_JS = (
    "(on) => { const s = document.querySelector('#stream'); if (s) s.classList.toggle('sv-compact', on); }"
)


class Page(gr.Blocks):
    """gr.Blocks that checks every endpoint's inputs from any client, raw HTTP included, private endpoints too: as
    many as it takes, each of its kind, finite numbers (a missing or NaN argument got `error: null` before), a file
    only from the upload folder, the replay round within the session's run; and whose /generate takes every
    argument after the prompt as optional (gradio_client fills the defaults itself)."""

    def validate_inputs(self, block_fn, inputs):
        if block_fn.api_name == "generate":
            endpoints.fill_api_defaults(inputs)
        endpoints.check_endpoint_inputs(block_fn, inputs)
        super().validate_inputs(block_fn, inputs)

    async def preprocess_data(self, block_fn, inputs, state, explicit_call: bool = False):
        """The replay round against the session's own slider (its maximum is the run's), named when past it."""
        endpoints.check_run_ranges(block_fn, inputs, state)
        return await super().preprocess_data(block_fn, inputs, state, explicit_call)


def build_demo() -> gr.Blocks:
    """The page, section by section in reading order (ui/page.py lays each out), then its events (wire)."""
    # the page opens on the tour's recorded run (no server call draws it); the browser plays the tour over it
    first = t.initial_outputs()
    with Page(title="specviz: speculative decoding debugger", delete_cache=(3600, 3600)) as demo:
        c = page.session_state(first)
        page.header()
        c |= page.shared_controls()
        with gr.Row(equal_height=False, elem_classes="sv-layout"):
            with gr.Column(scale=3, min_width=300, elem_classes="sv-main"):
                c |= page.run_controls(first, c["race"])
                c |= page.stream_and_replay(first)
                c |= page.view_tabs(first["views"], c)
            with gr.Column(scale=1, min_width=280, elem_classes="sv-controls"):
                c |= page.settings_column(c)
        wire_page(demo, c)
    return demo


# what wire addresses by name besides the controls and the views: buttons, states, notes
WIRED = (
    "run stop prev next play selected output_only compact pair_note examples prompt drift drift_out history forget "
    "engine_trace"
).split()


def wire_page(demo, c: dict) -> None:
    """The page's components (`c`, by the sections' names) handed to wire: the Controls fields, the views (the Race
    tab's is `race_html`, beside the race checkbox), the states, the trace's buttons, the rest (WIRED)."""
    view_outs = [c["race_html" if name == "race" else name] for name in av.VIEWS]
    ui = {name: c[name] for name in FIELDS}
    wire(demo, ui, view_outs, c["events"], c["slider"], c["download"], c["upload"], {n: c[n] for n in WIRED})


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
    server.trust_forwarded()  # uvicorn believes X-Forwarded-For from SPECVIZ_TRUSTED_PROXIES only
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
    # start-up leaves ~0.5 M objects: no full collection of them lands in a visitor's run (settle_heap; imported here,
    # as ui/ imports the engine: after ui.server, which loads ZeroGPU's `spaces` before torch)
    if warm:
        from engine.runtime.models import settle_heap

        settle_heap()
    print(av.READY, flush=True)
    # a terminate (a Space restarting, the tests' servers) closes the server as Ctrl-C does, and the exit handlers run
    # (run.RECORDING_DIR)
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    demo.block_thread()


if __name__ == "__main__":
    main()
