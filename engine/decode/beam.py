"""Beam search on the engine's pointer cache, plain or speculative, as a generator of events.

The search is transformers' beam search (generation/utils.py `_beam_search`, v5) for one prompt:
each step takes the top K = max(2, 1 + #eos)·B continuations of all B running beams by cumulative
log-probability, keeps the best B that did not hit EOS / the length limit as the running beams, and
offers those of the top B that did to the finished set (score = log-prob ÷ generated length ^
length_penalty). It stops when the finished set cannot improve (early_stopping=False's heuristic:
the best running beam's score ÷ its current length is no better than the worst finished one),
when every candidate hits the limit, or, with early_stopping=True, when B hypotheses have finished.

The KV cache holds B rows, one per running beam, all of one length (every beam grows one token
per step). Reordering beams is a gather of rows (`KVCache.reorder_rows`): a copy of the live prefix.

Speculative beam search (`speculative=True`): the drafter proposes up to γ tokens per beam
(`Drafter.propose_beams`; the families marked `beams` in engine/specs.py); ONE
target forward over the (B, γ+1) inputs [last token of beam b, its drafts] gives the target's
log-probabilities after every prefix of every drafted path. The beam search is then replayed step
by step from those rows: a running beam whose tokens since the round began are its origin's drafts
d_1..d_k finds its next-token log-probs in row k of its origin. The replay continues while every
running beam it selects lies on a drafted path; the first step that selects one off the paths is
still exact (it used rows of beams on the paths), and ends the round. The cache then keeps, per new
beam, its origin's row up to the beam's last token but one (a gather of rows and a pointer move:
the rollback). Each replayed step sees exactly the log-probabilities a plain step would compute,
so the beams and scores are those of plain beam search (up to the float rounding of a (γ+1)-token
forward against a 1-token one). The run shares the chain loop's scaffolding (loop.py: prefill, clock,
first event, deadline) and its race (race.py). This module knows nothing about HTML.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace

import torch

from ..config import GenerationConfig
from ..events import BeamDrafted, BeamResult, BeamStep, BeamVerified, Finished, RoundTimed
from ..runtime.cache import KVCache
from ..runtime.roofline import host_record
from ..specs import check_beams
from .loop import Clock, past, prefill, started

NEG = -1.0e9  # transformers' "impossible" score


@dataclass
class BeamState:
    """Running beams and the finished set of one beam search (transformers' tensors, batch 1)."""

    seqs: list  # (B) generated ids of each running beam
    scores: torch.Tensor  # (B,) float32 cumulative log-prob of each running beam
    done_seqs: list  # (B) generated ids of each finished slot
    done_scores: torch.Tensor  # (B,) float32 length-penalised score of each finished slot (NEG = empty)
    done_flags: torch.Tensor  # (B,) bool: slot holds a finished hypothesis
    improvable: bool = True  # the early-stopping heuristic still allows a better finished hypothesis
    length: int = 0  # tokens generated so far by every running beam

    @classmethod
    def start(cls, num_beams: int) -> "BeamState":
        scores = torch.zeros(num_beams)
        scores[1:] = NEG  # all rows hold the prompt: only beam 0's continuations count at first
        return cls(
            [[] for _ in range(num_beams)],
            scores,
            [[] for _ in range(num_beams)],
            torch.full((num_beams,), NEG),
            torch.zeros(num_beams, dtype=torch.bool),
        )


@dataclass
class StepOut:
    """What one beam-search step chose."""

    parents: list  # per new running beam: index of the running beam it extends
    tokens: list  # per new running beam: the token it appended
    finished: list  # [(parent, token, score)] hypotheses that entered the finished set at this step
    go_on: bool  # False: the search is over


def beam_step(
    state: BeamState,
    log_probs: torch.Tensor,
    eos: frozenset,
    max_new_tokens: int,
    length_penalty: float = 1.0,
    early_stopping: bool | str = False,
) -> tuple[BeamState, StepOut]:
    """One step of transformers' beam search from the running beams' next-token log-probs (B, V)."""
    num_beams, vocab = log_probs.shape
    keep = max(2, 1 + len(eos)) * num_beams
    acc = (log_probs + state.scores[:, None]).reshape(1, -1)  # (1, B·V)
    top_lp, top_idx = torch.topk(acc, k=keep)  # (1, K)
    parents, tokens = (top_idx // vocab)[0].tolist(), (top_idx % vocab)[0].tolist()
    cand = [state.seqs[b] + [t] for b, t in zip(parents, tokens)]
    hits = torch.tensor([[t in eos or state.length + 1 >= max_new_tokens for t in tokens]])  # (1, K)
    # running beams for the next step: the best B that did not just finish
    run_lp = top_lp + hits.to(torch.float32) * NEG
    nxt = torch.topk(run_lp, k=num_beams)[1][0].tolist()
    # finished set: the top-B candidates that finished compete with the ones kept so far
    top_mask = torch.arange(keep) < num_beams
    just_done = hits & top_mask[None, :]
    done_lp = top_lp / ((state.length + 1) ** length_penalty)
    full = bool(state.done_flags.all()) and early_stopping is True
    done_lp += float(full) * NEG
    done_lp += float(not state.improvable) * NEG
    done_lp += (~just_done) * NEG
    merged = torch.cat((state.done_scores[None], done_lp), dim=1)  # (1, B + K)
    pick = torch.topk(merged, k=num_beams)[1][0].tolist()
    flags = torch.cat((state.done_flags, just_done[0]))
    all_seqs = state.done_seqs + cand
    finished = [
        (parents[i - num_beams], tokens[i - num_beams], float(merged[0, i]))
        for i in pick
        if i >= num_beams and bool(flags[i])
    ]
    new = BeamState(
        [cand[i] for i in nxt],
        run_lp[0, nxt],
        [all_seqs[i] for i in pick],
        merged[0, pick],
        flags[pick],
        state.improvable,
        state.length + 1,
    )
    # early-stopping heuristic: can the best running beam still beat the worst finished one?
    best_len = max_new_tokens if early_stopping == "never" and length_penalty > 0 else new.length
    best_running = new.scores[0] / (best_len**length_penalty)
    worst = torch.where(new.done_flags, new.done_scores.min(), torch.tensor(NEG))
    new.improvable = state.improvable and bool((best_running > worst).any())
    go_on = (
        new.improvable
        and not (bool(new.done_flags.all()) and early_stopping is True)
        and not bool(hits.all())
    )
    return new, StepOut([parents[i] for i in nxt], [tokens[i] for i in nxt], finished, go_on)


def on_drafted_path(draft: list, depth: int, token: int) -> bool:
    """A beam that stood on its origin's drafts d_1..d_depth and now added `token` is still on the drafted
    path iff token is d_(depth+1): only then does the round's forward hold its next-token row."""
    return depth < len(draft) and token == draft[depth]


# -- the run ---------------------------------------------------------------------------------------
def beam_run(
    engine,
    ids: list[int],
    cfg: GenerationConfig,
    speculative: bool,
    deadline: float | None,
    cache_len: int,
    drafter=None,
):
    """The events of one beam search of the target from prompt `ids` (engine: an Engine; cache_len: its
    cache_slots; drafter: any Drafter, by default the one for the engine's draft spec, checked now)."""
    if speculative and drafter is None:
        check_beams(engine.draft_spec)
    return _beam_events(engine, ids, cfg, speculative, deadline, cache_len, drafter)


def make_beam_drafter(engine, cfg: GenerationConfig, cache: KVCache):
    """The engine's drafter for its spec (beam_run checked it is a family marked `beams`), on the B-row cache."""
    return engine.make_drafter(replace(cfg, tree_budget=0), None, cache.max_len, cache)


def _replay(state, log_probs, drafts, eos, max_new_tokens: int):
    """3. The beam search replayed from one forward's log-probs while every kept beam stays on a drafted path.
    Returns the state, per running beam the row (beam at the round's start) it descends from, and each
    replayed step with the scores after it and which of its tokens were drafted."""
    origin, steps = list(range(len(drafts))), []
    while True:
        state, step = beam_step(state, log_probs[origin, len(steps)], eos, max_new_tokens)
        origin = [origin[p] for p in step.parents]
        on_draft = [on_drafted_path(drafts[o], len(steps), tok) for o, tok in zip(origin, step.tokens)]
        steps.append((step, [float(s) for s in state.scores], on_draft))
        if not step.go_on or not all(on_draft):
            return state, origin, steps


def _rollback(cache, before: int, origin: list, steps: list, tally: dict, device) -> list:
    """4. Keep, per new beam, its origin's row up to its last token but one (a pointer move, then a gather of
    rows when the beams were reordered). Returns per row how many drafted tokens a surviving beam stands on."""
    depth, on_draft = len(steps), steps[-1][2]
    verified = [0] * len(origin)
    for o, ok in zip(origin, on_draft):
        verified[o] = max(verified[o], depth if ok else depth - 1)
    cache.truncate(before + depth)
    t_r = time.perf_counter()
    if origin != list(range(len(origin))):
        tally["reorder_bytes"] += cache.reorder_rows(torch.tensor(origin, device=device))
        tally["reorders"] += 1
    tally["reorder_s"] += time.perf_counter() - t_r
    return verified


def _hypotheses(state) -> list:
    """The finished hypotheses, best first; after an early stop (time limit) the running beams, scored alike."""
    hyps = [
        (seq, float(s)) for seq, s, f in zip(state.done_seqs, state.done_scores, state.done_flags) if bool(f)
    ]
    if not hyps:
        hyps = [(seq, float(s) / max(1, state.length)) for seq, s in zip(state.seqs, state.scores)]
        hyps.sort(key=lambda h: -h[1])
    return hyps


def _beam_events(engine, ids, cfg, speculative, deadline, cache_len, drafter):
    target = engine.target
    with torch.inference_mode():
        cache = KVCache.for_model(target.model, cache_len)
        if speculative and drafter is None:
            drafter = make_beam_drafter(engine, cfg, cache)
        if speculative:
            drafter.prepare(ids, cfg)  # n-gram: which prompt positions the chat template wrote
        # before the clock: a host's first call measures
        host = host_record(target.model, target.device, target.dtype)
        clock = Clock()
        t_start = clock()
    yield from clock.hand_over(
        [
            started(
                target,
                engine.text,
                ids,
                cfg,
                "speculative" if speculative else "ar",
                drafter.name if speculative else "",
                host,
            )
        ]
    )
    for progress in prefill(engine.forward, ids, cache, deadline, target.device):  # one row
        yield from clock.hand_over([progress])
    with torch.inference_mode():
        # (a one-token prompt caches nothing: the first forward allocates B rows)
        cache.expand_rows(cfg.num_beams)
    state = BeamState.start(cfg.num_beams)
    round_, stop_reason, go_on = 0, "max_new_tokens", True
    tally = dict(forwards=0, positions=0, reorders=0, reorder_bytes=0, drafted=0, reorder_s=0.0)
    round_s = 0.0  # the last round's wall time: a round that would end past the deadline is not started
    try:
        while go_on:
            if past(deadline) or (deadline is not None and time.monotonic() + round_s > deadline):
                stop_reason = "time_limit"
                break
            round_start = time.monotonic()
            round_ += 1
            with torch.inference_mode():
                state, go_on, out = _beam_round(
                    engine,
                    ids,
                    cfg,
                    drafter if speculative else None,
                    cache,
                    state,
                    tally,
                    round_,
                    clock,
                    t_start,
                )
            round_s = time.monotonic() - round_start
            yield from clock.hand_over(out)
    except GeneratorExit:
        return
    yield from _result(
        engine, cfg, speculative, state, round_, stop_reason, len(ids), clock() - t_start, tally
    )


def _beam_round(engine, ids, cfg, drafter, cache, state, tally, round_: int, clock, t_start: float):
    """One round: 1. draft per beam, 2. verify every beam in one forward, 3. replay, 4. roll back.
    Returns the new state, whether the search goes on, and the round's events."""
    device, text, out, t0 = engine.target.device, engine.token_text, [], clock()
    pos = len(ids) + state.length  # absolute position of the first token this round adds
    room = cfg.max_new_tokens - state.length - 1  # drafts beyond the length limit cannot be used
    beams = [list(ids) + s for s in state.seqs]
    # 1. draft: up to γ tokens per beam
    drafts = drafter.propose_beams(beams, min(cfg.gamma, room)) if drafter is not None and room > 0 else []
    drafts = [d[:room] for d in drafts] or [[] for _ in beams]
    tally["drafted"] += sum(len(d) for d in drafts)
    if drafter is not None:
        out.append(
            BeamDrafted(
                round=round_,
                pos=pos,
                token_ids=drafts,
                drafter=drafter.name,
                tokens=[[text(t) for t in d] for d in drafts],
            )
        )
    t1 = clock()
    # 2. verify: one forward over (B, γ+1) = [last token of each beam, its drafts (padded)]
    width = max(len(d) for d in drafts)
    x = torch.tensor([[b[-1]] + d + [0] * (width - len(d)) for b, d in zip(beams, drafts)], device=device)
    before = cache.length
    log_probs = torch.log_softmax(engine.forward(x, cache).float(), dim=-1)  # (B, γ+1, V)
    tally["forwards"] += 1
    tally["positions"] += x.numel()
    # 3. the beam search replayed from that forward's rows
    state, origin, steps = _replay(state, log_probs, drafts, engine.target.eos_ids, cfg.max_new_tokens)
    for k, (step, scores, on_draft) in enumerate(steps):
        out.append(
            BeamStep(
                round=round_,
                pos=pos + k,
                parents=step.parents,
                token_ids=step.tokens,
                tokens=[text(t) for t in step.tokens],
                scores=scores,
                drafted=on_draft,
                finished=[
                    {"parent": p, "token_id": t, "token": text(t), "score": s} for p, t, s in step.finished
                ],
            )
        )
    # 4. roll back: each new beam keeps its origin's row
    verified = _rollback(cache, before, origin, steps, tally, device)
    out.append(
        BeamVerified(
            round=round_,
            pos=pos,
            steps=len(steps),
            verified=verified,
            origins=origin,
            positions=x.numel(),
            cache_before=before + x.shape[1],
            cache_after=cache.length,
        )
    )
    t2 = clock()
    out.append(
        RoundTimed(
            round=round_,
            pos=len(ids) + state.length,
            draft_s=t1 - t0,
            verify_s=t2 - t1,
            total_s=t2 - t0,
            elapsed_s=t2 - t_start,
            gamma=sum(len(d) for d in drafts),
        )
    )
    return state, steps[-1][0].go_on, out


def _result(
    engine,
    cfg,
    speculative: bool,
    state,
    round_: int,
    stop_reason: str,
    prompt_len: int,
    wall: float,
    tally: dict,
):
    """The BeamResult (every hypothesis, best first) and the Finished event with the run's summary."""
    target, hyps = engine.target, _hypotheses(state)
    best = hyps[0][0]
    if stop_reason != "time_limit" and best and best[-1] in target.eos_ids:
        stop_reason = "eos"
    decode = target.tokenizer.decode
    yield BeamResult(
        round=round_,
        pos=prompt_len + len(best),
        num_beams=cfg.num_beams,
        token_ids=[h[0] for h in hyps],
        texts=[decode(h[0], skip_special_tokens=True) for h in hyps],
        scores=[h[1] for h in hyps],
    )
    forwards = tally["forwards"]
    summary = {
        "mode": "beam_speculative" if speculative else "beam",
        "num_beams": cfg.num_beams,
        "gamma": cfg.gamma if speculative else 0,
        "max_new_tokens": cfg.max_new_tokens,
        "rounds": round_,
        "new_tokens": len(best),
        "steps": state.length,
        "target_forwards": forwards,
        "forwards_saved": state.length - forwards,
        "positions_forwarded": tally["positions"],
        "drafted": tally["drafted"],
        "steps_per_forward": state.length / forwards if forwards else None,
        "score": hyps[0][1],
        "wall_s": wall,
        "tokens_per_s": len(best) / wall if wall else None,
        "reorders": tally["reorders"],
        "reorder_s": tally["reorder_s"],
        "reorder_bytes": tally["reorder_bytes"],
        "threads": torch.get_num_threads() if target.device.type == "cpu" else None,
    }
    yield Finished(
        round=round_,
        pos=prompt_len + len(best),
        stop_reason=stop_reason,
        text=decode(best, skip_special_tokens=True),
        token_ids=list(best),
        summary=summary,
    )


def race_summary(spec_events: list, plain_events: list) -> dict:
    """The speculative lane's summary plus the plain lane's forwards and time, the speedup and the verdict."""
    spec, plain = spec_events[-1].summary, plain_events[-1].summary
    results = [
        next((e for e in events if e.kind == "beam_result"), None) for events in (spec_events, plain_events)
    ]
    same = None not in results and results[0].token_ids == results[1].token_ids
    return {
        **spec,
        "ar_target_forwards": plain["target_forwards"],
        "ar_wall_s": plain["wall_s"],
        "ar_token_ids": list(plain_events[-1].token_ids),
        "ar_tokens_per_s": plain["tokens_per_s"],
        "ar_reorder_s": plain["reorder_s"],
        "ar_reorder_bytes": plain["reorder_bytes"],
        "speedup": plain["wall_s"] / spec["wall_s"] if spec["wall_s"] else None,
        "identical_to_ar": same,
    }
