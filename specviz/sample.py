"""A small hand-built trace (NOT model output) for tests, docs and an offline demo of the renderers.

A greedy speculative run with γ = 3 and 9 new tokens, then its AR baseline:
  round 1: 2 of 3 drafts accepted, the 3rd rejected and corrected (one position rolled back)
  round 2: all 3 accepted (one is `<script>alert(1)</script>`, one is ` &`) plus a bonus newline
  round 3: the first draft rejected (three positions rolled back), corrected
  round 4: γ = 0 (one token left in the budget): a plain target step
"""
from __future__ import annotations

from engine.events import Committed, Drafted, Finished, RolledBack, RoundTimed, RunStarted, Verified
from engine.metrics import RunStats

PROMPT_IDS, PROMPT_TOKENS = [1, 2], ["<|im_start|>", "Hi"]
SPEC_TOKENS = ["The", " cat", " ran", "<script>alert(1)</script>", " &", " dog", "\n", " Z", "!"]
SPEC_IDS = [10, 11, 12, 13, 14, 15, 16, 17, 18]
SPEC_ORIGINS = ["accepted", "accepted", "corrected", "accepted", "accepted", "accepted", "bonus", "corrected", "ar"]
TARGET_STEP_S = 0.04  # one target step; the AR lane pays this per token, a verify of 4 tokens 1.5 of it


def _topk(*rows):
    return [[list(r) for r in row] for row in rows]


def _config(temperature: float) -> dict:
    return {"gamma": 3, "max_new_tokens": 9, "temperature": temperature, "top_k": 0, "top_p": 1.0,
            "seed": 0, "raw": False, "record_topk": 3}


def _finish(events, rounds, pos, ids, tokens, wall, step_s=None):
    stats = RunStats()
    for e in events:
        stats.add(e)
    return Finished(rounds, pos, "max_new_tokens", "".join(tokens), list(ids), stats.summary(wall, step_s))


def speculative_events(temperature: float = 0.0, finished: bool = True) -> list:
    """The speculative run (rounds 1-4) described in the module docstring."""
    greedy = temperature == 0
    ev = [RunStarted(0, "spec01", "speculative", "target-test", "draft-test", "cpu", "float32",
                     _config(temperature), "Hi", PROMPT_IDS, PROMPT_TOKENS, 2)]
    # round 1: The, cat accepted; " sat" rejected -> " ran"
    ev += [Drafted(1, 2, [10, 11, 20], ["The", " cat", " sat"], [0.9, 0.8, 0.6],
                   _topk([(10, "The", 0.9)], [(11, " cat", 0.8)], [(20, " sat", 0.6), (12, " ran", 0.2)]), "draft-test"),
           Verified(1, 2, [0.85, 0.7, 0.1], [1.0, 1.0, 0.0], [True, True, False], 2, 12, " ran", 0.6, "corrected",
                    _topk([(10, "The", 0.85)], [(11, " cat", 0.7)], [(12, " ran", 0.6), (20, " sat", 0.1)],
                          [(30, ".", 0.5)]), greedy),
           RolledBack(1, [4], 5, 4),
           Committed(1, 2, [10, 11, 12], ["The", " cat", " ran"], ["accepted", "accepted", "corrected"], [0.85, 0.7, 0.6]),
           RoundTimed(1, 5, 0.006, 0.055, 0.066, 0.086, 3)]
    # round 2: all three accepted, bonus newline
    ev += [Drafted(2, 5, [13, 14, 15], ["<script>alert(1)</script>", " &", " dog"], [0.7, 0.9, 0.8],
                   _topk([(13, "<script>alert(1)</script>", 0.7)], [(14, " &", 0.9)], [(15, " dog", 0.8)]), "draft-test"),
           Verified(2, 5, [0.8, 0.95, 0.9], [1.0, 1.0, 1.0], [True, True, True], None, 16, "\n", 0.5, "bonus",
                    _topk([(13, "<script>alert(1)</script>", 0.8)], [(14, " &", 0.95)], [(15, " dog", 0.9)],
                          [(16, "\n", 0.5), (31, " <b>", 0.2)]), greedy),
           Committed(2, 5, [13, 14, 15, 16], ["<script>alert(1)</script>", " &", " dog", "\n"],
                     ["accepted", "accepted", "accepted", "bonus"], [0.8, 0.95, 0.9, 0.5]),
           RoundTimed(2, 9, 0.006, 0.055, 0.066, 0.152, 3)]
    # round 3: the first draft rejected -> " Z"
    ev += [Drafted(3, 9, [21, 22, 23], [" a", " b", " c"], [0.5, 0.5, 0.5], [], "draft-test"),
           Verified(3, 9, [0.05, 0.3, 0.2], [0.0, 1.0, 0.0], [False, False, False], 0, 17, " Z", 0.4, "corrected",
                    [], greedy),
           RolledBack(3, [9, 10, 11], 12, 9),
           Committed(3, 9, [17], [" Z"], ["corrected"], [0.4]),
           RoundTimed(3, 10, 0.006, 0.055, 0.066, 0.218, 3)]
    # round 4: one token left in the budget, so no draft
    ev += [Committed(4, 10, [18], ["!"], ["ar"], [0.9]),
           RoundTimed(4, 11, 0.0, 0.038, 0.04, 0.258, 0)]
    if finished:
        ev.append(_finish(ev, 4, 11, SPEC_IDS, SPEC_TOKENS, 0.26, TARGET_STEP_S))
    return ev


