"""`python -m engine metrics SOURCE`: a serving engine's report read from a file, `-` (stdin) or an http(s) URL of a
server the user runs (its /metrics, or an endpoint that answers with a response), printed as τ, the rate and the
per-position acceptance; `--watch SECONDS` scrapes again and again and prints each window between two scrapes;
`--json` prints the figures as one JSON object a line; `--out FILE` writes the text read (a window: its two scrapes,
one after the other), which the page's Your engine tab reads to the same figures. Only this command fetches a URL:
the public page never does. Plain Python, no torch.
"""

from __future__ import annotations

import json
import sys
import time
import urllib.request
from dataclasses import replace
from pathlib import Path

from .readers import PROMETHEUS_KINDS, pick, read_runs
from .run import MAX_METRICS_BYTES, PROM_PREFIX, MetricsRun, position_rates, rate, tau

FETCH_TIMEOUT = 10.0  # seconds a URL may take to answer
MIN_WATCH = 0.5  # seconds between scrapes, at least


def fetch(source: str) -> str:
    """The text at SOURCE: a file, "-" (stdin) or an http(s) URL; at most MAX_METRICS_BYTES, UTF-8."""
    if source.startswith(("http://", "https://")):
        with urllib.request.urlopen(source, timeout=FETCH_TIMEOUT) as answer:  # noqa: S310 (http(s) only)
            data = answer.read(MAX_METRICS_BYTES + 1)
    elif "://" in source:
        raise ValueError(f"{source}: a file, - or an http(s) URL")
    elif source == "-":
        data = sys.stdin.buffer.read(MAX_METRICS_BYTES + 1)
    else:
        with open(source, "rb") as f:
            data = f.read(MAX_METRICS_BYTES + 1)
    if len(data) > MAX_METRICS_BYTES:
        raise ValueError(f"{source}: more than {MAX_METRICS_BYTES // 2**10} KiB")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise ValueError(f"{source}: not UTF-8 text") from None


def figures(run: MetricsRun) -> dict:
    """The run's figures as one JSON object: τ, the rate and the per-position rates (as floats, each an exact
    ratio of the counts beside it), the model, the engine and the window."""
    t, r = tau(run), rate(run)
    return {
        "tau": None if t is None else float(t),
        "rate": None if r is None else float(r),
        "per_position": [float(x) for x in position_rates(run)],
        "model": run.model,
        "engine": run.reader.engine,
        "kind": run.kind,
        "window": run.window,
        "counts": {k: v for k, v in run.counts().items() if v is not None},
        "notes": list(run.notes),
    }


def _f(value, digits: int) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


def line(run: MetricsRun, label: str) -> str:
    """One window (or one read) in a line: τ, the rate, the per-position rates, the counts."""
    f = figures(run)
    positions = " ".join(_f(x, 2) for x in f["per_position"]) or "–"
    counts = ", ".join(f"{k} {v:,}" for k, v in f["counts"].items())
    return f"{label} τ {_f(f['tau'], 3)} · rate {_f(f['rate'], 3)} · per position {positions} · {counts}"


def read_one(text: str, args) -> MetricsRun:
    runs = read_runs(text, args.kind)
    if len(runs) > 1 and not args.model:
        listed = "; ".join(r.model or "(no labels)" for r in runs)
        print(f"{len(runs)} models in this report, read apart: {listed}", file=sys.stderr)
    return pick(runs, args.model)


def show(run: MetricsRun, args, label: str) -> None:
    if args.json:
        print(json.dumps(figures(run)), flush=True)
    else:
        print(line(run, label), flush=True)


def once(args) -> int:
    text = fetch(args.source)
    run = read_one(text, args)
    show(run, args, f"{run.reader.engine}{' · ' + run.model if run.model else ''}:")
    if not args.json:
        for note in run.notes:
            print(f"  note: {note}")
    if args.out:
        Path(args.out).write_text(text, encoding="utf-8")
    return 0


def pause(seconds: float) -> None:
    """The wait between two scrapes (a test serves a request in it)."""
    time.sleep(seconds)


def spec_lines(text: str) -> str:
    """A scrape's spec-decode samples only (what the readers read): two of a large server's scrapes then fit the
    page's limit."""
    prefixes = tuple(f"{p}spec_decode_" for p in set(PROM_PREFIX.values()))
    return "".join(line + "\n" for line in text.splitlines() if line.lstrip().startswith(prefixes))


def scraped(text: str) -> bool:
    """Whether the text is /metrics (a window is two of them pasted), not a response (read alone)."""
    try:
        return read_runs(text)[0].kind in PROMETHEUS_KINDS
    except ValueError:
        return False


def watch(args) -> int:
    """Scrape every --watch seconds; each window is read from the scrape before and this one, their spec-decode
    samples pasted together (what --out writes)."""
    every = max(args.watch, MIN_WATCH)
    before, at, shown = fetch(args.source), time.monotonic(), 0
    print(f"scrape 1 read; a window every {every:g} s (Ctrl-C stops)", file=sys.stderr, flush=True)
    try:
        while args.windows is None or shown < args.windows:
            pause(every)
            shown += 1
            try:
                text, now = fetch(args.source), time.monotonic()
                pair = spec_lines(before) + spec_lines(text) if scraped(before) else text
                run = read_one(pair, args)
            except (ValueError, OSError) as e:
                print(f"[window {shown}] cannot read: {e}", file=sys.stderr, flush=True)
            else:
                run = replace(run, window={**(run.window or {}), "seconds": round(now - at, 3)})
                show(run, args, f"[window {shown} · {now - at:.1f} s]")
                if args.out:
                    Path(args.out).write_text(pair, encoding="utf-8")
            before, at = text, now
    except KeyboardInterrupt:
        pass
    return 0


HELP = "read a serving engine's speculative metrics (vLLM, SGLang, llama.cpp server, TensorRT-LLM)"


def arguments(m) -> None:
    """`python -m engine metrics SOURCE [--watch S] [--windows N] [--model NAME] [--json] [--out FILE]`."""
    m.add_argument(
        "source", help="a file, - (stdin), or an http(s) URL of your server (/metrics or a response)"
    )
    m.add_argument("--kind", default="auto", help="the report's kind (default: detected)")
    m.add_argument("--model", default=None, help="the model to read where the report holds several")
    m.add_argument(
        "--watch",
        type=float,
        default=None,
        metavar="SECONDS",
        help="scrape again every SECONDS; print each window",
    )
    m.add_argument(
        "--windows", type=int, default=None, metavar="N", help="with --watch: stop after N windows"
    )
    m.add_argument("--json", action="store_true", help="print the figures as one JSON object a line")
    m.add_argument("--out", metavar="FILE", help="write what was read (the page's Your engine tab loads it)")


def metrics_cli(args) -> int:
    return watch(args) if args.watch is not None else once(args)
