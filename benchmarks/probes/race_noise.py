"""Is the race's verdict robust to a busy machine? The interleaved race vs the old sequential way.

    .venv/bin/python benchmarks/probes/race_noise.py [--draft ngram] [--gamma 4] [--max-new-tokens 64]

For each of the 6 grounded prompts (engine/prompts/grounded.jsonl), measures the speedup over AR on a
quiet machine and again while a CPU-burning process runs beside it, switching its load on and off at
random every 0.3-1.5 s (bounded: it stops by itself after --burn-s seconds and is killed at the end),
three ways, one after the other for each prompt:
  - interleaved, 1 thread: Engine.run(compare_ar=True) as it ships: the two lanes advance round by round
    on one OS thread and compute with one torch thread (RACE_THREADS);
  - interleaved, all threads: the same with torch's default thread count (race_threads=None);
  - sequential: the speculative run, then the AR run, each timed on its own with the default threads
    (how the race worked before).
Prints each prompt's speedups and how far the noisy one moved from the quiet one, then the medians.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
import torch  # noqa: E402

from engine import Engine, GenerationConfig  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
BURNER = """
import random, time
end = time.time() + {seconds}
rng = random.Random({seed})
while time.time() < end:
    busy_until = time.time() + rng.uniform(0.3, 1.5)
    while time.time() < busy_until:
        pass
    time.sleep(rng.uniform(0.3, 1.5))
"""


def cpu_name() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines() if Path("/proc/cpuinfo").exists() else []:
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown CPU"


def interleaved(
    engine: Engine, prompt: str, cfg: GenerationConfig, threads: int | None
) -> tuple[float, list]:
    s = engine.run(prompt, cfg, compare_ar=True, race_threads=threads).summary
    return s["speedup"], s["timing_flags"]


def sequential(engine: Engine, prompt: str, cfg: GenerationConfig) -> float:
    spec = list(engine.generate(prompt, cfg))[-1].summary
    ar = list(engine.generate(prompt, cfg, "ar"))[-1].summary
    return spec["tokens_per_s"] / ar["tokens_per_s"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--draft", default="ngram")
    ap.add_argument("--gamma", type=int, default=4)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--burn-s", type=float, default=900, help="the burner stops by itself after this long")
    ap.add_argument(
        "--burners", type=int, default=1, help="CPU-burning processes (1: one core busy; 2: both)"
    )
    args = ap.parse_args()
    prompts = [
        json.loads(line)["prompt"]
        for line in (ROOT / "engine/prompts/grounded.jsonl").read_text().splitlines()
        if line.strip()
    ][:6]
    engine = Engine.load(draft=args.draft)
    cfg = GenerationConfig(gamma=args.gamma, max_new_tokens=args.max_new_tokens)
    ways = {
        "interleaved, 1 thread": lambda p: interleaved(engine, p, cfg, 1),
        f"interleaved, {torch.get_num_threads()} threads": lambda p: interleaved(engine, p, cfg, None),
        "sequential": lambda p: (sequential(engine, p, cfg), []),
    }
    for way in ways.values():  # warm-up
        way(prompts[0])
    print(
        f"# race under load: {args.draft} γ={args.gamma}, {args.max_new_tokens} new tokens, greedy fp32, "
        f"{cpu_name()}, {torch.get_num_threads()} torch threads by default, {args.burners} CPU burner(s)"
    )
    print("| prompt | " + " | ".join(f"{w}: quiet | busy | moved | flagged" for w in ways) + " |")
    print("|---|" + "---|---|---|---|" * len(ways))
    moved = {way: [] for way in ways}
    for k, prompt in enumerate(prompts, 1):
        quiet = {way: run(prompt)[0] for way, run in ways.items()}
        burners = [
            subprocess.Popen([sys.executable, "-c", BURNER.format(seconds=args.burn_s, seed=b + 1)])
            for b in range(args.burners)
        ]
        try:
            busy = {way: run(prompt) for way, run in ways.items()}
        finally:
            for burner in burners:
                burner.kill()
                burner.wait()
        cells = []
        for way in ways:
            m = abs(busy[way][0] / quiet[way] - 1)
            moved[way].append(m)
            flagged = "–" if way == "sequential" else ("yes" if busy[way][1] else "no")
            cells.append(f"{quiet[way]:.2f}× | {busy[way][0]:.2f}× | {m:.0%} | {flagged}")
        print(f"| {k} | " + " | ".join(cells) + " |", flush=True)
    for way, values in moved.items():
        print(
            f"{way}: the busy speedup moved from the quiet one by median {statistics.median(values):.0%}, "
            f"at most {max(values):.0%}"
        )


if __name__ == "__main__":
    main()
