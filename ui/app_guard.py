"""What the public app checks and bounds: the API's argument types, the prompt, the compact form a
session keeps its run in, the end of a run that was cut short, and the folder of trace files.

Pure: no gradio, no torch. Every refusal is a ValueError whose message names the setting and its range.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import time
import uuid
import zlib
from pathlib import Path

from engine.events import EVENT_TYPES, MAX_TRACE_BYTES, Finished, write_trace
from engine.metrics import summarize
from specviz.replay import rounds_of
from specviz.runs import ROUND_KINDS, RunSet, as_event, main_run

SEED_MAX = 2**63 - 1
CHARS_PER_TOKEN = 16  # a prompt longer than this many characters per allowed token is refused untokenized


def whole(name: str, value, low: int | None = None, high: int | None = None) -> int:
    """value as an int when it is a whole number (an integral float counts) in low..high; else a ValueError."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{name} must be a whole number, got {type(value).__name__} {str(value)[:40]!r}")
    if isinstance(value, float) and not (math.isfinite(value) and value.is_integer()):
        raise ValueError(f"{name} must be a whole number, got {value!r}")
    value = int(value)
    if (low is not None and value < low) or (high is not None and value > high):
        span = f"between {low} and {high}" if high is not None else f"at least {low}"
        raise ValueError(f"{name} must be {span}, got {value}")
    return value


def number(name: str, value) -> float:
    """value as a float when it is a finite number; else a ValueError naming the setting."""
    try:  # an int too large for a float (10**400) is refused too, by name
        finite = (
            not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(float(value))
        )
    except OverflowError:
        finite = False
    if not finite:
        raise ValueError(f"{name} must be a finite number, got {str(value)[:40]!r}")
    return float(value)


# what an endpoint's input may hold
INPUT_KINDS = ("number", "bool", "text", "choice", "file", "index", "any")


def check_inputs(endpoint: str, wanted: list[tuple[str, str]], values: list, max_text: int) -> None:
    """The inputs one of the app's endpoints got from a client (the browser, or any raw HTTP caller): as many as it
    takes, each of its kind (INPUT_KINDS, with the setting's label); else a ValueError naming the endpoint, the
    setting and what it takes. max_text: characters a text input may hold."""
    if len(values) != len(wanted):
        takes = ", ".join(label for _, label in wanted) or "nothing"
        raise ValueError(
            f"/{endpoint} takes {len(wanted)} input{'' if len(wanted) == 1 else 's'} ({takes}), got "
            f"{len(values)}"[:600]
        )
    for (kind, label), value in zip(wanted, values):
        check_input(kind, label, value, max_text)


def check_input(kind: str, label: str, value, max_text: int) -> None:
    """One input against its kind; a ValueError naming the setting."""
    if kind == "number" and value is not None:  # None: a cleared number box (the handler's default)
        number(label, value)
    elif kind == "bool" and not isinstance(value, bool):
        raise ValueError(f"{label} must be true or false, got {str(value)[:40]!r}")
    elif kind == "text" and value is not None:
        if not isinstance(value, str):
            raise ValueError(f"{label} must be text, got {type(value).__name__}")
        if len(value) > max_text:
            raise ValueError(f"{label} is {len(value):,} characters; the app takes at most {max_text:,}")
    elif kind == "choice" and value is not None and not isinstance(value, str):
        try:
            number(label, value)  # a numeric choice (the replay speed) must be finite
        except ValueError:
            raise ValueError(
                f"{label} must be one of its choices (text or a finite number), got "
                f"{type(value).__name__} {str(value)[:40]!r}"
            ) from None
    elif kind == "file" and value is not None and not isinstance(value, (str, dict)):
        raise ValueError(f"{label} must be an uploaded file, got {type(value).__name__}")
    elif kind == "index":
        whole(label, value, 0)


def model_name(role: str, value) -> str:
    """A target / draft spec must be non-empty text."""
    if not isinstance(value, str) or not value.strip():
        raise ValueError(
            f"{role} must be a model name (text such as 'embedded' or 'ngram'), got {value!r}"[:200]
        )
    return value


