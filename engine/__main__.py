"""Command line: `python -m engine generate --prompt TEXT [...]`; `python -m engine kernels` prints this host's
measured kernel plan, `python -m engine roofline` its roofline (the benchmark: `python -m benchmarks`); `python -m
engine metrics SOURCE` reads a serving engine's speculative metrics (engine/serving/cli.py)."""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

from .config import GenerationConfig
from .serving import cli as serving_cli
from .specs import usages


def _generate(args) -> int:
    from .decode.engine import Engine
    from .events import write_trace

    cfg = GenerationConfig(
        gamma=args.gamma,
        max_new_tokens=args.max_new_tokens,
        temperature=args.temperature,
        top_k=args.top_k,
        top_p=args.top_p,
        seed=args.seed,
        raw=args.raw,
        adaptive=args.adaptive,
        p_min=args.p_min,
        tree_budget=args.tree_budget,
        tree_branching=args.tree_branching,
        num_beams=args.num_beams,
    )
    engine = Engine.load(
        args.target,
        args.draft,
        device=args.device,
        dtype=args.dtype,
        trust_remote_code=args.trust_remote_code,
    )
    threads = {} if args.race_threads is None else {"race_threads": args.race_threads or None}
    result = engine.run(args.prompt, cfg, compare_ar=args.compare_ar, **threads)
    if args.trace:
        write_trace(args.trace, result.events)
    s = result.summary
    if args.json:
        out = {
            "text": result.text,
            "token_ids": result.token_ids,
            **{k: v for k, v in s.items() if k != "mode"},
        }
        print(json.dumps(out))
    elif cfg.num_beams > 1:
        print(result.text)
        line = (
            f"\n[beam search B={s['num_beams']}: score {s['score']:.4f}, {s['steps']} steps in {s['target_forwards']} "
            f"target forwards ({s['forwards_saved']} saved), {s['tokens_per_s']:.1f} tok/s"
        )
        if args.compare_ar:
            line += (
                f"; plain beam search {s['ar_target_forwards']} forwards, raced side by side: speedup "
                f"{s['speedup']:.2f}x, {'same beams' if s['identical_to_ar'] else 'different beams'}"
            )
        print(line + "]", file=sys.stderr)
    else:
        print(result.text)
        alpha = f"α {s['alpha']:.2f} per token" if s.get("alpha") is not None else "no drafts tested"
        line = (
            f"\n[{s['rounds']} rounds, {s['accepted']}/{s['drafted']} drafts accepted ({alpha}), "
            f"{s['mean_accepted_length']:.2f} tokens/forward, {s['tokens_per_s']:.1f} tok/s"
        )
        if args.compare_ar:
            line += (
                f"; AR {s['ar_tokens_per_s']:.1f} tok/s, raced side by side: speedup {s['speedup']:.2f}x "
                f"(predicted {(s['predicted_speedup'] or 0):.2f}x, {s.get('threads') or '?'} CPU thread(s) per lane), "
                f"{'identical' if s['identical_to_ar'] else 'different'} output"
            )
            share = s.get("bandwidth")
            if share:
                line += (
                    f"; AR step {share['step_s'] * 1e3:.1f} ms = {share['share']:.0%} of the bandwidth bound "
                    f"({share['read_bytes'] / 1e9:.3f} GB ÷ {share['bandwidth'] / 1e9:.1f} GB/s)"
                )
        if s.get("timing_flags"):
            line += "; WARNING machine was busy: timing unreliable (" + "; ".join(s["timing_flags"]) + ")"
        print(line + "]", file=sys.stderr)
    return 0


def _kernels(args) -> int:
    """The lean forward's kernel plan on this host (measured once, then cached; --refresh measures again)."""
    from .runtime import kernels, native
    from .runtime.lean import LeanForward, forward_fn
    from .runtime.models import load_model

    target = load_model(args.target, dtype=args.dtype)
    forward = forward_fn(target.model)  # the target's own: on the GGUF's blocks by default
    if not isinstance(forward, LeanForward):
        forward = LeanForward(target.model)
    print(f"native kernel: {native.status()}; weights: {forward.weight_format}")
    if getattr(forward.head, "packed", None) is None:
        print("no oneDNN-packed weights here (a GPU, a build without oneDNN, or too little RAM)")
    print(kernels.report(forward.measure_kernels(refresh=args.refresh)))
    return 0


def _copy(rates: dict) -> str:
    """The copy rate beside the read rate, where measured: printed for comparison, the floors use the read rate."""
    copy = rates.get("copy_bandwidth")
    return f" (copy {copy / 1e9:.1f} GB/s, read + write counted)" if copy else ""


