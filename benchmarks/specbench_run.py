"""`python -m benchmarks specbench`: Spec-Bench's questions raced the way the field reports them. Every drafter
spec given and transformers' greedy and equivalent assisted generation (prompt lookup for `ngram`, the target
itself for `self`, early exit for `layerskip`), each question run by every contestant in turn (interleaved
per question, after one untimed warm-up each), greedy. MT-bench's questions run both turns: the second turn
conditions on the contestant's own first answer. Speedups as Spec-Bench's evaluation/speed.py computes them
(engine/specbench.py) over our AR, the median per-question ratio beside them, mean tokens per target forward
(Spec-Bench's "mean accepted tokens"), and the outputs that differ from our AR. Writes results.json,
results.md (the leaderboard's table) and report.html (the app's Spec-Bench view) under --out.
"""

from __future__ import annotations

import json
import shlex
import statistics
import sys
import time
from pathlib import Path

from tqdm import tqdm

from engine import costmodel
from engine import specbench as sb
from engine.config import GenerationConfig
from engine.decode.engine import Engine
from engine.drafters.suffix import MAX_HISTORY_TOKENS, History, load_corpus
from engine.runtime import kernels
from engine.runtime.models import EMBEDDED, load_model, settle_heap
from engine.specs import family, parse_contestant
from specviz import CSS_PATH, render_leaderboard
from specviz.leaderboard import host_text, pass_range

from .bench_stats import AR
from .common import md_table
from .harness import WARMUP_TOKENS, build_configs, machine_info, run_config

MAX_REPEATS = 9  # passes over the sample


def encode_turns(tokenizer, turns: list, answers: list) -> list:
    """The chat-templated ids of the next turn: every earlier turn with this contestant's own answer to it."""
    messages = []
    for turn, answer in zip(turns, answers):
        messages += [{"role": "user", "content": turn}, {"role": "assistant", "content": answer}]
    messages.append({"role": "user", "content": turns[len(answers)]})
    ids = tokenizer.apply_chat_template(
        messages, add_generation_prompt=True, tokenize=True, return_dict=False
    )
    return list(ids["input_ids"] if hasattr(ids, "keys") else ids)


# what each turn keeps of its run's summary: α's counts, the verify size and cost, a round's host time and forward
FROM_SUMMARY = (
    "accepted",
    "rejections",
    "v",
    "v_n",
    "host_per_round_s",
    "forward_per_round_s",
    "host_rounds",
)


def answer(config, engines, loaded, question: dict, max_new_tokens: int, history=None) -> dict:
    """One contestant's answer to every turn of a question: tokens, seconds, target forwards, accepted draft
    positions and rejections (α's counts) and the most common verify size with its cost v (target steps) per turn."""
    out = {k: [] for k in ("new_tokens", "wall_time", "forwards", "token_ids", *FROM_SUMMARY)}
    texts = []
    for _ in question["turns"]:
        ids = encode_turns(loaded.tokenizer, question["turns"], texts)
        sample = run_config(config, engines, loaded, ids, max_new_tokens, history)
        texts.append(loaded.tokenizer.decode(sample.token_ids, skip_special_tokens=True))
        out["new_tokens"].append(len(sample.token_ids))
        out["wall_time"].append(sample.wall_s)
        out["token_ids"].append(list(sample.token_ids))
        summary = sample.summary or {}
        for k in FROM_SUMMARY:
            out[k].append(summary.get(k))
        rounds = summary.get("rounds")
        out["forwards"].append(
            rounds
            if config.runner == "ours" and config.gamma
            else len(sample.token_ids)
            if config.runner == "ours"
            else None
        )
    return out


def _contestants(target: str, drafts, gamma: int, hf: bool, hf_drafts: tuple | None) -> tuple:
    """The loaded target, an engine per drafter spec (and our AR), the configs raced and the drafters transformers
    has no counterpart for."""
    loaded = load_model(target)
    engines = {
        "ar": Engine(loaded, "self"),
        **{d: Engine(loaded, parse_contestant(d).drafter) for d in drafts},
    }
    configs, unsupported = build_configs(list(drafts), [gamma], loaded, hf)
    if hf_drafts is not None:  # transformers' rows: greedy and the equivalents of these drafters only
        configs = [c for c in configs if c.runner != "hf" or not c.drafter or c.drafter in hf_drafts]
    return loaded, engines, configs, unsupported


