"""Metrics of a run, computed from its events (live, one event at a time, or from a saved trace).

Counts come from the events; every modelled number (α, E, c, v, the predicted speedup, the timing
guards) comes from costmodel.py, so the engine's summary, the app's panels and the bench report
agree. `summarize(spec_events, ar_events)` is the one summary of a run, raced or not.

Reported as in the field: acceptance rate = accepted / drafted (vLLM's, a count ratio, never fed to
the formula); mean accepted length = tokens committed per target forward; speedup = speculative
tok/s ÷ AR tok/s of the same target on the same prompt.
"""

from __future__ import annotations

from . import costmodel, costrule


def greedy_drift(run_ids: list[int], reference_ids: list[int]) -> dict:
    """The greedy drift meter (a lossy acceptance rule against the target's own greedy tokens): {'first': index of
    the first generated token that differs (None: identical), 'differ': positions that differ, counting those past
    the shorter run, 'tokens': positions compared (the longer run's length)}."""
    n = max(len(run_ids), len(reference_ids))
    differ = [
        i for i in range(n) if i >= len(run_ids) or i >= len(reference_ids) or run_ids[i] != reference_ids[i]
    ]
    return {"first": differ[0] if differ else None, "differ": len(differ), "tokens": n}


def count_positions(drafted: list[int], accepted: list[int], verdict: list) -> None:
    """Count one verified round into per-position tallies: position i was drafted (and tested, or cut by an
    accepted end-of-text) and accepted iff verdict[i]. The one per-position count every report uses."""
    while len(drafted) < len(verdict):
        drafted.append(0)
        accepted.append(0)
    for i, ok in enumerate(verdict):
        drafted[i] += 1
        accepted[i] += bool(ok)


def position_counts(events) -> tuple[list[int], list[int]]:
    """(drafted, accepted) per draft position 1..γ over a run's verified events."""
    drafted, accepted = [], []
    for event in events or []:
        if getattr(event, "kind", None) == "verified":
            count_positions(drafted, accepted, event.accepted)
    return drafted, accepted


