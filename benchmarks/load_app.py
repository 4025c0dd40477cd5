"""Load the app the way a busy public Space is loaded, on loopback only, for a bounded time.

    .venv/bin/python benchmarks/load_app.py                 # starts `python app.py` on a free port
    .venv/bin/python benchmarks/load_app.py --url http://127.0.0.1:7860/ --pid 1234

For --seconds it keeps 8 streaming /generate clients busy, while another client starts long runs and
disconnects (half cancel, half drop the connection), and another uploads the largest allowed trace and
loads it in a fresh session. Then it prints latency percentiles (queue wait + run), the server's RSS
after one warm-up run (the engine's first run allocates its working buffers once), its highest sample
during the load and after it (its pid is known when this script started it, or given with --pid), and
the errors.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from urllib.parse import urlparse

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from engine.events import MAX_TRACE_BYTES, trace_to_json  # noqa: E402
from specviz.demo_trace import long_events  # noqa: E402
from tests.app_server import call_event, fn_index, serve_app, upload  # noqa: E402

PROMPTS = [
    "Copy this sentence exactly: the quick brown fox jumps over the lazy dog.",
    "Name three colours.",
    "Count from one to ten.",
    "Say hello in French, Spanish and German.",
]
LONG = "Write a long story about a lighthouse keeper and a storm."


def rss_mib(pid: int | None) -> float | None:
    if pid is None:
        return None
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return None


def largest_trace(folder: Path) -> Path:
    """A valid trace just under the server's MAX_TRACE_BYTES."""
    per_round = len(trace_to_json(long_events(100))) / 100
    rounds = int(MAX_TRACE_BYTES * 0.98 / per_round)
    while True:
        text = trace_to_json(long_events(rounds))
        if len(text.encode()) <= MAX_TRACE_BYTES:
            path = folder / "largest-trace.json"
            path.write_text(text, encoding="utf-8")
            return path
        rounds -= 20


class Tally:
    """Latencies and errors, by kind, from every worker thread."""

    def __init__(self):
        self.lock = threading.Lock()
        self.latency: dict[str, list[float]] = {}
        self.errors: dict[str, list[str]] = {}

    def ok(self, kind: str, seconds: float) -> None:
        with self.lock:
            self.latency.setdefault(kind, []).append(seconds)

    def error(self, kind: str, message: str) -> None:
        with self.lock:
            self.errors.setdefault(kind, []).append(message[:200])


def streaming_client(url: str, n: int, until: float, tally: Tally, max_new: int) -> None:
    """Stream /generate calls back to back; time to the first round and to the final reply."""
    import gradio_client

    client = gradio_client.Client(url, verbose=False)
    k = 0
    while time.monotonic() < until:
        prompt = f"{PROMPTS[(n + k) % len(PROMPTS)]} ({n}.{k})"
        started, first = time.monotonic(), None
        try:
            job = client.submit(prompt, "ngram", 4, max_new, 0.0, 0, api_name="/generate")
            for _ in job:
                first = first or time.monotonic() - started
            text, summary = job.result()
            if not text or json.loads(summary).get("stop_reason") not in ("eos", "max_new_tokens"):
                tally.error("generate", f"odd reply: {text[:40]!r} {summary[:80]}")
            else:
                tally.ok("generate first round", first or 0.0)
                tally.ok("generate whole run", time.monotonic() - started)
        except Exception as e:  # every failure is counted, none stops the load
            tally.error("generate", f"{type(e).__name__}: {e}")
        k += 1


def disconnecting_client(url: str, until: float, tally: Tally) -> None:
    """Start long runs and walk away: cancel one, drop the next one's connection mid-stream."""
    import gradio_client
    import httpx

    k = 0
    while time.monotonic() < until:
        try:
            if k % 2 == 0:
                job = gradio_client.Client(url, verbose=False).submit(
                    LONG, "ngram", 4, 256, 0.0, 0, api_name="/generate"
                )
                while not job.outputs() and not job.done():
                    time.sleep(0.1)
                job.cancel()
            else:
                session = uuid.uuid4().hex
                body = {
                    "data": [LONG, "ngram", 4, 256, 0.0, 0, "embedded"],
                    "fn_index": fn_index(url, "generate"),
                    "session_hash": session,
                }
                with httpx.Client(timeout=300) as http:
                    http.post(f"{url}gradio_api/queue/join", json=body).raise_for_status()
                    with http.stream(
                        "GET", f"{url}gradio_api/queue/data", params={"session_hash": session}
                    ) as s:
                        for line in s.iter_lines():
                            if '"process_generating"' in line:
                                break  # the connection closes here, mid-run
            tally.ok("disconnect", 0.0)
        except Exception as e:
            tally.error("disconnect", f"{type(e).__name__}: {e}")
        k += 1
        time.sleep(2)


