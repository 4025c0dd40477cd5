"""The page's sections, each a function that lays its components out in reading order and returns them by name
(app.build_demo calls them in page order, then app.wire connects them). The tabs that wire their own events (Spec-Bench,
Beam search, Batch, Your engine) do so here, in their section; everything else is wired in app.py."""

from __future__ import annotations

import gradio as gr

import specviz
import ui.server as server  # first: it imports ZeroGPU's `spaces` (when present) before torch
from engine.config import MAX_BATCH
from ui import app_views as av
from ui import batch_tab as ub
from ui import engine_tab as et
from ui import specbench as sb
from ui import tour as t
from ui.app_guard import PARAM_LABEL
from ui.session import session_history
from ui.tab_runs import BATCH_EXAMPLE, DRIFT_SAMPLES, batch_generate, beam_generate

# a slider's least width: its range input (Gradio's min-width 112 px) and both end labels inside its box, so two
# never share a row of the 280-px settings column (top-p's track spilled out of the Sampling box)
SLIDER_WIDTH = 200


def session_state(first: dict) -> dict:
    """The session's own state: its run and its history."""
    # the session's run: a RunSet while streaming, packed bytes once settled; first the tour's recorded run
    events = gr.State(first["state"], time_to_live=server.STATE_TTL_S)
    # the session's earlier prompts and outputs, which suffix speculation drafts from (never shared): each
    # session gets its own deep copy of an empty one, with no load call to the server; its bound
    # SPECVIZ_HISTORY_TOKENS is checked here, at start-up
    history = gr.State(session_history(), time_to_live=server.STATE_TTL_S)
    return {"events": events, "history": history}


def header() -> None:
    gr.Markdown(
        "# specviz\nWatch speculative decoding round by round: the draft proposes γ tokens, "
        "the target verifies them in one forward, and you see what was accepted, rejected and why.",
        elem_classes="sv-header",
    )


def shared_controls() -> dict:
    """Made here, placed in the settings column: the main column (first in reading order) reads them, the
    examples set the race, the beam tab takes the pair and the token budget."""
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
    return {"pair": pair, "max_new": max_new, "race": race}


def run_controls(first: dict, race) -> dict:
    """The main column's top: the prompt, Generate and Stop, the two most used controls, the examples, the summary
    and the tour's row."""
    prompt = gr.Textbox(
        first["prompt"],
        label="Prompt",
        lines=4,
        elem_id="prompt",
        placeholder="Ask something, or paste text to copy, edit or extract from",
    )
    with gr.Row(elem_classes="sv-buttons"):
        run_btn = gr.Button("Generate", variant="primary", elem_id="generate", min_width=120)
        stop_btn = gr.Button("Stop", variant="secondary", elem_id="stop", interactive=False, min_width=80)
    # the two most used: beside Generate, before the tabs
    with gr.Row(elem_classes="sv-run-controls"):
        drafter = gr.Dropdown(av.drafter_choices(), value="ngram", label="Drafter", scale=2, min_width=120)
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
    summary = gr.HTML(first["views"]["summary"], elem_id="summary")
    with gr.Row(elem_classes="sv-tour-row", equal_height=True):
        gr.HTML(t.tour_host(), elem_id="tour")  # assets/specviz.js plays the tour
        gr.Button(  # Skip and Replay: assets/specviz.js, no server call
            "Skip the tour", size="sm", scale=0, min_width=110, elem_id="tour-skip"
        )
        gr.Button("▶ Replay the tour", size="sm", scale=0, min_width=130, elem_id="tour-replay")
    return dict(
        prompt=prompt,
        run=run_btn,
        stop=stop_btn,
        drafter=drafter,
        param=param,
        gamma=gamma,
        examples=examples.dataset,
        summary=summary,
    )


def stream_and_replay(first: dict) -> dict:
    """The legend, the stream's options, the stream itself and the replay row under it."""
    gr.HTML(specviz.render_legend())
    with gr.Row(elem_classes="sv-stream-options"):
        output_only = gr.Checkbox(
            False, label="Show output only (hide drafts)", elem_id="output-only", container=False
        )
        compact = gr.Checkbox(
            False, label="Compact: one rejected draft per round (+N)", elem_id="compact", container=False
        )
        forget = gr.Button(  # the ⟲ marks: drafts taken from this session's earlier runs
            "⟲ Forget my history", size="sm", scale=0, min_width=150, elem_id="forget-history"
        )
    stream = gr.HTML(first["views"]["stream"], elem_id="stream")
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
    return dict(
        output_only=output_only,
        compact=compact,
        forget=forget,
        stream=stream,
        prev=prev_btn,
        play=play_btn,
        next=next_btn,
        slider=slider,
        selected=selected,
    )