def _roofline(args) -> int:
    """This host's read bandwidth (and copy, beside it) and matmul throughput, the floors of a forward over n tokens, and the measured
    t(n) of the lean forward beside them (medians of --reps, interleaved over n)."""
    import torch

    from . import costmodel
    from .runtime import roofline
    from .runtime.cache import KVCache
    from .runtime.lean import LeanForward, forward_fn
    from .runtime.models import load_model
    from .runtime.threads import torch_threads

    target = load_model(args.target)
    forward = forward_fn(target.model)  # on the GGUF's blocks (the embedded default) or fp32 matrices
    if not isinstance(forward, LeanForward):
        forward = LeanForward(target.model)
    costs = roofline.costs_of(forward)
    ctx, ns = args.context, tuple(range(1, 18))
    print(
        f"weights: {costs['weights']}, a step reads {costs['weight_bytes'] / 1e6:.0f} MB of them "
        f"(de-quantized to fp32: {costs['weight_bytes_fp32'] / 1e6:.0f} MB)"
    )
    ids = torch.randint(0, 1000, (1, ctx + ns[-1]))
    for threads in sorted({1, torch.get_num_threads()}):
        r = {**roofline.machine(threads, refresh=args.refresh), **costs}
        print(
            f"{threads} thread(s): read {r['bandwidth'] / 1e9:.1f} GB/s{_copy(r)}, fp32 matmul {r['flops'] / 1e9:.0f} "
            f"GFLOP/s (measured {r['measured']}); weights {r['weight_bytes'] / 1e6:.0f} MB, ridge n* = "
            f"{costmodel.ridge(ctx, r):.0f} at {ctx} cached tokens"
        )
        for t in roofline.takes_of(r):  # when, and under what load, each figure was measured
            load = t["outside_cores"]
            print(
                f"  take {t['measured'] or 'of unknown date'}: read {t['bandwidth'] / 1e9:.1f} GB/s{_copy(t)}, matmul "
                f"{t['flops'] / 1e9:.0f} GFLOP/s, other processes "
                + ("not measured" if load is None else f"{load:.2f} cores")
                + (" (quiet)" if t["quiet"] else " (busy: measured again at the next load)")
            )
        times = {n: [] for n in ns}
        with torch_threads(threads), torch.inference_mode():
            cache = KVCache.for_model(target.model, ctx + ns[-1] + 1)
            forward(ids[:, :ctx], cache, logits_to_keep=1)
            for _ in range(args.reps):
                for n in ns:
                    t = time.perf_counter()
                    forward(ids[:, ctx : ctx + n], cache)
                    times[n].append(time.perf_counter() - t)
                    cache.truncate(ctx)
        for n in ns:
            t_n = statistics.median(times[n])
            memory, compute = costmodel.floors(n, ctx, r)
            with torch_threads(threads):
                hot = roofline.kernel_floor(forward, n)  # blocks: the kernels' own compute, cache-hot
            kernel = (
                f"  block kernels hot {hot * 1e3:5.1f} ms  t / max(memory, hot) {t_n / max(memory, hot):.2f}"
            )
            print(
                f"  n={n:2d}: t(n) {t_n * 1e3:6.1f} ms  memory floor {memory * 1e3:5.1f} ms  compute floor "
                f"{compute * 1e3:5.1f} ms  t / roofline {costmodel.gap(t_n, n, ctx, r):.2f}"
                + (kernel if hot is not None else "")
                + (f"  ({1 / t_n:.1f} tok/s = {memory / t_n:.0%} of the bandwidth bound)" if n == 1 else "")
            )
    return 0


RECORDERS = {"hf": "hf", "llama-cpp": "llama_cpp"}  # `record ENGINE` -> engine/recorders/<module>.py


def _record_parser(sub) -> None:
    """`python -m engine record {hf,llama-cpp}`: one prompt through another engine's speculation, written as a
    specviz trace (docs/engines.md). The flags are shared; each recorder reads them in its own terms."""
    rec = sub.add_parser("record", help="record another engine's speculative run as a specviz trace")
    rec.add_argument(
        "engine",
        choices=sorted(RECORDERS),
        help="hf: transformers' assisted generation; llama-cpp: llama-cpp-python's draft model",
    )
    rec.add_argument("--prompt", required=True, help="the user message (chat template applied unless --raw)")
    rec.add_argument(
        "--target",
        default="embedded",
        help="hf: 'embedded', 'embedded-gemma', a hub id or a directory; llama-cpp: a GGUF file "
        "(default: the embedded SmolLM2's)",
    )
    rec.add_argument(
        "--draft",
        default="prompt-lookup",
        help="hf: prompt-lookup, quant[:int8] (the target's int8 copy as assistant model), "
        "model:SPEC (an assistant model; another tokenizer: universal assisted generation), "
        "early-exit:L; llama-cpp: prompt-lookup",
    )
    rec.add_argument("--gamma", type=int, default=4, help="tokens proposed per round, 1..16")
    rec.add_argument("--max-new-tokens", type=int, default=64)
    rec.add_argument("--raw", action="store_true", help="send the prompt without the chat template")
    rec.add_argument("--trace", metavar="FILE.json", required=True, help="where to write the trace")