def uploading_client(url: str, trace: Path, until: float, tally: Tally) -> None:
    """Upload the largest allowed trace and load it in a fresh session, again and again."""
    while time.monotonic() < until:
        started = time.monotonic()
        try:
            result = call_event(url, "load_trace", [upload(url, trace)], uuid.uuid4().hex)
            if result["error"] or result["warnings"]:
                tally.error("upload", str(result["error"] or result["warnings"]))
            else:
                tally.ok("upload + load largest trace", time.monotonic() - started)
        except Exception as e:
            tally.error("upload", f"{type(e).__name__}: {e}")
        time.sleep(1)


def percentiles(values: list[float]) -> str:
    values = sorted(values)
    at = lambda q: values[min(len(values) - 1, int(q * len(values)))]  # noqa: E731
    return f"n={len(values):4d}  p50 {at(0.5):6.2f} s  p90 {at(0.9):6.2f} s  max {values[-1]:6.2f} s"


def run(url: str, pid: int | None, seconds: float, clients: int, max_new: int) -> int:
    host = urlparse(url).hostname
    if host not in ("127.0.0.1", "localhost", "::1"):
        raise SystemExit(f"loopback only: {url} is not on this machine")
    import gradio_client

    trace = largest_trace(Path(tempfile.mkdtemp(prefix="specviz-load-")))
    gradio_client.Client(url, verbose=False).predict(PROMPTS[0], "ngram", 4, 8, 0.0, 0, api_name="/generate")
    before, samples = rss_mib(pid), []
    tally, until = Tally(), time.monotonic() + seconds
    workers = [
        threading.Thread(target=streaming_client, args=(url, n, until, tally, max_new))
        for n in range(clients)
    ]
    workers += [
        threading.Thread(target=disconnecting_client, args=(url, until, tally)),
        threading.Thread(target=uploading_client, args=(url, trace, until, tally)),
    ]
    started = time.monotonic()
    for w in workers:
        w.start()
    while any(w.is_alive() for w in workers):
        samples.append(rss_mib(pid) or 0.0)
        time.sleep(1)
    after = rss_mib(pid)
    print(
        f"{clients} streaming /generate clients ({max_new} new tokens each), 1 disconnecting client, "
        f"1 uploading a {trace.stat().st_size / 2**20:.2f} MiB trace; {time.monotonic() - started:.0f} s"
    )
    for kind, values in sorted(tally.latency.items()):
        print(f"  {kind:28s} {percentiles(values) if kind != 'disconnect' else f'n={len(values):4d}'}")
    if before is not None:
        print(
            f"  server RSS {before:.0f} MiB after a warm-up run, {max(samples):.0f} MiB at most during the load, "
            f"{after:.0f} MiB after"
        )
    n_errors = sum(len(v) for v in tally.errors.values())
    print(f"  errors: {n_errors}")
    for kind, messages in tally.errors.items():
        for m in sorted(set(messages))[:5]:
            print(f"    {kind}: {m}")
    return 1 if n_errors else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", help="a running app on loopback (default: start one)")
    parser.add_argument("--pid", type=int, help="the running app's process id, for its RSS")
    parser.add_argument("--seconds", type=float, default=90, help="how long new requests are started")
    parser.add_argument("--clients", type=int, default=8, help="streaming /generate clients")
    parser.add_argument("--max-new-tokens", type=int, default=32)
    args = parser.parse_args()
    if args.url:
        return run(args.url.rstrip("/") + "/", args.pid, args.seconds, args.clients, args.max_new_tokens)
    with serve_app() as url:
        return run(url, url.pid, args.seconds, args.clients, args.max_new_tokens)


if __name__ == "__main__":
    sys.exit(main())
