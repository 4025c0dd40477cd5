"""Batched speculation: B sequences per verify forward, each accepting its own number of tokens (ragged).

Each round: 1. every running row drafts up to the batch's γ (one γ for the whole batch: fixed, or chosen by
`auto` from goodput, below); 2. ONE target forward over every row's [last committed token, drafts...] (shorter
drafts padded; runtime/rowcache.py's per-row pointers, masks and positions); 3.-5. each row accepts, rolls back
(its own pointer: no copies) and commits through the single-sequence step's `settle`, so a row's verdict is the
same code a solo run uses. Lossless per row: greedy rows are token-identical to their solo runs, sampled rows draw
from their own seed (seed + row: a generator for the drafts, the draws by position for the verdicts) with exactly
the target's law. A row that ends (end-of-text, its token budget) drops out: its cache row is dropped once and
later forwards are smaller.

Goodput (SmartSpec, Liu et al. 2024): `auto` in a batch drafts every row by n-gram lookup at the largest γ it
considers, then verifies the γ (0 = a plain step for every row) that maximises the batch's expected committed
tokens per second over the rest of the run: the γ whose predicted time to commit every row's remaining tokens is
least (costmodel.batch_drain: each row's own α and draft rate, rows dropping out as they finish, t(B, T) the
forward's measured cost, costmodel.batch_forward_curve). Per round rather than to the end, a row that copies its
prompt would pull γ up while a slower row keeps the batch running anyway. Its reasons are `decided` events (row −1).

Events: each row's stream is a single run's events with `row` set (RunStarted ... Finished), and each round adds a
`batch_round` (row −1); a `batch_finished` ends the batch with its throughput.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import torch

from .. import costmodel
from ..config import MAX_BATCH, MAX_GAMMA, GenerationConfig
from ..drafters.base import Settled
from ..drafters.batched import row_drafters
from ..drafters.registry import drafter_factory
from ..events import BatchFinished, BatchRound, Decided, Finished, Prefilling, RoundTimed
from ..metrics import RunStats
from ..runtime.roofline import host_record
from ..runtime.rowcache import RowsKVCache, ragged_inputs
from ..runtime.sliding import sliding_window
from ..runtime.threads import synchronizer
from ..sampling import Draws
from ..specs import parse_draft
from .loop import PREFILL_CHUNK, Clock, cache_slots, past, started
from .record import round_events
from .step import settle, usable, verify_rows

# the γ auto weighs each round in a batch (0 = a plain step for every row)
GOODPUT_GAMMAS = tuple(range(0, 9))
AUTO_SPECS = ("auto", "auto:ngram")  # in a batch both mean: n-gram drafts, γ chosen by goodput
ROW_PRIOR = 4.0  # pseudo-tests pulling a row's α toward the batch's pooled α (Goodput.alphas)
POOLED_PRIOR = 4.0  # pseudo-tests at α = 0.5 in the batch's pooled α (one unlucky probe does not settle it)
# plain rounds with drafts on offer after which auto verifies them once more (α goes stale) ...
EXPLORE_EVERY = 8
# ... when the best drafted γ is predicted within this share of the best rate (cheap to learn)
EXPLORE_WITHIN = 0.9


def check_batch(rows_ids: list[list[int]]) -> None:
    """Refuse a batch the loop cannot run, naming the setting and its range."""
    if not 1 <= len(rows_ids) <= MAX_BATCH:
        raise ValueError(f"batch size B must be between 1 and {MAX_BATCH} prompts, got {len(rows_ids)}")
    empty = [b for b, ids in enumerate(rows_ids) if not ids]
    if empty:
        raise ValueError(f"prompt {empty[0] + 1} of the batch is empty: every row needs at least one token")


def row_random(cfg: GenerationConfig, rows: int, device) -> tuple[list, list]:
    """Each row's randomness, seeded cfg.seed + b (a solo run with that seed draws the same): its drafter's
    generators and its verdicts' Draws. None for every row when greedy."""
    if cfg.greedy:
        return [None] * rows, [None] * rows
    base = cfg.seed if cfg.seed is not None else torch.seed()
    generators, draws = [], []
    for b in range(rows):
        g = torch.Generator(device=device)
        g.manual_seed((base + b) % 2**63)
        generators.append(g)
        draws.append(Draws((base + b) % 2**63))
    return generators, draws