def _record(args) -> int:
    import importlib

    module = importlib.import_module(f"engine.recorders.{RECORDERS[args.engine]}")
    return module.record_cli(args)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m engine", description="specviz speculative decoding engine"
    )
    sub = parser.add_subparsers(dest="command", required=True)
    g = sub.add_parser("generate", help="generate from one prompt")
    g.add_argument("--prompt", required=True, help="the user message (chat template applied unless --raw)")
    g.add_argument("--target", default="embedded", help="'embedded', a hub id or a local directory")
    g.add_argument("--draft", default="self", help="drafter spec: " + usages())
    g.add_argument("--gamma", type=int, default=4, help="draft tokens per round, 1..16")
    g.add_argument("--max-new-tokens", type=int, default=128)
    g.add_argument("--temperature", type=float, default=0.0, help="0 = greedy")
    g.add_argument("--top-k", type=int, default=0)
    g.add_argument("--top-p", type=float, default=1.0)
    g.add_argument("--seed", type=int, default=0)
    g.add_argument("--raw", action="store_true", help="send the prompt without the chat template")
    g.add_argument("--adaptive", default="fixed", choices=["fixed", "heuristic"], help="γ schedule")
    g.add_argument(
        "--p-min", type=float, default=0.0, help="confidence threshold for model drafters (0 = off)"
    )
    g.add_argument(
        "--tree-budget", type=int, default=0, help="tree speculation: draft nodes per round (0 = chain)"
    )
    g.add_argument("--tree-branching", type=int, default=2, help="tree speculation: children tried per node")
    g.add_argument(
        "--num-beams",
        type=int,
        default=1,
        help="beam search width B, 2..8 (greedy; --draft ngram[:N] or self); 1 = off",
    )
    g.add_argument(
        "--compare-ar",
        action="store_true",
        help="race the autoregressive baseline, interleaved round by round, and compare",
    )
    g.add_argument(
        "--race-threads",
        type=int,
        default=None,
        metavar="N",
        help="CPU threads both race lanes compute with (0 = torch's default; default "
        "$SPECVIZ_RACE_THREADS or 1: an outside load then slows both lanes alike)",
    )
    g.add_argument("--trace", metavar="FILE.json", help="write every event to a JSON trace")
    g.add_argument("--json", action="store_true", help="print one JSON object as the last line of stdout")
    g.add_argument("--device", default=None, help="cpu, cuda, cuda:1 (default: automatic)")
    g.add_argument("--dtype", default=None, help="fp32, bf16, fp16 (default: bf16 on CUDA, fp32 on CPU)")
    g.add_argument(
        "--trust-remote-code", action="store_true", help="allow a hub model's own code (off by default)"
    )
    k = sub.add_parser("kernels", help="print the lean forward's measured kernel plan for this host")
    k.add_argument("--target", default="embedded")
    k.add_argument("--dtype", default=None, help="fp32 (default on CPU) or bf16")
    k.add_argument(
        "--refresh", action="store_true", help="measure again instead of reading this host's cache"
    )
    r = sub.add_parser(
        "roofline", help="this host's bandwidth, matmul throughput and the lean forward against them"
    )
    r.add_argument("--target", default="embedded")
    r.add_argument("--context", type=int, default=300, help="cached tokens before the timed forwards")
    r.add_argument("--reps", type=int, default=9)
    r.add_argument(
        "--refresh",
        action="store_true",
        help="measure the bandwidth and throughput again (not from the cache)",
    )
    _record_parser(sub)
    serving_cli.arguments(sub.add_parser("metrics", help=serving_cli.HELP))
    args = parser.parse_args(argv)
    try:
        commands = {
            "kernels": _kernels,
            "roofline": _roofline,
            "record": _record,
            "metrics": serving_cli.metrics_cli,
        }
        run = commands.get(args.command, _generate)
        return run(args)
    except (ValueError, OSError, RuntimeError) as e:  # ModelLoadError is a ValueError
        print(f"error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
