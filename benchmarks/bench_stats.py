"""Benchmark statistics: medians over repeats, paired speedups, pooled acceptance, predicted curves.

Pure Python on the harness's samples (harness.py); no models, no clocks.
"""

from __future__ import annotations

from engine import costmodel
from engine.config import MAX_GAMMA

AR, HF_GREEDY = "ours/ar", "hf/greedy"  # the reference configs every other one is compared with


def _ratio(a, b):
    return a / b if a is not None and b else None


def _first_diff(a: list, b: list) -> int | None:
    """Index of the first differing token (or the shorter length); None when identical."""
    if a == b:
        return None
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


def summarize_prompt(samples: dict, configs: list) -> dict:
    """Per config: medians over repeats, paired speedups, acceptance counts, identity vs our AR."""
    reference = samples[AR][0].token_ids
    out = {}
    for c in configs:
        runs = samples.get(c.name, [])
        if not runs:
            out[c.name] = None
            continue
        diffs = [_first_diff(s.token_ids, reference) for s in runs]
        row = {
            "wall_s": costmodel.median(s.wall_s for s in runs),
            "new_tokens": costmodel.median(len(s.token_ids) for s in runs),
            "tokens_per_s": costmodel.median(s.tokens_per_s for s in runs),
            "speedup_vs_ar": costmodel.median(
                _ratio(s.tokens_per_s, a.tokens_per_s) for s, a in zip(runs, samples[AR])
            ),
            "speedup_vs_hf": costmodel.median(
                _ratio(s.tokens_per_s, h.tokens_per_s) for s, h in zip(runs, samples.get(HF_GREEDY, []))
            ),
            "identical": all(d is None for d in diffs),
            "first_diff": next((d for d in diffs if d is not None), None),
            "runs": [
                {
                    "wall_s": s.wall_s,
                    "new_tokens": len(s.token_ids),
                    "tokens_per_s": s.tokens_per_s,
                    "engine_wall_s": (s.summary or {}).get("wall_s"),
                }
                for s in runs
            ],
        }
        if c.runner == "ours" and c.gamma:
            sums = [s.summary for s in runs]
            for key in (
                "alpha",
                "acceptance_rate",
                "mean_accepted_length",
                "c",
                "v",
                "predicted_speedup",
                "target_step_s",
            ):
                row[key] = costmodel.median(s.get(key) for s in sums)
            for key in ("drafted", "accepted", "rejections", "rounds"):
                row[key] = sum(s.get(key) or 0 for s in sums)
            # a run the model cannot predict (tree rounds: E has no closed form) leaves the prompt unpredicted, so
            # a prediction never covers a subset of the runs it is printed beside
            predicted = all(
                s.get("model_tokens") is not None and s.get("model_steps") is not None for s in sums
            )
            for key in ("model_tokens", "model_steps"):
                row[key] = sum(s[key] for s in sums) if predicted else None
            if not predicted:
                row["predicted_speedup"] = None
            row["v_points"] = [
                [n, costmodel.median(dict(s.get("v_points") or []).get(n) for s in sums)]
                for n in sorted({n for s in sums for n, _ in s.get("v_points") or []})
            ]
            row["gen_tokens"] = sum(len(s.token_ids) for s in runs)
            row["pos_drafted"] = [
                sum(col) for col in zip(*[s.pos_drafted + [0] * (c.gamma - len(s.pos_drafted)) for s in runs])
            ]
            row["pos_accepted"] = [
                sum(col)
                for col in zip(*[s.pos_accepted + [0] * (c.gamma - len(s.pos_accepted)) for s in runs])
            ]
            row["per_position_acceptance"] = [
                _ratio(a, d) for a, d in zip(row["pos_accepted"], row["pos_drafted"])
            ]
        out[c.name] = row
    return out


def aggregate(prompt_rows: list, configs: list) -> dict:
    """Per config over a set of prompts: total tokens / total median time, pooled acceptance counts."""
    out = {}
    for c in configs:
        rows = [r[c.name] for r in prompt_rows if r.get(c.name)]
        if not rows:
            out[c.name] = None
            continue
        tokens, wall = sum(r["new_tokens"] for r in rows), sum(r["wall_s"] for r in rows)
        out[c.name] = {
            "prompts": len(rows),
            "new_tokens": tokens,
            "wall_s": wall,
            "tokens_per_s": tokens / wall if wall else None,
            "identical": all(r["identical"] for r in rows),
        }
        if c.runner == "ours" and c.gamma:
            drafted, accepted = sum(r["drafted"] for r in rows), sum(r["accepted"] for r in rows)
            rejections = sum(r["rejections"] for r in rows)
            pos_d = [sum(col) for col in zip(*[r["pos_drafted"] for r in rows])]
            pos_a = [sum(col) for col in zip(*[r["pos_accepted"] for r in rows])]
            # every prompt's runs, or no prediction
            predicted = all(r["model_tokens"] is not None for r in rows)
            tokens = sum(r["model_tokens"] for r in rows) if predicted else None
            steps = sum(r["model_steps"] for r in rows) if predicted else None
            # the cost model's Σ E / Σ cost, pooled over runs
            out[c.name].update(
                drafted=drafted,
                accepted=accepted,
                rejections=rejections,
                alpha=costmodel.alpha(accepted, rejections),
                acceptance_rate=_ratio(accepted, drafted),
                mean_accepted_length=_ratio(
                    sum(r["gen_tokens"] for r in rows), sum(r["rounds"] for r in rows)
                ),
                c=costmodel.median(r["c"] for r in rows),
                v=costmodel.median(r["v"] for r in rows),
                per_position_acceptance=[_ratio(a, d) for a, d in zip(pos_a, pos_d)],
                pos_drafted=pos_d,
                pos_accepted=pos_a,
                predicted_speedup=_ratio(tokens, steps),
            )
    for row in out.values():
        if row:
            row["speedup_vs_ar"] = _ratio(row["tokens_per_s"], (out.get(AR) or {}).get("tokens_per_s"))
            row["speedup_vs_hf"] = _ratio(row["tokens_per_s"], (out.get(HF_GREEDY) or {}).get("tokens_per_s"))
    return out


