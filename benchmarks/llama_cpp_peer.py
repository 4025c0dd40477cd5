"""A real peer on the same CPU: llama.cpp (through llama-cpp-python) on the same SmolLM2-135M weights, greedy,
interleaved prompt by prompt with our AR and our n-gram lane.

    make peer                                   # builds llama-cpp-python from its PyPI source (dev only)
    make peer-avx2                              # both sides at x86-64-v3 (AVX2/FMA), on any host that runs it
    python -m benchmarks peer [--threads 2] [--gamma 4] [--max-new-tokens 64] [--repeats 2]

Contestants, each warmed once per prompt, then run in a fixed interleaved order every repeat:
- llama.cpp AR on an F32 GGUF (the shipped Q4_1 GGUF de-quantized: the very weights our engine runs) and on
  the shipped Q4_1 GGUF itself;
- llama.cpp prompt-lookup decoding (`LlamaPromptLookupDecoding`, num_pred_tokens = γ) on both;
- our AR and our `ngram` γ (the engine as the benchmarks time it: events consumed, call to last token), on the
  de-quantized fp32 weights (SPECVIZ_WEIGHTS=fp32) and on the shipped GGUF's blocks (the default).
Both sides are given the same prompt token ids (our chat template) and time prefill + generation. Every
speculative output is checked against its own side's AR output; llama.cpp's F32 greedy output against ours, and
our AR on the blocks against our fp32 AR (the blocks' products are the fp32 ones: they must agree 10/10).
llama-cpp-python's speculative path asks for logits at every position (logits_all), so its PLD pays a full LM
head over the prompt: that is the peer as shipped, and the report says so.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from benchmarks.common import embedded_on  # noqa: E402
from benchmarks.harness import load_prompts  # noqa: E402
from benchmarks.timing import time_ours  # noqa: E402
from engine.config import GenerationConfig  # noqa: E402
from engine.decode.engine import Engine  # noqa: E402
from engine.runtime import kernels, native  # noqa: E402
from engine.runtime.models import CACHE_DIR, embedded_gguf_dir  # noqa: E402

PROMPTS = Path(__file__).resolve().parent.parent / "engine" / "prompts"


def f32_gguf(src: Path, dst: Path) -> Path:
    """A copy of a GGUF with every tensor de-quantized to F32 (metadata copied; file type set to all-F32)."""
    import gguf

    if dst.exists():
        return dst
    reader = gguf.GGUFReader(src)
    arch = reader.fields[gguf.Keys.General.ARCHITECTURE].contents()
    tmp = dst.with_suffix(".tmp")
    dst.parent.mkdir(parents=True, exist_ok=True)  # a fresh machine's cache has no gguf folder yet
    writer = gguf.GGUFWriter(tmp, arch)
    for field in reader.fields.values():
        if field.name == gguf.Keys.General.ARCHITECTURE or field.name.startswith("GGUF."):
            continue
        value = gguf.LlamaFileType.ALL_F32 if field.name == gguf.Keys.General.FILE_TYPE else field.contents()
        sub = field.types[-1] if field.types[0] == gguf.GGUFValueType.ARRAY else None
        writer.add_key_value(field.name, value, field.types[0], sub_type=sub)
    for tensor in reader.tensors:
        writer.add_tensor(
            tensor.name, gguf.quants.dequantize(tensor.data, tensor.tensor_type).astype(np.float32)
        )
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    tmp.replace(dst)
    return dst


def build_info() -> str:
    """Where llama-cpp-python was loaded from and the CPU features its build uses (llama_print_system_info)."""
    import llama_cpp

    info = llama_cpp.llama_print_system_info().decode().strip().strip("|").strip()
    return f"{llama_cpp.__version__} from {Path(llama_cpp.__file__).parent.parent}, {info}"


def llama_runner(path: Path, threads: int, gamma: int | None, repack: bool = True):
    """(ids, max_new) -> (generated ids, seconds) for llama.cpp greedy, with prompt lookup when gamma is set.
    repack=False loads without llama.cpp's extra buffer types (its repacked CPU weights): on this project's
    Intel Xeon (AMX) the repacked Q4_1 path crashed in llama_decode (a segmentation fault), F32 did not."""
    import llama_cpp
    from llama_cpp import Llama
    from llama_cpp.llama_speculative import LlamaPromptLookupDecoding

    draft = LlamaPromptLookupDecoding(num_pred_tokens=gamma) if gamma else None
    default = llama_cpp.llama_model_default_params

    def params():
        p = default()
        p.use_extra_bufts = repack
        return p

    llama_cpp.llama_model_default_params = params  # read once by Llama() for its model parameters
    try:
        llm = Llama(
            model_path=str(path),
            n_ctx=2048,
            n_threads=threads,
            n_threads_batch=threads,
            verbose=False,
            draft_model=draft,
        )
    finally:
        llama_cpp.llama_model_default_params = default
    eos = llm.token_eos()

    def run(ids: list, max_new: int):
        out, first = [], None
        # llama-cpp-python keeps the last prompt's KV and skips the prefill of a prompt it has seen (the warm-up
        # ran this one): forget it, so both sides pay their prefill, as ours does on every call
        llm.reset()
        t = time.perf_counter()
        for tok in llm.generate(ids, top_k=1, temp=0.0, reset=True):
            out.append(int(tok))
            first = first or time.perf_counter() - t
            if tok == eos or len(out) >= max_new:
                break
        return out, time.perf_counter() - t, first

    return run


def ours_runner(engine: Engine, mode: str, gamma: int):
    """As the benchmarks time our engine (time_ours: events consumed, call to last token), plus the time to the
    first committed token (prefill and one step), read from the same events."""

    def run(ids: list, max_new: int):
        first = []

        def tick(event):
            if event.kind == "committed" and not first:
                first.append(time.perf_counter())

        t = time.perf_counter()
        sample = time_ours(
            engine, ids, GenerationConfig(gamma=gamma, max_new_tokens=max_new), mode, on_event=tick
        )
        return sample.token_ids, sample.wall_s, first[0] - t if first else None

    return run


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(prog="python -m benchmarks peer", description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", type=int, default=torch.get_num_threads())
    ap.add_argument("--gamma", type=int, default=4)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--prompts", default="grounded,open", help="prompt sets under engine/prompts")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    q41 = next(embedded_gguf_dir().glob("*.gguf"))
    f32 = f32_gguf(q41, CACHE_DIR / "gguf" / (q41.stem + ".F32.gguf"))
    target = embedded_on("fp32")  # the de-quantized weights (538 MB)
    on_blocks = embedded_on("gguf")  # the shipped file's blocks (97 MB), the default
    tok = target.tokenizer
    prompts = [p for name in args.prompts.split(",") for p in load_prompts(PROMPTS / f"{name}.jsonl")]
    g = args.gamma
    runners = {
        "llama.cpp AR, F32": llama_runner(f32, args.threads, None),
        f"llama.cpp PLD γ={g}, F32": llama_runner(f32, args.threads, g),
        "llama.cpp AR, Q4_1": llama_runner(q41, args.threads, None, repack=False),
        f"llama.cpp PLD γ={g}, Q4_1": llama_runner(q41, args.threads, g, repack=False),
        "ours AR, fp32": ours_runner(Engine(target, "ngram"), "ar", g),
        f"ours ngram γ={g}, fp32": ours_runner(Engine(target, "ngram"), "speculative", g),
        "ours AR, gguf": ours_runner(Engine(on_blocks, "ngram"), "ar", g),
        f"ours ngram γ={g}, gguf": ours_runner(Engine(on_blocks, "ngram"), "speculative", g),
    }
    tokens = {k: 0 for k in runners}
    seconds = {k: 0.0 for k in runners}
    per_prompt = {k: [] for k in runners}
    decode = {k: [0, 0.0] for k in runners}  # tokens after the first, seconds after the first
    outputs: dict = {}
    print(
        f"host: {kernels.cpu_name()} [{' '.join(kernels.cpu_flags())}], {args.threads} thread(s) each, torch "
        f"{torch.__version__}; {len(prompts)} prompts ({args.prompts}), {args.max_new_tokens} new tokens, greedy, "
        f"{args.repeats} repeats interleaved"
    )
    held = " ".join(f"{k}={v}" for k, v in kernels.held().items())
    print(f"ours: {native.status()}{f', held: {held}' if held else ''}; llama.cpp: {build_info()}")
    for i, p in enumerate(prompts):
        ids = tok.apply_chat_template(
            [{"role": "user", "content": p["prompt"]}],
            add_generation_prompt=True,
            tokenize=True,
            return_dict=False,
        )
        ids = list(ids["input_ids"] if isinstance(ids, dict) else ids)
        for run in runners.values():
            run(ids, 8)  # warm
        times = {k: [] for k in runners}
        for _ in range(args.repeats):
            for name, run in runners.items():
                out, s, first = run(ids, args.max_new_tokens)
                times[name].append((s, first))
                outputs[(i, name)] = out
        for name in runners:
            s = statistics.median(t for t, _ in times[name])
            after = statistics.median(t - f for t, f in times[name])  # decoding after the first token
            n = len(outputs[(i, name)])
            tokens[name] += n
            seconds[name] += s
            decode[name][0] += n - 1
            decode[name][1] += after
            per_prompt[name].append(n / s)
        print(
            f"prompt {i + 1} ({p['category']}): "
            + "  ".join(f"{k}: {per_prompt[k][-1]:.1f}" for k in runners),
            flush=True,
        )
    report(runners, tokens, seconds, per_prompt, decode, outputs, len(prompts))


def agree(a: list, b: list) -> int:
    """Tokens two greedy outputs share before they first differ."""
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


def report(runners, tokens, seconds, per_prompt, decode, outputs, n_prompts: int) -> None:
    ar_of = {
        "llama.cpp": {"F32": "llama.cpp AR, F32", "Q4_1": "llama.cpp AR, Q4_1"},
        "ours": {"fp32": "ours AR, fp32", "gguf": "ours AR, gguf"},
    }
    print(
        "\n| contestant | tok/s (all prompts, prefill included) | decoding tok/s after the first token | median tok/s "
        "per prompt | × its own AR | outputs = its own AR |"
    )
    print("|---|---|---|---|---|---|")
    for name in runners:
        if name.startswith("ours"):
            base = ar_of["ours"]["gguf" if name.endswith("gguf") else "fp32"]
        else:
            base = ar_of["llama.cpp"]["F32" if name.endswith("F32") else "Q4_1"]
        same = sum(outputs[(i, name)] == outputs[(i, base)] for i in range(n_prompts))
        ratio = (tokens[name] / seconds[name]) / (tokens[base] / seconds[base])
        print(
            f"| {name} | {tokens[name] / seconds[name]:.1f} | {decode[name][0] / decode[name][1]:.1f} | "
            f"{statistics.median(per_prompt[name]):.1f} | "
            f"{ratio:.2f}× | {same}/{n_prompts} |"
        )
    ours, peer = "ours AR, fp32", "llama.cpp AR, F32"
    print(
        f"\nour AR ÷ llama.cpp F32 AR: {(tokens[ours] / seconds[ours]) / (tokens[peer] / seconds[peer]):.2f}× "
        f"(decoding after the first token: {(decode[ours][0] / decode[ours][1]) / (decode[peer][0] / decode[peer][1]):.2f}×); "
        f"greedy outputs identical on {sum(outputs[(i, ours)] == outputs[(i, peer)] for i in range(n_prompts))}"
        f"/{n_prompts} prompts, agreeing on a median of "
        f"{statistics.median(agree(outputs[(i, ours)], outputs[(i, peer)]) for i in range(n_prompts))} leading tokens"
    )
    blocks, q41 = "ours AR, gguf", "llama.cpp AR, Q4_1"
    rate = {k: decode[k][0] / decode[k][1] for k in (blocks, q41, ours)}
    print(
        f"our AR on the blocks ÷ llama.cpp Q4_1 AR, decoding after the first token: {rate[blocks] / rate[q41]:.2f}× "
        f"(prefill included: {(tokens[blocks] / seconds[blocks]) / (tokens[q41] / seconds[q41]):.2f}×); "
        f"÷ our fp32 AR: {rate[blocks] / rate[ours]:.2f}×; our AR on the blocks = our fp32 AR on "
        f"{sum(outputs[(i, blocks)] == outputs[(i, ours)] for i in range(n_prompts))}/{n_prompts} prompts"
    )


if __name__ == "__main__":
    main()