def view_tabs(shown: dict, c: dict) -> dict:
    """The tabs under the stream, every one in sight on a phone (none behind a "…" menu). `shown`: the first
    views; `c`: the controls the Spec-Bench, Beam search and Batch tabs reuse."""
    with gr.Tabs(overflow_behavior="wrap"):
        with gr.Tab("Verify", elem_id="tab-verify"):
            verify = gr.HTML(shown["verify"], elem_id="verify")
        with gr.Tab("Tree", elem_id="tab-tree"):
            tree = gr.HTML(shown["tree"], elem_id="tree")
        with gr.Tab("Charts", elem_id="tab-charts"):
            charts = charts_tab(shown)
        with gr.Tab("Race", elem_id="tab-race"):
            race_html = gr.HTML(shown["race"], elem_id="race")
        with gr.Tab("Explain", elem_id="tab-explain"):
            explain = explain_tab(shown)
        with gr.Tab("Spec-Bench", elem_id="tab-specbench"):
            specbench_section(c["prompt"], c["race"])
        with gr.Tab("Beam search", elem_id="tab-beams"):
            beam_section(
                c["pair"], c["drafter"], c["param"], c["gamma"], c["max_new"], c["prompt"], c["summary"]
            )
        with gr.Tab("Batch", elem_id="tab-batch"):
            batch_section(c["pair"], c["drafter"], c["param"], c["gamma"], c["max_new"])
        with gr.Tab("Your engine", elem_id="tab-engine"):
            engine_trace = et.engine_section()  # its metrics views wire themselves
    return dict(verify=verify, tree=tree, race_html=race_html, **charts, **explain, engine_trace=engine_trace)


def charts_tab(shown: dict) -> dict:
    with gr.Row():
        fig_len = gr.Plot(shown["fig_len"], label="accepted length", min_width=300)
        fig_pos = gr.Plot(shown["fig_pos"], label="by position", min_width=300)
    with gr.Row():
        fig_run = gr.Plot(shown["fig_run"], label="running α", min_width=300)
        fig_tput = gr.Plot(shown["fig_tput"], label="throughput", min_width=300)
    fig_speedup = gr.Plot(shown["fig_speedup"], label="predicted speedup")
    return dict(fig_len=fig_len, fig_pos=fig_pos, fig_run=fig_run, fig_tput=fig_tput, fig_speedup=fig_speedup)


def explain_tab(shown: dict) -> dict:
    explain = gr.HTML(shown["explain"], elem_id="explain")
    with gr.Row(equal_height=True):
        drift_btn = gr.Button(
            f"Measure the sampled drift at Temperature > 0 ({DRIFT_SAMPLES} seeded 2-token runs per rule)",
            size="sm",
            scale=0,
            min_width=200,
            elem_id="drift-measure",
        )
        drift_out = gr.HTML("", elem_id="drift-out")
    return dict(explain=explain, drift=drift_btn, drift_out=drift_out)


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
        beam_generate,
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
            BATCH_EXAMPLE,
            lines=4,
            max_lines=16,
            label=f"Prompts, one per line (B = the number of lines, 1 to {MAX_BATCH})",
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
        batch_generate,
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


def settings_column(c: dict) -> dict:
    """The settings column beside the main one: the pair (`c`'s, made earlier) and its note, adaptive γ, the token
    budget and the race, then the Sampling, Tree speculation and Trace boxes."""
    c["pair"].render()
    pair_note = gr.Markdown("", visible=False, elem_id="pair-note")
    with gr.Row():
        adaptive = gr.Dropdown(list(av.ADAPTIVE), value="fixed", label="Adaptive γ", min_width=120)
        p_min = gr.Slider(
            0,
            0.95,
            value=0.4,
            step=0.05,
            label="p_min (confidence)",
            interactive=False,
            min_width=SLIDER_WIDTH,
        )
    c["max_new"].render()
    c["race"].render()
    return dict(
        pair_note=pair_note,
        adaptive=adaptive,
        p_min=p_min,
        **sampling_settings(),
        **tree_settings(),
        **trace_settings(),
    )


def sampling_settings() -> dict:
    with gr.Accordion("Sampling", open=False):
        temperature = gr.Slider(
            0, 2, value=0, step=0.05, label="Temperature (0 = greedy)", elem_id="temperature"
        )
        with gr.Row():
            top_k = gr.Number(0, precision=0, label="top-k (0 = off)", min_width=100)
            top_p = gr.Slider(
                0.05, 1, value=1, step=0.05, label="top-p", elem_id="top-p", min_width=SLIDER_WIDTH
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
    return dict(temperature=temperature, top_k=top_k, top_p=top_p, accept=accept, seed=seed)


def tree_settings() -> dict:
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
    return dict(tree_budget=tree_budget, tree_branching=tree_branching)


def trace_settings() -> dict:
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
    return dict(download=download, upload=upload)
