"""Metrics of a run, computed from its events (live, one event at a time, or from a saved trace).

acceptance rate = accepted / drafted; mean accepted length = tokens committed per target forward;
c = draft time per drafted token / target step; v = verify forward / target step;
predicted speedup = E / (γc + v) with E = (1 - α^(γ+1)) / (1 - α) (Leviathan et al. 2023), where α is
the per-token acceptance probability accepted / (accepted + rejections).
"""
from __future__ import annotations


def expected_tokens(alpha: float, gamma: int) -> float:
    """E: expected tokens per target forward with acceptance rate alpha and gamma drafts."""
    if alpha >= 1.0:
        return gamma + 1.0
    return (1.0 - alpha ** (gamma + 1)) / (1.0 - alpha)


def predicted_speedup(alpha: float, gamma: int, c: float, v: float) -> float:
    """Walltime improvement over AR when a draft step costs c and verifying γ+1 tokens costs v target steps."""
    return expected_tokens(alpha, gamma) / (gamma * c + v)


class RunStats:
    """Accumulates counters from events; `summary()` turns them into the metrics dict."""

    def __init__(self):
        self.mode, self.gamma, self.prompt_len = "speculative", 0, 0
        self.rounds = self.new_tokens = self.drafted = self.accepted = self.rejections = 0
        self.draft_s = self.verify_s = self.elapsed_s = 0.0
        self.pos_drafted: list[int] = []
        self.pos_accepted: list[int] = []
        self.full_verify_s: list[float] = []  # verify time of rounds that drafted the full gamma
        self.ar_step_s: list[float] = []  # verify time of plain (γ = 0) steps
        self.finished: dict = {}

    def add(self, event) -> None:
        kind = getattr(event, "kind", None)
        if kind == "run_started":
            self.mode, self.gamma = event.mode, int(event.config.get("gamma", 0))
            self.prompt_len = event.pos
        elif kind == "drafted":
            n = len(event.token_ids)
            self.drafted += n
            self._grow(n)
            for i in range(n):
                self.pos_drafted[i] += 1
        elif kind == "verified":
            for i, ok in enumerate(event.accepted):
                if ok:
                    self.accepted += 1
                    self.pos_accepted[i] += 1
            self.rejections += event.first_rejected is not None
        elif kind == "committed":
            self.new_tokens += len(event.token_ids)
        elif kind == "round_timed":
            self.rounds += 1
            self.draft_s += event.draft_s
            self.verify_s += event.verify_s
            self.elapsed_s = event.elapsed_s
            if event.gamma == 0:
                self.ar_step_s.append(event.verify_s)
            elif event.gamma == self.gamma:
                self.full_verify_s.append(event.verify_s)
        elif kind == "finished":
            self.finished = event.summary

    def _grow(self, n: int) -> None:
        while len(self.pos_drafted) < n:
            self.pos_drafted.append(0)
            self.pos_accepted.append(0)

    def summary(self, wall_s: float | None = None, target_step_s: float | None = None) -> dict:
        """Metrics dict; target_step_s (one target forward of one token) enables c, v and the prediction."""
        wall = wall_s if wall_s is not None else self.finished.get("wall_s", self.elapsed_s)
        if target_step_s is None:
            target_step_s = self.finished.get("target_step_s")
        if target_step_s is None and self.ar_step_s:
            target_step_s = sorted(self.ar_step_s)[len(self.ar_step_s) // 2]
        alpha = self.accepted / self.drafted if self.drafted else None
        # α for the formula: per-token acceptance probability. accepted/drafted counts the tokens
        # after a rejection as failures although they were never tested; the geometric MLE does not.
        tested = self.accepted + self.rejections
        alpha_token = self.accepted / tested if tested else None
        out = {
            "mode": self.mode,
            "gamma": self.gamma if self.mode == "speculative" else 0,
            "rounds": self.rounds,
            "new_tokens": self.new_tokens,
            "drafted": self.drafted,
            "accepted": self.accepted,
            "acceptance_rate": alpha,
            "alpha_per_token": alpha_token,
            "mean_accepted_length": self.new_tokens / self.rounds if self.rounds else None,
            "per_position_acceptance": [a / d if d else None for a, d in zip(self.pos_accepted, self.pos_drafted)],
            "wall_s": wall,
            "tokens_per_s": self.new_tokens / wall if wall else None,
            "draft_s": self.draft_s,
            "verify_s": self.verify_s,
            "target_step_s": target_step_s,
            "c": None, "v": None, "predicted_speedup": None,
        }
        if target_step_s and self.drafted and self.full_verify_s:
            c = self.draft_s / self.drafted / target_step_s
            v = sorted(self.full_verify_s)[len(self.full_verify_s) // 2] / target_step_s
            out.update(c=c, v=v, predicted_speedup=predicted_speedup(alpha_token, self.gamma, c, v))
        return out


def summarize(events) -> dict:
    """The summary of a whole run from its events (e.g. a trace read from disk)."""
    stats = RunStats()
    for event in events:
        stats.add(event)
    return stats.summary()
