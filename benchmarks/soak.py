"""Soak a live server through everything a visitor can load, and print its RSS over time:

    .venv/bin/python -m benchmarks soak --cycles 6

Each cycle, in fresh sessions and through the page's own protocol: a run with every drafter the page offers on the
embedded pair (heads and the int8 copy among them), a run of the Gemma pair (a second target and a cross-vocabulary
draft), a batch of B = 16 raced against the AR batch, a B = 8 beam search on a ~1,700-token prompt raced against plain
beam search, the largest trace the server takes uploaded and loaded, and the drift meter. After each cycle the server's RSS (VmRSS) is sampled. The models' LRU (SPECVIZ_MAX_MODELS) and every
cache are bounded, so RSS should plateau after the first cycle or two: the table says whether it did.
"""

from __future__ import annotations

import argparse
import tempfile
import time
import uuid
from pathlib import Path

from engine import Engine, GenerationConfig, load_model
from engine.decode.drift import drift_job
from engine.events import MAX_TRACE_BYTES, trace_to_json
from specviz.demo_trace import long_events
from tests.app_server import call_event, serve_app, upload
from ui import app_views as av
from ui.controls import Controls

from .common import host_line
from .load_app import rss_mib

PROMPT = "Copy this sentence exactly: the quick brown fox jumps over the lazy dog, then list three colours."
GEMMA_PROMPT = "The lighthouse keeper climbed the stairs every evening, and"
LONG_PROMPT = "Copy this text exactly: " + " ".join(
    ["The lighthouse keeper climbed the stairs and watched the storm roll in."] * 110
)  # ~1,700 tokens: the beams' cache rows are large
BATCH = "\n".join(f"Count from {k} to {k + 12}, separated by commas." for k in range(16))


def run_values(pair: str, drafter: str, prompt: str, **kw) -> list:
    """The run endpoint's inputs (Controls order, then the session's run and its history: states the server holds)."""
    return [*Controls(pair=pair, drafter=drafter, prompt=prompt, max_new=24, **kw).values(), None, None]


def largest_trace(folder: Path) -> Path:
    """The largest trace of long_events under MAX_TRACE_BYTES (what the upload limit lets through)."""
    rounds, path = 200, folder / "soak-trace.json"
    while True:
        text = trace_to_json(long_events(rounds * 2))
        if len(text.encode()) > min(MAX_TRACE_BYTES, 5.9 * 2**20):
            return path
        path.write_text(text, encoding="utf-8")
        rounds *= 2


def cycle(url: str, trace: Path) -> list[str]:
    """One pass through every kind of request; returns the errors (each 'what: message')."""
    errors = []

    def call(what: str, name: str, data: list):
        result = call_event(url, name, data, uuid.uuid4().hex, timeout_s=600)
        if result["error"]:
            errors.append(f"{what}: {result['error'][:120]}")

    for drafter in av.drafter_choices()[:-1]:  # the preset draft model is a hub pair's
        call(f"run {drafter}", "run", run_values(av.EMBEDDED_PAIR, drafter, PROMPT))
    call("run gemma", "run", run_values(av.GEMMA_PAIR, av.PRESET_DRAFT, GEMMA_PROMPT))
    call("batch 16", "batch", [av.EMBEDDED_PAIR, "ngram", 0, 4, 24, BATCH, True])
    call("beams 8, long prompt", "beam", [av.EMBEDDED_PAIR, "ngram", 0, 4, 24, 8, True, LONG_PROMPT])
    call("trace", "load_trace", [upload(url, trace)])
    call(
        "drift",
        "measure_drift",
        run_values(av.EMBEDDED_PAIR, "ngram", PROMPT, temperature=1.0, accept="typical:0.09,0.3")[:-2],
    )
    return errors


def drift_times(samples: int) -> None:
    """The drift meter (engine/decode/drift.py drift_job) at `samples` runs per rule, in this process, on a short and
    a ~1,900-token prompt: its wall time against the server's 180 s bound."""
    cfg = GenerationConfig(temperature=1.0, accept="typical:0.09,0.3")
    long_prompt = " ".join(["The lighthouse keeper climbed the stairs and watched the storm roll in."] * 130)
    for name, prompt in (("short", PROMPT), ("long", long_prompt)):
        engine = Engine(load_model("embedded"), "ngram", measure_step=False)
        t = time.monotonic()
        *_, last = drift_job(engine, prompt, cfg, samples)
        print(
            f"| drift meter, {name} prompt ({len(engine.encode(prompt)):,} tokens), ngram | {samples} runs per rule "
            f"| {time.monotonic() - t:.1f} s | TV {last['lossy']['tv']:.3f}, exact {last['exact']['tv']:.3f} |",
            flush=True,
        )


def main(argv=None) -> int:
    b = argparse.ArgumentParser(prog="python -m benchmarks soak", description=__doc__.split("\n\n")[0])
    b.add_argument("--cycles", type=int, default=6, help="passes through every kind of request")
    b.add_argument(
        "--drift-samples", default="10", help="SPECVIZ_DRIFT_SAMPLES for the server (small: a soak)"
    )
    b.add_argument(
        "--drift-only",
        type=int,
        metavar="N",
        default=0,
        help="only time the drift meter at N runs per rule (short and long prompt), in this process",
    )
    args = b.parse_args(argv)
    if args.drift_only:
        print(f"# {host_line()}\n| what | n | wall | result |\n|---|---|---|---|")
        drift_times(args.drift_only)
        return 0
    with (
        tempfile.TemporaryDirectory() as tmp,
        serve_app(
            SPECVIZ_DRIFT_SAMPLES=args.drift_samples,
            SPECVIZ_CLIENT_UPLOADS="1000",
            SPECVIZ_CLIENT_UPLOAD_MB="100000",
        ) as url,
    ):
        trace = largest_trace(Path(tmp))
        t0 = time.monotonic()
        print(
            f"# soak: {host_line()}, {trace.stat().st_size / 2**20:.1f} MiB trace, after start-up "
            f"RSS {rss_mib(url.pid):.0f} MiB",
            flush=True,
        )
        print("| cycle | minutes | RSS MiB | errors |\n|---|---|---|---|", flush=True)
        for k in range(1, args.cycles + 1):
            errors = cycle(url, trace)
            print(
                f"| {k} | {(time.monotonic() - t0) / 60:.1f} | {rss_mib(url.pid):.0f} | "
                f"{'; '.join(errors) or 'none'} |",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
