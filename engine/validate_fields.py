"""The field checks every event's checks are made of (a probability, a count in a range, parallel lists of one
length, top-k lists) and the bounds they hold a trace to. Each refusal is a one-line ValueError naming the field and
its allowed range. Plain Python: nothing about JSON, HTML or torch.
"""

from __future__ import annotations

import math
import re

from .config import WHOLE_SETTINGS, GenerationConfig, short_repr
from .specs import FAMILIES

RUN_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")
MAX_TREE_NODES = WHOLE_SETTINGS["tree_budget"][1]  # draft nodes of one tree round
# rows of one verify forward: the root, its nodes, a drafter's own rows
MAX_FORWARD_ROWS = 2 * MAX_TREE_NODES + 1
# W, N − 1
MAX_MATCH = int(FAMILIES["suffix"].args[0].high)  # suffix's longest match, its N
MAX_OCCURRENCES = 64  # engine/drafters/suffix.py's OCCURRENCES (its test pins the two together)
MAX_WINDOW = (int(FAMILIES["lookahead"].args[0].high), int(FAMILIES["lookahead"].args[1].high) - 1)
MAX_BEAMS = WHOLE_SETTINGS["num_beams"][1]
MAX_TOPK = WHOLE_SETTINGS["record_topk"][1]  # alternatives a top-k list may hold
PROB_SLACK = 1e-6  # float32 rounding may put a probability a hair above 1
NEXT_KINDS = ("corrected", "bonus")
TREE_STATUS = ("accepted", "rejected", "unvisited")
CONFIG_KEYS = set(GenerationConfig.__dataclass_fields__)


def real_number(value) -> bool:
    """A finite int or float, not a bool."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def prob(where: str, value, none_ok: bool = False, below_one: bool = False) -> None:
    """A probability in [0, 1] (in [0, 1) when `below_one`: a uniform draw)."""
    if value is None and none_ok:
        return
    high = 1.0 if below_one else 1.0 + PROB_SLACK
    if not (real_number(value) and 0.0 <= value and (value < high if below_one else value <= high)):
        allowed = "a probability in [0, 1)" if below_one else "a probability in [0, 1]"
        raise ValueError(f"{where} must be {allowed}{' or null' if none_ok else ''}, got {short_repr(value)}")


def positive(where: str, value, none_ok: bool = True, zero_ok: bool = False) -> None:
    """A cost or rate: > 0 (>= 0 when `zero_ok`), or None."""
    if value is None and none_ok:
        return
    if not (real_number(value) and (value >= 0 if zero_ok else value > 0)):
        allowed = "a number >= 0" if zero_ok else "a number > 0"
        raise ValueError(f"{where} must be {allowed}{' or null' if none_ok else ''}, got {short_repr(value)}")


def whole(where: str, value, low: int, high: int | None = None) -> None:
    """An int (not a bool, not a float) in low..high."""
    if not (
        isinstance(value, int)
        and not isinstance(value, bool)
        and low <= value
        and (high is None or value <= high)
    ):
        allowed = f"a whole number in {low}..{high}" if high is not None else f"a whole number >= {low}"
        raise ValueError(f"{where} must be {allowed}, got {short_repr(value)}")


def each(where: str, values: list, check, *args, **kwargs) -> None:
    for i, value in enumerate(values):
        check(f"{where}[{i}]", value, *args, **kwargs)


def texts(where: str, values: list) -> None:
    for i, value in enumerate(values):
        if not isinstance(value, str):
            raise ValueError(f"{where}[{i}] must be a string, got {short_repr(value)}")


def topk_rows(where: str, rows) -> None:
    """A top-k list as the renderers read it: at most MAX_TOPK rows of [id, text, prob]."""
    if not isinstance(rows, list) or len(rows) > MAX_TOPK:
        raise ValueError(
            f"{where} must be a list of at most {MAX_TOPK} [id, text, prob] rows, got {short_repr(rows)}"
        )
    for i, row in enumerate(rows):
        if not (isinstance(row, list) and len(row) == 3 and isinstance(row[1], str)):
            raise ValueError(f"{where}[{i}] must be [id, text, prob], got {short_repr(row)}")
        whole(f"{where}[{i}][0]", row[0], 0)
        prob(f"{where}[{i}][2]", row[2])


def topk_per_position(where: str, value, at_most: int) -> None:
    """One top-k list per position ([] when none was recorded), at most `at_most` positions."""
    if not isinstance(value, list) or len(value) > at_most:
        raise ValueError(f"{where} must be a list of at most {at_most} top-k lists, got {short_repr(value)}")
    for i, rows in enumerate(value):
        topk_rows(f"{where}[{i}]", rows)


def one_of(where: str, value, allowed: tuple) -> None:
    if value not in allowed:
        raise ValueError(f"{where} must be one of {', '.join(allowed)}, got {short_repr(value)}")


def same_length(kind: str, event, names: list[str], at_most: int | None = None) -> None:
    """Parallel lists of an event (one entry per token) have one length, at most `at_most`."""
    lengths = {name: len(getattr(event, name)) for name in names}
    n = lengths[names[0]]
    for name, length in lengths.items():
        if length != n:
            raise ValueError(
                f"{kind}.{name} must have one entry per token ({n}, like {kind}.{names[0]}), got {length}"
            )
    if at_most is not None and n > at_most:
        raise ValueError(f"{kind}.{names[0]} must hold at most {at_most} tokens, got {n}")