class RunStats:
    """Accumulates counters and round timings from one run's events; `summary()` turns them into metrics."""

    def __init__(self):
        self.mode, self.gamma, self.prompt_len, self.max_new_tokens = "speculative", 0, 0, 0
        self.new_tokens = self.drafted = self.accepted = self.rejections = 0
        self.elapsed_s = 0.0
        self.pos_drafted: list[int] = []
        self.pos_accepted: list[int] = []
        # (tokens drafted, draft_s, total_s) per timed round; the forward judged drafted + 1 positions: γ + 1 for a
        # chain, nodes + 1 for a tree (RoundTimed.verified), so c is per drafted node and v(n) at the forward's size
        self.rounds: list[tuple[int, float, float]] = []
        self.tree_rounds = 0  # rounds that verified a tree (more positions than their chain view)
        self.forward_s: list[float] = []  # verify_s of plain rounds: one forward and a pick, like the probe
        # the rounds whose verify forward was timed apart (RoundTimed.forward_s): those forwards, and everything
        # else the rounds did (drafting, the acceptance rule, the feedback, the events: the host's work)
        self.verify_forward_s, self.host_s, self.host_rounds = 0.0, 0.0, 0
        self.token_ids: list[int] = []
        self.finished = None  # the Finished event, once seen
        self.threads = 0  # CPU torch threads the run computed with (0: not recorded)
        self.host: dict = {}  # the machine measured (RunStarted.host): the roofline's inputs

    def add(self, event) -> None:
        kind = getattr(event, "kind", None)
        if kind == "run_started":
            self.mode, self.gamma = event.mode, int(event.config.get("gamma", 0))
            self.max_new_tokens = int(event.config.get("max_new_tokens", 0))
            self.prompt_len = event.pos
            self.threads = int(getattr(event, "threads", 0) or 0)
            self.host = getattr(event, "host", None) or {}
        elif kind == "drafted":
            self.drafted += len(event.token_ids)
        elif kind == "verified":
            count_positions(self.pos_drafted, self.pos_accepted, event.accepted)
            self.accepted += sum(map(bool, event.accepted))
            self.rejections += event.first_rejected is not None
        elif kind == "committed":
            self.new_tokens += len(event.token_ids)
            self.token_ids += list(event.token_ids)
        elif kind == "round_timed":
            n = int(getattr(event, "verified", 0) or 0) or int(event.gamma) + 1
            self.tree_rounds += n > int(event.gamma) + 1
            self.rounds.append((n - 1, float(event.draft_s), float(event.total_s)))
            if event.gamma == 0:
                self.forward_s.append(float(event.verify_s))
            forward = float(getattr(event, "forward_s", 0.0) or 0.0)
            if forward > 0:
                self.verify_forward_s += forward
                self.host_s += max(0.0, float(event.total_s) - forward)
                self.host_rounds += 1
            self.elapsed_s = float(event.elapsed_s)
        elif kind == "finished":
            self.finished = event

    @property
    def done(self) -> bool:
        return self.finished is not None

    def wall_s(self) -> float:
        """The run's wall time: its Finished summary's when plausible, else the last round's elapsed time."""
        wall = (self.finished.summary or {}).get("wall_s") if self.finished is not None else None
        ok = isinstance(wall, (int, float)) and not isinstance(wall, bool) and wall >= self.elapsed_s > 0
        return float(wall) if ok else self.elapsed_s

    def step_times(self) -> list[float]:
        """Round times of plain (γ = 0) rounds: the cost AR decoding pays per token."""
        return [total for g, _, total in self.rounds if g == 0]

    def summary(
        self, wall_s: float | None = None, target_step_s: float | None = None, ar: "RunStats | None" = None
    ) -> dict:
        """Metrics dict. t(1) comes from the AR lane when one was raced (same prompt, same noise), else from
        this run's plain rounds, else from `target_step_s` (a probe of one single-token forward)."""
        wall = wall_s if wall_s is not None else self.wall_s()
        if target_step_s is None and self.finished is not None:
            probe = (self.finished.summary or {}).get("target_step_s")
            target_step_s = probe if isinstance(probe, (int, float)) and not isinstance(probe, bool) else None
        plain = self.step_times()
        if ar is not None and ar.step_times():
            step_times, source = ar.step_times(), "the AR lane"
        elif len(plain) >= costmodel.MIN_SAMPLES:
            step_times, source = plain, "this run's plain rounds"
        else:
            step_times, source = [], "a one-token probe after the run"
        step = costmodel.median(step_times) if step_times else target_step_s
        alpha = costmodel.alpha(self.accepted, self.rejections) if self.mode == "speculative" else None
        out = {
            "mode": self.mode,
            "gamma": self.gamma if self.mode == "speculative" else 0,
            "max_new_tokens": self.max_new_tokens,
            "rounds": len(self.rounds),
            "new_tokens": self.new_tokens,
            "drafted": self.drafted,
            "accepted": self.accepted,
            "rejections": self.rejections,
            "alpha": alpha,
            "acceptance_rate": self.accepted / self.drafted if self.drafted else None,
            "mean_accepted_length": self.new_tokens / len(self.rounds) if self.rounds else None,
            "per_position_acceptance": [
                a / d if d else None for a, d in zip(self.pos_accepted, self.pos_drafted)
            ],
            "wall_s": wall,
            "threads": self.threads or None,
            "tokens_per_s": self.new_tokens / wall if wall else None,
            "draft_s": sum(d for _, d, _ in self.rounds),
            "verify_s": sum(t - d for _, d, t in self.rounds),
            # per round whose forward was timed apart: the verify forward, and the rest of the round
            "forward_per_round_s": self.verify_forward_s / self.host_rounds if self.host_rounds else None,
            "host_per_round_s": self.host_s / self.host_rounds if self.host_rounds else None,
            "host_rounds": self.host_rounds,
        }
        # the share of this machine's bandwidth bound a target step reached, at the run's mean context
        out["bandwidth"] = costmodel.bandwidth_share(step, self.prompt_len + self.new_tokens / 2, self.host)
        if self.mode != "speculative":
            out.update(target_step_s=step, step_spread=costmodel.spread(step_times), timing_flags=[])
            return out
        cost = costmodel.costs(self.rounds, step, source if step else "none", step_times)
        if ar is not None:
            # like with like: the probe times a bare one-token forward, as the AR lane's verify_s does
            cost["timing_flags"] += costmodel.compare_lanes(target_step_s, costmodel.median(ar.forward_s))
        # the load watch's reading of each lane (a solo run watched by the app has one lane: loadwatch.py)
        runs = (self, ar) if ar is not None else (self,)
        lanes = [(run.finished.summary or {}) if run.finished is not None else {} for run in runs]
        shares = [s["contended_share"] for s in lanes if isinstance(s.get("contended_share"), (int, float))]
        if ar is not None or shares:
            cost["timing_flags"] += costmodel.contention(*lanes)
            out["contended_share"] = max(shares) if shares else None
            cores = [s["outside_cores"] for s in lanes if isinstance(s.get("outside_cores"), (int, float))]
            out["outside_cores"] = max(cores) if cores else None
        # E(α, γ) is a chain's: a tree's expected tokens depend on its shape, which this model does not know
        model = costmodel.prediction(
            None if self.tree_rounds else alpha, [g for g, _, _ in self.rounds], cost["c"], cost["v_points"]
        )
        out["tree_rounds"] = self.tree_rounds
        out.update(cost, **model, probe_step_s=target_step_s)
        out["v_points"] = [[n, v] for n, v in cost["v_points"].items()]  # JSON-stable
        out["timing_reliable"] = not cost["timing_flags"]
        # what costrule.usable falls back on: this host's quiet v(n), from what the run recorded of its machine
        out["calibration"] = costrule.calibration(self.host, self.prompt_len + self.new_tokens / 2)
        if ar is not None:
            out.update(race(self, ar))
        return out


def race(spec: RunStats, ar: RunStats) -> dict:
    """The race's verdict fields: only once both lanes have finished (never a provisional ratio)."""
    if not (spec.done and ar.done):
        return {"speedup": None, "identical_to_ar": None, "race_done": False}
    s, a = (
        spec.new_tokens / spec.wall_s() if spec.wall_s() else None,
        ar.new_tokens / ar.wall_s() if ar.wall_s() else None,
    )
    diff = next((i for i, (x, y) in enumerate(zip(spec.token_ids, ar.token_ids)) if x != y), None)
    if diff is None and len(spec.token_ids) != len(ar.token_ids):
        diff = min(len(spec.token_ids), len(ar.token_ids))
    return {
        "race_done": True,
        "ar_token_ids": list(ar.token_ids),
        "ar_wall_s": ar.wall_s(),
        "ar_tokens_per_s": a,
        "speedup": s / a if s and a else None,
        "identical_to_ar": diff is None,
        "first_diff": diff,
    }


def stats_of(events) -> RunStats:
    stats = RunStats()
    for event in events or []:
        stats.add(event)
    return stats


def summarize(events, ar_events=None) -> dict:
    """The summary of a run from its events (e.g. a trace read from disk); with the AR lane's events, the
    race's too (t(1) from the AR lane, the speedup and identity once both have finished)."""
    return stats_of(events).summary(ar=stats_of(ar_events) if ar_events else None)
