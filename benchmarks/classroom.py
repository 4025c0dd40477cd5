"""A classroom at once: N visitors arriving within one minute on a live server (loopback), each doing the first
minute of a visit, and one hostile client flooding the queue beside them:

    .venv/bin/python -m benchmarks classroom [--visitors 50] [--arrivals-s 60] [--url URL --pid PID]

Each visitor, in its own session, does what the page's browser does: loads the page and its config (the tour
then plays in the browser: no request), presses Generate on the default example (the page's first step answers
from the start-up recording, no queue place), then runs one prompt of its own with the default drafter (ngram,
64 new tokens) through the queue, reading its stream; its page's heartbeat stream is open throughout, as a browser
tab's is. The flooder, from the same address (a school's NAT looks the same), sends `--flood` joins with fresh
session hashes every 2 s, never reads and holds no page open. Printed: refusals, errors,
each visitor's wait + completion of its own run (percentiles), the server's RSS, what the flood got.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import threading
import time
import uuid
from pathlib import Path

import httpx

from tests.app_server import OpenPage, fn_index, serve_app
from ui import app_views as av
from ui.controls import Controls

from .common import host_line, median
from .load_app import rss_mib

OWN_PROMPTS = [
    "Explain in three sentences why the sky is blue.",
    "List five animals that live in the ocean.",
    "Write a haiku about autumn leaves.",
    "What is the capital of France? Answer in one sentence.",
    "Give me three tips for learning a new language.",
    "Copy this sentence exactly: a journey of a thousand miles begins with a single step.",
    "Describe a cat in two sentences.",
    "Name the planets of the solar system in order.",
]
FLOOD_PROMPT = "Write a very long story about a flood. " * 20


def pct(values: list, q: float) -> float:
    """The q-th percentile (nearest rank) of the values; NaN when there are none."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * len(ordered) + 0.5) - 1))]


def body(fn: int, data: list, session: str) -> bytes:
    return json.dumps(
        {"data": data, "fn_index": fn, "session_hash": session, "event_data": None, "trigger_id": None}
    ).encode()


def visitor(url: str, ids: dict, k: int, start_at: float, out: list) -> None:
    """One visitor's first minute; appends its record to `out`."""
    rec = {"visitor": k, "refused": None, "error": None, "recorded": False}
    session = uuid.uuid4().hex[:12]
    time.sleep(max(0.0, start_at - time.monotonic()))
    t0 = time.monotonic()
    api, headers = f"{url}gradio_api/", {"content-type": "application/json"}
    try:
        with httpx.Client(timeout=300) as http:
            http.get(url).raise_for_status()  # the page
            http.get(f"{url}config").raise_for_status()  # its config: the tour's frames, the recorded run
            rec["page_s"] = time.monotonic() - t0
            page = OpenPage(api, session).__enter__()  # the open tab
            # the default example, then Generate: the page's first step, answered without a queue place
            _, prompt, drafter, _ = av.EXAMPLES[0]
            example = Controls(drafter=drafter, race=True, prompt=prompt).values()
            first = http.post(
                f"{api}run/predict", content=body(ids["start"], [*example, None], session), headers=headers
            )
            first.raise_for_status()
            rec["recorded"] = "sv-recorded" in json.dumps(first.json().get("data", []))
            # the visitor's own prompt, 64 tokens, the default drafter: through the queue, its stream read
            own = Controls(prompt=OWN_PROMPTS[k % len(OWN_PROMPTS)], max_new=64).values()
            clicked = time.monotonic()
            joined = http.post(
                f"{api}queue/join", content=body(ids["run"], [*own, None, None], session), headers=headers
            )
            if joined.status_code != 200:
                rec["refused"] = f"{joined.status_code}: {joined.text[:160]}"
                return
            with http.stream("GET", f"{api}queue/data", params={"session_hash": session}) as stream:
                for line in stream.iter_lines():
                    if not line.startswith("data:"):
                        continue
                    msg = json.loads(line[5:])
                    if msg.get("msg") == "process_starts":
                        rec["wait_s"] = time.monotonic() - clicked
                    elif msg.get("msg") == "process_generating" and "first_frame_s" not in rec:
                        rec["first_frame_s"] = time.monotonic() - clicked
                    elif msg.get("msg") == "process_completed":
                        rec["done_s"] = time.monotonic() - clicked
                        if not msg.get("success"):
                            rec["error"] = str((msg.get("output") or {}).get("error"))[:160]
                        break
                    elif msg.get("msg") == "close_stream":
                        break
            if "done_s" not in rec and rec["error"] is None:
                rec["error"] = "the stream ended before the run completed"
    except httpx.HTTPError as e:
        rec["error"] = f"{type(e).__name__}: {e}"[:160]
    finally:
        if "page" in locals():
            page.__exit__(None, None, None)
        out.append(rec)


def flooder(url: str, fn: int, per_burst: int, stop: threading.Event, tally: dict) -> None:
    """Joins with fresh session hashes every 2 s, never reading; counts what the server answered."""
    api, headers = f"{url}gradio_api/", {"content-type": "application/json"}
    flood = Controls(prompt=FLOOD_PROMPT, max_new=512).values()
    with httpx.Client(timeout=30) as http:
        while not stop.is_set():
            for _ in range(per_burst):
                try:
                    r = http.post(
                        f"{api}queue/join",
                        content=body(fn, [*flood, None, None], uuid.uuid4().hex),
                        headers=headers,
                    )
                    tally[r.status_code] = tally.get(r.status_code, 0) + 1
                except httpx.HTTPError:
                    tally["error"] = tally.get("error", 0) + 1
            stop.wait(2.0)


