"""`python -m benchmarks [...]`: race our AR, our speculative engine and transformers' generate() (see README)."""

from __future__ import annotations

import argparse
import runpy
import shlex
import sys
from pathlib import Path

from engine.specs import CONTESTANT_USAGE

from .harness import run_bench
from .report import write_reports


def parser() -> argparse.ArgumentParser:
    b = argparse.ArgumentParser(
        prog="python -m benchmarks",
        description="race our AR, our speculative engine and transformers' generate()",
    )
    b.add_argument("--target", default="embedded", help="'embedded', a hub id or a local directory")
    b.add_argument("--drafts", default="self", help=f"comma-separated contestants: {CONTESTANT_USAGE}")
    b.add_argument("--gammas", default="1,2,4,8", help="comma-separated draft lengths")
    b.add_argument(
        "--prompts",
        metavar="FILE.jsonl",
        default=None,
        help='JSON lines {"category": ..., "prompt": ...} (default: engine/prompts/bench.jsonl)',
    )
    b.add_argument("--categories", default="", help="comma-separated categories to keep (default: all)")
    b.add_argument(
        "--limit", type=int, default=None, help="keep only the first N prompts (after --categories)"
    )
    b.add_argument("--max-new-tokens", type=int, default=64)
    b.add_argument(
        "--repeats", type=int, default=3, help="timed runs per config and prompt (median reported)"
    )
    b.add_argument(
        "--overhead-pairs", type=int, default=3, help="normal/lean run pairs for the event overhead"
    )
    b.add_argument("--out", default="bench-out", help="folder for results.json, results.md, report.html")
    b.add_argument("--no-hf", action="store_true", help="skip transformers' generate() baselines")
    b.add_argument("--device", default=None, help="cpu, cuda, cuda:1 (default: automatic)")
    b.add_argument("--dtype", default=None, help="fp32, bf16, fp16 (default: bf16 on CUDA, fp32 on CPU)")
    b.add_argument(
        "--num-beams",
        default="",
        metavar="B[,B...]",
        help="race speculative vs plain beam search of these widths (2-8) instead, per drafter (ngram[:N] "
        "or self) and γ, counting target forwards saved; writes beams-<draft>-g<γ>.md/.json in --out",
    )
    return b


def specbench_parser() -> argparse.ArgumentParser:
    b = argparse.ArgumentParser(
        prog="python -m benchmarks specbench",
        description="Spec-Bench's questions, every contestant interleaved per question",
    )
    b.add_argument("--target", default="embedded")
    b.add_argument(
        "--drafts",
        default="ngram,auto",
        help=f"comma-separated contestants: {CONTESTANT_USAGE}; +tree=BxW drafts trees of at most B nodes, "
        "W children tried per node",
    )
    b.add_argument("--gamma", type=int, default=4, help="draft tokens per round, 1..16")
    b.add_argument(
        "--per-category",
        type=int,
        default=10,
        help="questions per leaderboard column (a seeded stratified sample); 0 = all 480",
    )
    b.add_argument("--seed", type=int, default=0)
    b.add_argument("--max-new-tokens", type=int, default=1024, help="per turn (Spec-Bench's default: 1024)")
    b.add_argument("--no-hf", action="store_true", help="skip transformers' generate() rows")
    b.add_argument(
        "--hf-drafts",
        default=None,
        help="comma-separated: transformers' equivalents of only these "
        "drafters (default: of every one that has one); greedy always",
    )
    b.add_argument(
        "--session",
        action="store_true",
        help="one visitor's session: each speculative contestant keeps a history of its earlier answers over "
        "the sample (suffix and auto draft from it)",
    )
    b.add_argument(
        "--corpus",
        default=None,
        help="a datastore (engine/drafters/suffix.py load_corpus): each speculative contestant's history starts "
        "with it (suffix and auto draft from it)",
    )
    b.add_argument(
        "--repeats",
        type=int,
        default=1,
        help="passes over the sample, 1..9: each turn's time is its median over the passes; each pass's "
        "leaderboard is printed too",
    )
    b.add_argument("--out", default="specbench-out")
    return b


def _specbench(argv: list) -> int:
    from .specbench_run import run_specbench

    args = specbench_parser().parse_args(argv)
    results = run_specbench(
        target=args.target,
        drafts=split_list(args.drafts),
        gamma=args.gamma,
        per_category=args.per_category or None,
        seed=args.seed,
        max_new_tokens=args.max_new_tokens,
        hf=not args.no_hf,
        out=args.out,
        hf_drafts=tuple(split_list(args.hf_drafts)) if args.hf_drafts is not None else None,
        session=args.session,
        corpus=args.corpus,
        repeats=args.repeats,
        settle=True,
        command="python -m benchmarks specbench " + shlex.join(argv),
    )
    print(
        f"wrote {Path(args.out) / 'results.json'} and results.md ({results['seconds'] / 60:.1f} min)",
        file=sys.stderr,
    )
    return 0


