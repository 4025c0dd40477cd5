"""Peak RSS of a process that loads the engine on the embedded model and runs one generation, on the GGUF's blocks
(the default) against SPECVIZ_WEIGHTS=fp32, one fresh process each, alternating.

    .venv/bin/python -m benchmarks.probes.weights_rss [--rounds 2] [--tokens 64] [--draft ngram]
        [--target embedded|embedded-gemma]

Each child prints its RSS after the load (the engine built, the kernel plan read) and its peak (ru_maxrss) after the
generation (tests/test_blocks.py holds the two formats' outputs equal)."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

from benchmarks.common import host_line

PROMPT = "Write a short story about a lighthouse keeper and a storm, in five sentences."


def child(target: str, draft: str, tokens: int) -> dict:
    import resource

    from engine import Engine, GenerationConfig

    def rss_mib() -> float:
        with open("/proc/self/status") as f:
            return next(int(x.split()[1]) for x in f if x.startswith("VmRSS")) / 1024

    engine = Engine.load(target=target, draft=draft)
    loaded = rss_mib()
    engine.run(PROMPT, GenerationConfig(gamma=4, max_new_tokens=tokens, raw=target != "embedded"))
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {"loaded": loaded, "peak": peak, "after": rss_mib()}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(
        prog="python -m benchmarks.probes.weights_rss", description=__doc__.split("\n\n")[0]
    )
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--draft", default="ngram")
    ap.add_argument("--target", default="embedded", help="embedded (SmolLM2) or embedded-gemma")
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.target, args.draft, args.tokens)))
        return
    print(host_line())
    print(f"target {args.target}, draft {args.draft}, {args.tokens} new tokens")
    seen: dict = {"gguf": [], "fp32": []}
    for _ in range(args.rounds):
        for fmt in seen:
            env = dict(os.environ, SPECVIZ_WEIGHTS=fmt)
            cmd = [sys.executable, "-m", "benchmarks.probes.weights_rss", "--child", fmt]
            cmd += ["--tokens", str(args.tokens), "--draft", args.draft, "--target", args.target]
            done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
            seen[fmt].append(json.loads(done.stdout.strip().splitlines()[-1]))
            r = seen[fmt][-1]
            print(
                f"{fmt}: after load {r['loaded']:.0f} MiB, peak {r['peak']:.0f} MiB, after the run {r['after']:.0f} MiB",
                flush=True,
            )
    g, f = (max(r["peak"] for r in seen[k]) for k in ("gguf", "fp32"))
    print(f"\npeak RSS on the blocks {g:.0f} MiB = {g / f:.2f} of fp32's {f:.0f} MiB")


if __name__ == "__main__":
    main()