def ar_events(differ_at: int | None = None, temperature: float = 0.0) -> list:
    """The AR baseline: one token per round, one target step (0.04 s) each after a 0.02 s prefill;
    `differ_at` (0-based) swaps one token."""
    ev = [RunStarted(0, "ar01", "ar", "target-test", "", "cpu", "float32", _config(temperature), "Hi",
                     PROMPT_IDS, PROMPT_TOKENS, 2)]
    ids, tokens = list(SPEC_IDS), list(SPEC_TOKENS)
    if differ_at is not None:
        ids[differ_at], tokens[differ_at] = 99, " other"
    for k, (tid, text) in enumerate(zip(ids, tokens)):
        ev += [Committed(k + 1, 2 + k, [tid], [text], ["ar"], [0.9]),
               RoundTimed(k + 1, 3 + k, 0.0, 0.038, TARGET_STEP_S, round(0.02 + TARGET_STEP_S * (k + 1), 3), 0)]
    ev.append(_finish(ev, len(ids), 2 + len(ids), ids, tokens, 0.38))
    return ev


def sample_events(temperature: float = 0.0, with_ar: bool = True, differ_at: int | None = None) -> list:
    """Speculative run followed by its AR baseline, as the app records a comparison."""
    return speculative_events(temperature) + (ar_events(differ_at, temperature) if with_ar else [])


def long_events(rounds: int, topk: int = 5) -> list:
    """A consistent greedy speculative run of `rounds` rounds (3 drafts all accepted + a bonus each, `topk`
    alternatives per position): big traces for the app's upload, memory and load tests."""
    config = dict(_config(0.0), max_new_tokens=4 * rounds, record_topk=topk)
    ev = [RunStarted(0, "long01", "speculative", "target-test", "draft-test", "cpu", "float32", config, "Hi",
                     PROMPT_IDS, PROMPT_TOKENS, 2)]
    ids, tokens = [], []
    for r in range(1, rounds + 1):
        pos = 2 + 4 * (r - 1)
        draft_ids, draft_tokens = [100 + r % 50, 200, 300], [f" w{r % 50}", " and", " so"]
        alts = [[[tid + j, f"{text}{j}", round(0.9 / (j + 1), 3)] for j in range(topk)]
                for tid, text in zip(draft_ids + [16], draft_tokens + ["\n"])]
        ev += [Drafted(r, pos, draft_ids, draft_tokens, [0.8, 0.7, 0.6], alts[:3], "draft-test"),
               Verified(r, pos, [0.85, 0.75, 0.65], [1.0, 1.0, 1.0], [True, True, True], None, 16, "\n", 0.5,
                        "bonus", alts, True),
               Committed(r, pos, draft_ids + [16], draft_tokens + ["\n"], ["accepted"] * 3 + ["bonus"],
                         [0.85, 0.75, 0.65, 0.5]),
               RoundTimed(r, pos + 4, 0.01, 0.03, 0.05, round(0.05 * r, 3), 3)]
        ids += draft_ids + [16]
        tokens += draft_tokens + ["\n"]
    ev.append(_finish(ev, rounds, 2 + 4 * rounds, ids, tokens, round(0.05 * rounds, 3), TARGET_STEP_S))
    return ev
