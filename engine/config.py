"""One dataclass holds every per-run setting; it validates itself with messages meant for users."""

from __future__ import annotations

import math
import os
import re
from dataclasses import asdict, dataclass
from pathlib import Path

# the one cache folder (SPECVIZ_CACHE): de-quantized embedded weights, kernel plans, roofline takes, native builds
CACHE_DIR = Path(os.environ.get("SPECVIZ_CACHE", Path.home() / ".cache" / "specviz"))
MAX_GAMMA = 16
MODES = ("speculative", "ar")  # a run drafts and verifies, or is the plain autoregressive baseline
MAX_BATCH = 16  # sequences in one batched run (engine/decode/batch.py)
# logits / 1e-300 overflow to inf / nan; 0.01 is near-greedy already
MIN_TEMPERATURE, MAX_TEMPERATURE = (0.01, 100.0)
TEMPERATURE_RANGE = f"0 (greedy) or between {MIN_TEMPERATURE} and {MAX_TEMPERATURE:g}"
MAX_SEED = 2**63 - 1  # torch's generator takes a signed 64-bit seed
WHOLE_SETTINGS = {  # name -> (lowest, highest or None, the range as a message says it)
    "gamma": (1, MAX_GAMMA, f"between 1 and {MAX_GAMMA}"),
    "max_new_tokens": (1, None, "at least 1"),
    "top_k": (0, None, "0 (off) or positive"),
    "record_topk": (0, 20, "between 0 and 20"),
    "tree_budget": (0, 64, "between 0 (chain) and 64 nodes"),
    "tree_branching": (1, 8, "between 1 and 8"),
    "num_beams": (1, 8, "1 (off) or between 2 and 8"),
}


# a number in ASCII; NaN and inf are let through to be refused by the range checks, by name
NUMBER = re.compile(r"[+-]?((\d+\.?\d*|\.\d+)(e[+-]?\d+)?|nan|inf|infinity)", re.ASCII | re.IGNORECASE)
WHOLE = re.compile(r"[+-]?\d+", re.ASCII)


def plain_number(raw: str, whole: bool = False) -> float | int:
    """A number written in ASCII digits (Python's int() and float() also take '３' and '0_1'); ValueError else."""
    raw = raw.strip()
    if not (WHOLE if whole else NUMBER).fullmatch(raw):
        raise ValueError(raw)
    return int(raw) if whole else float(raw)


TYPICAL_DEFAULT = (0.09, 0.3)  # Medusa-2's ε and δ (δ = sqrt ε)
ACCEPT_RANGE = (
    "'exact' (lossless), or 'typical' / 'typical:EPS,DELTA' (lossy) with EPS in (0, 1] and DELTA in (0, 1]"
)


def typical_params(text: str) -> tuple[float, float]:
    """'typical' or 'typical:EPS,DELTA' -> (ε, δ); ValueError naming the setting and its range."""
    _, _, rest = text.partition(":")
    if not rest.strip():
        return TYPICAL_DEFAULT
    try:
        eps, delta = (plain_number(x) for x in rest.split(","))
    except ValueError:
        raise ValueError(f"accept must be {ACCEPT_RANGE}, got {short_repr(text)}") from None
    if not (0 < eps <= 1 and 0 < delta <= 1):  # NaN fails too
        raise ValueError(f"accept must be {ACCEPT_RANGE}, got {short_repr(text)}")
    return eps, delta


def normal_accept(value) -> str:
    """The acceptance rule's normal form: "exact" or "typical:EPS,DELTA" (checked)."""
    if not isinstance(value, str):
        raise ValueError(f"accept must be {ACCEPT_RANGE}, got {short_repr(value)}")
    rule, _, _ = "".join(value.split()).lower().partition(":")  # an acceptance rule's name, not a drafter's
    if rule not in ("exact", "typical"):
        raise ValueError(f"accept must be {ACCEPT_RANGE}, got {short_repr(value)}")
    value = "".join(value.split()).lower()  # spaces anywhere dropped, as drafter specs' are
    if value == "exact":
        return value
    if value.startswith("exact"):
        raise ValueError(f"accept must be {ACCEPT_RANGE}, got {short_repr(value)}")
    eps, delta = typical_params(value)
    return f"typical:{eps:g},{delta:g}"


def short_repr(value) -> str:
    """repr of a user's value, cut so a huge one cannot flood the message."""
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _number(name: str, value, allowed: str) -> None:
    """A real number, not a bool, a string or NaN; the message names the setting and its range."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
        raise ValueError(f"{name} must be a number {allowed}, got {short_repr(value)}")


def check_mode(mode) -> None:
    """A run's mode is one of MODES (a ValueError naming both otherwise)."""
    if mode not in MODES:
        raise ValueError(f"mode must be 'speculative' or 'ar', got {mode!r}")