# `python -m benchmarks forward PROBE`: where a forward's time goes
FORWARD = {
    "ops": "forward_ops",
    "gemm": "small_gemm",
    "step": "step_cost",
    "dtype": "dtype_cost",
    "onednn": "onednn_cost",
    "layouts": "layouts",
    "native": "native_cost",
    "levels": "levels",
    "prefetch": "prefetch",
    "compile": "compile_cost",
    "prefill": "prefill_blocks",
}


def _forward(argv: list) -> int:
    """Run one forward probe (benchmarks/forward/) as a script with the remaining arguments."""
    if not argv or argv[0] in ("-h", "--help") or argv[0] not in FORWARD:
        print(
            "usage: python -m benchmarks forward {"
            + ",".join(FORWARD)
            + "} [ARGS]\n\n"
            + "\n".join(f"  {k:7s} benchmarks/forward/{v}.py" for k, v in FORWARD.items()),
            file=sys.stdout if argv[:1] in (["-h"], ["--help"]) else sys.stderr,
        )
        return 0 if argv[:1] in (["-h"], ["--help"]) else 2
    module = f"benchmarks.forward.{FORWARD[argv[0]]}"
    saved = sys.argv
    sys.argv = [module, *argv[1:]]
    try:
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    finally:
        sys.argv = saved
    return 0


def main(argv=None) -> int:
    """Run the benchmark and write results.json, results.md and report.html (`specbench`: Spec-Bench's
    leaderboard instead); errors: stderr, exit code 2."""
    argv = sys.argv[1:] if argv is None else argv
    try:
        if argv[:1] == ["specbench"]:
            return _specbench(argv[1:])
        if argv[:1] == ["roundcost"]:
            from .roundcost import main as roundcost_main  # a round's host time per drafter beside t(1)

            return roundcost_main(argv[1:])
        if argv[:1] == ["soak"]:
            from .soak import main as soak_main  # a live server's RSS through every kind of request

            return soak_main(argv[1:])
        if argv[:1] == ["forward"]:
            return _forward(argv[1:])
        if argv[:1] == ["classroom"]:
            from .classroom import main as classroom_main  # 50 visitors at once and a flood, on a live server

            return classroom_main(argv[1:])
        if argv[:1] == ["sidebyside"]:
            from .sidebyside import main as side_main  # transformers' assisted generation against our engine

            return side_main(argv[1:])
        if argv[:1] == ["peer"]:
            from .llama_cpp_peer import main as peer_main  # llama.cpp on the same weights (make peer)

            return peer_main(argv[1:]) or 0
        if argv[:1] == ["race"]:  # the default: our drafters against our AR (and transformers')
            argv = argv[1:]
        if argv[:1] == ["batch"]:
            from .batch_bench import main as batch_main  # batched throughput (its own flags)

            return batch_main(argv[1:])
        args = parser().parse_args(argv)
        return _bench(args, argv)
    except (ValueError, OSError, RuntimeError) as e:  # ModelLoadError is a ValueError
        print(f"error: {e}", file=sys.stderr)
        return 2


def _bench(args, argv: list) -> int:
    try:
        gammas = [int(g) for g in split_list(args.gammas)]
        beams = [int(b) for b in split_list(args.num_beams)]
    except ValueError:
        raise ValueError(
            f"--gammas and --num-beams take whole numbers separated by commas, got {args.gammas!r} "
            f"and {args.num_beams!r}"
        ) from None
    if beams:
        return _bench_beams(args, argv, split_list(args.drafts), gammas, beams)
    results = run_bench(
        target=args.target,
        drafts=split_list(args.drafts),
        gammas=gammas,
        prompts=args.prompts,
        max_new_tokens=args.max_new_tokens,
        repeats=args.repeats,
        out=args.out,
        categories=split_list(args.categories) or None,
        hf=not args.no_hf,
        limit=args.limit,
        overhead_pairs=args.overhead_pairs,
        device=args.device,
        dtype=args.dtype,
        command="python -m benchmarks " + shlex.join(argv),
    )
    out = Path(args.out)
    write_reports(results, out)
    print(f"wrote {out / 'results.json'}, {out / 'results.md'}, {out / 'report.html'}", file=sys.stderr)
    if results["mismatches"]:
        print(
            f"WARNING: {results['mismatches']} greedy output(s) differ from our AR output; see results.md",
            file=sys.stderr,
        )
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
            bench_beams(
                Engine(loaded, d),
                beams,
                g,
                args.max_new_tokens,
                prompts,
                str(out / f"beams-{d}-g{g}"),
                command,
            )
    print(f"wrote beams-*.md and beams-*.json in {out}", file=sys.stderr)
    return 0


def split_list(text) -> list:
    return [s.strip() for s in (text or "").split(",") if s.strip()]


if __name__ == "__main__":
    sys.exit(main())
