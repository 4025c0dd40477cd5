"""A prepared GPU check: no hub, no gradio; random-weight models of realistic shapes, CUDA + bf16.

    python benchmarks/gpu_check.py                      # on a GPU: 1.7B-shaped target, 135M-shaped draft
    python benchmarks/gpu_check.py --tiny --device cpu --dtype fp32   # a seconds-long smoke test (make test runs it)

What it measures (each printed as a Markdown line and written as JSON with --out):
1. the draft's cost c: one step of the 135M-shaped draft ÷ one step of the 1.7B-shaped target, on this device;
2. oracle:α[:c] (engine/drafters/oracle.py: the target's own greedy tokens, each kept with probability α, costing
   c target steps per drafted token) raced against AR at several α and γ: measured vs predicted speedup
   (engine/costmodel.py) and the timing guards' verdict;
3. device → host reads per round (every `.item()`/`int()`/`.tolist()` the engine makes), in the draft loop
   and in the whole round, at two γ: they must not grow with γ (one sync per round is the design);
   on CUDA also the synchronisations torch's sync debug mode reports;
4. how often bf16 greedy speculative output differs from bf16 greedy AR (rounding of a multi-token forward
   vs single-token forwards; fp32 is identical), and at which generated token;
5. batched speculation (engine/decode/batch.py): oracle:0.8 at γ = 4 against the AR batch of the same prompts at
   each B of --batch-sizes, raced round by round: decode tokens/s of each and how many rows equal AR's.
Random weights are enough for all four: speed and synchronisation do not depend on what the weights say,
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
from engine.metrics import summarize  # noqa: E402
from engine.runtime.cache import KVCache  # noqa: E402
from engine.runtime.lean import forward_fn  # noqa: E402
from engine.runtime.models import LoadedModel  # noqa: E402

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

    engine.make_drafter = counting
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
def step_time(loaded: LoadedModel, context: int = 128, repeats: int = 20) -> float:
    """Median seconds of one single-token forward at `context` tokens of cache."""
    forward, dev = forward_fn(loaded.model), loaded.device
    cache = KVCache.for_model(loaded.model, context + 2)
    forward(torch.randint(0, VOCAB, (1, context), device=dev), cache)
    x, times = torch.randint(0, VOCAB, (1, 1), device=dev), []
    for _ in range(repeats):
        if dev.type == "cuda":
            torch.cuda.synchronize()
        t = time.perf_counter()
        forward(x, cache)
        if dev.type == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t)
        cache.truncate(context)
    return statistics.median(times)


def check(args) -> dict:
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    dtype = {"bf16": torch.bfloat16, "fp32": torch.float32, "fp16": torch.float16}[args.dtype]
    pre = "tiny-" if args.tiny else ""
    target = random_model(pre + "target", device, dtype, seed=1)
    draft = random_model(pre + "draft", device, dtype, seed=2)
    c = step_time(draft) / step_time(target)
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
    engine = Engine(target, f"oracle:0.8:{c:.3f}")
    for gamma in (min(args.gammas), max(args.gammas)):
        cfg = GenerationConfig(gamma=gamma, max_new_tokens=args.max_new_tokens, record_topk=0)
        report["host_reads"][gamma] = {
            **reads_per_round(engine, prompts[0], cfg),
            "cuda_syncs_per_round": cuda_syncs_per_round(engine, prompts[0], cfg),
        }
    report["batch"] = batch_curve(Engine(target, f"oracle:0.8:{c:.3f}"), args)
    rows = report["oracle"]
    report["bf16_vs_ar"] = {
        "runs": sum(r["runs"] for r in rows),
        "identical": sum(r["identical_to_ar"] for r in rows),
    }
    return report


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
    ap.add_argument("--out", default=None, help="write the report as JSON here")
    args = ap.parse_args(argv)
    report = check(args)
    print(markdown(report))
    if args.out:
        Path(args.out).write_text(json.dumps(report, indent=1))
    return report


if __name__ == "__main__":
    main()
