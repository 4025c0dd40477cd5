"""`python -m benchmarks sidebyside`: the same prompts through transformers' assisted generation (recorded round by
round, engine/recorders/hf.py) and through our engine with the matching drafter (prompt lookup against `ngram`):
both against their own plain greedy decoding, token identity, rounds, tokens per target forward and speedup, and
one HTML page with both streams of every prompt.

Definitions, one for both engines: tokens per forward = new tokens ÷ the rounds that committed them (transformers
reads the prompt in round 1's forward; ours in a prefill before round 1, not counted); speedup = Spec-Bench's
(engine/specbench.py): per question the engine's speculative tokens/s ÷ its plain greedy tokens/s, overall the mean
speed ÷ the mean plain speed; each run timed call -> last token with the prompt's prefill, the four runs of a prompt
back to back (ours AR, transformers greedy, ours speculative, transformers assisted).
"""

from __future__ import annotations

import argparse
import html
import json
import shlex
import time
from pathlib import Path

from engine import specbench as sb
from engine.config import GenerationConfig
from engine.decode.engine import Engine
from engine.recorders import hf
from engine.runtime.models import EMBEDDED, prompt_ids
from specviz import CSS_PATH
from specviz.tokens import render_stream

from .common import host, host_line, md_table
from .timing import time_ours


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m benchmarks sidebyside", description=__doc__.split("\n\n")[0])
    p.add_argument("--draft", default="ngram", help="our drafter spec; transformers runs its counterpart")
    p.add_argument("--gamma", type=int, default=4)
    p.add_argument("--per-category", type=int, default=1, help="Spec-Bench questions per leaderboard column")
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--out", default="sidebyside-out")
    return p


def one(engine: Engine, draft: str, gamma: int, question: dict, new: int) -> dict:
    """One prompt through both engines: four timed runs and the recorded transformers trace."""
    prompt = question["turns"][0]
    ids = prompt_ids(engine.target.tokenizer, prompt)
    cfg = GenerationConfig(gamma=gamma, max_new_tokens=new)
    ar = time_ours(engine, ids, cfg, "ar")
    theirs = hf.run(EMBEDDED, draft, prompt, gamma=gamma, max_new_tokens=new)
    events = []
    spec = time_ours(engine, ids, cfg, "speculative", on_event=events.append)
    done = theirs["events"][-1]
    return {
        "question_id": question["question_id"],
        "category": question["category"],
        "group": question["group"],
        "ours": side(spec.summary, spec.token_ids == ar.token_ids, spec.wall_s, len(ar.token_ids), ar.wall_s),
        "transformers": {
            **side(
                done.summary,
                done.token_ids == theirs["reference"],
                theirs["assisted_s"],
                len(theirs["reference"]),
                theirs["plain_s"],
            ),
            "forwards": theirs["forwards"],
        },
        "same_text": spec.token_ids == done.token_ids,
        "streams": (render_stream(events), render_stream(theirs["events"])),
    }


def side(summary: dict, identical: bool, wall_s: float, plain_tokens: int, plain_s: float) -> dict:
    """One engine's figures for a question: from its run summary (engine/metrics.py) and Spec-Bench's speed
    (engine/specbench.py question_speed) of its speculative and its plain run."""
    speed = sb.question_speed([summary["new_tokens"]], [wall_s])
    plain = sb.question_speed([plain_tokens], [plain_s])
    return {
        "identical": identical,
        "rounds": summary["rounds"],
        "new_tokens": summary["new_tokens"],
        "tokens_per_forward": summary["mean_accepted_length"],
        "speed": speed,
        "plain_speed": plain,
        "speedup": speed / plain,
        "wall_s": wall_s,
    }


def per_forward(side_: dict) -> float:
    return side_["tokens_per_forward"] or 0.0


def overall(rows: list, engine: str) -> dict:
    """Spec-Bench's overall speedup (mean speed ÷ mean plain speed) and median per-question ratio, engine/specbench.py."""
    return sb.speedups(
        {r["question_id"]: r[engine]["speed"] for r in rows},
        {r["question_id"]: r[engine]["plain_speed"] for r in rows},
        {r["question_id"]: r["group"] for r in rows},
    )["overall"]