def _race(
    configs, engines, loaded, chosen: list, max_new_tokens: int, base: list, session: bool, bar
) -> dict:
    """Config name -> question id -> answer: every question run by every contestant in turn (interleaved per
    question). A speculative contestant's history starts with the datastore's sequences `base`: one history for
    the whole sample with session, else a fresh one per question (none without a datastore)."""
    answers = {c.name: {} for c in configs}

    def fresh() -> History:
        h = History(max_tokens=sum(map(len, base)) + MAX_HISTORY_TOKENS)
        for seq in base:
            h.add(seq)
        return h

    speculative = [c.name for c in configs if c.runner == "ours" and c.gamma]
    histories = {name: fresh() for name in speculative} if session else {}
    for q in chosen:
        for c in configs:  # interleaved per question
            history = histories.get(c.name) or (fresh() if base and c.name in speculative else None)
            answers[c.name][q["question_id"]] = answer(c, engines, loaded, q, max_new_tokens, history)
            bar.update(len(q["turns"]))
    return answers


def median_pass(passes: list) -> dict:
    """One pass's answers with each turn's wall time the median over the passes (a hiccup of the host moves one
    pass of one contestant, not the median). Every pass must give the same tokens (greedy): a pass that does not
    is refused, naming the contestant and the question."""
    first = passes[0]
    answers = {name: {qid: dict(a) for qid, a in rows.items()} for name, rows in first.items()}
    for name, rows in answers.items():
        for qid, a in rows.items():
            seen = [p[name][qid] for p in passes]
            if any(x["token_ids"] != a["token_ids"] for x in seen):
                raise RuntimeError(f"{name} answered question {qid} differently in another pass (greedy)")
            a["wall_times"] = [list(turn) for turn in zip(*(x["wall_time"] for x in seen))]
            a["wall_time"] = [statistics.median(turn) for turn in a["wall_times"]]
    return answers


