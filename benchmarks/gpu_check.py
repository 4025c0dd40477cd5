"""A prepared GPU check: no hub, no gradio; random-weight models of realistic shapes, CUDA + bf16.

    python benchmarks/gpu_check.py --dtype fp32         # on a GPU: 1.7B-shaped target, 135M-shaped draft
    python benchmarks/gpu_check.py                      # bf16: item 4 below (the oracle's α collapses, see there)
    python benchmarks/gpu_check.py --tiny --device cpu --dtype fp32   # a seconds-long smoke test (make test runs it)

What it measures (each printed as a Markdown line and written as JSON with --out):
1. the draft's cost c: one step of the 135M-shaped draft ÷ one step of the 1.7B-shaped target, on this device;
2. oracle:α[:c] (engine/drafters/oracle.py: the target's own greedy tokens, each kept with probability α, costing
   c target steps per drafted token) raced against AR at several α and γ: measured vs predicted speedup
   (engine/costmodel.py) and the timing guards' verdict;
3. device → host reads per round (every `.item()`/`int()`/`.tolist()` the engine makes), in the draft loop
   and in the whole round, at two γ: they must not grow with γ (4 per round, none in the draft loop, here);
   on CUDA also the synchronisations torch's sync debug mode reports;
4. how often bf16 greedy speculative output differs from bf16 greedy AR (rounding of a multi-token forward
   vs single-token forwards; fp32 is identical), and at which generated token. On random weights (near-flat
   logits) bf16 leaves AR within a few tokens, and after that the oracle's proposals (the AR pass's tokens)
   fit another context: its measured α collapses (benchmarks/results/gpu-check-h200.md), so the oracle rows
   want --dtype fp32;
5. batched speculation (engine/decode/batch.py): oracle:0.8 at γ = 4 against the AR batch of the same prompts at
   each B of --batch-sizes, raced round by round: decode tokens/s of each and how many rows equal AR's;
6. the target's verify curve t(n) (n rows at --context cached tokens, n = 1..17) beside its memory floor (the
   weight bytes ÷ a read-only stream's rate on this device): how far a decode step is from the bound, and
   whether t(n) is flat up to a ridge as the tree drafters assume;
7. the training-free drafters (--trees: ngram, suffix, recycle, lookahead, auto) raced against AR on prompts
   that repeat themselves: tokens per target forward, speedup, and identity with AR in the run dtype and
   in fp32 (the tree-attention verify on CUDA).
Random weights are enough for all of these: speed and synchronisation do not depend on what the weights say,
and oracle:α fixes the acceptance by construction.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import warnings
from pathlib import Path

import torch
from torch.utils._python_dispatch import TorchDispatchMode

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from engine import Engine, GenerationConfig  # noqa: E402
from engine.drafters.base import Factory  # noqa: E402
from engine.metrics import summarize  # noqa: E402
from engine.runtime import roofline  # noqa: E402
from engine.runtime.cache import KVCache  # noqa: E402
from engine.runtime.lean import LeanForward, forward_fn  # noqa: E402
from engine.runtime.models import LoadedModel  # noqa: E402
from engine.runtime.threads import synchronizer  # noqa: E402

# Llama shapes of SmolLM2-1.7B (target) and SmolLM2-135M (draft); --tiny shrinks both for a smoke test
SHAPES = {
    "target": dict(
        hidden_size=2048,
        intermediate_size=8192,
        num_hidden_layers=24,
        num_attention_heads=32,
        num_key_value_heads=32,
    ),
    "draft": dict(
        hidden_size=576,
        intermediate_size=1536,
        num_hidden_layers=30,
        num_attention_heads=9,
        num_key_value_heads=3,
    ),
    "tiny-target": dict(
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
    ),
    "tiny-draft": dict(
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
    ),
}
VOCAB = 49152


class IdTokenizer:
    """Stands in for a tokenizer (no hub): token text is the id; no end-of-text, so runs go to their length."""

    eos_token_id = None
    chat_template = None

    def decode(self, ids, skip_special_tokens=False):
        return "".join(f"<{i}>" for i in ids)


def random_model(shape: str, device: torch.device, dtype: torch.dtype, seed: int) -> LoadedModel:
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=VOCAB,
        max_position_embeddings=4096,
        tie_word_embeddings=True,
        eos_token_id=None,
        bos_token_id=None,
        pad_token_id=None,
        **SHAPES[shape],
    )
    old = torch.get_default_dtype()
    torch.set_default_dtype(dtype)  # initialise straight in the run dtype: no fp32 copy of a 1.7B model
    try:
        with torch.device(device):
            model = LlamaForCausalLM(config).eval()
    finally:
        torch.set_default_dtype(old)
    model.generation_config.eos_token_id = None
    return LoadedModel(shape, model, IdTokenizer(), device, dtype)


class HostReads(TorchDispatchMode):
    """Counts device → host reads: `.item()`, `int()`, `float()`, `bool()` on a tensor (aten._local_scalar_dense)
    and `.tolist()` (which bypasses the dispatcher, so it is wrapped while the mode is active)."""

    def __init__(self):
        super().__init__()
        self.reads = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func is torch.ops.aten._local_scalar_dense.default:
            self.reads += 1
        return func(*args, **(kwargs or {}))

    def __enter__(self):
        self._tolist = torch.Tensor.tolist
        counter = self

        def tolist(t):
            counter.reads += 1
            return counter._tolist(t)

        torch.Tensor.tolist = tolist
        return super().__enter__()

    def __exit__(self, *exc):
        torch.Tensor.tolist = self._tolist
        return super().__exit__(*exc)


def reads_per_round(engine: Engine, ids: list[int], cfg: GenerationConfig) -> dict:
    """Median host reads per round in the drafter's propose (the draft loop) and in the whole round."""
    drafts, rounds = [], []
    made = engine.make_drafter

    def counting(*a):
        drafter = made(*a)
        propose = drafter.propose

        def counted(ids_, gamma):
            with HostReads() as c:
                out = propose(ids_, gamma)
            drafts.append(c.reads)
            return out

        drafter.propose = counted
        return drafter

    engine.make_drafter = Factory(counting, made.needs)
    try:
        gen = engine.generate(None, cfg, prompt_ids=ids)
        next(gen)  # run_started: prefill done
        while True:
            with HostReads() as c:
                events = []
                for event in gen:
                    events.append(event)
                    if event.kind in ("round_timed", "finished"):
                        break
            if not events or events[-1].kind == "finished":
                break
            rounds.append(c.reads)
    finally:
        engine.make_drafter = made
    return {
        "draft_loop": statistics.median(drafts) if drafts else None,
        "round": statistics.median(rounds) if rounds else None,
    }