def table(rows: list) -> str:
    body = [
        [
            str(r["question_id"]),
            r["category"],
            f"{per_forward(r['ours']):.2f}",
            f"{per_forward(r['transformers']):.2f}",
            f"{r['ours']['speedup']:.2f}×",
            f"{r['transformers']['speedup']:.2f}×",
            "yes" if r["ours"]["identical"] and r["transformers"]["identical"] else "NO",
            "yes" if r["same_text"] else "no",
        ]
        for r in rows
    ]
    mean = [
        "all",
        f"{len(rows)} prompts",
        *(
            f"{sum(r[s]['new_tokens'] for r in rows) / max(sum(r[s]['rounds'] for r in rows), 1):.2f}"
            for s in ("ours", "transformers")
        ),
        *(
            f"{o['speedup']:.2f}× (median {o['median_ratio']:.2f})"
            for o in (overall(rows, e) for e in ("ours", "transformers"))
        ),
        f"{sum(r['ours']['identical'] and r['transformers']['identical'] for r in rows)}/{len(rows)}",
        f"{sum(r['same_text'] for r in rows)}/{len(rows)}",
    ]
    header = [
        "question",
        "category",
        "ours: tokens / forward",
        "transformers: tokens / forward",
        "ours: speedup",
        "transformers: speedup",
        "each identical to its greedy",
        "same text",
    ]
    return md_table(header, body + [mean])


def page(rows: list, command: str, machine: str) -> str:
    """One HTML page: per prompt both streams, ours above transformers', with their figures."""
    parts = [f"<h1>Side by side</h1><p><code>{html.escape(command)}</code></p><p>{html.escape(machine)}</p>"]
    for r in rows:
        o, t = r["ours"], r["transformers"]
        parts.append(
            f"<h2>{html.escape(str(r['question_id']))} · {html.escape(r['category'])}</h2>"
            f"<h3>specviz · {o['rounds']} rounds · {per_forward(o):.2f} tokens / forward · {o['speedup']:.2f}×</h3>"
            f"{r['streams'][0]}"
            f"<h3>transformers · {t['rounds']} rounds ({t['forwards']} target forwards) · "
            f"{per_forward(t):.2f} tokens / forward · {t['speedup']:.2f}×</h3>{r['streams'][1]}"
        )
    css = Path(CSS_PATH).read_text(encoding="utf-8")
    return (
        '<!DOCTYPE html><html><head><meta charset="utf-8"><title>specviz side by side</title>'
        f"<style>body{{font-family:system-ui,sans-serif;max-width:1100px;margin:2em auto}}{css}</style></head>"
        "<body>" + "\n".join(parts) + "</body></html>\n"
    )


def main(argv: list) -> int:
    args = parser().parse_args(argv)
    command = "python -m benchmarks sidebyside " + shlex.join(argv)
    questions = sb.sample(sb.load_questions(), args.per_category)
    engine = Engine.load(EMBEDDED, args.draft)
    warm = dict(questions[0], turns=["Say hi."])
    one(engine, args.draft, args.gamma, warm, 8)  # first calls pay one-time costs (kernel plans, caches)
    t0 = time.perf_counter()
    rows = [one(engine, args.draft, args.gamma, q, args.max_new_tokens) for q in questions]
    machine = host_line(host())
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    text = f"{command}\n\n{machine}\n\n{table(rows)}\n"
    (out / "results.md").write_text(text, encoding="utf-8")
    (out / "sidebyside.html").write_text(page(rows, command, machine), encoding="utf-8")
    plain = [{k: v for k, v in r.items() if k != "streams"} for r in rows]
    (out / "results.json").write_text(
        json.dumps({"command": command, "host": machine, "rows": plain}, indent=1)
    )
    print(text + f"\n({(time.perf_counter() - t0) / 60:.1f} min; {out / 'sidebyside.html'})")
    return 0
