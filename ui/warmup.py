"""Start-up warm-up: every path the first Generate takes is run once before the first visitor arrives, so
their first token comes as fast as later ones (README, "What the page teaches": first_token.py measures it).
"""

from __future__ import annotations

import os
import time

import gradio as gr
import httpx

from engine import Engine, GenerationConfig, load_model
from engine.runtime.models import EMBEDDED
from specviz.runs import RunSet
from ui import app_views as av
from ui import run
from ui.app_guard import runs as guard_runs
from ui.controls import Controls


def warm_up() -> None:
    """Load the embedded model and run a few tokens through every path the first Generate takes (the engine's
    lean forward, n-gram drafting, verification, the AR baseline, the renderers and plotly), so the first
    visitor's first token comes as fast as later ones."""
    engine = Engine(load_model(EMBEDDED), "ngram")
    cfg = GenerationConfig(gamma=4, max_new_tokens=6)
    runs = RunSet()
    for lane, event in engine.race(WARM_PROMPT, cfg):
        runs.add(event, lane)
    av.views(runs)


WARM_PROMPT = "Repeat: the cat sat on the mat. The cat sat"
WARM_RUN = Controls(drafter="ngram", gamma=4, max_new=8, prompt=WARM_PROMPT)  # 8 tokens, n-gram, γ = 4
# the run endpoint's inputs: the controls, then the session's run and its history (states: the server's own)
WARM_DATA = [*WARM_RUN.values(), None, None]


def record_example() -> None:
    """Run the default example (the first, raced against AR) once on this host and keep its outputs for the page
    (run.RECORDED): a Generate with its controls shows them without a queue place, flagged as recorded."""
    label, prompt, drafter, _ = av.EXAMPLES[0]
    controls = Controls(drafter=drafter, race=True, prompt=prompt)
    *_, last = run.generate(controls)
    runs = guard_runs(last.state)
    spec = av.view_runs(runs).get("speculative")
    cpu = (
        ((getattr(spec.started, "host", {}) or {}).get("cpu") or "this CPU") if spec and spec.started else ""
    )
    note = run.recorded_note(cpu, time.strftime("%H:%M UTC", time.gmtime()))
    run.RECORDED.update(controls=controls, outputs=last._replace(summary=note + last.summary))


def warm_queue(demo: gr.Blocks) -> None:
    """One short Generate through the server's own queue once it serves, so that Gradio's event path, its worker
    threads and the streamed response are used first here, not on the first visitor's Generate. Best effort."""
    session = f"specviz-warm-up-{os.getpid()}"
    fn = next(d["id"] for d in demo.config["dependencies"] if d.get("api_name") == "run")
    body = {
        "data": WARM_DATA,
        "fn_index": fn,
        "session_hash": session,
        "event_data": None,
        "trigger_id": None,
    }
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
