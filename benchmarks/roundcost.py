"""`python -m benchmarks roundcost`: where a round's host time goes, per drafter, beside t(1) (issue 64).

Every method runs each question's first turn in turn (interleaved per question; both weight formats in one process
with --weights gguf,fp32), greedy, γ 4. From each round's `round_timed` event:

- forward: the verify forward alone (`forward_s`); t(1) is the median forward of our AR's rounds on the same weights;
- draft: asking the drafter (`draft_s`);
- accept: the acceptance rule, the rollback and the commit's bookkeeping (`verify_s − forward_s`);
- feedback: the drafter learning the settled round (`feedback_s`);
- events: building the round's events (`total_s − draft_s − verify_s − feedback_s`);
- host: everything but the forward (`total_s − forward_s`), the figure the issue bounds at 10% of t(1); beside it
  the same of the rounds that drafted nothing (a plain round of a speculative method: what it costs over our AR's).

Medians per round (a round's host time is small and skewed by the machine's hiccups; the mean is printed beside).
"""

from __future__ import annotations

import argparse
import statistics
import time

from benchmarks.common import embedded_on, host_line
from benchmarks.specbench_run import encode_turns
from engine import Engine, GenerationConfig
from engine import specbench as sb
from engine.runtime.models import settle_heap

PARTS = ("draft", "accept", "feedback", "events", "host")


def parts(e) -> dict:
    """One round_timed event's host parts, in seconds."""
    events = e.total_s - e.draft_s - e.verify_s - e.feedback_s
    return {
        "draft": e.draft_s,
        "accept": e.verify_s - e.forward_s,
        "feedback": e.feedback_s,
        "events": events,
        "host": e.total_s - e.forward_s,
    }


def measure(weights: list, drafts: list, per_category: int, max_new_tokens: int, gamma: int) -> dict:
    """{(weights, method): {"forward": [...], part: [...], "tokens": [...]}} over the sample, interleaved per question."""
    engines = {}
    for w in weights:
        target = embedded_on(w)
        engines[(w, "ar")] = Engine(target, "self", measure_step=False)
        for d in drafts:
            engines[(w, d)] = Engine(target, d, measure_step=False)
    out = {key: {"forward": [], "tokens": [], "plain_host": [], **{p: [] for p in PARTS}} for key in engines}
    questions = sb.sample(sb.load_questions(), per_category, 0)
    cfg = GenerationConfig(gamma=gamma, max_new_tokens=max_new_tokens)
    for key in engines:  # one warm-up run each: a first call loads, compiles and measures the host
        engines[key].run("Hello", GenerationConfig(gamma=gamma, max_new_tokens=4))
    settle_heap()  # as the app's start-up: no full collection of the loaded models lands in a round
    for q in questions:
        for (w, method), engine in engines.items():
            ids = encode_turns(engine.target.tokenizer, q["turns"][:1], [])
            rec = out[(w, method)]
            for e in engine.generate(None, cfg, "ar" if method == "ar" else "speculative", prompt_ids=ids):
                if e.kind == "round_timed":
                    rec["forward"].append(e.forward_s)
                    for p, v in parts(e).items():
                        rec[p].append(v)
                    if e.gamma == 0:
                        rec["plain_host"].append(e.total_s - e.forward_s)
                elif e.kind == "committed":
                    rec["tokens"].append(len(e.token_ids))
    return out


def table(out: dict, weights: list) -> list[str]:
    lines = []
    for w in weights:
        t1 = statistics.median(out[(w, "ar")]["forward"])
        lines += [
            "",
            f"weights {w}: t(1) = {1e3 * t1:.2f} ms (median AR forward); per round, median ms (mean):",
            "",
            "| method | rounds | tokens / round | forward | draft | accept | feedback | events | host | host ÷ t(1) "
            "| plain rounds: host ÷ t(1) |",
            "|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        for (ww, method), rec in out.items():
            if ww != w:
                continue
            cells = [
                f"{1e3 * statistics.median(rec[p]):.3f} ({1e3 * statistics.fmean(rec[p]):.3f})"
                for p in ("forward", *PARTS)
            ]
            share = statistics.median(rec["host"]) / t1
            plain = rec["plain_host"]
            plain_share = (
                f"{100 * statistics.median(plain) / t1:.1f}% of {len(plain)}"
                if plain and method != "ar"
                else "—"
            )
            lines.append(
                f"| {method} | {len(rec['host'])} | {sum(rec['tokens']) / max(len(rec['tokens']), 1):.2f} | "
                + " | ".join(cells)
                + f" | {100 * share:.1f}% | {plain_share} |"
            )
    return lines


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks roundcost", description=__doc__.splitlines()[0])
    p.add_argument("--drafts", default="ngram,suffix,recycle,auto")
    p.add_argument("--weights", default="gguf,fp32", help="comma-separated: gguf, fp32")
    p.add_argument(
        "--per-category", type=int, default=1, help="Spec-Bench questions per category (first turns)"
    )
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--gamma", type=int, default=4)
    args = p.parse_args(argv)
    weights = [w.strip() for w in args.weights.split(",") if w.strip()]
    drafts = [d.strip() for d in args.drafts.split(",") if d.strip()]
    t = time.perf_counter()
    out = measure(weights, drafts, args.per_category, args.max_new_tokens, args.gamma)
    print(host_line())
    print(
        f"python -m benchmarks roundcost --drafts {','.join(drafts)} --weights {','.join(weights)} "
        f"--per-category {args.per_category} --max-new-tokens {args.max_new_tokens} --gamma {args.gamma}"
        f" ({(time.perf_counter() - t) / 60:.1f} min)"
    )
    print("\n".join(table(out, weights)))
    return 0