def batch_run(
    engine, rows_ids: list[list[int]], cfg: GenerationConfig, speculative: bool, deadline: float | None
) -> Iterator:
    """The events of one batched run (module docstring); rows_ids: each row's prompt ids."""
    check_batch(rows_ids)
    if cfg.num_beams > 1:
        raise ValueError(
            f"num_beams must be 1 in a batched run (beam search is a batch of its own), got {cfg.num_beams}"
        )
    window = sliding_window(engine.target.model)
    longest = max(map(len, rows_ids)) + cfg.max_new_tokens + MAX_GAMMA
    # the per-row mask is one for every layer: exact inside the window
    if window is not None and longest > window:
        raise ValueError(
            f"a batched run of a target with sliding-window layers must fit in its window of {window} "
            f"tokens: the longest prompt ({max(map(len, rows_ids))} tokens) + max_new_tokens "
            f"({cfg.max_new_tokens}) + {MAX_GAMMA} draft slots is {longest}"
        )
    goodput = speculative and engine.draft_spec in AUTO_SPECS
    return BatchRun(engine, [list(ids) for ids in rows_ids], cfg, speculative, goodput, deadline).events()


class BatchRun:
    """One batched run's state (its cache, drafters, rows still running) and its loop as named steps."""

    def __init__(self, engine, rows_ids, cfg: GenerationConfig, speculative: bool, goodput: bool, deadline):
        self.engine, self.target, self.cfg, self.deadline = engine, engine.target, cfg, deadline
        self.ids, self.prompt_lens = rows_ids, [len(ids) for ids in rows_ids]
        self.speculative, self.spec = speculative, engine.draft_spec if speculative else ""
        factory = engine.make_drafter if not goodput else ngram_factory(engine)
        extra = factory.needs.rows if speculative else 0
        max_len = max(cache_slots(n, cfg, extra) for n in self.prompt_lens)
        self.cache = RowsKVCache.for_model(self.target.model, max_len, len(rows_ids))
        generators, self.draws = row_random(cfg, len(rows_ids), self.target.device)
        self.drafters = row_drafters(factory, cfg, generators, max_len, self.cache) if speculative else None
        self.features = [] if self.drafters is not None and factory.needs.features else None
        self.chooser = Goodput(cfg) if goodput else None
        self.live = list(range(len(rows_ids)))  # cache row r holds sequence live[r]
        self.ends: dict[int, str] = {}  # sequence -> its stop reason
        self.clock, self.stats = Clock(), [RunStats() for _ in rows_ids]
        self.sync = synchronizer(self.target.device)

    @torch.inference_mode()
    def events(self) -> Iterator:
        if self.drafters is not None:
            self.drafters.prepare(self.ids, self.cfg)
        host = host_record(self.target.model, self.target.device, self.target.dtype)
        self.t_start = self.clock()
        mode = "speculative" if self.speculative else "ar"
        yield from self._hand_over(
            [
                dataclasses.replace(
                    started(self.target, self.engine.text, ids, self.cfg, mode, self.spec, host), row=b
                )
                for b, ids in enumerate(self.ids)
            ]
        )
        for progress in _prefill(
            self.engine.forward, self.ids, self.cache, self.deadline, self.target.device, self.features
        ):
            yield from self._hand_over([progress])
        prefill_s = self.clock() - self.t_start
        if self.features and not past(self.deadline):
            for r, n in enumerate(
                self.prompt_lens
            ):  # the prefill's settle: positions 0 .. len − 2 of each row
                prompt = torch.cat(self.features, dim=1)[r, : n - 1]
                self.drafters.settle(
                    r, Settled(round=0, n_accepted=0, ids=self.ids[r], verify_s=0.0, rows=0, features=prompt)
                )
        if self.features:
            self.features.clear()
        round_, gammas = 0, []
        while self.live:
            if past(self.deadline):
                self.ends.update(dict.fromkeys(self.live, "time_limit"))
                break
            round_ += 1
            events, gamma = self._round(round_)
            gammas.append(gamma)
            yield from self._hand_over(events)
            # after the round's events are counted: a row's Finished summary includes its last round
            yield from self._hand_over(self._drop_finished(round_))
        wall = self.clock() - self.t_start
        yield from self._hand_over(
            [self._finished(b, round_, self.ends.get(b, "time_limit"), wall) for b in self.live]
        )
        tokens = [len(ids) - n for ids, n in zip(self.ids, self.prompt_lens)]
        yield BatchFinished(
            round=round_,
            rows=len(self.ids),
            mode=mode,
            draft=self.spec,
            summary=batch_summary(self.stats, tokens, wall, prefill_s, gammas),
        )

    def _round(self, round_: int) -> tuple[list, int]:
        """1. draft, 2. one verify forward, 3.-5. each row settles; the round's events and its γ."""
        remaining = [self.cfg.max_new_tokens - (len(self.ids[b]) - self.prompt_lens[b]) for b in self.live]
        t0 = self.clock()
        drafts, gamma, decision, found = self._draft(round_, remaining, t0)
        self.sync()
        t1 = self.clock()
        steps, shape = self._verify(drafts, remaining)
        self.sync()
        t2 = self.clock()
        self._learn(round_, steps, t2 - t1)
        if self.chooser is not None:
            self.chooser.record(self.live, shape[1], t2 - t1, steps, found)
        name = self.drafters.name if self.drafters else ""
        events = [] if decision is None else [decision]
        for b, s in zip(self.live, steps):
            events += [
                dataclasses.replace(e, row=b)
                for e in round_events(
                    s, round_, self.engine.text, self.cfg.record_topk, self.cfg.greedy, name
                )
            ]
        t3 = self.clock()
        times = dict(draft_s=t1 - t0, verify_s=t2 - t1, total_s=t3 - t0, elapsed_s=t3 - self.t_start)
        events += [
            RoundTimed(
                round=round_, row=b, pos=len(self.ids[b]), gamma=len(s.judged), verified=shape[1], **times
            )
            for b, s in zip(self.live, steps)
        ]
        events.append(
            BatchRound(
                round=round_,
                rows=list(self.live),
                gamma=gamma,
                drafted=[len(s.judged) for s in steps],
                accepted=[s.n_accepted for s in steps],
                committed=[len(s.new) for s in steps],
                forward_shape=list(shape),
                **times,
            )
        )
        self._mark_ends(steps)
        return events, gamma

    def _draft(self, round_: int, remaining: list[int], t0: float):
        """1. every running row drafts at the batch's γ (a row near its budget drafts fewer); auto drafts at its
        largest γ, then chooses γ by goodput and cuts the drafts to it. Returns (drafts, γ, decided, lengths)."""
        rows = [self.ids[b] for b in self.live]
        if self.drafters is None:
            return [None] * len(rows), 0, None, []
        if self.chooser is None:
            gamma = self.cfg.gamma
            return self.drafters.propose(rows, [min(gamma, n - 1) for n in remaining]), gamma, None, []
        drafts = self.drafters.propose(rows, [min(max(GOODPUT_GAMMAS), n - 1) for n in remaining])
        found = [len(d.token_ids) if usable(d) else 0 for d in drafts]
        gamma, decision = self.chooser.choose(round_, found, self.clock() - t0, self.live, remaining)
        return [_cut(d, gamma) for d in drafts], gamma, decision, found

    def _verify(self, drafts: list, remaining: list[int]) -> tuple[list, tuple]:
        """2. ONE target forward over every row's [last committed token, drafts...]; 3.-5. per row: accept /
        resample, roll back its own pointer, commit (the single run's `settle`). Returns the Steps and (B, T)."""
        device = self.target.device
        inputs = [verify_rows(self.ids[b], d, device) for b, d in zip(self.live, drafts)]
        lengths = self.cache.lengths
        x, mask, positions = ragged_inputs(lengths, inputs, device)
        forward = (
            self.engine.forward
            if self.features is None
            else _with_features(self.engine.forward, self.features)
        )
        logits = forward(x, self.cache, attention_mask=mask, position_ids=positions)  # (B, T, V)
        steps = []
        for r, (b, d, (tokens, _, _)) in enumerate(zip(self.live, drafts, inputs)):
            self.cache.truncate_row(r, lengths[r] + len(tokens))  # the padding's slots go first
            s = settle(
                logits[r, : len(tokens)],
                self.ids[b],
                d,
                self.cache.row(r),
                self.cfg,
                self.draws[b],
                eos=self.target.eos_ids,
                remaining=remaining[r],
            )
            steps.append(s)
            self.ids[b].extend(s.new)
        return steps, tuple(x.shape)

    def _learn(self, round_: int, steps: list, verify_s: float) -> None:
        """Each row's drafter settles its row's round (features, the forward's rows it asked for, the verdict; no
        rows to time: a batch's forward is not one sequence's)."""
        if self.drafters is None:
            return
        for r, (b, s) in enumerate(zip(self.live, steps)):
            kept = s.kept_features(self.features[-1], r) if self.features else None
            self.drafters.settle(
                r,
                Settled(
                    round=round_,
                    n_accepted=s.n_accepted,
                    ids=self.ids[b],
                    verify_s=verify_s,
                    rows=0,
                    seen=s.seen,
                    features=kept,
                ),
            )
        if self.features:
            self.features.clear()

    def _mark_ends(self, steps: list) -> None:
        for b, s in zip(self.live, steps):
            if s.new and s.new[-1] in self.target.eos_ids:
                self.ends[b] = "eos"
            elif len(self.ids[b]) - self.prompt_lens[b] >= self.cfg.max_new_tokens:
                self.ends[b] = "max_new_tokens"

    def _drop_finished(self, round_: int) -> list:
        """Rows that ended drop out (their cache rows once, not every round); their `finished` events."""
        stay = [r for r, b in enumerate(self.live) if b not in self.ends]
        if len(stay) == len(self.live):
            return []
        wall = self.clock() - self.t_start
        done = [self._finished(b, round_, self.ends[b], wall) for b in self.live if b in self.ends]
        if stay:
            self.cache.keep_rows(stay)
            if self.drafters is not None:
                self.drafters.keep(stay)
        self.live = [self.live[r] for r in stay]
        return done

    def _finished(self, b: int, round_: int, reason: str, wall: float) -> Finished:
        new = self.ids[b][self.prompt_lens[b] :]
        return Finished(
            round=round_,
            row=b,
            pos=len(self.ids[b]),
            stop_reason=reason,
            token_ids=new,
            text=self.target.tokenizer.decode(new, skip_special_tokens=True),
            summary=self.stats[b].summary(wall),
        )

    def _hand_over(self, events: list) -> Iterator:
        """Yield events with the clock stopped, each row's counted into that row's RunStats."""
        for e in events:
            if 0 <= e.row < len(self.stats):
                self.stats[e.row].add(e)
        yield from self.clock.hand_over(events)