@dataclass(frozen=True)
class GenerationConfig:
    gamma: int = 4  # draft tokens per round, 1..16
    max_new_tokens: int = 128  # generated tokens at most, >= 1
    temperature: float = 0.0  # 0 = greedy; 0.01..100 samples (lossless rejection sampling)
    top_k: int = 0  # keep the k most likely tokens (0 = off); applied to p and q alike
    top_p: float = 1.0  # nucleus mass in (0, 1]; 1 = off; applied to p and q alike
    seed: int | None = 0  # seeds the sampler, 0..2**63-1; a seeded run is reproducible
    raw: bool = False  # send the prompt as-is, without the chat template
    record_topk: int = 5  # top-k alternatives recorded per position in events (0 = none, cheaper)
    adaptive: str = "fixed"  # "fixed" γ, or "heuristic": +2 after a fully accepted round, -1 otherwise
    p_min: float = 0.0  # confidence threshold in [0, 1): a model drafter stops when its top q is below it
    tree_budget: int = 0  # tree speculation: at most this many draft nodes per round (0 = a chain of γ)
    tree_branching: int = 2  # tree: children tried per node (model drafters add top-q siblings), 1..8
    # wall seconds (prefill included) after which the run stops; None = none
    time_limit_s: float | None = None
    num_beams: int = 1  # beam search width B, 2..8 (engine/decode/beam.py; greedy, chain drafts); 1 = off
    # the acceptance rule: "exact" (lossless), or "typical:EPS,DELTA" (LOSSY, Medusa-2's)
    accept: str = "exact"

    def __post_init__(self):
        for name, (low, high, allowed) in WHOLE_SETTINGS.items():
            value = getattr(self, name)
            _number(name, value, allowed)
            if not math.isfinite(value) or value != int(value):
                raise ValueError(f"{name} must be a whole number {allowed}, got {value!r}")
            if not (low <= value and (high is None or value <= high)):
                raise ValueError(f"{name} must be {allowed}, got {value!r}")
            object.__setattr__(self, name, int(value))
        _number("temperature", self.temperature, TEMPERATURE_RANGE)
        if not (self.temperature == 0 or MIN_TEMPERATURE <= self.temperature <= MAX_TEMPERATURE):
            raise ValueError(f"temperature must be {TEMPERATURE_RANGE}, got {self.temperature!r}")
        _number("top_p", self.top_p, "in (0, 1]")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p!r}")
        _number("p_min", self.p_min, "in [0, 1)")
        if not 0 <= self.p_min < 1:
            raise ValueError(f"p_min must be in [0, 1), got {self.p_min!r}")
        if self.adaptive not in ("fixed", "heuristic"):
            raise ValueError(f"adaptive must be 'fixed' or 'heuristic', got {self.adaptive!r}")
        if self.time_limit_s is not None:
            _number("time_limit_s", self.time_limit_s, "in (0, 86400] seconds or None")
            if not 0 < self.time_limit_s <= 86400:
                raise ValueError(
                    f"time_limit_s must be in (0, 86400] seconds or None, got {self.time_limit_s!r}"
                )
        if self.seed is not None and (
            isinstance(self.seed, bool) or not isinstance(self.seed, int) or not 0 <= self.seed <= MAX_SEED
        ):
            raise ValueError(
                f"seed must be a whole number in 0..2**63-1 (or None), got {short_repr(self.seed)}"
            )
        if self.num_beams > 1 and (self.temperature != 0 or self.tree_budget):
            raise ValueError(
                f"num_beams > 1 (beam search) needs temperature 0 and tree_budget 0, got temperature "
                f"{self.temperature!r} and tree_budget {self.tree_budget!r}"
            )
        object.__setattr__(self, "accept", normal_accept(self.accept))
        if self.lossy and self.num_beams > 1:
            raise ValueError(
                f"accept={self.accept!r} (lossy typical acceptance) is for chains and trees: it needs "
                f"num_beams 1, got num_beams {self.num_beams!r}"
            )
        if not isinstance(self.raw, bool):
            raise ValueError(f"raw must be true or false, got {short_repr(self.raw)}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

    @property
    def lossy(self) -> bool:
        """The acceptance rule changes the output (typical acceptance): every view marks such a run."""
        return self.accept != "exact"

    @property
    def typical(self) -> tuple[float, float] | None:
        """(ε, δ) of typical acceptance, None under the exact rule."""
        return typical_params(self.accept) if self.lossy else None

    def to_dict(self) -> dict:
        return asdict(self)
