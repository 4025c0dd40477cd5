"""Typed events of a speculative (or autoregressive) run, and their JSON trace format.

Every event is a frozen, keyword-only dataclass of plain data (ints, floats, strings, lists, dicts; never
tensors) carrying its `round` and absolute token positions (`pos`), so a renderer needs no engine
state and a whole run can be written to JSON and read back into equal objects.
Top-k alternatives are lists of `[token_id, token_text, prob]`.

The event types themselves live in engine/event_types.py and are re-exported here: `from engine.events import
Verified` keeps working. This module holds the JSON trace format and its guards.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from .event_types import (
    EVENT_TYPES,
    BatchFinished,
    BatchRound,
    BeamDrafted,
    BeamResult,
    BeamStep,
    BeamVerified,
    Committed,
    Decided,
    Drafted,
    DraftTree,
    Finished,
    LookaheadWindow,
    Prefilling,
    Retokenized,
    RolledBack,
    RoundTimed,
    RunStarted,
    SuffixMatched,
    TreeSized,
    Verified,
)
from .validate import validate_events

TRACE_FORMAT = "specviz-trace"
TRACE_VERSION = 1

__all__ = [
    "RunStarted",
    "Decided",
    "Drafted",
    "Verified",
    "Retokenized",
    "DraftTree",
    "LookaheadWindow",
    "TreeSized",
    "SuffixMatched",
    "RolledBack",
    "Committed",
    "RoundTimed",
    "Prefilling",
    "Finished",
    "BeamDrafted",
    "BeamStep",
    "BeamVerified",
    "BeamResult",
    "BatchRound",
    "BatchFinished",
    "EVENT_TYPES",
] + [
    "TRACE_FORMAT",
    "TRACE_VERSION",
    "MAX_TRACE_BYTES",
    "MAX_EVENTS",
    "MAX_NUMBER",
    "MAX_DEPTH",
    "UNBOUNDED",
    "event_to_dict",
    "event_from_dict",
    "trace_to_json",
    "trace_from_json",
    "write_trace",
    "read_trace",
]


def event_to_dict(event) -> dict:
    """Plain dict with a "kind" key, ready for json.dumps (a single run's row 0 and specviz's own engine {} are left
    out: they are the defaults)."""
    out = {"kind": event.kind, **dataclasses.asdict(event)}
    if out.get("row") == 0:
        del out["row"]
    if out.get("engine") == {}:  # specviz's own run: the default
        del out["engine"]
    return out


MAX_TRACE_BYTES = 5 * 1024 * 1024  # an uploaded trace larger than this is refused unread
MAX_EVENTS = 50_000
MAX_NUMBER = 1e12  # any number beyond this in a trace is hostile or corrupt
MAX_DEPTH = 6  # nesting of lists/dicts inside one field
UNBOUNDED = {"run_started.config.seed"}  # any 64-bit seed is a real one; GenerationConfig checks 0..2**63-1

_TYPES = {
    "int": (int,),
    "float": (int, float),
    "str": (str,),
    "bool": (bool,),
    "list": (list,),
    "dict": (dict,),
}


def _key(key) -> str:
    """A dict key as a message shows it: a plain name as is, anything else (a newline, 300 characters) quoted and
    cut, so a refusal stays one short line (found by tests/test_trace_fuzz.py)."""
    text = str(key)
    return text if text.isidentifier() and len(text) <= 40 else repr(text)[:42]


def _check_text(text: str, where: str) -> None:
    """Text a page can show: valid Unicode (JSON's "\\ud800" escape decodes to a lone surrogate, which no UTF-8
    writer takes)."""
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as e:
            raise ValueError(
                f"{where}: not valid text (a lone surrogate \\u{ord(text[e.start]):04x} at character "
                f"{e.start})"
            ) from None


def _check_plain(value, where: str, depth: int = 0) -> None:
    """Plain JSON data only, bounded numbers and nesting: nothing a renderer could choke on."""
    if depth > MAX_DEPTH:
        raise ValueError(f"{where}: nested too deeply")
    if isinstance(value, str):
        _check_text(value, where)
        return
    if isinstance(value, bool) or value is None:
        return
    if isinstance(value, (int, float)):
        if not abs(value) <= MAX_NUMBER and not (where in UNBOUNDED and isinstance(value, int)):  # also NaN
            raise ValueError(f"{where}: number {value!r} out of range")
        return
    if isinstance(value, list):
        for i, item in enumerate(value):
            _check_plain(item, f"{where}[{i}]", depth + 1)
        return
    if isinstance(value, dict):
        for k, item in value.items():
            _check_text(str(k), f"{where} (a key)")
            _check_plain(item, f"{where}.{_key(k)}", depth + 1)
        return
    raise ValueError(f"{where}: unexpected {type(value).__name__}")


def event_from_dict(data: dict):
    """Inverse of event_to_dict; validates kind, fields and their types (ValueError on anything off)."""
    if not isinstance(data, dict) or data.get("kind") not in EVENT_TYPES:
        kind = data.get("kind") if isinstance(data, dict) else type(data).__name__
        raise ValueError(f"unknown event kind {str(kind)[:40]!r}")
    cls = EVENT_TYPES[data["kind"]]
    fields = {f.name: f for f in dataclasses.fields(cls)}
    body = {k: v for k, v in data.items() if k != "kind"}
    if set(body) - set(fields):
        raise ValueError(f"{data['kind']} event has unknown fields {sorted(set(body) - set(fields))[:5]}")
    required = {
        n
        for n, f in fields.items()
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    }
    if required - set(body):
        raise ValueError(f"{data['kind']} event lacks fields {sorted(required - set(body))}")
    for name, value in body.items():
        allowed = [t.strip() for t in str(fields[name].type).split("|")]
        ok = (value is None and "None" in allowed) or any(
            isinstance(value, _TYPES[t]) and not (isinstance(value, bool) and t != "bool")
            for t in allowed
            if t in _TYPES
        )
        if not ok:
            raise ValueError(
                f"{data['kind']}.{name} must be {' or '.join(allowed)}, got {type(value).__name__}"
            )
        _check_plain(value, f"{data['kind']}.{name}")
    return cls(**body)


def trace_to_json(events) -> str:
    """Compact JSON (no spaces after separators): a trace this writes is never larger than needed, so one the app
    offers for download loads back under MAX_TRACE_BYTES."""
    return json.dumps(
        {"format": TRACE_FORMAT, "version": TRACE_VERSION, "events": [event_to_dict(e) for e in events]},
        ensure_ascii=False,
        separators=(",", ":"),
    )


def trace_from_json(text: str | bytes) -> list:
    """Parse and validate a trace (types and sizes here, meaning in engine/validate.py); any problem is a
    ValueError with a one-line reason."""
    if len(text) > MAX_TRACE_BYTES:
        raise ValueError(
            f"trace is {len(text) / 2**20:.1f} MiB; the limit is {MAX_TRACE_BYTES / 2**20:.0f} MiB"
        )
    try:
        data = json.loads(text)
    except (ValueError, RecursionError) as e:  # JSONDecodeError, bad UTF-8, an int of over 4300 digits
        raise ValueError(f"trace is not valid JSON ({str(e)[:80]})") from None
    if not isinstance(data, dict) or data.get("format") != TRACE_FORMAT:
        raise ValueError("not a specviz trace (missing format marker)")
    if data.get("version") != TRACE_VERSION:
        raise ValueError(f"unsupported trace version {str(data.get('version'))[:20]!r}")
    events = data.get("events")
    if not isinstance(events, list) or not events:
        raise ValueError("trace has no events")
    if len(events) > MAX_EVENTS:
        raise ValueError(f"trace has {len(events)} events; the limit is {MAX_EVENTS}")
    out = [event_from_dict(d) for d in events]
    validate_events(out)  # what the numbers mean: probabilities, γ, rounds, positions, costs
    return out


def write_trace(path, events) -> None:
    Path(path).write_text(trace_to_json(events), encoding="utf-8")


def read_trace(path) -> list:
    return trace_from_json(Path(path).read_text(encoding="utf-8"))