def _write(results: dict, out) -> None:
    """results.json, results.md and report.html in folder `out` (made if missing)."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(results, indent=1, ensure_ascii=False), encoding="utf-8")
    (out / "results.md").write_text(markdown(results), encoding="utf-8")
    (out / "report.html").write_text(html(results), encoding="utf-8")


def run_specbench(
    target: str = EMBEDDED,
    drafts=("ngram",),
    gamma: int = 4,
    per_category: int | None = 10,
    seed: int = 0,
    max_new_tokens: int = 1024,
    hf: bool = True,
    out="specbench-out",
    questions=None,
    progress: bool = True,
    command: str | None = None,
    hf_drafts: tuple | None = None,
    session: bool = False,
    corpus: str | None = None,
    repeats: int = 1,
    settle: bool = False,
) -> dict:
    """Race every contestant on a seeded stratified sample of Spec-Bench; write results.json and results.md.
    repeats: passes over the whole sample, each interleaved per question; a turn's time is its median over the
    passes (median_pass) and the leaderboard of each pass is kept beside the median's ("passes").
    session: each of our speculative contestants keeps one History over the whole sample, as one visitor asking
    the questions in turn (suffix and auto draft from the earlier answers; the others ignore it).
    corpus: a datastore file (engine/drafters/suffix.py `load_corpus`): each speculative contestant's history starts
    with it, a fresh copy per question (one for the whole sample with session).
    settle: after the warm-up, settle the heap as the app does at start-up (models.settle_heap: the command line's
    runs; a test's process keeps its collector as it is)."""
    GenerationConfig(gamma=gamma, max_new_tokens=max_new_tokens)  # the ranges, with the user-facing messages
    chosen = sb.sample(questions if questions is not None else sb.load_questions(), per_category, seed)
    loaded, engines, configs, unsupported = _contestants(target, drafts, gamma, hf, hf_drafts)
    if not 1 <= repeats <= MAX_REPEATS:
        raise ValueError(
            f"repeats (passes over the sample) must be between 1 and {MAX_REPEATS}, got {repeats}"
        )
    runs = sum(len(q["turns"]) for q in chosen) * len(configs) * repeats
    bar = tqdm(
        total=runs, desc="specbench", unit="turn", file=sys.stderr, disable=not progress, dynamic_ncols=True
    )
    t0 = time.perf_counter()
    for c in configs:  # warm-up, untimed
        run_config(
            c,
            engines,
            loaded,
            encode_turns(loaded.tokenizer, chosen[0]["turns"], []),
            min(max_new_tokens, WARMUP_TOKENS),
        )
    base = load_corpus(corpus) if corpus else []
    if settle:
        settle_heap()
    passes = [
        _race(configs, engines, loaded, chosen, max_new_tokens, base, session, bar) for _ in range(repeats)
    ]
    bar.close()
    answers = median_pass(passes)
    results = {
        "format": "specviz-specbench",
        "version": 1,
        "command": command or "python " + shlex.join(sys.argv),
        "machine": {**machine_info(loaded), "cpu": kernels.cpu_name(), "flags": kernels.cpu_flags()},
        "date": time.strftime("%Y-%m-%d"),
        "seconds": round(time.perf_counter() - t0, 1),
        "settings": {
            "target": target,
            "drafts": list(drafts),
            "gamma": gamma,
            "per_category": per_category,
            "seed": seed,
            "max_new_tokens": max_new_tokens,
            "questions": len(chosen),
            "temperature": 0.0,
            "session": session,
            "repeats": repeats,
            "settled_heap": settle,
            "corpus": {"path": str(corpus), "sequences": len(base), "tokens": sum(map(len, base))}
            if corpus
            else None,
        },
        "configs": [c.to_dict() for c in configs],
        "hf_unsupported": unsupported,
        "questions": [{k: q[k] for k in ("question_id", "category", "group")} for q in chosen],
        "answers": answers,
        "leaderboard": leaderboard(configs, answers, chosen),
        "passes": [leaderboard(configs, p, chosen) for p in passes] if repeats > 1 else [],
    }
    _write(results, out)
    return results


def html(results: dict) -> str:
    """A standalone page: the Spec-Bench view the app shows (table, caption, chart), styled by specviz.css."""
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8"><title>specviz: Spec-Bench</title>'
        f"<style>{CSS_PATH.read_text(encoding='utf-8')}\nbody {{ font-family: system-ui, sans-serif; margin: 2em; }}"
        f"</style></head><body><h1>Spec-Bench</h1>{render_leaderboard(results)}</body></html>\n"
    )


def leaderboard(configs, answers: dict, chosen: list) -> list:
    """Per contestant: Spec-Bench's speedup over our AR per column and overall (with the median per-question
    ratio), tokens per target forward, and the questions whose output differs from our AR's."""
    groups = {q["question_id"]: q["group"] for q in chosen}
    speed = {
        name: {qid: sb.question_speed(a["new_tokens"], a["wall_time"]) for qid, a in rows.items()}
        for name, rows in answers.items()
    }
    out = []
    for c in configs:
        rows = answers[c.name]
        forwards = [f for a in rows.values() for f in a["forwards"]]
        tokens = sum(sum(a["new_tokens"]) for a in rows.values())
        differ = sum(a["token_ids"] != answers[AR][qid]["token_ids"] for qid, a in rows.items())
        host, forward = per_round(rows, "host_per_round_s"), per_round(answers[AR], "forward_per_round_s")
        out.append(
            {
                # a round's host work (everything but the verify forward, in ms) and our AR's t(1) beside it
                "host_ms_per_round": None if host is None else round(1e3 * host, 4),
                "ar_forward_ms": None if forward is None else round(1e3 * forward, 4),
                "config": c.name,
                "label": c.label,
                "speedups": sb.speedups(speed[c.name], speed[AR], groups),
                "tokens_per_s": statistics.fmean(speed[c.name].values()),
                "tokens_per_forward": tokens / sum(forwards) if forwards and None not in forwards else None,
                "differ_from_ar": differ,
            }
        )
    return out