def check_prompt(prompt, max_tokens: int) -> str:
    """The prompt as text: a str of valid Unicode (no lone surrogates), not absurdly long before tokenizing."""
    if not isinstance(prompt, str):
        raise ValueError(f"prompt must be text, got {type(prompt).__name__}")
    try:
        prompt.encode("utf-8")
    except UnicodeEncodeError as e:
        raise ValueError(
            f"prompt is not valid text: a lone surrogate {prompt[e.start]!r} at character {e.start}; "
            f"send UTF-8 text"
        ) from None
    if len(prompt) > max_tokens * CHARS_PER_TOKEN:
        raise ValueError(
            f"prompt is {len(prompt):,} characters, too long: this server reads at most "
            f"{max_tokens * CHARS_PER_TOKEN:,} characters"
        )
    return prompt


def check_prompt_tokens(n_tokens: int, max_tokens: int, chars: int | None = None) -> None:
    """A prompt over the token cap, refused in the characters the visitor sees: the cap in characters of text
    like theirs (their own characters per token), and how much to cut. Without `chars`, in tokens."""
    if n_tokens <= max_tokens:
        return
    if not chars:
        raise ValueError(f"prompt is {n_tokens:,} tokens; this server reads at most {max_tokens:,}")
    fits = max_tokens * chars // n_tokens  # characters of text like this prompt that fit
    raise ValueError(
        f"prompt is {chars:,} characters, too long: this server reads at most about {fits:,} "
        f"characters of text like it. Shorten it by about {chars - fits:,} characters."
    )


def check_gamma(value, high: int) -> int:
    """γ as the page sends it: a whole number from 1 to high (a slider's box takes 2.5 as typed); else a
    ValueError in the page's own words."""
    try:
        return whole("γ", value, 1, high)
    except ValueError:
        raise ValueError(f"γ must be a whole number from 1 to {high}, got {str(value)[:40]}") from None


def api_arguments(
    prompt,
    draft,
    gamma,
    max_new_tokens,
    temperature,
    seed,
    target,
    max_new_cap: int,
    max_prompt_tokens: int,
    num_beams=1,
) -> dict:
    """The /generate API's arguments, type-checked one by one (JSON clients can send anything)."""
    return dict(
        prompt=check_prompt(prompt, max_prompt_tokens),
        draft=model_name("draft", draft),
        target=model_name("target", target),
        gamma=whole("gamma", gamma, 1, 16),
        max_new_tokens=whole("max_new_tokens", max_new_tokens, 1, max_new_cap),
        temperature=number("temperature", temperature),
        seed=whole("seed", seed, 0, SEED_MAX),
        num_beams=whole("num_beams", num_beams, 1, 8),
    )


# --- the session's run: a live list while streaming, compact bytes once settled -------------------


def pack(events) -> bytes:
    """A settled run as zlib-compressed compact JSON: what a session keeps in its gr.State (a 5 MB trace
    packs to ~0.3 MB, against tens of MB as a list of dataclasses)."""
    # shallow: asdict() deep-copies, 10x slower
    plain = [
        {"kind": e.kind, **{f.name: getattr(e, f.name) for f in dataclasses.fields(e)}}
        for e in map(as_event, events or [])
        if e is not None
    ]
    return zlib.compress(json.dumps(plain, separators=(",", ":"), ensure_ascii=False).encode("utf-8"), 1)


def unpack(state) -> list:
    """The events of a session's state: the live list during a run, decoded from pack()'s bytes after."""
    if not state:
        return []
    return list(_decoded(state) if isinstance(state, bytes) else state)


def runs(state) -> RunSet:
    """The session's run folded into a RunSet: the live one while streaming; for a settled run one RunSet per
    packed blob, kept for the next replay step, so stepping reuses every round's markup."""
    if isinstance(state, RunSet):
        return state
    if isinstance(state, bytes) and state:
        return _folded(state)
    return RunSet(unpack(state))


@functools.lru_cache(maxsize=4)
def _folded(blob: bytes) -> RunSet:
    return RunSet(_decoded(blob))


