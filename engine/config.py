"""One dataclass holds every per-run setting; it validates itself with messages meant for users."""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass

MAX_GAMMA = 16


@dataclass(frozen=True)
class GenerationConfig:
    gamma: int = 4  # draft tokens per round, 1..16
    max_new_tokens: int = 128  # generated tokens at most, >= 1
    temperature: float = 0.0  # 0 = greedy; > 0 samples (lossless rejection sampling)
    top_k: int = 0  # keep the k most likely tokens (0 = off); applied to p and q alike
    top_p: float = 1.0  # nucleus mass in (0, 1]; 1 = off; applied to p and q alike
    seed: int | None = 0  # seeds the sampler; a seeded run is reproducible
    raw: bool = False  # send the prompt as-is, without the chat template
    record_topk: int = 5  # top-k alternatives recorded per position in events (0 = none, cheaper)
    adaptive: str = "fixed"  # "fixed" γ, or "heuristic": +2 after a fully accepted round, -1 otherwise
    p_min: float = 0.0  # confidence threshold in [0, 1): a model drafter stops when its top q is below it
    tree_budget: int = 0  # tree speculation: at most this many draft nodes per round (0 = a chain of γ)
    tree_branching: int = 2  # tree: children tried per node (model drafters add top-q siblings), 1..8
    time_limit_s: float | None = None  # wall seconds (prefill included) after which the run stops; None = none

    def __post_init__(self):
        def number(name, value):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
                raise ValueError(f"{name} must be a number, got {value!r}")

        for name in ("gamma", "max_new_tokens", "top_k", "record_topk", "tree_budget", "tree_branching"):
            value = getattr(self, name)
            number(name, value)
            if value != int(value):
                raise ValueError(f"{name} must be a whole number, got {value!r}")
            object.__setattr__(self, name, int(value))
        number("temperature", self.temperature)
        number("top_p", self.top_p)
        if not 1 <= self.gamma <= MAX_GAMMA:
            raise ValueError(f"gamma must be between 1 and {MAX_GAMMA}, got {self.gamma}")
        if self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be at least 1, got {self.max_new_tokens}")
        if not 0 <= self.temperature < math.inf:
            raise ValueError(f"temperature must be 0 (greedy) or positive, got {self.temperature}")
        if self.top_k < 0:
            raise ValueError(f"top_k must be 0 (off) or positive, got {self.top_k}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if not 0 <= self.record_topk <= 20:
            raise ValueError(f"record_topk must be between 0 and 20, got {self.record_topk}")
        if not 0 <= self.tree_budget <= 64:
            raise ValueError(f"tree_budget must be between 0 (chain) and 64 nodes, got {self.tree_budget}")
        if not 1 <= self.tree_branching <= 8:
            raise ValueError(f"tree_branching must be between 1 and 8, got {self.tree_branching}")
        number("p_min", self.p_min)
        if not 0 <= self.p_min < 1:
            raise ValueError(f"p_min must be in [0, 1), got {self.p_min}")
        if self.adaptive not in ("fixed", "heuristic"):
            raise ValueError(f"adaptive must be 'fixed' or 'heuristic', got {self.adaptive!r}")
        if self.time_limit_s is not None:
            number("time_limit_s", self.time_limit_s)
            if not 0 < self.time_limit_s <= 86400:
                raise ValueError(f"time_limit_s must be in (0, 86400] seconds or None, got {self.time_limit_s}")
        if self.seed is not None and (isinstance(self.seed, bool) or not isinstance(self.seed, int)):
            raise ValueError(f"seed must be a whole number, got {self.seed!r}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

    def to_dict(self) -> dict:
        return asdict(self)