def run(url: str, pid: int | None, visitors: int, arrivals_s: float, flood: int, seed: int, log=None) -> dict:
    ids = {"run": fn_index(url, "run"), "start": start_index(url)}
    rng = random.Random(seed)
    begin = time.monotonic() + 1.0
    starts = sorted(begin + rng.uniform(0, arrivals_s) for _ in range(visitors))
    records, tally, stop, rss = [], {}, threading.Event(), []
    rss_before = rss_mib(pid) if pid else None
    flood_thread = threading.Thread(target=flooder, args=(url, ids["run"], flood, stop, tally), daemon=True)
    flood_thread.start()
    threads = [
        threading.Thread(target=visitor, args=(url, ids, k, at, records), daemon=True)
        for k, at in enumerate(starts)
    ]
    for t in threads:
        t.start()
    while any(t.is_alive() for t in threads):
        if pid:
            rss.append(rss_mib(pid))
        time.sleep(1.0)
    stop.set()
    flood_thread.join(10)
    dropped = log.read_text(errors="replace").count("dropped") if log is not None and log.exists() else None
    return {
        "records": records,
        "flood": tally,
        "dropped_lines": dropped,
        "rss_before": rss_before,
        "rss_peak": max(rss) if rss else None,
        "rss_after": rss_mib(pid) if pid else None,
    }


def start_index(url: str) -> int:
    """The index of Generate's first step (run.start_run: a queue=False event of the run button)."""
    config = httpx.get(f"{url}config", timeout=30).json()
    run = fn_index(url, "run")
    chain = {d["id"]: d for d in config["dependencies"]}
    # the run's chain: start_run -> live_or_served -> run; walk back from the run to its first step
    k = run
    while chain[k].get("trigger_after") is not None:
        k = chain[k]["trigger_after"]
    return k


def report(result: dict, visitors: int, arrivals_s: float, flood: int) -> str:
    recs = result["records"]
    done = [r for r in recs if "done_s" in r and not r["error"]]
    refused = [r for r in recs if r["refused"]]
    errors = [r for r in recs if r["error"]]
    waits = [r.get("wait_s", 0) for r in done]
    totals = [r["done_s"] for r in done]
    pages = [r["page_s"] for r in recs if "page_s" in r]
    lines = [
        f"Classroom: {visitors} visitors arriving within {arrivals_s:g} s, each: page + config, the tour (in the "
        f"browser), the default example, one 64-token ngram run of its own; a flooder sending {flood} unread joins "
        f"every 2 s from the same address.",
        f"Host: {host_line()}",
        f"- visitors whose own run completed: {len(done)}/{visitors}; refused: {len(refused)}; errors: {len(errors)}",
        f"- the default example served from the start-up recording: {sum(r['recorded'] for r in recs)}/{visitors}",
        f"- page + config load: p50 {median(pages):.2f} s, p95 {pct(pages, 95):.2f} s",
        f"- own run, wait for a slot: p50 {median(waits):.1f} s, p95 {pct(waits, 95):.1f} s",
        f"- own run, wait + completion: p50 {median(totals):.1f} s, p95 {pct(totals, 95):.1f} s, "
        f"max {max(totals, default=float('nan')):.1f} s",
        f"- the flood's joins answered: {dict(sorted(result['flood'].items(), key=str))}; server log lines "
        f"'dropped' (unread jobs dropped, none ran): {result['dropped_lines']}",
    ]
    if result["rss_before"] is not None:
        lines.append(
            f"- server RSS: {result['rss_before']:.0f} MiB before, peak {result['rss_peak']:.0f}, "
            f"after {result['rss_after']:.0f} MiB"
        )
    for r in (refused + errors)[:5]:
        lines.append(f"  - visitor {r['visitor']}: {r['refused'] or r['error']}")
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks classroom", description=__doc__.split("\n\n")[0])
    p.add_argument("--visitors", type=int, default=50, help="visitors arriving (default 50)")
    p.add_argument("--arrivals-s", type=float, default=60.0, help="they arrive within this many seconds (60)")
    p.add_argument("--flood", type=int, default=50, help="unread joins the flooder sends every 2 s (50)")
    p.add_argument("--seed", type=int, default=0, help="arrival times' seed")
    p.add_argument("--url", default=None, help="a running server (default: start app.py on a free port)")
    p.add_argument("--pid", type=int, default=None, help="that server's process id, for its RSS")
    p.add_argument("--out", default=None, help="also write the report to this file")
    args = p.parse_args(argv)
    if args.url:
        result = run(args.url, args.pid, args.visitors, args.arrivals_s, args.flood, args.seed)
    else:
        with serve_app() as url:
            port = url.rstrip("/").rsplit(":", 1)[1]
            log = Path(os.environ.get("TMPDIR", "/tmp")) / f"specviz-app-{port}.log"  # serve_app's log
            result = run(url, url.pid, args.visitors, args.arrivals_s, args.flood, args.seed, log)
    text = report(result, args.visitors, args.arrivals_s, args.flood)
    print(text)
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            f.write(text + "\n")
    return 0