@functools.lru_cache(maxsize=2)  # scrubbing the replay slider decodes the same run again and again
def _decoded(blob: bytes) -> tuple:
    out = []
    for d in json.loads(zlib.decompress(blob)):
        kind = d.pop("kind")
        out.append(EVENT_TYPES[kind](**d))  # written by pack() from validated events: no second validation
    return tuple(out)


def ended(events, reason: str) -> list:
    """events plus, for every run cut before the engine finished it (time limit, Stop, an error; both lanes
    of a race), a Finished(stop_reason=reason) with its committed text; finished runs are unchanged."""
    events = [e for e in map(as_event, events or []) if e is not None]
    starts = [i for i, e in enumerate(events) if e.kind == "run_started"]
    out = events[: starts[0]] if starts else list(events)
    for start, end in zip(starts, starts[1:] + [len(events)]):
        run = events[start:end]
        out += run
        if any(e.kind == "finished" for e in run):
            continue
        committed = [e for e in run if e.kind == "committed"]
        ids = [t for e in committed for t in e.token_ids]
        last = max((e.round for e in run if e.kind in ROUND_KINDS), default=0)
        pos = committed[-1].pos + len(committed[-1].token_ids) if committed else run[0].pos
        text = "".join(t for e in committed for t in e.tokens)
        out.append(
            Finished(
                round=last, pos=pos, stop_reason=reason, text=text, token_ids=ids, summary=summarize(run)
            )
        )
    return out


def replay_rounds(events) -> int:
    """The replay slider's maximum: the last round, but never more than the rounds actually present
    (a hostile trace numbering its last round 1e12 gets a slider of its real length)."""
    run = main_run(events)
    return min(rounds_of(events), len(run.rounds)) if run is not None else 0


# --- the folder of trace files behind the download button -----------------------------------------


def write_trace_file(folder: Path, events, keep: int, max_age_s: float) -> Path:
    """Write the run's trace under a fresh random name (never the trace's own run_id), then drop the
    folder's files older than max_age_s and all but the newest `keep`."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"specviz-trace-{uuid.uuid4().hex[:16]}.json"
    write_trace(path, events)
    size = path.stat().st_size
    if size > MAX_TRACE_BYTES:  # it could not be loaded back: not offered
        path.unlink(missing_ok=True)
        raise ValueError(
            f"this run's trace is {size / 2**20:.1f} MiB, over the {MAX_TRACE_BYTES / 2**20:.0f} MiB a "
            f"trace can be loaded back; it is not offered for download"
        )
    prune(folder, keep, max_age_s, spare=path)
    return path


def prune_cache(folder: Path, keep: int, max_age_s: float) -> int:
    """Bound the copies Gradio's file cache keeps of the trace files this app wrote (<folder>/<hash>/specviz-trace-*.json,
    what it serves downloads from; an upload of one keeps its name too): delete those past their age or beyond
    the newest `keep`; returns how many. Nothing else in the folder (shared by every Gradio app) is touched;
    Gradio's own delete_cache (1 h) covers the rest."""
    now, files = time.time(), []
    for f in folder.glob("*/specviz-trace-*.json"):
        try:
            files.append((f.stat().st_mtime, f))
        except OSError:
            continue
    files.sort(reverse=True)
    gone = 0
    for rank, (mtime, f) in enumerate(files):
        if rank >= keep or now - mtime > max_age_s:
            try:
                f.unlink(missing_ok=True)
                gone += 1
                f.parent.rmdir()  # its hash folder, once empty
            except OSError:  # not ours to delete after all, or the folder holds more: leave it
                pass
    return gone


def prune(folder: Path, keep: int, max_age_s: float, spare: Path | None = None) -> None:
    """Delete trace files past their age or beyond the newest `keep` (the spared one always stays)."""
    now = time.time()
    files = []
    for f in folder.glob("specviz-trace-*.json"):
        try:
            files.append((f.stat().st_mtime, f))
        except OSError:  # removed by another worker meanwhile
            continue
    files.sort(reverse=True)
    others = [(t, f) for t, f in files if f != spare]
    for rank, (mtime, f) in enumerate(others):
        if rank >= keep - 1 or now - mtime > max_age_s:
            f.unlink(missing_ok=True)