def cuda_syncs_per_round(engine: Engine, ids: list[int], cfg: GenerationConfig) -> float | None:
    """On CUDA: synchronisations per round as torch's sync debug mode reports them (warnings)."""
    if engine.target.device.type != "cuda":
        return None
    torch.cuda.set_sync_debug_mode("warn")
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            done = list(engine.generate(None, cfg, prompt_ids=ids))[-1]
    finally:
        torch.cuda.set_sync_debug_mode(0)
    syncs = sum("synchroniz" in str(w.message) for w in caught)
    return syncs / max(done.round, 1)


@torch.inference_mode()
def step_time(loaded: LoadedModel, context: int = 128, repeats: int = 20, rows: int = 1) -> float:
    """Median seconds of one forward over `rows` new tokens (a causal block) at `context` tokens of cache."""
    forward, dev = forward_fn(loaded.model), loaded.device
    sync = synchronizer(dev)
    cache = KVCache.for_model(loaded.model, context + rows + 2)
    forward(torch.randint(0, VOCAB, (1, context), device=dev), cache)
    x, times = torch.randint(0, VOCAB, (1, rows), device=dev), []
    for _ in range(repeats):
        sync()
        t = time.perf_counter()
        forward(x, cache)
        sync()
        times.append(time.perf_counter() - t)
        cache.truncate(context)
    return statistics.median(times)


def progress(name: str, value) -> None:
    """One section's result on stderr as soon as it is measured (a run cut short still reports it)."""
    print(f"[gpu_check] {name}: {json.dumps(value, default=str)}", file=sys.stderr, flush=True)