@torch.inference_mode()  # per step of the generator
def _prefill(forward, rows_ids, cache: RowsKVCache, deadline, device, features) -> Iterator[Prefilling]:
    """Every row's prompt but its last token, right-padded into one (B, ·) forward per chunk of about PREFILL_CHUNK
    tokens in all; each row then keeps its own prompt's slots (a padding token comes after its row's tokens, so no
    real token ever sees one). Between chunks: stop at the deadline (the rows' lengths are then left as they are:
    the run ends before any round), and yield a Prefilling (row −1) so a consumer can stop it there."""
    feeds = [ids[:-1] for ids in rows_ids]
    width = max(map(len, feeds))
    step = max(1, PREFILL_CHUNK // len(feeds))  # positions per row per forward: ~PREFILL_CHUNK tokens in all
    for start in range(0, width, step):
        if past(deadline):
            return
        if start:
            yield Prefilling(round=0, row=-1, pos=start, total=width)
        chunk = [f[start : start + step] or f[-1:] or [0] for f in feeds]
        stop = min(start + step, width)
        x = torch.tensor([c + [c[-1]] * (stop - start - len(c)) for c in chunk], device=device)
        if features is None:
            forward(x, cache, logits_to_keep=1)
        else:
            forward(x, cache, logits_to_keep=1, hidden_out=features)  # (B, chunk, H) appended
    if width:
        cache.set_lengths([len(f) for f in feeds])


def _with_features(forward, features: list):
    return lambda *a, **k: forward(*a, hidden_out=features, **k)


def _cut(draft, gamma: int):
    """A row's draft cut to the batch's chosen γ (None when γ is 0 or nothing is left)."""
    if draft is None or not gamma or not len(draft.token_ids):
        return None
    return dataclasses.replace(
        draft, token_ids=draft.token_ids[:gamma], q=draft.q[:gamma] if draft.q is not None else None
    )


def ngram_factory(engine):
    """auto's drafter in a batch: n-gram lookup (its default N), built once per engine."""
    if getattr(engine, "_batch_ngram", None) is None:
        engine._batch_ngram = drafter_factory(parse_draft("ngram"), engine.target)
    return engine._batch_ngram


class Goodput:
    """auto's γ for the whole batch, each round: the γ that commits the batch's remaining tokens soonest."""

    def __init__(self, cfg: GenerationConfig):
        self.cfg = cfg
        self.forward_s: dict[tuple[int, int], list[float]] = {}  # (rows, tokens per row) -> measured seconds
        self.draft_s: list[float] = []  # drafting seconds of a round (every row at the largest γ)
        self.counts: dict[int, list[int]] = {}  # row -> [accepted, rejections, rounds, rounds with a draft]
        # plain rounds in a row chosen while some row had a draft (nothing tested meanwhile)
        self.plain_run = 0

    def alphas(self, rows: list[int]) -> tuple[float, list[float], list[float]]:
        """The pooled α (POOLED_PRIOR pseudo-tests at 0.5: 0.5 before any test), each row's α shrunk toward it (ROW_PRIOR
        pseudo-tests: rows differ, one copies its prompt while the next writes freely) and each row's share of
        rounds in which its drafter had a draft, shrunk the same way toward the batch's."""
        c = [self.counts.get(b, [0, 0, 0, 0]) for b in rows]
        total = [sum(x[i] for x in self.counts.values()) for i in range(4)]
        pooled = costmodel.shrunk_alpha(total[0], total[1], 0.5, POOLED_PRIOR)
        found = (total[3] + 1) / (total[2] + 2)
        return (
            pooled,
            [costmodel.shrunk_alpha(a, r, pooled, ROW_PRIOR) for a, r, _, _ in c],
            [costmodel.shrunk_alpha(h, n - h, found, ROW_PRIOR) for _, _, n, h in c],
        )

    def choose(
        self, round_: int, lengths: list[int], draft_s: float, rows_: list[int], remaining: list[int]
    ) -> tuple[int, Decided]:
        """lengths: each running row's draft length at the largest γ; rows_: which rows they are; remaining: the
        tokens each may still commit. Returns (γ, its decided event)."""
        self.draft_s.append(draft_s)
        rows = len(lengths)
        pooled, alphas, found = self.alphas(rows_)
        curve = costmodel.batch_forward_curve({k: costmodel.median(v) for k, v in self.forward_s.items()})
        left = sum(remaining)
        table = []
        for g in GOODPUT_GAMMAS:
            if g > MAX_GAMMA:
                continue
            t = costmodel.batch_drain(alphas, found, remaining, g, curve, costmodel.median(self.draft_s))
            table.append(
                {
                    "drafter": "ngram" if g else "",
                    "gamma": g,
                    "alpha": pooled if g else None,
                    "tokens": left,
                    "seconds": t,
                    "measured": (rows, 1 + g) in self.forward_s,
                    "predicted_tokens_per_s": left / t if t else None,
                }
            )
        multi = any(t > 1 for _, t in self.forward_s)
        # 1 × 1: a kernel
        plain = any(t == 1 for _, t in self.forward_s) and (rows > 1 or (1, 1) in self.forward_s)
        if not multi and any(lengths):  # probe: a drafted forward first, then a plain one, then goodput
            gamma, why = (
                self.cfg.gamma,
                f"measuring a drafted forward ({rows} × {1 + min(self.cfg.gamma, max(lengths))})",
            )
        elif not plain:
            gamma, why = 0, f"measuring a plain forward ({rows} × 1)"
        elif (
            self.plain_run >= EXPLORE_EVERY
            and any(lengths)
            and (drafted := max(table[1:], key=lambda c: (c["predicted_tokens_per_s"] or 0, -c["gamma"])))[
                "predicted_tokens_per_s"
            ]
            >= EXPLORE_WITHIN * max(c["predicted_tokens_per_s"] or 0 for c in table)
        ):
            best = drafted  # α is only learnt from drafts the target tests
            gamma = best["gamma"]
            why = (
                f"re-measuring α: {self.plain_run} plain rounds since drafts were last tested; γ = {gamma} is the "
                f"best drafted choice ({best['predicted_tokens_per_s']:.0f} tokens/s predicted)"
            )
        else:
            best = max(table, key=lambda c: (c["predicted_tokens_per_s"] or 0, -c["gamma"]))
            gamma = best["gamma"]
            why = (
                f"γ = {gamma} commits the batch's {left} remaining tokens soonest (goodput): "
                f"{best['seconds']:.2f} s predicted, {best['predicted_tokens_per_s']:.0f} tokens/s, at the rows' "
                f"α {min(alphas):.2f}..{max(alphas):.2f} (pooled {pooled:.2f})"
            )
        self.plain_run = self.plain_run + 1 if gamma == 0 and any(lengths) else 0
        return gamma, Decided(
            round=round_,
            row=-1,
            pos=0,
            drafter="ngram" if gamma else "",
            gamma=gamma,
            reason=why,
            plain_tokens_per_s=table[0]["predicted_tokens_per_s"],
            candidates=table,
        )

    def record(self, rows: list[int], tokens: int, verify_s: float, steps, lengths: list[int]) -> None:
        """A verified round: its forward's (B, T) and time; each row's tested drafts and whether it had a draft."""
        self.forward_s.setdefault((len(rows), tokens), []).append(verify_s)
        for b, s, k in zip(rows, steps, lengths):
            c = self.counts.setdefault(b, [0, 0, 0, 0])
            c[0] += s.n_accepted
            c[1] += s.rejected
            c[2] += 1
            c[3] += k > 0


def batch_summary(
    stats: list[RunStats], tokens: list[int], wall: float, prefill_s: float, gammas: list[int]
) -> dict:
    """The batch's numbers: committed tokens per second of the whole batch (tokens_per_s, prefill included;
    decode_tokens_per_s, after the prefill: what batching and speculation change), per-row α and tokens, the pooled α
    with its counts."""
    rows = [s.summary(wall) for s in stats]
    total, decode = sum(tokens), wall - prefill_s
    accepted, rejections = sum(s.accepted for s in stats), sum(s.rejections for s in stats)
    return {
        "rows": len(stats),
        "tokens": total,
        "wall_s": wall,
        "tokens_per_s": total / wall if wall > 0 else None,
        "prefill_s": prefill_s,
        "decode_tokens_per_s": total / decode if decode > 0 else None,
        "alpha": costmodel.alpha(accepted, rejections),
        "accepted": accepted,  # α's counts, pooled over the rows: accepted / (accepted + rejections)
        "rejections": rejections,
        "row_tokens": tokens,
        "row_alpha": [r["alpha"] for r in rows],
        "rounds": len(gammas),
        "round_gammas": [[g, gammas.count(g)] for g in sorted(set(gammas))],
    }
