"""Speculative vs plain beam search of the same width: target forwards saved and the wall-time ratio.

    .venv/bin/python benchmarks/beam_bench.py [--beams 2,4] [--draft ngram] [--gamma 4] [--max-new-tokens 48]
        [--prompts engine/prompts/grounded.jsonl] [--out benchmarks/beam-bench]
    python -m benchmarks --num-beams 2,4 --drafts ngram --gammas 4 [...]   (the same, per drafter and γ)

Each (B, prompt) is one race (Engine.run(compare_ar=True) with num_beams=B): the speculative and the
plain beam search advance interleaved, round by round, on one torch thread, so a load hits both alike.
Counted per lane: target forwards (one per round), beam-search steps (tokens every beam grew by) and
the time of each lane's own compute; checked: both return the same hypotheses. Writes OUT.json and
OUT.md (per prompt and totals).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.common import host, host_line  # noqa: E402
from engine import Engine, GenerationConfig  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


def bench_beams(
    engine: Engine, beams, gamma: int, max_new_tokens: int, prompts: list, out: str, command: str
) -> list:
    """Race speculative vs plain beam search for every width in `beams` and prompt ({"category", "prompt"});
    write OUT.json and OUT.md and return the rows. `python -m benchmarks --num-beams` calls this too."""
    rows = []
    for b in beams:
        cfg = GenerationConfig(num_beams=b, gamma=gamma, max_new_tokens=max_new_tokens)
        # warm-up
        engine.run(prompts[0]["prompt"], GenerationConfig(num_beams=b, max_new_tokens=4), compare_ar=True)
        for p in prompts:
            s = engine.run(p["prompt"], cfg, compare_ar=True).summary
            row = {
                "num_beams": b,
                "category": p["category"],
                "steps": s["steps"],
                "spec_forwards": s["target_forwards"],
                "plain_forwards": s["ar_target_forwards"],
                "forwards_saved": s["ar_target_forwards"] - s["target_forwards"],
                "spec_wall_s": s["wall_s"],
                "plain_wall_s": s["ar_wall_s"],
                "speedup": s["speedup"],
                "reorder_s": s["reorder_s"],
                "reorder_bytes": s["reorder_bytes"],
                "reorders": s["reorders"],
                "plain_reorder_s": s["ar_reorder_s"],
                "plain_reorder_bytes": s["ar_reorder_bytes"],
                "same_beams": s["identical_to_ar"],
            }
            rows.append(row)
            print(json.dumps(row), flush=True)
    lines = [
        f"# Speculative vs plain beam search ({engine.draft_spec}, γ = {gamma}, {max_new_tokens} new tokens)",
        "",
        f"Host: {host_line()}; 1 torch thread per lane (interleaved race).",
        f"Command: `{command}`",
        "",
        "| B | prompt | steps | spec forwards | plain forwards | forwards saved | forwards / token (spec) "
        "| spec s | plain s | plain ÷ spec time | same beams |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['num_beams']} | {r['category']} | {r['steps']} | {r['spec_forwards']} | "
            f"{r['plain_forwards']} | {r['forwards_saved']} | {r['spec_forwards'] / r['steps']:.2f} | "
            f"{r['spec_wall_s']:.2f} | {r['plain_wall_s']:.2f} | {r['speedup']:.2f}× | {r['same_beams']} |"
        )
    for b in sorted({r["num_beams"] for r in rows}):
        rs = [r for r in rows if r["num_beams"] == b]
        steps, sf, pf = (sum(r[k] for r in rs) for k in ("steps", "spec_forwards", "plain_forwards"))
        sw, pw = sum(r["spec_wall_s"] for r in rs), sum(r["plain_wall_s"] for r in rs)
        lines.append(
            f"| {b} | **all** | {steps} | {sf} | {pf} | {pf - sf} | {sf / steps:.2f} | {sw:.2f} | {pw:.2f} | "
            f"{pw / sw:.2f}× | {all(r['same_beams'] for r in rs)} |"
        )
    spec_reorder = sum(r["reorder_s"] for r in rows)
    lines += [
        "",
        f"Beam reordering (gather of cache rows) in the speculative lanes: {sum(r['reorders'] for r in rows)} "
        f"gathers, {sum(r['reorder_bytes'] for r in rows) / 2**20:.0f} MiB copied, {spec_reorder:.2f} s = "
        f"{100 * spec_reorder / sum(r['spec_wall_s'] for r in rows):.1f}% of their time; in the plain lanes "
        f"{sum(r['plain_reorder_bytes'] for r in rows) / 2**20:.0f} MiB, {sum(r['plain_reorder_s'] for r in rows):.2f} s"
        f" = {100 * sum(r['plain_reorder_s'] for r in rows) / sum(r['plain_wall_s'] for r in rows):.1f}%.",
    ]
    Path(out + ".json").write_text(json.dumps({"host": host(), "command": command, "rows": rows}, indent=1))
    Path(out + ".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--beams", default="2,4")
    ap.add_argument("--draft", default="ngram")
    ap.add_argument("--gamma", type=int, default=4)
    ap.add_argument("--max-new-tokens", type=int, default=48)
    ap.add_argument("--prompts", default=str(ROOT / "engine/prompts/grounded.jsonl"))
    ap.add_argument("--out", default=str(ROOT / "benchmarks/results/beam-bench"))
    argv = sys.argv[1:] if argv is None else argv
    args = ap.parse_args(argv)
    prompts = [json.loads(line) for line in Path(args.prompts).read_text().splitlines() if line.strip()]
    bench_beams(
        Engine.load("embedded", args.draft),
        [int(x) for x in args.beams.split(",")],
        args.gamma,
        args.max_new_tokens,
        prompts,
        args.out,
        ".venv/bin/python benchmarks/beam_bench.py " + " ".join(argv),
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
