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
SPEC_ORIGINS = [
    "accepted",
    "accepted",
    "corrected",
    "accepted",
    "accepted",
    "accepted",
    "bonus",
    "corrected",
    "ar",
]
TARGET_STEP_S = 0.04  # one target step; the AR lane pays this per token, a verify of 4 tokens 1.5 of it
# a machine as RunStarted.host records it (engine/runtime/roofline.py): 10 GB/s, 100 GFLOP/s, 0.3 GB of weights
HOST = {
    "cpu": "Test CPU <b>",
    "threads": 1,
    "measured": "2026-12-01",
    "bandwidth": 10e9,
    "flops": 100e9,
    "weight_bytes": 3e8,
    "flops_per_token": 1.5e8,
    "kv_bytes_per_position": 1e4,
    "attn_flops_per_position": 1e3,
    "kernels": {"qkv": {"1": "mkl", "2": "onednn", "5": "onednn"}, "o": {"1": "mkl", "2": "mkl", "5": "mkl"}},
}


def _topk(*rows):
    return [[list(r) for r in row] for row in rows]


def _config(temperature: float) -> dict:
    return {
        "gamma": 3,
        "max_new_tokens": 9,
        "temperature": temperature,
        "top_k": 0,
        "top_p": 1.0,
        "seed": 0,
        "raw": False,
        "record_topk": 3,
    }


def _finish(events, rounds, pos, ids, tokens, wall, step_s=None):
    stats = RunStats()
    for e in events:
        stats.add(e)
    return Finished(
        round=rounds,
        pos=pos,
        stop_reason="max_new_tokens",
        text="".join(tokens),
        token_ids=list(ids),
        summary=stats.summary(wall, step_s),
    )


def speculative_events(temperature: float = 0.0, finished: bool = True) -> list:
    """The speculative run (rounds 1-4) described in the module docstring."""
    greedy = temperature == 0
    ev = [
        RunStarted(
            round=0,
            run_id="spec01",
            mode="speculative",
            target="target-test",
            draft="draft-test",
            device="cpu",
            dtype="float32",
            config=_config(temperature),
            prompt_text="Hi",
            prompt_ids=PROMPT_IDS,
            prompt_tokens=PROMPT_TOKENS,
            pos=2,
            host=HOST,
        )
    ]
    # round 1: The, cat accepted; " sat" rejected -> " ran"
    ev += [
        Drafted(
            round=1,
            pos=2,
            token_ids=[10, 11, 20],
            tokens=["The", " cat", " sat"],
            q=[0.9, 0.8, 0.6],
            draft_topk=_topk([(10, "The", 0.9)], [(11, " cat", 0.8)], [(20, " sat", 0.6), (12, " ran", 0.2)]),
            drafter="draft-test",
        ),
        Verified(
            round=1,
            pos=2,
            p=[0.85, 0.7, 0.1],
            accept_prob=[1.0, 1.0, 0.0],
            accepted=[True, True, False],
            first_rejected=2,
            next_id=12,
            next_token=" ran",
            next_p=0.6,
            next_kind="corrected",
            target_topk=_topk(
                [(10, "The", 0.85)],
                [(11, " cat", 0.7)],
                [(12, " ran", 0.6), (20, " sat", 0.1)],
                [(30, ".", 0.5)],
            ),
            greedy=greedy,
        ),
        RolledBack(round=1, positions=[4], cache_before=5, cache_after=4),
        Committed(
            round=1,
            pos=2,
            token_ids=[10, 11, 12],
            tokens=["The", " cat", " ran"],
            origins=["accepted", "accepted", "corrected"],
            p=[0.85, 0.7, 0.6],
        ),
        RoundTimed(round=1, pos=5, draft_s=0.006, verify_s=0.055, total_s=0.066, elapsed_s=0.086, gamma=3),
    ]
    # round 2: all three accepted, bonus newline
    ev += [
        Drafted(
            round=2,
            pos=5,
            token_ids=[13, 14, 15],
            tokens=["<script>alert(1)</script>", " &", " dog"],
            q=[0.7, 0.9, 0.8],
            draft_topk=_topk(
                [(13, "<script>alert(1)</script>", 0.7)], [(14, " &", 0.9)], [(15, " dog", 0.8)]
            ),
            drafter="draft-test",
        ),
        Verified(
            round=2,
            pos=5,
            p=[0.8, 0.95, 0.9],
            accept_prob=[1.0, 1.0, 1.0],
            accepted=[True, True, True],
            first_rejected=None,
            next_id=16,
            next_token="\n",
            next_p=0.5,
            next_kind="bonus",
            target_topk=_topk(
                [(13, "<script>alert(1)</script>", 0.8)],
                [(14, " &", 0.95)],
                [(15, " dog", 0.9)],
                [(16, "\n", 0.5), (31, " <b>", 0.2)],
            ),
            greedy=greedy,
        ),
        Committed(
            round=2,
            pos=5,
            token_ids=[13, 14, 15, 16],
            tokens=["<script>alert(1)</script>", " &", " dog", "\n"],
            origins=["accepted", "accepted", "accepted", "bonus"],
            p=[0.8, 0.95, 0.9, 0.5],
        ),
        RoundTimed(round=2, pos=9, draft_s=0.006, verify_s=0.055, total_s=0.066, elapsed_s=0.152, gamma=3),
    ]
    # round 3: the first draft rejected -> " Z"
    ev += [
        Drafted(
            round=3,
            pos=9,
            token_ids=[21, 22, 23],
            tokens=[" a", " b", " c"],
            q=[0.5, 0.5, 0.5],
            draft_topk=[],
            drafter="draft-test",
        ),
        Verified(
            round=3,
            pos=9,
            p=[0.05, 0.3, 0.2],
            accept_prob=[0.0, 1.0, 0.0],
            accepted=[False, False, False],
            first_rejected=0,
            next_id=17,
            next_token=" Z",
            next_p=0.4,
            next_kind="corrected",
            target_topk=[],
            greedy=greedy,
        ),
        RolledBack(round=3, positions=[9, 10, 11], cache_before=12, cache_after=9),
        Committed(round=3, pos=9, token_ids=[17], tokens=[" Z"], origins=["corrected"], p=[0.4]),
        RoundTimed(round=3, pos=10, draft_s=0.006, verify_s=0.055, total_s=0.066, elapsed_s=0.218, gamma=3),
    ]
    # round 4: one token left in the budget, so no draft
    ev += [
        Committed(round=4, pos=10, token_ids=[18], tokens=["!"], origins=["ar"], p=[0.9]),
        RoundTimed(round=4, pos=11, draft_s=0.0, verify_s=0.038, total_s=0.04, elapsed_s=0.258, gamma=0),
    ]
    if finished:
        ev.append(_finish(ev, 4, 11, SPEC_IDS, SPEC_TOKENS, 0.26, TARGET_STEP_S))
    return ev