def check(args) -> dict:
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    dtype = {"bf16": torch.bfloat16, "fp32": torch.float32, "fp16": torch.float16}[args.dtype]
    pre = "tiny-" if args.tiny else ""
    target = random_model(pre + "target", device, dtype, seed=1)
    draft = random_model(pre + "draft", device, dtype, seed=2)
    c = step_time(draft) / step_time(target)
    progress("draft_c", c)
    gen = torch.Generator().manual_seed(0)
    prompts = [
        torch.randint(0, VOCAB, (args.prompt_tokens,), generator=gen).tolist() for _ in range(args.prompts)
    ]
    report = {
        "device": str(device),
        "dtype": args.dtype,
        "shapes": "tiny" if args.tiny else "1.7B target, 135M draft",
        "gpu": torch.cuda.get_device_name(0) if device.type == "cuda" else None,
        "draft_c": c,
        "oracle": [],
        "host_reads": {},
        "bf16_vs_ar": None,
    }
    for alpha in args.alphas:
        engine = Engine(target, f"oracle:{alpha:g}:{c:.3f}")
        for gamma in args.gammas:
            cfg = GenerationConfig(gamma=gamma, max_new_tokens=args.max_new_tokens, record_topk=0)
            rows = []
            for ids in prompts:
                lanes = {"speculative": [], "ar": []}
                for lane, event in engine.race(None, cfg, prompt_ids=ids):
                    lanes[lane].append(event)
                s = summarize(lanes["speculative"], lanes["ar"])
                rows.append(s)
            # noqa: E731
            med = lambda k, rows=rows: statistics.median(
                [r[k] for r in rows if r.get(k) is not None] or [float("nan")]
            )
            report["oracle"].append(
                {
                    "alpha": alpha,
                    "gamma": gamma,
                    "measured_alpha": med("alpha"),
                    "speedup": med("speedup"),
                    "predicted_speedup": med("predicted_speedup"),
                    "ratio": med("speedup") / med("predicted_speedup") if med("predicted_speedup") else None,
                    "flagged": sum(bool(r.get("timing_flags")) for r in rows),
                    "runs": len(rows),
                    "identical_to_ar": sum(bool(r.get("identical_to_ar")) for r in rows),
                    "first_diff": [r.get("first_diff") for r in rows if not r.get("identical_to_ar")],
                }
            )
            progress("oracle", report["oracle"][-1])
    engine = Engine(target, f"oracle:0.8:{c:.3f}")
    for gamma in (min(args.gammas), max(args.gammas)):
        cfg = GenerationConfig(gamma=gamma, max_new_tokens=args.max_new_tokens, record_topk=0)
        report["host_reads"][gamma] = {
            **reads_per_round(engine, prompts[0], cfg),
            "cuda_syncs_per_round": cuda_syncs_per_round(engine, prompts[0], cfg),
        }
    progress("host_reads", report["host_reads"])
    report["batch"] = batch_curve(Engine(target, f"oracle:0.8:{c:.3f}"), args)
    progress("batch", report["batch"])
    report["verify_curve"] = verify_curve(target, args.context)
    progress("verify_curve", report["verify_curve"])
    report["trees"] = tree_races(target, args, dtype_name=args.dtype) if args.trees else []
    if (
        args.trees and dtype != torch.float32
    ):  # identity is promised in fp32: the tree verify in fp32 on this device
        del target, draft, engine
        if device.type == "cuda":
            torch.cuda.empty_cache()
        target32 = random_model(pre + "target", device, torch.float32, seed=1)
        report["trees"] += tree_races(target32, args, dtype_name="fp32")
    rows = report["oracle"]
    report["bf16_vs_ar"] = {
        "runs": sum(r["runs"] for r in rows),
        "identical": sum(r["identical_to_ar"] for r in rows),
    }
    return report


ROWS = (1, 2, 3, 4, 5, 9, 17)


