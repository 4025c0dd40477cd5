"""Spec-Bench (Xia et al., Findings of ACL 2024; github.com/hemingkx/Spec-Bench, Apache-2.0): its 480 questions
(engine/prompts/spec_bench/, with the licence) and its arithmetic, as its `evaluation/speed.py` computes them:

    per question: speed = Σ new tokens over its turns / Σ wall time over its turns
    per category and overall: speedup = mean(speed of the method) / mean(speed of the baseline)
    mean accepted tokens = the mean over every decoding step of the tokens it accepted

MT-bench's 8 subcategories (writing, roleplay, reasoning, math, coding, extraction, stem, humanities) report
together as `mt_bench`. Beside Spec-Bench's ratio of means this module gives the median of the per-question
ratios (robust to one slow outlier on a shared box). Plain Python: no torch, no model.
"""

from __future__ import annotations

import json
import random
import statistics
from pathlib import Path

QUESTIONS = Path(__file__).resolve().parent / "prompts" / "spec_bench" / "question.jsonl"
MT_BENCH = ("writing", "roleplay", "reasoning", "math", "coding", "extraction", "stem", "humanities")
# the leaderboard's columns
GROUPS = ("mt_bench", "translation", "summarization", "qa", "math_reasoning", "rag")


def group_of(category: str) -> str:
    """The leaderboard column a question's category reports under."""
    return "mt_bench" if category in MT_BENCH else category


def load_questions(path=QUESTIONS) -> list[dict]:
    """[{question_id, category, group, turns}] in file order; a line that is not a question is a ValueError."""
    out = []
    for n, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        row = json.loads(line)
        turns = row.get("turns")
        if not (
            isinstance(row.get("category"), str)
            and isinstance(turns, list)
            and turns
            and all(isinstance(t, str) and t.strip() for t in turns)
        ):
            raise ValueError(f"{path}:{n}: expected a Spec-Bench question with a category and its turns")
        out.append(
            {
                "question_id": row.get("question_id"),
                "category": row["category"],
                "group": group_of(row["category"]),
                "turns": list(turns),
            }
        )
    return out


def sample(questions: list[dict], per_group: int | None, seed: int = 0) -> list[dict]:
    """A fixed, seeded stratified sample: per_group questions of each leaderboard column (all when None), in
    file order."""
    if per_group is None:
        return list(questions)
    if per_group < 1:
        raise ValueError(f"--per-category must be at least 1, got {per_group}")
    rng = random.Random(seed)
    keep = set()
    for group in GROUPS:
        ids = [i for i, q in enumerate(questions) if q["group"] == group]
        keep.update(rng.sample(ids, min(per_group, len(ids))))
    return [q for i, q in enumerate(questions) if i in keep]


def question_speed(new_tokens: list, wall_times: list) -> float:
    """Spec-Bench's per-question speed: tokens over all of its turns / the seconds they took."""
    seconds = sum(wall_times)
    if seconds <= 0:
        raise ValueError(f"a question's wall times must add up to more than 0 s, got {wall_times!r}")
    return sum(new_tokens) / seconds


def speedups(method: dict, baseline: dict, groups: dict) -> dict:
    """Per leaderboard column and overall: Spec-Bench's speedup (mean method speed / mean baseline speed over
    the column's questions) and the median per-question ratio. method, baseline: {question_id: speed};
    groups: {question_id: leaderboard column}. Only questions both sides answered count."""
    out = {}
    for group in (*GROUPS, "overall"):
        ids = [q for q in method if q in baseline and (group == "overall" or groups.get(q) == group)]
        if not ids:
            continue
        m, b = [method[q] for q in ids], [baseline[q] for q in ids]
        out[group] = {
            "speedup": statistics.fmean(m) / statistics.fmean(b),
            "median_ratio": statistics.median(x / y for x, y in zip(m, b)),
            "questions": len(ids),
        }
    return out


def mean_accepted(accept_lengths: list) -> float | None:
    """Spec-Bench's mean accepted tokens: the mean over every step of every question (None without steps)."""
    return statistics.fmean(accept_lengths) if accept_lengths else None