def ar_events(differ_at: int | None = None, temperature: float = 0.0) -> list:
    """The AR baseline: one token per round, one target step (0.04 s) each after a 0.02 s prefill;
    `differ_at` (0-based) swaps one token."""
    ev = [
        RunStarted(
            round=0,
            run_id="ar01",
            mode="ar",
            target="target-test",
            draft="",
            device="cpu",
            dtype="float32",
            config=_config(temperature),
            prompt_text="Hi",
            prompt_ids=PROMPT_IDS,
            prompt_tokens=PROMPT_TOKENS,
            pos=2,
            host=HOST,
        )
    ]
    ids, tokens = list(SPEC_IDS), list(SPEC_TOKENS)
    if differ_at is not None:
        ids[differ_at], tokens[differ_at] = 99, " other"
    for k, (tid, text) in enumerate(zip(ids, tokens)):
        ev += [
            Committed(round=k + 1, pos=2 + k, token_ids=[tid], tokens=[text], origins=["ar"], p=[0.9]),
            RoundTimed(
                round=k + 1,
                pos=3 + k,
                draft_s=0.0,
                verify_s=0.038,
                total_s=TARGET_STEP_S,
                elapsed_s=round(0.02 + TARGET_STEP_S * (k + 1), 3),
                gamma=0,
            ),
        ]
    ev.append(_finish(ev, len(ids), 2 + len(ids), ids, tokens, 0.38))
    return ev


def sample_events(temperature: float = 0.0, with_ar: bool = True, differ_at: int | None = None) -> list:
    """Speculative run followed by its AR baseline, as the app records a comparison."""
    return speculative_events(temperature) + (ar_events(differ_at, temperature) if with_ar else [])


def long_events(rounds: int, topk: int = 5) -> list:
    """A consistent greedy speculative run of `rounds` rounds (3 drafts all accepted + a bonus each, `topk`
    alternatives per position): big traces for the app's upload, memory and load tests."""
    config = dict(_config(0.0), max_new_tokens=4 * rounds, record_topk=topk)
    ev = [
        RunStarted(
            round=0,
            run_id="long01",
            mode="speculative",
            target="target-test",
            draft="draft-test",
            device="cpu",
            dtype="float32",
            config=config,
            prompt_text="Hi",
            prompt_ids=PROMPT_IDS,
            prompt_tokens=PROMPT_TOKENS,
            pos=2,
        )
    ]
    ids, tokens = [], []
    for r in range(1, rounds + 1):
        pos = 2 + 4 * (r - 1)
        draft_ids, draft_tokens = [100 + r % 50, 200, 300], [f" w{r % 50}", " and", " so"]
        alts = [
            [[tid + j, f"{text}{j}", round(0.9 / (j + 1), 3)] for j in range(topk)]
            for tid, text in zip(draft_ids + [16], draft_tokens + ["\n"])
        ]
        ev += [
            Drafted(
                round=r,
                pos=pos,
                token_ids=draft_ids,
                tokens=draft_tokens,
                q=[0.8, 0.7, 0.6],
                draft_topk=alts[:3],
                drafter="draft-test",
            ),
            Verified(
                round=r,
                pos=pos,
                p=[0.85, 0.75, 0.65],
                accept_prob=[1.0, 1.0, 1.0],
                accepted=[True, True, True],
                first_rejected=None,
                next_id=16,
                next_token="\n",
                next_p=0.5,
                next_kind="bonus",
                target_topk=alts,
                greedy=True,
            ),
            Committed(
                round=r,
                pos=pos,
                token_ids=draft_ids + [16],
                tokens=draft_tokens + ["\n"],
                origins=["accepted"] * 3 + ["bonus"],
                p=[0.85, 0.75, 0.65, 0.5],
            ),
            RoundTimed(
                round=r,
                pos=pos + 4,
                draft_s=0.01,
                verify_s=0.03,
                total_s=0.05,
                elapsed_s=round(0.05 * r, 3),
                gamma=3,
            ),
        ]
        ids += draft_ids + [16]
        tokens += draft_tokens + ["\n"]
    ev.append(_finish(ev, rounds, 2 + 4 * rounds, ids, tokens, round(0.05 * rounds, 3), TARGET_STEP_S))
    return ev
