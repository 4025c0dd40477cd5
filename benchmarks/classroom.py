"""A classroom at once, with one bad student: N visitors arriving within one minute on a live server (loopback:
every client behind one address, as a school's NAT), each doing the first minute of a visit, beside one attacker:

    .venv/bin/python -m benchmarks classroom [--visitors 60] [--arrivals-s 60] [--attacks unread,cheap,...]

Each visitor, in its own session, does what the page's browser does: loads the page (and with it its client
token, a cookie) and its config, presses Generate on the default example (answered from the start-up recording,
no queue place), then runs one prompt of its own with the default drafter (ngram, 64 new tokens) through the queue,
reading its stream; its page's heartbeat stream is open throughout. The attackers (ATTACKS), each alone and then
all together (`all`), from the same address, following the page's own protocol over raw HTTP:

- unread: joins with fresh session hashes every 2 s, never reading, no page loaded;
- cheap: one page loaded, 24 sessions each keeping 4 of the heaviest jobs joined (a B = 16 batch, a B = 8 beam
  search, the drift meter, a 512-token raced run) and reading their streams;
- heartbeats: 56 fresh sessions each holding a heartbeat stream open, each joining 4 512-token runs, reading them
  only after (the order that passed the old size check);
- sessions: 60 calls every 2 s of a queue=False handler with a fresh session hash each (a new Gradio session);
- slow: one page, 4 sessions joining 512-token runs and reading their streams one line every 5 s.

Printed per scenario: the visitors served, refused and failed, p50/p95 of the wait for a slot and of wait +
completion, the server's CPU seconds and RSS, and what the attacker's requests got.
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


HEADERS = {"content-type": "application/json"}


def count(tally: dict, key) -> None:
    tally[key] = tally.get(key, 0) + 1


def read_stream(http, api: str, session: str, tally: dict, pause_s: float = 0.0) -> None:
    """Read a session's result stream to its end (pause_s between lines: a slow reader); counts how its jobs
    ended (completed, refused in words, failed)."""
    try:
        with http.stream("GET", f"{api}queue/data", params={"session_hash": session}) as stream:
            for line in stream.iter_lines():
                if pause_s:
                    time.sleep(pause_s)
                if not line.startswith("data:"):
                    continue
                msg = json.loads(line[5:])
                if msg.get("msg") == "process_completed":
                    count(tally, "completed" if msg.get("success") else "ended with a message")
                elif msg.get("msg") == "close_stream":
                    return
    except (httpx.HTTPError, RuntimeError):  # the server ended it, or the attacker left (its client closed)
        count(tally, "stream cut")


def heavy_jobs(ids: dict) -> list:
    """The heaviest jobs the page offers: (fn, data) of a B = 16 batch raced, a B = 8 beam search raced, the drift
    meter and a 512-token raced run, each of 512 new tokens."""
    pair = av.EMBEDDED_PAIR
    batch = "\n".join(OWN_PROMPTS * 2)
    controls = Controls(prompt=FLOOD_PROMPT, max_new=512, race=True, temperature=1.0).values()
    return [
        (ids["batch"], [pair, "ngram", 0, 4, 512, batch, True]),
        (ids["beam"], [pair, "ngram", 0, 4, 512, 8, True, FLOOD_PROMPT]),
        (ids["measure_drift"], controls),
        (ids["run"], [*controls, None, None]),
    ]


def bursts(
    url: str, route: str, fn: int, data: list, per_burst: int, stop: threading.Event, tally: dict
) -> None:
    """`per_burst` POSTs to gradio_api/<route> every 2 s, each with a fresh session hash, never reading."""
    with httpx.Client(timeout=30) as http:
        while not stop.is_set():
            for _ in range(per_burst):
                try:
                    r = http.post(
                        f"{url}gradio_api/{route}", content=body(fn, data, uuid.uuid4().hex), headers=HEADERS
                    )
                    count(tally, r.status_code)
                except httpx.HTTPError:
                    count(tally, "error")
            stop.wait(2.0)


def unread(url: str, ids: dict, stop: threading.Event, tally: dict) -> None:
    """50 joins with fresh session hashes every 2 s, never reading, no page loaded."""
    flood = [*Controls(prompt=FLOOD_PROMPT, max_new=512).values(), None, None]
    bursts(url, "queue/join", ids["run"], flood, 50, stop, tally)


def cheap(
    url: str, ids: dict, stop: threading.Event, tally: dict, sessions: int = 24, per_session: int = 4
) -> None:
    """One page loaded; `sessions` sessions, each keeping `per_session` heavy jobs joined and reading them."""
    api, jobs = f"{url}gradio_api/", heavy_jobs(ids)
    http = httpx.Client(timeout=600)
    http.get(url)  # the page: its token

    def one(k: int) -> None:
        session = f"cheap-{k}-{uuid.uuid4().hex[:8]}"
        while not stop.is_set():
            for j in range(per_session):
                fn, data = jobs[(k + j) % len(jobs)]
                try:
                    count(
                        tally,
                        http.post(
                            f"{api}queue/join", content=body(fn, data, session), headers=HEADERS
                        ).status_code,
                    )
                except httpx.HTTPError:
                    count(tally, "error")
            read_stream(http, api, session, tally)
            stop.wait(1.0)

    threads = [threading.Thread(target=one, args=(k,), daemon=True) for k in range(sessions)]
    for t in threads:
        t.start()
    stop.wait()
    http.close()  # the attacker leaves: its streams end


def heartbeats(url: str, ids: dict, stop: threading.Event, tally: dict, sessions: int = 56) -> None:
    """Fresh sessions each holding a heartbeat stream open (no page loaded), each joining 4 512-token runs, then
    reading them; again every round."""
    api, data = f"{url}gradio_api/", [*Controls(prompt=FLOOD_PROMPT, max_new=512).values(), None, None]
    with httpx.Client(timeout=600) as http:
        while not stop.is_set():
            pages = [OpenPage(api, uuid.uuid4().hex[:12]) for _ in range(sessions)]
            for page in pages:
                page.__enter__()
            try:
                for page in pages:
                    for _ in range(4):
                        try:
                            r = http.post(
                                f"{api}queue/join",
                                content=body(ids["run"], data, page.session),
                                headers=HEADERS,
                            )
                            count(tally, r.status_code)
                        except httpx.HTTPError:
                            count(tally, "error")
                readers = [
                    threading.Thread(target=read_stream, args=(http, api, p.session, tally), daemon=True)
                    for p in pages
                ]
                for t in readers:
                    t.start()
                while any(t.is_alive() for t in readers) and not stop.is_set():
                    stop.wait(1.0)
            finally:
                for page in pages:
                    page.__exit__(None, None, None)


def sessions(url: str, ids: dict, stop: threading.Event, tally: dict) -> None:
    """60 calls every 2 s of a queue=False handler (Generate's first step), each with a fresh session hash."""
    bursts(url, "run/predict", ids["start"], [*Controls(prompt="hi").values(), None], 60, stop, tally)


def slow(url: str, ids: dict, stop: threading.Event, tally: dict, n: int = 4) -> None:
    """One page; n sessions joining 512-token runs and reading their streams one line every 5 s."""
    api, data = f"{url}gradio_api/", [*Controls(prompt=FLOOD_PROMPT, max_new=512).values(), None, None]
    http = httpx.Client(timeout=600)
    http.get(url)

    def one(k: int) -> None:
        while not stop.is_set():
            session = f"slow-{k}-{uuid.uuid4().hex[:8]}"
            try:
                count(
                    tally,
                    http.post(
                        f"{api}queue/join", content=body(ids["run"], data, session), headers=HEADERS
                    ).status_code,
                )
            except httpx.HTTPError:
                count(tally, "error")
            read_stream(http, api, session, tally, pause_s=5.0)

    for k in range(n):
        threading.Thread(target=one, args=(k,), daemon=True).start()
    stop.wait()
    http.close()  # the attacker leaves: its streams end


ATTACKS = {"unread": unread, "cheap": cheap, "heartbeats": heartbeats, "sessions": sessions, "slow": slow}


def cpu_s(pid: int | None) -> float | None:
    """The process's user + system CPU seconds so far."""
    if pid is None:
        return None
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def settle(pid: int | None, timeout_s: float = 120.0) -> None:
    """Wait until the server computes nothing (under 0.2 CPU-s a second), at most timeout_s."""
    deadline = time.monotonic() + timeout_s
    while pid and time.monotonic() < deadline:
        before = cpu_s(pid)
        time.sleep(2.0)
        if cpu_s(pid) - before < 0.4:
            return
    if not pid:
        time.sleep(10.0)


def run(
    url: str, pid: int | None, visitors: int, arrivals_s: float, attack: str, seed: int, log=None
) -> dict:
    """One scenario: the visitors arriving beside `attack` (a name of ATTACKS, "all", or "none")."""
    ids = {name: fn_index(url, name) for name in ("run", "batch", "beam", "measure_drift")}
    ids["start"] = start_index(url)
    rng = random.Random(seed)
    begin = time.monotonic() + 3.0  # the attacker first
    starts = sorted(begin + rng.uniform(0, arrivals_s) for _ in range(visitors))
    records, stop, rss = [], threading.Event(), []
    names = list(ATTACKS) if attack == "all" else [] if attack == "none" else [attack]
    tallies = {name: {} for name in names}
    dropped0 = log.read_text(errors="replace").count("dropped") if log is not None and log.exists() else 0
    rss_before, cpu_before, load = rss_mib(pid) if pid else None, cpu_s(pid), os.getloadavg()[0]
    attackers = [
        threading.Thread(target=ATTACKS[n], args=(url, ids, stop, tallies[n]), daemon=True) for n in names
    ]
    for t in attackers:
        t.start()
    threads = [
        threading.Thread(target=visitor, args=(url, ids, k, at, records), daemon=True)
        for k, at in enumerate(starts)
    ]
    t0 = time.monotonic()
    for t in threads:
        t.start()
    while any(t.is_alive() for t in threads):
        if pid:
            rss.append(rss_mib(pid))
        time.sleep(1.0)
    wall = time.monotonic() - t0
    stop.set()
    for t in attackers:
        t.join(5)
    settle(pid)  # the attacker left: what it left in line is dropped or stops, before the next scenario
    dropped = (
        log.read_text(errors="replace").count("dropped") - dropped0
        if log is not None and log.exists()
        else None
    )
    return {
        "attack": attack,
        "records": records,
        "tallies": tallies,
        "dropped_lines": dropped,
        "rss_before": rss_before,
        "rss_peak": max(rss) if rss else None,
        "rss_after": rss_mib(pid) if pid else None,
        "cpu_s": cpu_s(pid) - cpu_before if pid else None,
        "wall_s": wall,
        "load": load,
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


def report(result: dict, visitors: int) -> str:
    """One scenario's lines."""
    recs = result["records"]
    done = [r for r in recs if "done_s" in r and not r["error"]]
    refused = [r for r in recs if r["refused"]]
    errors = [r for r in recs if r["error"]]
    waits = [r.get("wait_s", 0) for r in done]
    totals = [r["done_s"] for r in done]
    lines = [
        f"### attacker: {result['attack']}",
        f"- visitors whose own run completed: {len(done)}/{visitors}; refused: {len(refused)}; errors: {len(errors)}",
        f"- own run, wait for a slot: p50 {median(waits):.1f} s, p95 {pct(waits, 95):.1f} s; wait + completion: "
        f"p50 {median(totals):.1f} s, p95 {pct(totals, 95):.1f} s, max {max(totals, default=float('nan')):.1f} s",
    ]
    if result["cpu_s"] is not None:
        lines.append(
            f"- server: {result['cpu_s']:.0f} CPU-s over {result['wall_s']:.0f} s; RSS {result['rss_before']:.0f} MiB "
            f"before, peak {result['rss_peak']:.0f}, after {result['rss_after']:.0f} MiB; host load "
            f"{result['load']:.1f} at the start"
        )
    for name, tally in result["tallies"].items():
        lines.append(f"- {name}'s requests answered: {dict(sorted(tally.items(), key=str))}")
    if result["dropped_lines"] is not None:
        lines.append(f"- unread jobs dropped (server log): {result['dropped_lines']}")
    for r in (refused + errors)[:3]:
        lines.append(f"  - visitor {r['visitor']}: {r['refused'] or r['error']}")
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks classroom", description=__doc__.split("\n\n")[0])
    p.add_argument("--visitors", type=int, default=60, help="visitors arriving (default 60)")
    p.add_argument("--arrivals-s", type=float, default=60.0, help="they arrive within this many seconds (60)")
    p.add_argument(
        "--attacks",
        default=",".join([*ATTACKS, "all"]),
        help=f"scenarios in turn, comma-separated: none, {', '.join(ATTACKS)}, all (default: each, then all)",
    )
    p.add_argument("--seed", type=int, default=0, help="arrival times' seed")
    p.add_argument("--url", default=None, help="a running server (default: start app.py on a free port)")
    p.add_argument("--pid", type=int, default=None, help="that server's process id, for its CPU and RSS")
    p.add_argument("--out", default=None, help="also write the report to this file")
    args = p.parse_args(argv)
    attacks = [a.strip() for a in args.attacks.split(",") if a.strip()]
    unknown = [a for a in attacks if a not in (*ATTACKS, "all", "none")]
    if unknown:
        p.error(f"unknown attack {unknown[0]!r}: choose from none, {', '.join(ATTACKS)}, all")
    head = (
        f"Classroom: {args.visitors} visitors arriving within {args.arrivals_s:g} s behind one address, each: page + "
        f"config (its token), the default example, one 64-token ngram run of its own, beside one attacker."
    )
    texts = [head, f"Host: {host_line()}"]
    print("\n".join(texts), flush=True)

    def scenarios(url, pid, log=None):
        for attack in attacks:
            text = report(
                run(url, pid, args.visitors, args.arrivals_s, attack, args.seed, log), args.visitors
            )
            print(text, flush=True)
            texts.append(text)

    if args.url:
        scenarios(args.url, args.pid)
    else:
        with serve_app() as url:
            port = url.rstrip("/").rsplit(":", 1)[1]
            log = Path(os.environ.get("TMPDIR", "/tmp")) / f"specviz-app-{port}.log"  # serve_app's log
            scenarios(url, url.pid, log)
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            f.write("\n".join(texts) + "\n")
    return 0
