"""Time from start-up to the first token: start `python app.py`, wait until it is ready (warm-up over), then run the
first example prompt three times through the app's own "run" event and time each run's first streamed update
carrying tokens. Not a test (it measures time); run it on a quiet machine:

    /work/bin/cpu-quiet .venv/bin/python tools/first_token.py [STARTS]   # with the start-up warm-up
    SPECVIZ_WARM_UP=0 .venv/bin/python tools/first_token.py [STARTS]     # without it, for comparison

STARTS app start-ups (default 3) are measured; it prints each and the medians.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.app_server import fn_index, free_port  # noqa: E402
from ui.app_views import EMBEDDED_PAIR, EXAMPLES, READY  # noqa: E402
from ui.controls import FIELDS, Controls  # noqa: E402


def first_token_s(url: str, prompt: str) -> tuple[float, float]:
    """(seconds from pressing Generate to the first update with tokens, to the run's end)."""
    controls = Controls(pair=EMBEDDED_PAIR, drafter="ngram", gamma=4, max_new=32, prompt=prompt)
    data = [getattr(controls, name) for name in FIELDS] + [
        None
    ]  # the run's inputs: the controls, no events yet
    session = uuid.uuid4().hex
    body = {
        "data": data,
        "fn_index": fn_index(url, "run"),
        "session_hash": session,
        "event_data": None,
        "trigger_id": None,
    }
    first = None
    with httpx.Client(timeout=300) as http:
        t0 = time.perf_counter()
        http.post(f"{url}gradio_api/queue/join", json=body).raise_for_status()
        with http.stream("GET", f"{url}gradio_api/queue/data", params={"session_hash": session}) as stream:
            for line in stream.iter_lines():
                if not line.startswith("data:"):
                    continue
                msg = json.loads(line[5:])
                if msg.get("msg") in ("process_generating", "process_completed") and first is None:
                    out = (msg.get("output") or {}).get("data") or []
                    if any(isinstance(v, str) and 'class="tok ' in v for v in out):
                        first = time.perf_counter() - t0
                if msg.get("msg") == "process_completed":
                    return first or float("nan"), time.perf_counter() - t0
    raise RuntimeError("the run did not complete")


def one_start() -> tuple[float, float, list[float]]:
    """Start the app once: (seconds until it is ready, the first run's first token, the later runs' first tokens)."""
    port = free_port()
    env = dict(
        os.environ,
        GRADIO_SERVER_NAME="127.0.0.1",
        GRADIO_SERVER_PORT=str(port),
        GRADIO_ANALYTICS_ENABLED="False",
        HF_HUB_OFFLINE="1",
    )
    url = f"http://127.0.0.1:{port}/"
    t_start = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, str(ROOT / "app.py")],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        for (
            line
        ) in proc.stdout:  # start-up ends with the app's READY line, after its warm-up run through the queue
            if line.startswith(READY):
                break
        with urllib.request.urlopen(url, timeout=10) as r:
            assert r.status == 200
        ready = time.perf_counter() - t_start
        threading.Thread(target=proc.stdout.read, daemon=True).start()  # keep draining its output
        prompt = EXAMPLES[0][1]
        first = first_token_s(url, prompt)[0]
        later = [first_token_s(url, prompt)[0] for _ in range(LATER_RUNS)]
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    return ready, first, later


LATER_RUNS = 2  # runs after the first, per start


def main() -> None:
    starts = int(sys.argv[1]) if len(sys.argv) > 1 else 3  # app start-ups measured; medians over them
    warm = os.environ.get("SPECVIZ_WARM_UP", "1") != "0"
    print(
        f"warm-up at start-up: {'on' if warm else 'off (SPECVIZ_WARM_UP=0)'}; {starts} start-ups, "
        f"each: the first run, then {LATER_RUNS} later runs (first token after Generate)"
    )
    rows = []
    for k in range(starts):
        ready, first, later = one_start()
        rows.append((ready, first, statistics.median(later)))
        print(
            f"start {k + 1}: ready after {ready:.1f} s; first run {first:.2f} s; later runs "
            + ", ".join(f"{t:.2f}" for t in later)
            + " s"
        )
    ready, first, later = (statistics.median(col) for col in zip(*rows))
    print(
        f"median: ready after {ready:.1f} s; first run's first token {first:.2f} s; later runs' {later:.2f} s; "
        f"first ÷ later {first / later:.2f}"
    )


if __name__ == "__main__":
    main()