def per_round(rows: dict, key: str) -> float | None:
    """A per-round figure of the turns' summaries (host_per_round_s, forward_per_round_s) averaged over all their
    rounds (each turn weighted by its rounds); None when no turn recorded it (transformers' rows, an old run)."""
    pairs = [
        (x, n)
        for a in rows.values()
        for x, n in zip(a.get(key) or [], a.get("host_rounds") or [])
        if x is not None and n
    ]
    total = sum(n for _, n in pairs)
    return sum(x * n for x, n in pairs) / total if total else None


def category_table(results: dict) -> list[str]:
    """Our speculative contestants per column: α (costmodel.alpha over the column's accepted and rejected draft
    positions), tokens per target forward, and the median v(n) of their turns at the most common verify size n
    (target steps)."""
    groups = {q["question_id"]: q["group"] for q in results["questions"]}
    head = ["method", *sb.GROUPS, "overall"]
    lines = [
        "Per column: α (accepted ÷ tested draft positions) · tokens per target forward · median v(n) over the turns "
        "(the verify forward's cost in target steps at each turn's most common size n).",
        "",
        "| " + " | ".join(head) + " |",
        "|" + "---|" * len(head),
    ]
    for c in results["configs"]:
        rows = results["answers"][c["name"]]
        if c["runner"] != "ours" or not c["gamma"]:
            continue
        cells = [c["label"]]
        for group in (*sb.GROUPS, None):
            turns = [
                tuple(a[k][i] for k in ("accepted", "rejections", "new_tokens", "forwards", "v", "v_n"))
                for qid, a in rows.items()
                if group is None or groups[qid] == group
                for i in range(len(a["new_tokens"]))
            ]
            if not turns or any(None in t[:4] for t in turns):
                cells.append("–")
                continue
            acc, rej, tok, fwd = (sum(t[k] for t in turns) for k in range(4))
            vs = [(t[4], t[5]) for t in turns if t[4] is not None and t[5]]
            v = statistics.median(x for x, _ in vs) if vs else None
            n = statistics.median_low(n for _, n in vs) if vs else None
            a = costmodel.alpha(acc, rej)
            alpha = f"{a:.2f}" if a is not None else "–"
            cells.append(f"{alpha} · {tok / fwd:.2f} · " + (f"v({n}) {v:.2f}" if v is not None else "–"))
        lines.append("| " + " | ".join(cells) + " |")
    return lines + ["", *turn_lines(results, groups)]


def turn_lines(results: dict, groups: dict) -> list[str]:
    """MT-bench's first and second turns apart: tokens per target forward of each speculative contestant (a
    drafter that reads history gains on the second turn, which repeats the first turn's question and answer)."""
    out = []
    for c in results["configs"]:
        rows = results["answers"][c["name"]]
        if c["runner"] != "ours" or not c["gamma"]:
            continue
        per_turn = []
        for turn in (0, 1):
            pairs = [
                (a["new_tokens"][turn], a["forwards"][turn])
                for qid, a in rows.items()
                if groups[qid] == "mt_bench" and len(a["new_tokens"]) > turn and a["forwards"][turn]
            ]
            per_turn.append(sum(t for t, _ in pairs) / sum(f for _, f in pairs) if pairs else None)
        if None not in per_turn:
            out.append(
                f"- {c['label']}: MT-bench tokens per forward, first turn {per_turn[0]:.2f}, second turn {per_turn[1]:.2f}"
            )
    return out


def pass_lines(results: dict) -> list[str]:
    """Each contestant's speedup per column in every pass apart (lowest – highest): how far one pass moves."""
    passes = results.get("passes") or []
    if len(passes) < 2:
        return []
    columns = (*sb.GROUPS, "overall")
    rows = []
    for i, row in enumerate(results["leaderboard"]):
        spans = [pass_range(passes, i, group) for group in columns]
        rows.append([row["label"], *(f"{span[0]:.2f} – {span[1]:.2f}" if span else None for span in spans)])
    return [
        "",
        f"Per pass (each of the {len(passes)} passes on its own times): lowest – highest speedup per column.",
        "",
        md_table(["method", *columns], rows),
    ]