@torch.inference_mode()
def verify_curve(loaded: LoadedModel, context: int, repeats: int = 20) -> dict:
    """t(n) for a causal block of n rows at `context` cached tokens (median of `repeats`), the weight bytes and
    this device's read-only stream rate: the memory floor is bytes ÷ rate (engine/runtime/roofline.py)."""
    forward, dev = forward_fn(loaded.model), loaded.device
    times = {n: step_time(loaded, context, repeats, n) for n in ROWS}
    costs = roofline.costs_of(forward if isinstance(forward, LeanForward) else loaded.model)
    rate = roofline.measure(1, loaded.dtype, device=dev.type)
    floor = costs["weight_bytes"] / rate["bandwidth"]
    return {
        "context": context,
        "forward": type(forward).__name__,
        "t": times,
        "weight_bytes": costs["weight_bytes"],
        "read_rate": rate["bandwidth"],
        "copy_rate": rate["copy_bandwidth"],
        "flops": rate["flops"],
        "floor_s": floor,
    }


def repeating_prompts(args) -> list[list[int]]:
    """Prompts that repeat a random phrase (so the retrieval drafters find matches in them)."""
    gen = torch.Generator().manual_seed(2)
    out = []
    for _ in range(args.prompts):
        phrase = torch.randint(0, VOCAB, (12,), generator=gen).tolist()
        out.append((phrase * (args.prompt_tokens // 12 + 1))[: args.prompt_tokens])
    return out


def tree_races(loaded: LoadedModel, args, dtype_name: str) -> list:
    """The training-free drafters raced against AR: tokens per forward, speedup, runs identical to AR."""
    prompts, out = repeating_prompts(args), []
    for spec in args.trees:
        engine = Engine(loaded, spec)
        cfg = GenerationConfig(gamma=4, max_new_tokens=args.max_new_tokens, record_topk=0)
        rows = []
        for ids in prompts:
            lanes = {"speculative": [], "ar": []}
            for lane, event in engine.race(None, cfg, prompt_ids=ids):
                lanes[lane].append(event)
            rows.append(summarize(lanes["speculative"], lanes["ar"]))
        out.append(
            {
                "spec": spec,
                "dtype": dtype_name,
                "tokens_per_forward": statistics.median(r["mean_accepted_length"] or 0 for r in rows),
                "speedup": statistics.median(r["speedup"] or 0 for r in rows),
                "runs": len(rows),
                "identical_to_ar": sum(bool(r.get("identical_to_ar")) for r in rows),
                "first_diff": [r.get("first_diff") for r in rows if not r.get("identical_to_ar")],
            }
        )
        progress("trees", out[-1])
    return out


def batch_curve(engine: Engine, args) -> list:
    """Batched oracle:0.8 (γ = 4) raced against the AR batch at each B: both lanes' decode tokens/s, rows equal."""
    gen = torch.Generator().manual_seed(1)
    cfg = GenerationConfig(gamma=4, max_new_tokens=args.max_new_tokens, record_topk=0)
    out = []
    for b in args.batch_sizes:
        ids = [
            torch.randint(0, VOCAB, (args.prompt_tokens + 7 * r,), generator=gen).tolist() for r in range(b)
        ]
        lanes = {"speculative": [], "ar": []}
        for lane, event in engine.race_batch(ids, cfg, threads=None):
            lanes[lane].append(event)
        spec, ar = (lanes[k][-1].summary for k in ("speculative", "ar"))
        rows = {k: {e.row: e.token_ids for e in lanes[k] if e.kind == "finished"} for k in lanes}
        out.append(
            {
                "rows": b,
                "speculative_tokens_per_s": spec["decode_tokens_per_s"],
                "ar_tokens_per_s": ar["decode_tokens_per_s"],
                "identical_rows": sum(rows["speculative"][r] == rows["ar"][r] for r in range(b)),
            }
        )
    return out


def markdown(r: dict) -> str:
    lines = [
        f"gpu_check on {r['gpu'] or r['device']} ({r['dtype']}, {r['shapes']}): draft c = {r['draft_c']:.3f}",
        "| α | γ | measured α | speedup | predicted | measured ÷ predicted | flagged | identical to AR |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for o in r["oracle"]:
        ratio = f"{o['ratio']:.2f}" if o["ratio"] else "–"
        lines.append(
            f"| {o['alpha']:g} | {o['gamma']} | {o['measured_alpha']:.2f} | {o['speedup']:.2f}× | "
            f"{o['predicted_speedup']:.2f}× | {ratio} | {o['flagged']}/{o['runs']} | "
            f"{o['identical_to_ar']}/{o['runs']} |"
        )
    for gamma, h in r["host_reads"].items():
        lines.append(
            f"host reads per round at γ={gamma}: draft loop {h['draft_loop']}, whole round {h['round']}"
            + (
                f", CUDA syncs {h['cuda_syncs_per_round']:.1f}"
                if h["cuda_syncs_per_round"] is not None
                else ""
            )
        )
    for row in r.get("batch", []):
        lines.append(
            f"batch B={row['rows']}: oracle:0.8 γ=4 {row['speculative_tokens_per_s']:.0f} tokens/s, AR batch "
            f"{row['ar_tokens_per_s']:.0f} ({row['speculative_tokens_per_s'] / row['ar_tokens_per_s']:.2f}×), "
            f"{row['identical_rows']}/{row['rows']} rows identical"
        )
    v = r.get("verify_curve")
    if v:
        t1 = v["t"][1]
        lines.append(
            f"verify curve ({v['forward']}, {v['context']} cached tokens): "
            + ", ".join(f"t({n}) {t * 1e3:.2f} ms" for n, t in v["t"].items())
            + "; t(n)/t(1) "
            + " ".join(f"{t / t1:.2f}" for t in v["t"].values())
        )
        lines.append(
            f"memory floor {v['weight_bytes'] / 1e9:.2f} GB ÷ read-only stream {v['read_rate'] / 1e9:.0f} GB/s "
            f"(copy {v['copy_rate'] / 1e9:.0f} GB/s) = {v['floor_s'] * 1e3:.2f} ms; t(1) ÷ floor "
            f"{t1 / v['floor_s']:.1f}; matmul {v['flops'] / 1e12:.1f} TFLOP/s"
        )
    for t in r.get("trees", []):
        lines.append(
            f"tree drafter {t['spec']} ({t['dtype']}, γ=4): {t['tokens_per_forward']:.2f} tokens per forward, "
            f"{t['speedup']:.2f}× AR, {t['identical_to_ar']}/{t['runs']} identical to AR"
            + (f" (first differences at {t['first_diff']})" if t["first_diff"] else "")
        )
    b = r["bf16_vs_ar"]
    lines.append(
        f"greedy speculative identical to greedy AR in {b['identical']} of {b['runs']} runs ({r['dtype']})"
    )
    return "\n".join(lines)


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--tiny", action="store_true", help="tiny shapes: a smoke test that runs on a CPU in seconds"
    )
    ap.add_argument("--device", default=None, help="cuda (default when present) or cpu")
    ap.add_argument("--dtype", default="bf16", choices=("bf16", "fp32", "fp16"))
    ap.add_argument("--alphas", type=lambda s: [float(x) for x in s.split(",")], default=[0.5, 0.8, 0.95])
    ap.add_argument("--gammas", type=lambda s: [int(x) for x in s.split(",")], default=[2, 4, 8])
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--prompts", type=int, default=3)
    ap.add_argument("--prompt-tokens", type=int, default=64)
    ap.add_argument("--batch-sizes", type=lambda s: [int(x) for x in s.split(",")], default=[1, 4, 16])
    ap.add_argument("--context", type=int, default=300, help="cached tokens for the verify curve")
    ap.add_argument(
        "--trees",
        type=lambda s: [x for x in s.split(",") if x],
        default=["ngram", "suffix", "recycle", "lookahead", "auto"],
        help="training-free drafters to race against AR (comma-separated specs; empty: none)",
    )
    ap.add_argument("--out", default=None, help="write the report as JSON here")
    args = ap.parse_args(argv)
    report = check(args)
    print(markdown(report))
    if args.out:
        Path(args.out).write_text(json.dumps(report, indent=1))
    return report


if __name__ == "__main__":
    main()