def predicted_curves(overall: dict, configs: list, max_gamma: int = MAX_GAMMA) -> dict:
    """Per drafter, the cost model's E/(γc + v(γ+1)) for γ = 1..max_gamma from the measured α, c and v.

    α is the per-token α pooled over every γ the drafter ran (accepted / tested positions); c is the
    median over γ; v(n) is the cost model's curve through the measured (n, v) points.
    """
    curves = {}
    for d in dict.fromkeys(c.drafter for c in configs if c.runner == "ours" and c.gamma):
        rows = [(c.gamma, overall.get(c.name)) for c in configs if c.runner == "ours" and c.drafter == d]
        rows = [(g, r) for g, r in rows if r and r.get("drafted")]
        alpha = costmodel.alpha(sum(r["accepted"] for _, r in rows), sum(r["rejections"] for _, r in rows))
        cost = costmodel.median(r["c"] for _, r in rows)
        points = {g + 1: r["v"] for g, r in rows if r.get("v") is not None}
        if alpha is None or cost is None or not points:
            continue
        curve = [[g, y] for g, _, y in costmodel.curve(alpha, cost, points, max_gamma)]
        best = max(curve, key=lambda p: p[1])
        curves[d] = {
            "alpha": alpha,
            "c": cost,
            "v_points": sorted([n, v] for n, v in points.items()),
            "curve": curve,
            "best_gamma": best[0],
            "best_predicted_speedup": best[1],
        }
    return curves


def head_to_head(overall: dict, configs: list) -> list:
    """Our config next to transformers' doing the same thing: AR vs greedy generate(), and each drafter
    and γ vs assisted generation with the equivalent settings. One row per pair that both ran."""
    hf = {(c.drafter, c.gamma): c for c in configs if c.runner == "hf"}
    rows = []
    for c in configs:
        theirs = hf.get((c.drafter, c.gamma)) if c.runner == "ours" else None
        ours_row, hf_row = overall.get(c.name), overall.get(theirs.name) if theirs else None
        if not ours_row or not hf_row:
            continue
        measured, predicted = ours_row.get("speedup_vs_ar"), ours_row.get("predicted_speedup")
        rows.append(
            {
                "ours": c.name,
                "hf": theirs.name,
                "label": c.label,
                "hf_label": theirs.label,
                "kind": "assisted" if c.gamma else "greedy",
                "ours_tokens_per_s": ours_row["tokens_per_s"],
                "hf_tokens_per_s": hf_row["tokens_per_s"],
                "ratio": _ratio(ours_row["tokens_per_s"], hf_row["tokens_per_s"]),
                "identical": bool(ours_row["identical"] and hf_row["identical"]),
                "measured_over_predicted": _ratio(measured, predicted) if c.gamma else None,
            }
        )
    return rows


def tabulate(rows: list, encoded: list, samples: list, configs: list) -> dict:
    """results.json's tables: per prompt, per category and overall rows, mismatches, head-to-head, predictions."""
    prompt_rows = [summarize_prompt(s, configs) for s in samples]
    mismatches = [
        {"prompt": i, "category": p["category"], "config": c.name, "first_diff": r[c.name]["first_diff"]}
        for i, (p, r) in enumerate(zip(rows, prompt_rows))
        for c in configs
        if r[c.name] and not r[c.name]["identical"]
    ]
    by_cat: dict = {}
    for p, r in zip(rows, prompt_rows):
        by_cat.setdefault(p["category"], []).append(r)
    overall = aggregate(prompt_rows, configs)
    return {
        "mismatches": len(mismatches),
        "mismatch_details": mismatches,
        "prompts": [
            {
                "id": i,
                "category": p["category"],
                "prompt": p["prompt"],
                "prompt_tokens": len(ids),
                "results": r,
            }
            for i, (p, ids, r) in enumerate(zip(rows, encoded, prompt_rows))
        ],
        "categories": {cat: aggregate(rs, configs) for cat, rs in by_cat.items()},
        "overall": overall,
        "head_to_head": head_to_head(overall, configs),
        "predicted": predicted_curves(overall, configs),
    }