def auto_lines(results: dict) -> list[str]:
    """Each `auto` contestant per column against the best of the fixed drafters raced beside it (our other
    speculative contestants) and against our AR: its speedup ÷ theirs."""
    ours = {c["name"]: c for c in results["configs"] if c["runner"] == "ours" and c["gamma"]}
    rows = {r["config"]: r for r in results["leaderboard"] if r["config"] in ours}
    autos = [n for n, c in ours.items() if family(c.get("drafter")) == "auto"]
    fixed = [n for n in rows if n not in autos]
    if not autos or not fixed:
        return []
    columns, table = (*sb.GROUPS, "overall"), []
    for a in autos:
        cells = [rows[a]["label"]]
        for group in columns:
            mine = rows[a]["speedups"].get(group)
            theirs = [
                (rows[f]["speedups"][group]["speedup"], f) for f in fixed if rows[f]["speedups"].get(group)
            ]
            if not mine or not theirs:
                cells.append(None)
                continue
            best, name = max(theirs)
            cells.append(f"{mine['speedup'] / best:.2f} ({ours[name]['drafter']}) · {mine['speedup']:.2f}")
        table.append(cells)
    return [
        "",
        "auto per column: its speedup ÷ the best fixed drafter's (which) · ÷ our AR's.",
        "",
        md_table(["method", *columns], table),
    ]


def markdown(results: dict) -> str:
    """The leaderboard's table: speedup per column and overall (median per-question ratio in brackets)."""
    s, m = results["settings"], results["machine"]
    head = ["method", *sb.GROUPS, "overall", "tokens / forward", "tok/s", "host / round", "outputs ≠ our AR"]
    lines = [
        f"# Spec-Bench on {s['target']} ({results['date']})",
        "",
        f"`{results['command']}`",
        "",
        f"{m['cpu']} ({m['cpu_count']} CPUs, {m['threads']} torch threads), torch {m['torch']}, {m['dtype']}; "
        f"{s['questions']} questions ({s['per_category']} per category, seed {s['seed']}; MT-bench both turns), "
        f"greedy, γ = {s['gamma']}, at most {s['max_new_tokens']} new tokens per turn (Spec-Bench: 1024); "
        + (
            "one session: each speculative contestant keeps a history of its earlier answers over the sample; "
            if s.get("session")
            else ""
        )
        + (
            f"each speculative contestant drafts from the datastore {s['corpus']['path']} "
            f"({s['corpus']['sequences']} sequences, {s['corpus']['tokens']} tokens); "
            if s.get("corpus")
            else ""
        )
        + (
            f"each turn's time is its median over {s['repeats']} passes over the sample, each interleaved per "
            "question; "
            if s.get("repeats", 1) > 1
            else ""
        )
        + (
            "the heap settled after loading, as the app's start-up settles it (one full collection, its survivors "
            "exempt from later ones); "
            if s.get("settled_heap")
            else ""
        )
        + f"{results['seconds'] / 60:.0f} min. Speedup = mean tok/s of the method ÷ mean tok/s of our AR over a "
        "column's questions (Spec-Bench's evaluation/speed.py); the median per-question ratio in brackets. "
        "Host / round: a round's time outside its verify forward (drafting, the acceptance rule, the drafter's "
        "feedback, the events), in ms and as a share of t(1), our AR's forward.",
        "",
        "| " + " | ".join(head) + " |",
        "|" + "---|" * len(head),
    ]
    for row in results["leaderboard"]:
        cells = [row["label"]]
        for group in (*sb.GROUPS, "overall"):
            v = row["speedups"].get(group)
            cells.append(f"{v['speedup']:.2f}× ({v['median_ratio']:.2f})" if v else "–")
        tpf = row["tokens_per_forward"]
        cells += [
            f"{tpf:.2f}" if tpf else "–",
            f"{row['tokens_per_s']:.1f}",
            host_text(row),
            f"{row['differ_from_ar']}/{s['questions']}",
        ]
        lines.append("| " + " | ".join(cells) + " |")
    lines += [*pass_lines(results), *auto_lines(results), "", *category_table(results)]
    if results["hf_unsupported"]:
        lines += [
            "",
            "No transformers counterpart for: " + ", ".join(f"`{d}`" for d in results["hf_unsupported"]),
        ]
    return "\n".join(lines) + "\n"
