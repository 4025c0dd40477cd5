"""`python -m benchmarks [...]`: race our AR, our speculative engine and transformers' generate() (see README)."""
from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

from .harness import run_bench
from .report import write_reports


def parser() -> argparse.ArgumentParser:
    b = argparse.ArgumentParser(prog="python -m benchmarks",
                                description="race our AR, our speculative engine and transformers' generate()")
    b.add_argument("--target", default="embedded", help="'embedded', a hub id or a local directory")
    b.add_argument("--drafts", default="self", help="comma-separated drafter specs, e.g. ngram,auto,self,model:<path>")
    b.add_argument("--gammas", default="1,2,4,8", help="comma-separated draft lengths")
    b.add_argument("--prompts", metavar="FILE.jsonl", default=None,
                   help='JSON lines {"category": ..., "prompt": ...} (default: engine/prompts/bench.jsonl)')
    b.add_argument("--categories", default="", help="comma-separated categories to keep (default: all)")
    b.add_argument("--limit", type=int, default=None, help="keep only the first N prompts (after --categories)")
    b.add_argument("--max-new-tokens", type=int, default=64)
    b.add_argument("--repeats", type=int, default=3, help="timed runs per config and prompt (median reported)")
    b.add_argument("--overhead-pairs", type=int, default=3, help="normal/lean run pairs for the event overhead")
    b.add_argument("--out", default="bench-out", help="folder for results.json, results.md, report.html")
    b.add_argument("--no-hf", action="store_true", help="skip transformers' generate() baselines")
    b.add_argument("--device", default=None, help="cpu, cuda, cuda:1 (default: automatic)")
    b.add_argument("--dtype", default=None, help="fp32, bf16, fp16 (default: bf16 on CUDA, fp32 on CPU)")
    b.add_argument("--num-beams", default="", metavar="B[,B...]",
                   help="race speculative vs plain beam search of these widths (2-8) instead, per drafter (ngram[:N] "
                        "or self) and γ, counting target forwards saved; writes beams-<draft>-g<γ>.md/.json in --out")
    return b


def main(argv=None) -> int:
    """Run the benchmark and write results.json, results.md and report.html; errors: stderr, exit code 2."""
    argv = sys.argv[1:] if argv is None else argv
    args = parser().parse_args(argv)
    try:
        return _bench(args, argv)
    except (ValueError, OSError, RuntimeError) as e:  # ModelLoadError is a ValueError
        print(f"error: {e}", file=sys.stderr)
        return 2


def _bench(args, argv: list) -> int:
    try:
        gammas = [int(g) for g in split_list(args.gammas)]
        beams = [int(b) for b in split_list(args.num_beams)]
    except ValueError:
        raise ValueError(f"--gammas and --num-beams take whole numbers separated by commas, got {args.gammas!r} "
                         f"and {args.num_beams!r}") from None
    if beams:
        return _bench_beams(args, argv, split_list(args.drafts), gammas, beams)
    results = run_bench(target=args.target, drafts=split_list(args.drafts), gammas=gammas, prompts=args.prompts,
                        max_new_tokens=args.max_new_tokens, repeats=args.repeats, out=args.out,
                        categories=split_list(args.categories) or None, hf=not args.no_hf, limit=args.limit,
                        overhead_pairs=args.overhead_pairs, device=args.device, dtype=args.dtype,
                        command="python -m benchmarks " + shlex.join(argv))
    out = Path(args.out)
    write_reports(results, out)
    print(f"wrote {out / 'results.json'}, {out / 'results.md'}, {out / 'report.html'}", file=sys.stderr)
    if results["mismatches"]:
        print(f"WARNING: {results['mismatches']} greedy output(s) differ from our AR output; see results.md",
              file=sys.stderr)
    return 0


def _bench_beams(args, argv: list, drafts: list, gammas: list, beams: list) -> int:
    """Speculative vs plain beam search of each width, per drafter and γ (benchmarks/beam_bench.py)."""
    from engine import Engine, GenerationConfig, load_model
    from engine.specs import check_beams

    from .beam_bench import bench_beams
    from .harness import load_prompts

    for b in beams:
        GenerationConfig(num_beams=b)  # the range, with the user-facing message
    for d in drafts:
        check_beams(d)
    prompts = load_prompts(args.prompts, split_list(args.categories) or None, args.limit)
    loaded = load_model(args.target, args.device, args.dtype)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    command = "python -m benchmarks " + shlex.join(argv)
    for d in drafts:
        for g in gammas:
            bench_beams(Engine(loaded, d), beams, g, args.max_new_tokens, prompts, str(out / f"beams-{d}-g{g}"),
                        command)
    print(f"wrote beams-*.md and beams-*.json in {out}", file=sys.stderr)
    return 0


def split_list(text) -> list:
    return [s.strip() for s in (text or "").split(",") if s.strip()]


if __name__ == "__main__":
    sys.exit(main())
