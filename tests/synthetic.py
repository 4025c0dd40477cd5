"""Random but consistent event streams for property tests of the renderers: a raced speculative run (γ from 1 to
16, fixed or varying per round, greedy or sampled, quiet or noisy timings, with or without a recorded machine)
and its AR lane. NOT model output: the numbers are drawn so that every figure the page derives has to be
computed, at settings far from the defaults."""

from __future__ import annotations

import random

from engine.events import Committed, Drafted, Finished, RolledBack, RoundTimed, RunStarted, Verified
from engine.metrics import RunStats


def host(rng: random.Random) -> dict:
    """A machine as RunStarted.host records it, from a phone-class CPU to a server: a third with the read rate of
    the run's start beside the host's best (bandwidth_best), a third recorded when the floor used the cached
    read rate, a third before that (no copy_bandwidth: their bandwidth is a copy's)."""
    kind = rng.randrange(3)
    copy = {} if kind == 0 else {"copy_bandwidth": rng.uniform(3e9, 200e9)}
    if kind == 2:
        copy["bandwidth_best"] = rng.uniform(3e9, 200e9)
    return {
        "cpu": "Synthetic CPU",
        "threads": rng.choice([1, 2, 8]),
        "measured": "2026-12-03",
        **copy,
        "bandwidth": rng.uniform(3e9, 200e9),
        "flops": rng.uniform(20e9, 3e12),
        "weight_bytes": rng.uniform(5e7, 4e9),
        "flops_per_token": rng.uniform(5e7, 4e9),
        "kv_bytes_per_position": rng.uniform(5e3, 4e5),
        "attn_flops_per_position": rng.uniform(1e3, 3e5),
    }


def _finished(events, rounds, pos, ids, wall, step_s):
    stats = RunStats()
    for e in events:
        stats.add(e)
    return Finished(
        round=rounds,
        pos=pos,
        stop_reason="max_new_tokens",
        text=" ".join(map(str, ids)),
        token_ids=list(ids),
        summary=stats.summary(wall, step_s),
    )


def race(rng: random.Random, gamma: int | None = None, tokens: int | None = None) -> list:
    """A finished speculative run and its AR lane (token-identical when greedy)."""
    gamma = gamma or rng.choice([1, 2, 3, 4, 5, 8, 12, 16])
    tokens = tokens or rng.randint(gamma + 2, 6 * gamma + 24)
    greedy = rng.random() < 0.7
    varying = rng.random() < 0.3  # auto-like: γ changes from round to round
    alpha = rng.choice([rng.uniform(0.05, 0.6), rng.uniform(0.6, 0.99), 1.0 if rng.random() < 0.1 else 0.9])
    noisy = rng.random() < 0.3
    step = rng.uniform(0.005, 0.2)
    c, slope = rng.uniform(0.0, 0.8), rng.uniform(0.0, 0.2)
    machine = host(rng) if rng.random() < 0.8 else {}
    config = {
        "gamma": gamma,
        "max_new_tokens": tokens,
        "temperature": 0.0 if greedy else 0.8,
        "top_k": 0,
        "top_p": 1.0,
        "seed": 0,
        "raw": False,
        "record_topk": 0,
    }
    if not greedy and rng.random() < 0.3:  # the lossy rule (typical acceptance)
        config["accept"] = "typical:0.09,0.3"
    start = dict(
        target="synthetic-target",
        device="cpu",
        dtype="float32",
        config=config,
        prompt_text="p",
        prompt_ids=[1],
        prompt_tokens=["p"],
        pos=1,
        host=machine,
    )
    spec = [RunStarted(round=0, run_id="syn-spec", mode="speculative", draft="synthetic-draft", **start)]
    jitter = (lambda: rng.uniform(0.3, 3.0)) if noisy else (lambda: rng.uniform(0.97, 1.03))  # noqa: E731
    pos, r, elapsed, ids = 1, 0, 0.0, []
    while len(ids) < tokens:
        r += 1
        g = min(rng.randint(1, gamma) if varying else gamma, tokens - len(ids) - 1)
        if g <= 0:  # one token left: a plain step
            ids.append(len(ids) + 100)
            spec.append(
                Committed(
                    round=r, pos=pos, token_ids=[ids[-1]], tokens=[f" t{ids[-1]}"], origins=["ar"], p=[0.9]
                )
            )
            t = step * jitter()
            elapsed += t
            pos += 1
            spec.append(
                RoundTimed(round=r, pos=pos, draft_s=0.0, verify_s=t, total_s=t, elapsed_s=elapsed, gamma=0)
            )
            continue
        k = next((i for i in range(g) if rng.random() >= alpha), g)  # accepted before the first rejection
        draft = [len(ids) + 100 + i if i < k else 50 + i for i in range(g)]
        q = [round(rng.uniform(0.05, 1.0), 3) for _ in range(g)]
        p = [round(rng.uniform(0.05, 1.0), 3) for _ in range(g)]
        accepted = [i < k for i in range(g)]
        u = None if greedy else [round(rng.uniform(0, 0.5), 3) if i < k else 0.999 for i in range(g)]
        nxt = len(ids) + 100 + k
        kind = "bonus" if k == g else "corrected"
        spec += [
            Drafted(
                round=r,
                pos=pos,
                token_ids=draft,
                tokens=[f" d{t}" for t in draft],
                q=q,
                draft_topk=[],
                drafter="synthetic-draft",
            ),
            Verified(
                round=r,
                pos=pos,
                p=p,
                accept_prob=[1.0 if a else 0.0 for a in accepted]
                if greedy
                else [1.0 if a else 0.5 for a in accepted],
                accepted=accepted,
                first_rejected=None if k == g else k,
                next_id=nxt,
                next_token=f" t{nxt}",
                next_p=0.5,
                next_kind=kind,
                target_topk=[],
                greedy=greedy,
                u=u,
            ),
        ]
        if k < g:
            spec.append(
                RolledBack(
                    round=r,
                    positions=list(range(pos + k + 1, pos + g + 1)),
                    cache_before=pos + g + 1,
                    cache_after=pos + k + 1,
                )
            )
        new = [len(ids) + 100 + i for i in range(k + 1)]
        ids += new
        spec.append(
            Committed(
                round=r,
                pos=pos,
                token_ids=new,
                tokens=[f" t{t}" for t in new],
                origins=["accepted"] * k + [kind],
                p=[0.8] * (k + 1),
            )
        )
        draft_s = g * c * step * jitter()
        verify_s = step * (1 + slope * g) * jitter()
        elapsed += draft_s + verify_s
        pos += k + 1
        spec.append(
            RoundTimed(
                round=r,
                pos=pos,
                draft_s=draft_s,
                verify_s=verify_s,
                total_s=draft_s + verify_s,
                elapsed_s=elapsed,
                gamma=g,
            )
        )
    spec.append(_finished(spec, r, pos, ids, elapsed, None))
    ar = [RunStarted(round=0, run_id="syn-ar", mode="ar", draft="", **start)]
    t_ar = 0.0
    for k, tid in enumerate(ids):
        t = step * jitter()
        t_ar += t
        ar += [
            Committed(round=k + 1, pos=1 + k, token_ids=[tid], tokens=[f" t{tid}"], origins=["ar"], p=[0.9]),
            RoundTimed(round=k + 1, pos=2 + k, draft_s=0.0, verify_s=t, total_s=t, elapsed_s=t_ar, gamma=0),
        ]
    ar.append(_finished(ar, len(ids), 1 + len(ids), ids, t_ar, None))
    return spec + ar
